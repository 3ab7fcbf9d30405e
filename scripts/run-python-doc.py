#!/usr/bin/env python3
"""Runs the ```python code blocks of a Markdown file in order, as one session (the test of
docs/python.md). Each block's source is printed before it runs; any exception fails the run
with the block's number."""
import re
import sys
import traceback


def main():
    path = sys.argv[1]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
    if not blocks:
        print(f"{path}: no python code blocks", file=sys.stderr)
        return 1
    env = {"__name__": "__main__"}
    for i, code in enumerate(blocks, 1):
        print(f"--- block {i} ---\n{code}", flush=True)
        try:
            exec(compile(code, f"{path}:block{i}", "exec"), env)
        except Exception:
            traceback.print_exc()
            print(f"{path}: block {i} failed", file=sys.stderr)
            return 1
    print(f"{path}: {len(blocks)} blocks ran", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
