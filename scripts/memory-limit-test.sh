#!/usr/bin/env bash
# Resource test: memory-limit-test.sh PLDR
# A model whose weights (a sparse 6 GiB file: two 768M-element matrices) do not fit under a
# virtual-memory limit (ulimit -v, 1.5 GiB) must fail with one clear error line and exit code
# 1, never a crash; the same command on the golden model under the same limit succeeds.
set -euo pipefail
PLDR=$(realpath "$1")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=$(mktemp -d /tmp/pldr-mem.XXXXXX)
trap 'rm -rf "$W"' EXIT
M="$W/big"
mkdir -p "$M"
# config: vocab 3,000,000 x hidden 256 (fixed G = identity: embedding, head, 1 small layer)
python3 - "$M" <<'PY'
import json, struct, sys
d = sys.argv[1]
V, H, D, L, F = 3000000, 4, 64, 1, 64
cfg = {"model_type": "pldrllm", "vocab_size": V, "hidden_size": H * D, "intermediate_size": F,
       "num_hidden_layers": L, "num_attention_heads": H, "head_dim": D,
       "max_position_embeddings": 64, "custom_G_type": "identity", "dtype": "float32",
       "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 3}
json.dump(cfg, open(f"{d}/config.json", "w"))
d_ = H * D
shapes = {"decoder.embedding.weight": [V, d_], "final_layer.weight": [V, d_], "final_layer.bias": [V],
          "decoder.layernorm1.weight": [d_], "decoder.layernorm1.bias": [d_],
          "decoder.past_G_values": [L, 3, 1, H, D, D]}
for i in range(L):
    p = f"decoder.dec_layers.{i}."
    for w in ("wq", "wk", "wv", "dense"):
        shapes[p + f"mha1.{w}.weight"] = [d_, d_]; shapes[p + f"mha1.{w}.bias"] = [d_]
    for g, (o, n) in {"gluw1": (F, d_), "gluw2": (F, d_), "gluw3": (d_, F)}.items():
        shapes[p + f"ffn.{g}.weight"] = [o, n]; shapes[p + f"ffn.{g}.bias"] = [o]
    for n in ("layernorm1", "layernorm2"):
        shapes[p + f"{n}.weight"] = [d_]; shapes[p + f"{n}.bias"] = [d_]
h, off = {}, 0
for k in sorted(shapes):
    n = 4
    for s in shapes[k]: n *= s
    h[k] = {"dtype": "F32", "shape": shapes[k], "data_offsets": [off, off + n]}; off += n
h["decoder.past_G_values_status"] = {"dtype": "BOOL", "shape": [L], "data_offsets": [off, off + L]}
off += L
hb = json.dumps(h).encode(); hb += b" " * (-len(hb) % 8)
with open(f"{d}/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(hb)) + hb)
    f.truncate(8 + len(hb) + off)   # sparse: the data reads as zeros
PY
run_limited() { (ulimit -v 1572864; "$PLDR" "$@"); }
set +e
run_limited dump "$M" --tokens 1,2,3 --out "$W/d.safetensors" > "$W/out" 2> "$W/err"
rc=$?
set -e
echo "big model under ulimit -v 1.5 GiB: exit $rc: $(cat "$W/err")"
[ "$rc" -eq 1 ] || { echo "FAIL: expected exit 1"; exit 1; }
[ "$(wc -l < "$W/err")" -eq 1 ] || { echo "FAIL: expected one error line"; exit 1; }
grep -qE "out of memory|cannot map|Cannot allocate memory" "$W/err" || { echo "FAIL: unclear message"; exit 1; }
run_limited dump "$ROOT/tests/golden/models/a_tiny_v510.f32" --tokens 1,2,3 --out "$W/ok.safetensors" > /dev/null
echo "PASS: the small model runs under the same limit; the big one fails with a clear message"
