#!/usr/bin/env bash
# The recorded SOTU run: a SentencePiece tokenizer trained on SOTU train, token shards, then the
# `small` PLDR-LLM preset and its SDPA twin (--fixed-g identity) trained identically, each for
# the same number of steps, and their loss curves.
#
#   scripts/train-sotu.sh [STEPS] [PAIR]      (default: 600 steps, PAIR sdpa)
#
# PAIR bf16 trains the same PLDR-LLM in mixed precision (--precision bf16: bf16 products, fp32
# master weights; docs/precision.md) beside the fp32 run instead of the SDPA twin.
#
# The two models train at the same time, one thread each (2 cores in all): on a shared 2-core
# machine two single-threaded runs go much faster than two-thread runs one after the other,
# and both see the same conditions.
# Everything goes to out/sotu/ (ignored by git). Each run prints its validation loss, the
# tokens/s and the unigram entropy of the validation split (the loss a model that knows only
# the token frequencies of the validation split itself would reach).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-600}
PAIR=${2:-sdpa}
case "$PAIR" in sdpa | bf16) ;; *) echo "train-sotu.sh: PAIR must be sdpa or bf16 (got '$PAIR')" >&2; exit 2 ;; esac
THREADS=1
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
COMMON=(--preset small --data "$OUT/shards" --steps "$STEPS" --batch 8 --lr 2e-3
        --warmup 50 --lr-alpha 0.1 --seed 1 --eval-every 100 --eval-batches 16
        --save-every 100 --log-every 25)
run() {
    local model=$1
    local extra=()
    [ "$model" = sdpa ] && extra=(--fixed-g identity)
    [ "$model" = bf16 ] && extra=(--precision bf16)
    if [ -f "$OUT/$model/train_state.safetensors" ]; then  # an interrupted run: continue it
        $PLDR train --resume "$OUT/$model" --data "$OUT/shards" --out "$OUT/$model" \
            --log-every 25 >>"$OUT/$model.log" 2>&1
    else
        $PLDR train "${COMMON[@]}" "${extra[@]}" --out "$OUT/$model" >"$OUT/$model.log" 2>&1
    fi
}
run pldr &
p1=$!
run "$PAIR" &
p2=$!
wait $p1
wait $p2
tail -n 3 "$OUT/pldr.log" "$OUT/$PAIR.log"

# 4. Both models on the whole validation split, and the loss curves on one plot.
for model in pldr "$PAIR"; do
    $PLDR perplexity "$OUT/$model" --data "$OUT/shards" | tee "$OUT/$model.ppl.txt"
done
ENT=$(awk '$1 == "valid" {print $(NF-1)}' "$OUT/prepare.txt")
for ext in png svg; do
    if [ "$PAIR" = sdpa ]; then
        $PLDR plot "$OUT/pldr/metrics.jsonl" "$OUT/sdpa/metrics.jsonl" --label PLDR --label SDPA \
            --title "SOTU, small preset: PLDR-LLM vs SDPA" --hline "$ENT:valid unigram entropy" \
            --out "$OUT/loss.$ext"
    else
        $PLDR plot "$OUT/pldr/metrics.jsonl" "$OUT/bf16/metrics.jsonl" --label "PLDR fp32" \
            --label "PLDR bf16" --title "SOTU, small preset: fp32 vs bf16 mixed precision" \
            --hline "$ENT:valid unigram entropy" --out "$OUT/loss-bf16.$ext"
    fi
done
