#!/usr/bin/env bash
# The golden tests (float32 and float64) under forced OpenBLAS kernels: the float32 allowances
# come from measured conditioning and must hold whatever kernel runs. Every x86-64 CPU runs the
# Haswell, Zen and Sandybridge kernels; SkylakeX and Cooperlake run where the CPU has AVX-512
# (and AVX512-BF16). These passes run every float32 product through OpenBLAS
# (PLDR_SGEMM=openblas); then, in a build with oneDNN, the large float32 products that oneDNN
# takes (core/blas.h) run once on its AVX2 kernels and once on the best the CPU has.
# Usage: scripts/test-coretypes.sh [BUILD_DIR] [CORETYPE ...]
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
# One OpenBLAS pass (single-threaded): its log in BUILD/coretype-T.log, its status in .rc.
pass() {
  local t=$1 core
  core=$(OPENBLAS_CORETYPE=$t OPENBLAS_VERBOSE=2 "$BUILD/tests/pldr_tests" \
           --gtest_filter=GoldenSet.MatchesManifest 2>&1 | sed -n 's/^Core: //p' | head -1)
  if [ "$core" != "$t" ]; then
    echo "coretypes: OpenBLAS ran '${core:-?}' when $t was forced" >"$BUILD/coretype-$t.log"
    echo 1 >"$BUILD/coretype-$t.rc"
    return
  fi
  echo "== golden tests with OPENBLAS_CORETYPE=$t (OpenBLAS reports Core: $core)" >"$BUILD/coretype-$t.head"
  if PLDR_SGEMM=openblas OPENBLAS_CORETYPE=$t OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
       "$BUILD/tests/pldr_tests" --gtest_filter="$filter" --gtest_brief=1 >"$BUILD/coretype-$t.log" 2>&1; then
    echo 0 >"$BUILD/coretype-$t.rc"
  else
    echo 1 >"$BUILD/coretype-$t.rc"
  fi
}
# As many passes at once as there are cores (each runs on one thread), reported in order.
jobs_max=$(nproc)
for t in "${types[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
  rm -f "$BUILD/coretype-$t.rc" "$BUILD/coretype-$t.head"
  pass "$t" &
done
wait
for t in "${types[@]}"; do
  [ -f "$BUILD/coretype-$t.head" ] && cat "$BUILD/coretype-$t.head"
  if [ "$(cat "$BUILD/coretype-$t.rc" 2>/dev/null)" = 0 ]; then
    tail -2 "$BUILD/coretype-$t.log"
  else
    tail -40 "$BUILD/coretype-$t.log"
    echo "coretypes: golden tests FAILED with OPENBLAS_CORETYPE=$t" >&2
    status=1
  fi
done
if grep -q '^PLDR_DNNL:BOOL=ON' "$BUILD/CMakeCache.txt" 2>/dev/null; then
  for isa in AVX2 ALL; do
    echo "== golden tests with oneDNN's float32 products, ONEDNN_MAX_CPU_ISA=$isa"
    if ONEDNN_MAX_CPU_ISA=$isa "$BUILD/tests/pldr_tests" --gtest_filter="$filter" \
         --gtest_brief=1 >"$BUILD/coretype-onednn-$isa.log" 2>&1; then
      tail -2 "$BUILD/coretype-onednn-$isa.log"
    else
      tail -40 "$BUILD/coretype-onednn-$isa.log"
      echo "coretypes: golden tests FAILED with ONEDNN_MAX_CPU_ISA=$isa" >&2
      status=1
    fi
  done
fi
exit $status
