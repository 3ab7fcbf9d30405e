#!/usr/bin/env bash
# SIGKILL test of training checkpoints: crash-test.sh PLDR KILLS [STEPS]
# One training run (preset tiny, a checkpoint after every step) is killed with SIGKILL KILLS
# times: half at a random moment, half at a named point inside the checkpoint write
# (PLDR_CRASH_AT: mid-file, after a rename, after the model / the state / the COMMIT marker,
# between the renames of the swap). After every kill the next launch must resume from the last
# complete checkpoint (a corrupt one fails the resume); at the end the run is completed and its
# model.safetensors and train_state.safetensors must equal, byte for byte, those of a run that
# was never interrupted. Prints one line per kill and the verdict; exit 0 = pass.
set -euo pipefail
PLDR=$(realpath "$1")
KILLS=${2:-50}
STEPS=${3:-60}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
W=$(mktemp -d /tmp/pldr-crash.XXXXXX)
trap 'rm -rf "$W"' EXIT
RANDOM=${CRASH_TEST_SEED:-12345}

head -c 40000 "$ROOT/data/corpus/tinyshakespeare/valid.txt" > "$W/text.txt"
"$PLDR" prepare --tokenizer "$ROOT/models/pldr-sotu-small/tokenizer.model" --out "$W/data" \
  --ctx 17 --valid-fraction 0.1 "$W/text.txt" > /dev/null
TRAIN=(train --preset tiny --data "$W/data" --steps "$STEPS" --batch 2 --save-every 1
       --eval-every 0 --eval-batches 1 --log-every 1000)

# The uninterrupted reference; its duration sets the range of the random kill times.
t0=$(date +%s%N)
"$PLDR" "${TRAIN[@]}" --out "$W/ref" > /dev/null
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$ms" -ge 20 ] || ms=20
echo "reference run: $STEPS steps in ${ms} ms"

points=(write.partial write.unsynced write.renamed ckpt.model ckpt.state ckpt.commit ckpt.rename
        ckpt.uncommit ckpt.done)
D="$W/run"
launch() {  # launch [env assignments...]: resume when a (possibly half-swapped) checkpoint exists
  if [ -f "$D/train_state.safetensors" ] || [ -f "$D/.ckpt-new/COMMIT" ]; then
    env "$@" "$PLDR" train --resume "$D" --data "$W/data" --out "$D" > "$W/log" 2>&1 &
  else
    env "$@" "$PLDR" "${TRAIN[@]}" --out "$D" > "$W/log" 2>&1 &
  fi
  pid=$!
}
step_of() {  # the step of the checkpoint in $D (after a resume has repaired it), or -
  "$PLDR" inspect "$D" > /dev/null 2>&1 || { echo "-"; return; }
  grep -ao '"step":"[0-9]*"' "$D/train_state.safetensors" | head -1 | tr -dc 0-9 || echo "-"
}

kills=0 finished=0 i=0
while [ "$kills" -lt "$KILLS" ]; do
  i=$((i + 1))
  if [ $((i % 2)) -eq 0 ]; then
    p=${points[$((RANDOM % ${#points[@]}))]}:$((RANDOM % 4 + 1))
    launch PLDR_CRASH_AT="$p"
    how="at $p"
  else
    launch PLDR_CRASH_AT=
    d=$(( (RANDOM * 32768 + RANDOM) % ms ))
    delay=$(printf '%d.%03d' $((d / 1000)) $((d % 1000)))
    sleep "$delay"
    kill -KILL "$pid" 2>/dev/null || true
    how="after ${delay}s"
  fi
  set +e
  { wait "$pid"; } 2>/dev/null
  rc=$?
  set -e
  if [ "$rc" -eq 137 ]; then
    kills=$((kills + 1))
    echo "kill $kills ($how): checkpoint at step $(step_of)"
  elif [ "$rc" -eq 0 ]; then
    # The run finished before the kill: start a new run in a fresh directory.
    finished=$((finished + 1))
    rm -rf "$D"
  else
    echo "FAIL: launch $i ($how) exited $rc:"; cat "$W/log"; exit 1
  fi
done

# Complete the last run and compare with the reference.
rc=0
if [ -f "$D/train_state.safetensors" ] || [ -f "$D/.ckpt-new/COMMIT" ]; then
  "$PLDR" train --resume "$D" --data "$W/data" --out "$D" > "$W/log" 2>&1 || rc=$?
else
  "$PLDR" "${TRAIN[@]}" --out "$D" > "$W/log" 2>&1 || rc=$?
fi
[ "$rc" -eq 0 ] || { echo "FAIL: the final resume exited $rc:"; cat "$W/log"; exit 1; }
for f in model.safetensors train_state.safetensors config.json; do
  cmp -s "$W/ref/$f" "$D/$f" || { echo "FAIL: $f differs from the uninterrupted run"; exit 1; }
done
echo "PASS: $kills SIGKILLs ($finished runs completed between them); the resumed run equals the uninterrupted one bit for bit"
