#!/usr/bin/env bash
# Tests use only what the repository holds: no file under tests/, python/tests/, fuzz/ or
# scripts/ (test inputs and fuzz seeds included, binary files too) names a path outside it —
# the development machines' shared folder (../shared, /work/...) or a home directory. Fails
# naming each file and the first such path in it.
set -euo pipefail
SRC=$(cd "${1:-$(dirname "$0")/..}" && pwd)
cd "$SRC"
pattern='(/work/|/home/|\.\./shared/|/shared/(golden|data|spec)/)'
bad=0
while IFS= read -r -d '' f; do
  # build-fuzz/fuzz/work/... is a folder of the build tree, not /work/.
  hit=$(grep -aoE "[^[:space:]\"'\`(]*$pattern[^[:space:]\"'\`)]*" "$f" | grep -vE '^build[^/]*/fuzz/work/' |
        grep -vE '^\$\{CMAKE_CURRENT_BINARY_DIR\}/work/' | head -1 || true)
  if [ -n "$hit" ]; then
    echo "$f: names a path outside the repository: $hit"
    bad=1
  fi
done < <(find tests python/tests fuzz scripts -type f ! -name 'check_no_outside_paths.sh' -print0)
[ "$bad" = 0 ] && echo "check_no_outside_paths: no test file names a path outside the repository"
exit "$bad"
