# Shared helpers of the Python tests: the repository paths, the pldr CLI, and a small
# safetensors reader (numpy) for the golden fixtures and the CLI's outputs.
import json
import os
import struct
import subprocess

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GOLDEN = os.environ.get("PLDR_GOLDEN_DIR") or os.path.join(ROOT, "tests", "golden")
DEFAULT_MODEL = os.path.join(ROOT, "models", "pldr-sotu-small")
EVAL_MODEL = os.path.join(GOLDEN, "eval", "models", "eval_v510_s2024")
PLDR_BIN = os.environ.get("PLDR_BIN") or os.path.join(ROOT, "build", "pldr")

_DTYPES = {"F64": np.float64, "F32": np.float32, "I64": np.int64, "F16": np.float16,
           "I32": np.int32}


def read_safetensors(path):
    """Every tensor of a safetensors file as a numpy array, by name."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(raw[base + a:base + b], dtype=_DTYPES[t["dtype"]]).reshape(
            t["shape"])
    return out


def single_step_fixtures():
    """The single-step golden sets, discovered by format as the C++ tests do: <name>.json
    with "files" and "config" (tests/golden_util.h)."""
    names = []
    for fn in sorted(os.listdir(GOLDEN)):
        if not fn.endswith(".json") or fn == "manifest.json":
            continue
        with open(os.path.join(GOLDEN, fn)) as f:
            side = json.load(f)
        if isinstance(side, dict) and "files" in side and "config" in side:
            names.append((side["name"], side))
    return names


def run_cli(*args):
    r = subprocess.run([PLDR_BIN, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"pldr {' '.join(args)} failed: {r.stderr}")
    return r.stdout


@pytest.fixture(scope="session")
def pldr():
    import pldr as module
    return module
