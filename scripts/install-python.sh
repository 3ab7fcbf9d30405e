#!/usr/bin/env bash
# Builds the Python module `pldr` and installs it for Debian's /usr/bin/python3 into the user
# site-packages (no root needed): afterwards `import pldr` works from any directory.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${PLDR_BUILD_DIR:-build}
PY=/usr/bin/python3
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$PY" >/dev/null
grep -q '^PLDR_PYTHON:BOOL=ON' "$BUILD/CMakeCache.txt" ||
  { echo "install-python: pybind11 not found (run scripts/install-deps.sh)" >&2; exit 1; }
cmake --build "$BUILD" -j"$(nproc)" --target pldr_python
SITE=$("$PY" -m site --user-site)
mkdir -p "$SITE"
for so in "$BUILD"/python/pldr*.so; do
  # Atomic replacement: a running interpreter keeps its mapped copy.
  cp "$so" "$SITE/.$(basename "$so").tmp"
  mv -f "$SITE/.$(basename "$so").tmp" "$SITE/$(basename "$so")"
done
"$PY" -c "import pldr; print('install-python: pldr', pldr.__version__, 'in', pldr.__file__)"
