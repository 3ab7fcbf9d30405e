#!/usr/bin/env bash
# Quick start, step 1: install the Debian packages, build pldr, then run the main job on the
# bundled default model (a PLDR-LLM that pldr trained on the State of the Union corpus):
# generate text, and audit the inference collapse (eps_G over the decode steps, the fluctuation
# of G_LM across prompts, block vs sequential scoring on TruthfulQA items), with the full
# report written to out/audit/report.html.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target pldr
# The Python module for Debian's python3, into the user site-packages (docs/python.md).
bash scripts/install-python.sh
MODEL=models/pldr-sotu-small
echo
echo "== pldr generate: $MODEL (KV-cache + G-cache) =="
./build/pldr generate "$MODEL" -p "The state of the Union is" -n 64 --temp 0.8 --top-p 0.9 --seed 1
echo
echo "== pldr audit: is the PLGA operator collapsed at inference? =="
./build/pldr audit "$MODEL" --out out/audit --steps 16 --items 4 --text data/corpus/sotu/valid.txt
echo
echo "Full report: out/audit/report.html (and out/audit/audit.json)."
echo
echo "== Python: import pldr =="
/usr/bin/python3 -c "import pldr; m = pldr.Model('$MODEL'); print(m.generate('The state of the Union is', max_tokens=16))"
