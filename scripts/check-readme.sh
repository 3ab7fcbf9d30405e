#!/usr/bin/env bash
# Runs every `./build/pldr …` command of README.md (code blocks, in order, continuation lines
# joined), from the repository root, so the README cannot drift from the tool. Each command
# must exit 0, and at least one must be found. Usage:
#   scripts/check-readme.sh [BUILD_DIR [README]]   (defaults: build, README.md)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=$(cd "${1:-build}" && pwd)
README=$(cd "$(dirname "${2:-README.md}")" && pwd)/$(basename "${2:-README.md}")
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# A scratch working directory with the repository's inputs linked in, so that the commands'
# out/ paths never touch the checkout and every run starts clean.
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
for d in data models tests docs; do ln -s "$ROOT/$d" "$WORK/$d"; done
cd "$WORK"
mkdir -p out
n=0
while IFS= read -r cmd; do
    cmd=${cmd//.\/build\/pldr/$BUILD\/pldr}
    n=$((n + 1))
    echo "[$n] $cmd"
    if ! bash -c "$cmd" >"$WORK/log" 2>&1; then
        echo "README command failed: $cmd" >&2
        tail -n 20 "$WORK/log" >&2
        exit 1
    fi
done < <(awk '
    /^```/ { inblock = !inblock; next }
    inblock {
        line = $0
        if (cont != "") { line = cont " " line; cont = "" }
        if (line ~ /\\$/) { sub(/\\$/, "", line); cont = line; next }
        if (line ~ /^\.\/build\/pldr /) { sub(/[ \t]+#.*$/, "", line); print line }
    }' "$README")

# A README without a single ./build/pldr command (or a parser that finds none) checks nothing.
if [ "$n" -eq 0 ]; then
    echo "README: no ./build/pldr commands found in $README" >&2
    exit 1
fi
echo "README: $n commands ran"
