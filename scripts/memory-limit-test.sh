#!/usr/bin/env bash
# Resource test: memory-limit-test.sh PLDR
# Models that do not fit under a virtual-memory limit (ulimit -v, 1.5 GiB) must fail with one
# clear error line and exit code 1, never a crash: one whose weights cannot even be mapped (6 GiB),
# one whose float64 parameters cannot be allocated; the golden model runs under the same limit.
set -euo pipefail
PLDR=$(realpath "$1")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=$(mktemp -d /tmp/pldr-mem.XXXXXX)
trap 'rm -rf "$W"' EXIT
# (no grep -q: under pipefail its early exit can SIGPIPE ldd and fail the test)
if ldd "$PLDR" 2>/dev/null | grep libasan >/dev/null; then
  echo "SKIP: AddressSanitizer reserves terabytes of virtual memory; ulimit -v does not apply"
  exit 0
fi
# make_model DIR VOCAB: a fixed-G model (embedding and head VOCAB x 256, one small layer) whose
# weights file is sparse (it reads as zeros and costs no disk).
make_model() {
mkdir -p "$1"
/usr/bin/python3 - "$1" "$2" <<'PY'
import json, struct, sys
d = sys.argv[1]
V, H, D, L, F = int(sys.argv[2]), 4, 64, 1, 64
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
}
run_limited() { (ulimit -v 1572864; "$PLDR" "$@"); }
expect_clear_failure() {  # expect_clear_failure WHAT PATTERN ARGS...
  local what=$1 pat=$2
  shift 2
  set +e
  run_limited "$@" > "$W/out" 2> "$W/err"
  local rc=$?
  set -e
  echo "$what under ulimit -v 1.5 GiB: exit $rc: $(cat "$W/err")"
  [ "$rc" -eq 1 ] || { echo "FAIL: expected exit 1"; exit 1; }
  [ "$(wc -l < "$W/err")" -eq 1 ] || { echo "FAIL: expected one error line"; exit 1; }
  grep -qE "$pat" "$W/err" || { echo "FAIL: unclear message"; exit 1; }
}
# 6 GiB of weights: the map itself does not fit.
make_model "$W/big" 3000000
expect_clear_failure "6 GiB model" "cannot map .*Cannot allocate memory" \
  dump "$W/big" --tokens 1,2,3 --out "$W/d.safetensors"
# 0.5 GiB of weights map, but 1 GiB of float64 parameters do not fit beside them.
make_model "$W/mid" 250000
expect_clear_failure "0.5 GiB model in float64" "out of memory" \
  dump "$W/mid" --tokens 1,2,3 --dtype f64 --out "$W/d.safetensors"
run_limited dump "$ROOT/tests/golden/models/a_tiny_v510.f32" --tokens 1,2,3 --out "$W/ok.safetensors" > /dev/null
echo "PASS: the small model runs under the same limit; the big one fails with a clear message"
