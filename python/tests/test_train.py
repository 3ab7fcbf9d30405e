# pldr.train: the training loop with a callback per step; returning False stops with a
# checkpoint, and a resumed run continues from it to the same weights as an uninterrupted run.
import os
import subprocess

import numpy as np
import pytest

from conftest import PLDR_BIN, ROOT, read_safetensors

CORPUS = os.path.join(ROOT, "data", "corpus", "tinyshakespeare", "valid.txt")


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    if not os.path.exists(CORPUS):
        pytest.skip(f"{CORPUS} not found")
    d = tmp_path_factory.mktemp("train")
    for args in (["tokenizer", "train", "--input", CORPUS, "--out", str(d / "tok"),
                  "--vocab-size", "400", "--model-type", "bpe", "--threads", "1"],
                 ["prepare", "--tokenizer", str(d / "tok.model"), "--out", str(d / "shards"),
                  "--ctx", "16", "--valid-fraction", "0.1", CORPUS]):
        r = subprocess.run([PLDR_BIN, *args], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    return str(d / "shards")


def test_train_callback_stop_and_resume(pldr, shards, tmp_path):
    common = dict(data_dir=shards, preset="tiny", steps=6, batch=4, lr=0.003, warmup=3,
                  eval_every=0, save_every=0)
    full = pldr.train(out_dir=str(tmp_path / "full"), **common)
    assert full["steps_done"] == 6 and full["stop_reason"] == "completed"

    seen = []
    part = pldr.train(out_dir=str(tmp_path / "part"),
                      callback=lambda s: seen.append(s) or s["step"] < 3, **common)
    assert part["stop_reason"] == "callback" and part["steps_done"] == 3
    assert [s["step"] for s in seen] == [1, 2, 3]
    assert all(np.isfinite(s["value"]) for s in seen)
    assert seen[0]["lr"] == 0.0  # step 1 runs at λ(0) = 0 (warmup)

    rest = pldr.train(out_dir=str(tmp_path / "part"), resume_dir=str(tmp_path / "part"),
                      **common)
    assert rest["start_step"] == 3 and rest["steps_done"] == 6
    a = read_safetensors(str(tmp_path / "full" / "model.safetensors"))
    b = read_safetensors(str(tmp_path / "part" / "model.safetensors"))
    assert sorted(a) == sorted(b)
    for k in a:
        assert np.array_equal(a[k], b[k]), k

    # The trained checkpoint loads as a model.
    m = pldr.Model(str(tmp_path / "full"))
    assert m.info["num_layers"] >= 1

    with pytest.raises(pldr.Error):
        pldr.train(data_dir=str(tmp_path / "no-shards"), out_dir=str(tmp_path / "x"),
                   preset="tiny", steps=2)
