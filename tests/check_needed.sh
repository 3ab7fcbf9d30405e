#!/usr/bin/env bash
# No binary of pldr names a CUDA library among its dynamic dependencies (ELF NEEDED): the CUDA
# runtime links statically and cuBLASLt is opened with dlopen on the first GPU product
# (src/cuda/gemm.cu), because linking libcublasLt.so cost every process 0.35 s and 200 MB of
# resident memory at start, GPU or not (docs/gpu.md, "Building"). Fails naming the binary and the
# library. Usage: check_needed.sh BINARY...
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: check_needed.sh BINARY..." >&2; exit 2; }
bad=0
for f in "$@"; do
  [ -f "$f" ] || { echo "$f: no such file" >&2; exit 2; }
  needed=$(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  [ -n "$needed" ] || { echo "$f: readelf found no NEEDED entry (not a dynamic ELF file?)" >&2; exit 2; }
  while read -r lib; do
    case "$lib" in
      libcublas*|libcudart*|libcuda.so*|libcudnn*|libnccl*)
        echo "$f links $lib: CUDA libraries are loaded at run time, never linked"
        bad=1 ;;
    esac
  done <<<"$needed"
done
exit $bad
