# The golden fixtures through the Python module: the float64 forward pass equals the reference's
# tensors to 1e-12 (relative per tensor, max|Δ| / max|ref|), as tests/test_golden_forward.cpp.
import os

import numpy as np
import pytest

from conftest import GOLDEN, read_safetensors, single_step_fixtures

FIXTURES = single_step_fixtures()


def rel_err(ours, ref):
    ref = np.asarray(ref, dtype=np.float64)
    d = np.max(np.abs(np.asarray(ours, dtype=np.float64) - ref))
    m = np.max(np.abs(ref))
    return d if m == 0 else d / m


def test_fixtures_found():
    assert len(FIXTURES) >= 5


@pytest.mark.parametrize("name,side", FIXTURES, ids=[n for n, _ in FIXTURES])
def test_forward_f64_matches_fixture(pldr, name, side):
    ref = read_safetensors(os.path.join(GOLDEN, side["files"]["f64"]))
    model = pldr.Model(os.path.join(GOLDEN, "models", name + ".f64"), dtype="f64")
    out = model.forward(ref["fwd.input_ids"])
    compared = 0
    for tname, ours in out["tensors"].items():
        if tname not in ref:
            continue
        assert ours.shape == ref[tname].shape, tname
        if tname == "fwd.mask" or tname.endswith(".scores_masked"):
            finite = np.isfinite(ref[tname])
            assert np.array_equal(finite, np.isfinite(ours)), tname
            assert rel_err(ours[finite], ref[tname][finite]) <= 1e-12, tname
        else:
            assert rel_err(ours, ref[tname]) <= 1e-12, (name, tname, rel_err(ours, ref[tname]))
        compared += 1
    fwd = [k for k in ref if k.startswith("fwd.") and k not in ("fwd.input_ids", "fwd.targets")]
    assert compared == len(fwd), (compared, len(fwd))
    # The per-layer lists are the same arrays as the named tensors.
    for layer in range(model.info["num_layers"]):
        assert np.array_equal(out["G_LM"][layer], out["tensors"][f"fwd.layer{layer}.G_LM"])
        assert np.array_equal(out["E"][layer], ref[f"fwd.layer{layer}.E"]) or \
            rel_err(out["E"][layer], ref[f"fwd.layer{layer}.E"]) <= 1e-12
    assert np.array_equal(out["logits"], out["tensors"]["fwd.logits"])


def test_forward_f32_close_to_fixture(pldr):
    name, side = FIXTURES[0]
    ref = read_safetensors(os.path.join(GOLDEN, side["files"]["f64"]))
    model = pldr.Model(os.path.join(GOLDEN, "models", name + ".f32"), dtype="f32")
    out = model.forward(ref["fwd.input_ids"])
    assert out["logits"].dtype == np.float32
    err = rel_err(out["logits"], ref["fwd.logits"])
    assert 0 < err < 1e-3  # float32: close, but not the float64 values
