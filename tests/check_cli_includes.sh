#!/usr/bin/env bash
# The pldr tool uses only the declared library: every file of tools/pldr/ (no exceptions) may
# include "pldr/..." (include/pldr/), the tool's own headers (tools/pldr/*.h) and system or
# third-party <...> headers, never the library's internals (src/), quoted or in <...>. The same
# holds for the serving engine (src/serve/engine.*, the adapter through which `pldr serve` reaches
# the model library): "pldr/..." and "serve/..." headers only. Fails naming each violation.
set -euo pipefail
SRC=$(cd "${1:-$(dirname "$0")/..}" && pwd)
cd "$SRC/tools/pldr"
bad=0
shopt -s nullglob
files=(*.cpp *.h *.hpp *.c *.cc)
[ "${#files[@]}" -gt 0 ] || { echo "check_cli_includes: no sources in tools/pldr"; exit 1; }
for f in "${files[@]}"; do
  while IFS= read -r line; do
    inc=$(sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1/' <<<"$line")
    case "$inc" in
      pldr/*) [ -f "$SRC/include/$inc" ] && continue ;;
      */*) ;;
      *) [ -f "$inc" ] && continue ;;
    esac
    echo "tools/pldr/$f: includes \"$inc\" (only include/pldr/ and tools/pldr/ headers are allowed)"
    bad=1
  done < <(grep -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" || true)
  if grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*<(core|io|model|ops|train|infer|audit|dist|api|serve)/' "$f"; then
    echo "tools/pldr/$f: includes a library internal"
    bad=1
  fi
done
for f in "$SRC"/src/serve/engine.*; do
  while IFS= read -r inc; do
    case "$inc" in
      pldr/*) [ -f "$SRC/include/$inc" ] && continue ;;
      serve/*) [ -f "$SRC/src/$inc" ] && continue ;;
    esac
    echo "src/serve/${f##*/}: includes \"$inc\" (the engine uses only include/pldr/ and src/serve/)"
    bad=1
  done < <(sed -nE 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1/p' "$f")
done
[ "$bad" = 0 ] && echo "check_cli_includes: every file of tools/pldr/ and the serving engine use only include/pldr/"
exit "$bad"
