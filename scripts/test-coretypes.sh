#!/usr/bin/env bash
# The golden tests (float32 and float64) under forced OpenBLAS kernels: the float32 allowances
# come from measured conditioning and must hold whatever kernel runs. Every x86-64 CPU runs the
# Haswell, Zen and Sandybridge kernels; SkylakeX and Cooperlake run where the CPU has AVX-512
# (and AVX512-BF16). Usage: scripts/test-coretypes.sh [BUILD_DIR] [CORETYPE ...]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
shift || true
types=("$@")
if [ "${#types[@]}" -eq 0 ]; then
  types=(Haswell Zen Sandybridge)
  if grep -qw avx512f /proc/cpuinfo; then types+=(SkylakeX); fi
  if grep -qw avx512_bf16 /proc/cpuinfo; then types+=(Cooperlake); fi
fi
filter='Golden*:AdamWGolden*:DagGolden*:LrSchedule.*Golden*:LrSchedule.MatchesTrajectory*'
filter+=':-GoldenSet.RenamedCopyRunsEveryGoldenTest'
status=0
for t in "${types[@]}"; do
  core=$(OPENBLAS_CORETYPE=$t OPENBLAS_VERBOSE=2 "$BUILD/tests/pldr_tests" \
           --gtest_filter=GoldenSet.MatchesManifest 2>&1 | sed -n 's/^Core: //p' | head -1)
  if [ "$core" != "$t" ]; then
    echo "coretypes: OpenBLAS ran '${core:-?}' when $t was forced" >&2
    status=1
    continue
  fi
  echo "== golden tests with OPENBLAS_CORETYPE=$t (OpenBLAS reports Core: $core)"
  if OPENBLAS_CORETYPE=$t OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
       "$BUILD/tests/pldr_tests" --gtest_filter="$filter" --gtest_brief=1 >"$BUILD/coretype-$t.log" 2>&1; then
    tail -2 "$BUILD/coretype-$t.log"
  else
    tail -40 "$BUILD/coretype-$t.log"
    echo "coretypes: golden tests FAILED with OPENBLAS_CORETYPE=$t" >&2
    status=1
  fi
done
exit $status
