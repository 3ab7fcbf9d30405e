#!/usr/bin/env bash
# The collapse study's long run (docs/collapse-study.md): the S shape (docs/collapse-study/s.json,
# 0.63M parameters) with the DAG regularizer, 74,000 steps of 32 × 128 tokens = 3.03e8 tokens on
# SOTU + tinyshakespeare (the shards of scripts/collapse-study.sh), one thread, audited every 1,000
# steps. Resumable: rerun after a stop and it goes on from the last checkpoint (every 500 steps),
# bit-exactly at the same thread count (THREADS, default 1; float32 sums depend on it, so a
# resume at another count continues the run, not bit for bit). Pausing for a benchmark:
# kill -STOP / kill -CONT the pldr process.
# Usage: scripts/collapse-long.sh [NAME [DAG [STEPS]]]   (defaults: s-dag 0.001,0.005,0.005 74000)
set -euo pipefail
cd "$(dirname "$0")/.."
PLDR=${PLDR:-./build/pldr}
OUT=${OUT:-out/collapse-study}
NAME=${1:-s-dag}
DAG=${2:-0.001,0.005,0.005}
STEPS=${3:-74000}
if [ ! -f "$OUT/shards/train.pldrtok" ]; then
  "$PLDR" prepare --tokenizer models/pldr-sotu-small/tokenizer.model --out "$OUT/shards" --ctx 129 \
    --valid-fraction 0.05 data/corpus/sotu/train.txt data/corpus/tinyshakespeare/train.txt
fi
if [ -f "$OUT/$NAME/train_state.safetensors" ]; then src=(--resume "$OUT/$NAME"); else src=(--config docs/collapse-study/s.json); fi
OMP_NUM_THREADS=${THREADS:-1} OPENBLAS_NUM_THREADS=${THREADS:-1} "$PLDR" train "${src[@]}" --data "$OUT/shards" \
  --out "$OUT/$NAME" --steps "$STEPS" --batch 32 --lr 2e-3 --warmup 500 --lr-alpha 0.1 --seed 1 \
  --dag "$DAG" --eval-every 2000 --eval-batches 16 --save-every 500 --audit-every 1000 \
  >> "$OUT/$NAME.log" 2>&1
"$PLDR" plot "$OUT/$NAME/metrics.jsonl" --out "$OUT/$NAME/loss.svg" --force \
  --audit-out "docs/collapse-study/collapse-$NAME.png" --title "collapse measurements: $NAME (3e8 tokens)"
