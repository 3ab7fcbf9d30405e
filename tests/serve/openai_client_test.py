#!/usr/bin/python3
"""The official OpenAI clients against `pldr serve` (CTest serve_openai_node, issue 36): starts a
server on loopback and runs tests/serve/node/openai_client_test.cjs with the Node client that
scripts/install-node-client.sh puts in .deps/node (openai 6.49.0, the version the issue used).
Exits 77 (skipped), saying why, when node or the client is absent. The Python `openai` client is
not packaged in Debian 12, so it is not run.
Usage: openai_client_test.py PLDR [NODE_MODULES_DIR]"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import ROOT, Server, check  # noqa: E402

PLDR = sys.argv[1]
MODULES = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, ".deps", "node", "node_modules")


def main():
    node = shutil.which("node")
    if not node:
        print("serve_openai_node: SKIPPED: node is not installed (bash scripts/install-node-client.sh)")
        sys.exit(77)
    if not os.path.isfile(os.path.join(MODULES, "openai", "package.json")):
        print(f"serve_openai_node: SKIPPED: the openai package is not in {MODULES} "
              "(bash scripts/install-node-client.sh)")
        sys.exit(77)
    s = Server(PLDR, args=["--parallel", "2"])
    try:
        r = subprocess.run([node, os.path.join(ROOT, "tests/serve/node/openai_client_test.cjs"), MODULES,
                            f"http://127.0.0.1:{s.port}/v1"], timeout=240)
        check(r.returncode == 0, f"the Node client test failed (exit {r.returncode})")
    finally:
        code = s.stop()
    check(code == 0, f"server exit code {code}")


if __name__ == "__main__":
    main()
