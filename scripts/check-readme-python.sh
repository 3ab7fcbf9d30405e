#!/usr/bin/env bash
# Runs README.md's `python3 -c "import pldr ..."` one-liner as written, with the given
# interpreter (default Debian's /usr/bin/python3), from the repository root; it must print text.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-/usr/bin/python3}
line=$(grep -m1 -E '^ *python3 -c "import pldr' README.md) ||
  { echo "README.md has no python3 -c \"import pldr ...\" line"; exit 1; }
line=${line#*python3 }
out=$(eval "\"$PY\" $line")
echo "$out"
[ -n "$(tr -d '[:space:]' <<<"$out")" ] || { echo "the one-liner printed nothing"; exit 1; }
