#!/usr/bin/env bash
# Quick start, step 1: install the Debian packages, build pldr, and run the main job on the
# bundled model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
echo
echo "== pldr dump: one forward pass of a bundled tiny PLDR-LLM, every deductive output saved =="
mkdir -p out
./build/pldr dump tests/golden/models/a_tiny_v510.f32 --tokens 10,10,14,11,31 \
    --out out/dump.safetensors
