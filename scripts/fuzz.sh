#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan, build dir build-fuzz) and runs each one for
# SECONDS (default 30) on its seed corpus and regression inputs: `bash scripts/fuzz.sh 30`.
# Targets run one per core at a time; TARGETS="safetensors shard" picks some. Exit status: non-zero
# when any target finds a crash (its input is in build-fuzz/fuzz/work/<target>/crash-*).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-30}
BUILD=${PLDR_FUZZ_BUILD_DIR:-build-fuzz}
CC=clang CXX=clang++ cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPLDR_FUZZ=ON \
  -DPLDR_BUILD_TESTS=OFF -DPLDR_BUILD_BENCH=OFF -DPLDR_FATAL_WARNINGS=OFF \
  -DPLDR_FUZZ_SECONDS="$SECS" ${PLDR_CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target fuzz_targets
filter=()
if [ -n "${TARGETS:-}" ]; then filter=(-R "^fuzz_($(echo "$TARGETS" | tr ' ' '|'))\$"); fi
set +e
# One target per core at a time: each libFuzzer process runs on one thread for SECONDS.
(cd "$BUILD" && ctest -L '^fuzz$' -j"$(nproc)" --output-on-failure -V "${filter[@]}") \
  > "$BUILD/fuzz-ctest.log" 2>&1
rc=$?
set -e
grep -E '^[0-9]+: fuzz_[a-z_]+: [0-9]+s, execs' "$BUILD/fuzz-ctest.log" | sed 's/^[0-9]*: //'
grep -E 'tests passed|tests failed' "$BUILD/fuzz-ctest.log" || true
[ $rc -eq 0 ] || grep -E 'ERROR: libFuzzer|SUMMARY|Test +#.*Failed' "$BUILD/fuzz-ctest.log" | head -20
exit $rc
