#!/usr/bin/env bash
# The official OpenAI Node client for the test that runs it against `pldr serve`
# (tests/serve/openai_client_test.py, CTest serve_openai_node): openai 6.49.0 from the npm
# registry into .deps/node (ignored by git). Needs node and npm; says so and exits 0 without them
# (the test is then skipped). CI runs it (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "install-node-client: node/npm not found; the OpenAI Node client test will be skipped"
  exit 0
fi
DIR=.deps/node
if [ -f "$DIR/node_modules/openai/package.json" ] &&
   grep -q '"version": "6.49.0"' "$DIR/node_modules/openai/package.json"; then
  echo "install-node-client: openai 6.49.0 present in $DIR"
  exit 0
fi
mkdir -p "$DIR"
if ! npm install --prefix "$DIR" --no-audit --no-fund --no-save --loglevel=error openai@6.49.0; then
  echo "install-node-client: npm could not install openai 6.49.0; the OpenAI Node client test will be skipped"
  exit 0
fi
echo "install-node-client: openai 6.49.0 installed in $DIR (node $(node --version))"
