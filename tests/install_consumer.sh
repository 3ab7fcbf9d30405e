#!/usr/bin/env bash
# cmake --install into a temporary prefix, then an outside project (tests/consumer) finds the
# package with find_package(pldr), builds a C++ and a C program against it, and runs both on the
# default model: each must generate the same greedy text (the C++ and C APIs agree), and the
# C API must report a missing model directory as an error, not a crash.
set -euo pipefail
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$(dirname "$0")/.." && pwd)
MODEL="$SRC/models/pldr-sotu-small"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cmake --install "$BUILD" --prefix "$TMP/prefix" >/dev/null
# Only the declared headers are installed.
test -f "$TMP/prefix/include/pldr/pldr.hpp" && test -f "$TMP/prefix/include/pldr/pldr.h"
extra=$(cd "$TMP/prefix/include" && find . -type f | grep -v '^./pldr/' || true)
[ -z "$extra" ] || { echo "unexpected installed headers: $extra"; exit 1; }
# A sanitized libpldr needs sanitized programs (the ASan runtime must come first).
SAN=()
if grep -q '^PLDR_SANITIZE:BOOL=ON' "$BUILD/CMakeCache.txt"; then
  SAN=(-DCMAKE_C_FLAGS=-fsanitize=address,undefined -DCMAKE_CXX_FLAGS=-fsanitize=address,undefined
       -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined)
fi
cmake -S "$SRC/tests/consumer" -B "$TMP/build" -DCMAKE_PREFIX_PATH="$TMP/prefix" \
  -DCMAKE_BUILD_TYPE=Release "${SAN[@]}" >/dev/null
cmake --build "$TMP/build" -j2 >/dev/null
cpp=$("$TMP/build/consumer_cpp" "$MODEL")
c=$("$TMP/build/consumer_c" "$MODEL")
echo "C++: $cpp"
echo "C:   $c"
text_cpp=${cpp##*|}
text_c=${c##*|}
[ -n "$text_cpp" ] || { echo "empty generation"; exit 1; }
[ "$text_cpp" = "$text_c" ] || { echo "the C and C++ APIs disagree"; exit 1; }
if "$TMP/build/consumer_c" "$TMP/no-such-model" 2>"$TMP/err"; then
  echo "a missing model directory was not an error"; exit 1
fi
grep -q "consumer_c: error: .*no-such-model" "$TMP/err" || { cat "$TMP/err"; exit 1; }
echo "install_consumer: OK"
