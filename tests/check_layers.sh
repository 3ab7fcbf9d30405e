#!/usr/bin/env bash
# The library's layering (docs/architecture.md, "Layering"): every #include of a project header
# in every file of src/, quoted or in <...>, names a header of the file's own folder or of a folder
# that the matrix below lets its folder include; every file of include/pldr/ includes only
# include/pldr/. A folder of src/ without a row fails, and so does an include that names no file
# (a quoted include without a folder must be a header of the file's own folder). Fails naming
# each violation: file, line, the include, and what the file's folder may include.
# Usage: check_layers.sh [SOURCE_ROOT]
set -euo pipefail
ROOT=$(cd "${1:-$(dirname "$0")/..}" && pwd)

# What each folder of src/ may include besides itself: folders of src/ ("pldr" is include/pldr/),
# or single headers. Lower layers first; a folder never includes one above it.
declare -A ALLOW=(
  # pldr::Error is the one exception type, shared with the public API (core/error.h).
  [core]="pldr/error.hpp"
  [ops]="core"
  # ops knows no model: the operator's options and variants by name are the model's to resolve
  # (model/config.h, model/plga_attention.h).
  [model]="core ops"
  # io reads and writes the model's files; the kernels (ops) reach it only through model/'s
  # headers (model/packed.h).
  [io]="core model"
  [dist]="core"
  # train, infer and audit sit side by side over io. One justified exception: audit measures
  # inference (collapse, generation, scoring: spec §8.1), so it includes infer, never the
  # reverse; train includes neither (the golden naming is model/named_outputs.h).
  [train]="core ops model io dist"
  # The CUDA backend's kernels (docs/gpu.md): the ops' element formulas and the optimizer's
  # (train/adamw_element.h, train/clip_order.h), shared with the CPU so that they are written
  # once; nothing of the model above them.
  [cuda]="core ops train"
  # The model on the GPU (docs/gpu.md): the model's passes composed from the kernels; train for
  # the training objective and step it runs on the device (train/loss.h, train/step.h), and the
  # session's cache modes (infer/session.h: CacheMode) for its decoding session.
  [cuda_model]="core ops model train infer/session.h cuda"
  # The sampler's settings are the sampling table of the declared options (pldr/options.hpp:
  # the one declaration every surface derives from; it includes only pldr/error.hpp).
  [infer]="core ops model io pldr/options.hpp"
  [audit]="core ops model io infer"
  # The benchmark workloads run inference and training steps.
  [perf]="core ops model io dist train infer"
  # The public API's implementation over everything below it.
  [api]="core ops model io dist train infer audit perf cuda cuda_model pldr"
  # pldr serve is a client of the public API, like the CLI and the Python module.
  [serve]="pldr"
)

bad=0
report() {
  echo "$1"
  bad=1
}

# allowed FOLDER INCLUDE: 0 when FOLDER's files may include INCLUDE (a path with a folder).
allowed() {
  local top=${2%%/*} a
  [ "$top" = "$1" ] && return 0
  for a in ${ALLOW[$1]}; do
    [ "$a" = "$top" ] || [ "$a" = "$2" ] && return 0
  done
  return 1
}

# target INCLUDE: sets $target to the file a project include names, src/X/... or
# include/pldr/...; "" when it is none of ours (no subshell: this runs for every include).
target=""
set_target() {
  case "$1" in
    pldr/*) target="include/$1" ;;
    */*) if [ -d "$ROOT/src/${1%%/*}" ]; then target="src/$1"; else target=""; fi ;;
    *) target="" ;;
  esac
}

# Every #include line of the files under a folder, in one pass: FILE<TAB>LINE<TAB>INCLUDE<TAB>
# quote|angle.
includes_under() {
  grep -rnE --include='*.h' --include='*.hpp' --include='*.cpp' --include='*.cc' --include='*.c' --include='*.cu' \
    --include='*.cuh' \
    '^[[:space:]]*#[[:space:]]*include[[:space:]]*["<]' "$1" |
    sed -E 's/^([^:]+):([0-9]+):[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1\t\2\t\3\tquote/;
            s/^([^:]+):([0-9]+):[[:space:]]*#[[:space:]]*include[[:space:]]*<([^>]+)>.*/\1\t\2\t\3\tangle/' |
    sort -t$'\t' -k1,1 -k2,2n || true
}

[ -d "$ROOT/src" ] || { echo "check_layers: no src/ under $ROOT"; exit 1; }
for dir in "$ROOT"/src/*/; do
  folder=$(basename "$dir")
  [ -n "${ALLOW[$folder]+x}" ] ||
    report "src/$folder: a folder with no row in the layer matrix of tests/check_layers.sh"
done
nfiles=$(find "$ROOT/src" -type f \( -name '*.h' -o -name '*.hpp' -o -name '*.cpp' -o -name '*.cc' \
  -o -name '*.c' \) | wc -l)

while IFS=$'\t' read -r f line inc kind; do
  [ -n "$inc" ] || continue
  rel=${f#"$ROOT"/}
  folder=${rel#src/}
  folder=${folder%%/*}
  [ -n "${ALLOW[$folder]+x}" ] || continue  # reported above
  if [[ "$inc" != */* ]]; then
    # A quoted header of the file's own folder; <...> without a folder is the system's.
    if [ "$kind" = quote ] && [ ! -f "${f%/*}/$inc" ]; then
      report "$rel:$line: includes \"$inc\", which is no header of src/$folder/"
    fi
    continue
  fi
  set_target "$inc"
  if [ -z "$target" ]; then
    [ "$kind" = angle ] && continue  # a system or third-party header
    report "$rel:$line: includes \"$inc\", which names no folder of src/ or include/pldr/"
    continue
  fi
  if [ ! -f "$ROOT/$target" ]; then
    report "$rel:$line: includes \"$inc\", which is no file ($target)"
  elif ! allowed "$folder" "$inc"; then
    report "$rel:$line: includes \"$inc\": src/$folder may include only ${ALLOW[$folder]} (and itself)"
  fi
done < <(includes_under "$ROOT/src")

# The public headers stand alone: include/pldr/ includes only include/pldr/ (and the system's).
if [ -d "$ROOT/include/pldr" ]; then
  nfiles=$((nfiles + $(find "$ROOT/include/pldr" -type f | wc -l)))
  while IFS=$'\t' read -r f line inc kind; do
    [ -n "$inc" ] || continue
    rel=${f#"$ROOT"/}
    case "$inc" in
      pldr/*) [ -f "$ROOT/include/$inc" ] && continue ;;
      */*)
        set_target "$inc"
        [ "$kind" = angle ] && [ -z "$target" ] && continue
        ;;
      *) [ "$kind" = angle ] && continue ;;
    esac
    report "$rel:$line: includes \"$inc\" (include/pldr/ includes only include/pldr/)"
  done < <(includes_under "$ROOT/include/pldr")
fi

[ "$nfiles" -gt 0 ] || { echo "check_layers: no sources under $ROOT/src"; exit 1; }
[ "$bad" = 0 ] && echo "check_layers: the $nfiles files of src/ and include/pldr/ follow the layer matrix"
exit "$bad"
