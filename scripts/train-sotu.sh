#!/usr/bin/env bash
# The recorded SOTU run: a SentencePiece tokenizer trained on SOTU train, token shards, then the
# `small` PLDR-LLM preset and its SDPA twin (--fixed-g identity) trained identically, each for
# the same number of steps, and their loss curves.
#
#   scripts/train-sotu.sh [STEPS] [THREADS]      (defaults: 1500 steps, 2 threads)
#
# Everything goes to out/sotu/ (ignored by git). Each run prints its validation loss, the
# tokens/s and the unigram entropy of the validation split (the loss a model that knows only
# the token frequencies of the validation split itself would reach).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-1500}
THREADS=${2:-2}
PLDR=${PLDR:-./build/pldr}
OUT=out/sotu
mkdir -p "$OUT"
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=1

# 1. Tokenizer: unigram, 4096 pieces, on SOTU train (one address per line).
if [ ! -f "$OUT/sotu-4k.model" ]; then
    $PLDR tokenizer train --input data/corpus/sotu/train.txt --out "$OUT/sotu-4k" \
        --vocab-size 4096 --model-type unigram --threads "$THREADS"
fi

# 2. Shards: chunks of 129 tokens (the model sees 128), SOTU valid as the validation split.
if [ ! -f "$OUT/shards/train.pldrtok" ]; then
    $PLDR prepare --tokenizer "$OUT/sotu-4k.model" --out "$OUT/shards" --ctx 129 \
        --valid data/corpus/sotu/valid.txt data/corpus/sotu/train.txt | tee "$OUT/prepare.txt"
fi

# 3. The two models, same shape, same data order, same schedule.
COMMON=(--preset small --data "$OUT/shards" --steps "$STEPS" --batch 16 --lr 2e-3
        --warmup 100 --lr-alpha 0.1 --seed 1 --eval-every 100 --eval-batches 16
        --save-every 250 --log-every 50)
for model in pldr sdpa; do
    extra=()
    [ "$model" = sdpa ] && extra=(--fixed-g identity)
    if [ -f "$OUT/$model/train_state.safetensors" ]; then
        $PLDR train --resume "$OUT/$model" --data "$OUT/shards" --out "$OUT/$model" \
            --log-every 50 | tee -a "$OUT/$model.log"
    else
        $PLDR train "${COMMON[@]}" "${extra[@]}" --out "$OUT/$model" | tee "$OUT/$model.log"
    fi
done

# 4. Loss curves, both models on one plot.
$PLDR plot "$OUT/pldr/metrics.jsonl" "$OUT/sdpa/metrics.jsonl" --label PLDR --label SDPA \
    --title "SOTU, small preset: PLDR-LLM vs SDPA" --out "$OUT/loss.png"
$PLDR plot "$OUT/pldr/metrics.jsonl" "$OUT/sdpa/metrics.jsonl" --label PLDR --label SDPA \
    --title "SOTU, small preset: PLDR-LLM vs SDPA" --out "$OUT/loss.svg"
