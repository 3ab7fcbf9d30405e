#!/usr/bin/env bash
# libpldr.so exports only the public API: the C functions pldr_*, pldr::api::* (with type
# information and virtual tables of its classes) and pldr::Error. Any
# other defined dynamic symbol (an internal pldr:: function, a dependency's symbol) fails the
# test, named. The API's entry points must be there (a library that exports nothing fails too).
set -euo pipefail
LIB="$1"
[ -f "$LIB" ] || { echo "check_exports: $LIB not found"; exit 1; }
syms=$(nm -D --defined-only -C "$LIB" | awk '{ $1 = ""; $2 = ""; sub(/^  /, ""); print }')
allowed='^(pldr_[A-Za-z0-9_]+|pldr::api::.*|(typeinfo for|typeinfo name for|vtable for) pldr::api::.*|(typeinfo for|typeinfo name for|vtable for) pldr::Error|pldr::Error::~Error\(\)|PLDR_[A-Za-z0-9_.]+)$'
bad=$(grep -vE "$allowed" <<<"$syms" || true)
if [ -n "$bad" ]; then
  echo "check_exports: $LIB exports symbols outside the public API ($(wc -l <<<"$bad")):"
  head -n 40 <<<"$bad"
  exit 1
fi
for want in 'pldr_model_load' 'pldr_train' 'pldr::api::Model::load(' 'pldr::api::train(' \
            'typeinfo for pldr::Error'; do
  grep -qF -- "$want" <<<"$syms" || { echo "check_exports: $LIB does not export $want"; exit 1; }
done
echo "check_exports: $(wc -l <<<"$syms") symbols, all of the public API"
