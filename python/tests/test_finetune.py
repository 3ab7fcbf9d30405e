# Fine-tuning from a released model directory (init_dir / `pldr train --init`): the run starts
# from the directory's config and weights, so its first loss is the model's own loss on the
# first batch (a fresh initialization would be near ln V), in Python and in the CLI.
import json
import os
import subprocess

import numpy as np
import pytest

from conftest import DEFAULT_MODEL, PLDR_BIN, ROOT

CORPUS = os.path.join(ROOT, "data", "corpus", "tinyshakespeare", "valid.txt")
CTX = 16


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """Shards of the corpus under the default model's own tokenizer, in file order."""
    if not os.path.exists(CORPUS):
        pytest.skip(f"{CORPUS} not found")
    d = tmp_path_factory.mktemp("finetune")
    r = subprocess.run([PLDR_BIN, "prepare", "--tokenizer",
                        os.path.join(DEFAULT_MODEL, "tokenizer.model"), "--out", str(d / "shards"),
                        "--ctx", str(CTX), "--valid-fraction", "0.1", CORPUS],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return str(d / "shards")


def first_chunks(shard_dir, n):
    """The first n chunks of train.pldrtok ([n, ctx]; docs/formats.md: a 40-byte header)."""
    with open(os.path.join(shard_dir, "train.pldrtok"), "rb") as f:
        raw = f.read()
    dtype = {2: np.uint16, 4: np.uint32}[int.from_bytes(raw[16:20], "little")]
    ctx = int.from_bytes(raw[20:24], "little")
    return np.frombuffer(raw[40:], dtype=dtype).reshape(-1, ctx)[:n].astype(np.int64)


def test_train_init_dir_starts_from_the_model(pldr, shards, tmp_path):
    model = pldr.Model(DEFAULT_MODEL)
    want = model.loss_and_grads(first_chunks(shards, 4))["value"]
    assert want < 0.8 * np.log(model.info["vocab_size"])  # a trained model, not a fresh one
    seen = []
    out = pldr.train(init_dir=DEFAULT_MODEL, data_dir=shards, out_dir=tmp_path / "ft", steps=2,
                     batch=4, shuffle=False, eval_every=0, save_every=0,
                     callback=lambda s: seen.append(s["value"]))
    assert out["steps_done"] == 2 and out["num_params"] == model.info["num_params"]
    assert seen[0] == pytest.approx(want, rel=1e-4)
    ft = pldr.Model(tmp_path / "ft")  # a model directory with the model's shape and tokenizer
    assert ft.info["hidden_size"] == model.info["hidden_size"]
    assert ft.tokenizer.encode("The Union") == model.tokenizer.encode("The Union")

    with pytest.raises(pldr.Error, match="--init"):
        pldr.train(init_dir=DEFAULT_MODEL, preset="tiny", data_dir=shards,
                   out_dir=tmp_path / "bad", steps=2)
    with pytest.raises(pldr.Error):  # never into the directory it starts from
        pldr.train(init_dir=tmp_path / "ft", data_dir=shards, out_dir=tmp_path / "ft", steps=2,
                   force=True)


def test_cli_train_init(pldr, shards, tmp_path):
    want = pldr.Model(DEFAULT_MODEL).loss_and_grads(first_chunks(shards, 4))["value"]
    r = subprocess.run([PLDR_BIN, "train", "--init", DEFAULT_MODEL, "--data", shards, "--out",
                        str(tmp_path / "ft"), "--steps", "2", "--batch", "4", "--no-shuffle",
                        "--eval-every", "0", "--save-every", "0"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with open(tmp_path / "ft" / "metrics.jsonl") as f:
        steps = [j for j in map(json.loads, f) if j.get("type") == "train"]
    assert steps[0]["step"] == 1 and steps[0]["loss"] == pytest.approx(want, rel=1e-4)
    r = subprocess.run([PLDR_BIN, "train", "--init", DEFAULT_MODEL, "--config",
                        os.path.join(DEFAULT_MODEL, "config.json"), "--data", shards, "--out",
                        str(tmp_path / "bad"), "--steps", "2"], capture_output=True, text=True)
    assert r.returncode != 0 and "--init" in r.stderr and len(r.stderr.strip().splitlines()) == 1
