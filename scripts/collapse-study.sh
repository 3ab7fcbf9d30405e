#!/usr/bin/env bash
# The collapse study (docs/collapse-study.md): PLDR-LLMs of two widths (docs/collapse-study/w128.json,
# 2.1M parameters; w64.json), each with and without the DAG regularizer, trained on SOTU +
# tinyshakespeare with `--audit-every`, then the curves and the fits (scripts/collapse-fit.py).
# Four runs at once, one thread each. Resumable: rerun with the same arguments after a stop;
# larger step counts extend the runs (the cosine schedule then spans the new total).
# Usage: scripts/collapse-study.sh [STEPS_W128 [STEPS_W64]]   (1,024 tokens per step)
set -euo pipefail
cd "$(dirname "$0")/.."
PLDR=${PLDR:-./build/pldr}
OUT=${OUT:-out/collapse-study}
S128=${1:-5000}
S64=${2:-16000}
mkdir -p "$OUT"
if [ ! -f "$OUT/shards/train.pldrtok" ]; then
  # The default model's tokenizer (4,096 pieces); every 20th line to validation.
  "$PLDR" prepare --tokenizer models/pldr-sotu-small/tokenizer.model --out "$OUT/shards" --ctx 129 \
    --valid-fraction 0.05 data/corpus/sotu/train.txt data/corpus/tinyshakespeare/train.txt
fi
run() {  # NAME CONFIG STEPS AUDIT_EVERY DAG
  local name=$1 cfg=$2 steps=$3 every=$4 dag=$5 src
  if [ -f "$OUT/$name/train_state.safetensors" ]; then src=(--resume "$OUT/$name"); else src=(--config "$cfg"); fi
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$PLDR" train "${src[@]}" --data "$OUT/shards" \
    --out "$OUT/$name" --steps "$steps" --batch 8 --lr 2e-3 --warmup 200 --lr-alpha 0.1 --seed 1 \
    --dag "$dag" --eval-every 500 --eval-batches 16 --save-every 1000 --audit-every "$every" \
    > "$OUT/$name.log" 2>&1
}
# The TF "dagreg" runs' coefficients (spec §3.2): 0.001·dag(A_LM) + 0.005·(dag(A_P) + dag(G_LM)).
run w128-dag docs/collapse-study/w128.json "$S128" 500 0.001,0.005,0.005 &
run w128-nodag docs/collapse-study/w128.json "$S128" 500 0,0,0 &
run w64-dag docs/collapse-study/w64.json "$S64" 750 0.001,0.005,0.005 &
run w64-nodag docs/collapse-study/w64.json "$S64" 750 0,0,0 &
wait
for n in w128-dag w128-nodag w64-dag w64-nodag; do tail -n 2 "$OUT/$n.log"; done
"$PLDR" plot "$OUT"/w128-dag/metrics.jsonl "$OUT"/w128-nodag/metrics.jsonl "$OUT"/w64-dag/metrics.jsonl \
  "$OUT"/w64-nodag/metrics.jsonl --label w128-dag --label w128-nodag --label w64-dag --label w64-nodag \
  --out docs/collapse-study/loss.png --force --smooth 200 --title "loss (SOTU + tinyshakespeare)"
for n in w128-dag w128-nodag w64-dag w64-nodag; do
  "$PLDR" plot "$OUT/$n/metrics.jsonl" --out "$OUT/$n/loss.svg" --force \
    --audit-out "docs/collapse-study/collapse-$n.png" --title "collapse measurements: $n"
done
/usr/bin/python3 scripts/collapse-fit.py "$OUT"/w128-dag "$OUT"/w128-nodag "$OUT"/w64-dag "$OUT"/w64-nodag
