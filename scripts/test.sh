#!/usr/bin/env bash
# Quick start, step 2: build pldr with its tests and run them all (ctest), then check the
# formatting of every C++ file.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${PLDR_BUILD_DIR:-build}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=${PLDR_BUILD_TYPE:-Release} ${PLDR_CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
# PLDR_CTEST_EXCLUDE: a regex of tests to leave out (CI's sanitizer pass: the timing and
# test-of-the-tests checks that AddressSanitizer only slows down).
(cd "$BUILD" && ctest --output-on-failure -j"$(nproc)" ${PLDR_CTEST_EXCLUDE:+-E "$PLDR_CTEST_EXCLUDE"})
if command -v clang-format >/dev/null; then
  git ls-files '*.cpp' '*.h' | xargs clang-format --dry-run --Werror
  echo "clang-format: all files formatted"
fi
