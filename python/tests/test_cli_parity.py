# The module and the CLI compute the same numbers: scoring equals `pldr score`, gradients equal
# `pldr grad`, greedy generation equals `pldr generate --json`.
import json
import os

import numpy as np
import pytest

from conftest import EVAL_MODEL, GOLDEN, read_safetensors, run_cli

REQUESTS = [
    {"context": "The quick brown fox", "continuation": " jumps over the lazy dog"},
    {"context": "", "continuation": "Hello world"},
    {"context": "Q: What is the capital of France?\nA:", "continuation": " Paris"},
]


@pytest.mark.parametrize("mode", ["block", "sequential", "cached"])
def test_score_equals_cli(pldr, tmp_path, mode):
    req = tmp_path / "req.jsonl"
    req.write_text("".join(json.dumps(r) + "\n" for r in REQUESTS))
    cli = [json.loads(l) for l in run_cli("score", EVAL_MODEL, "--requests", str(req),
                                          "--mode", mode).splitlines()]
    model = pldr.Model(EVAL_MODEL)
    for r, c in zip(REQUESTS, cli):
        ours = model.score(r["context"], r["continuation"], mode=mode)
        assert ours["logprob"] == c["logprob"]
        assert ours["token_logprobs"] == c["token_logprobs"]
        assert ours["is_greedy"] == c["is_greedy"]
    # Block and sequential scoring differ on a PLGA model (A and G see different tokens).
    if mode == "sequential":
        blk = model.score(REQUESTS[0]["context"], REQUESTS[0]["continuation"], mode="block")
        assert blk["logprob"] != cli[0]["logprob"]


def test_score_top_logprobs(pldr):
    model = pldr.Model(EVAL_MODEL)
    r = model.score("The quick brown fox", " jumps over", top_logprobs=3)
    assert len(r["top"]) == len(r["token_logprobs"])
    for lp, top, tok in zip(r["token_logprobs"], r["top"], r["continuation_ids"]):
        assert len(top) == 3
        assert top[0][1] >= top[1][1] >= top[2][1]
        assert lp <= top[0][1] + 1e-6
        if tok == top[0][0]:
            assert abs(lp - top[0][1]) < 1e-5


def test_grads_equal_cli(pldr, tmp_path):
    model_dir = os.path.join(GOLDEN, "models", "e_tiny_v510_dag.f64")
    rows = [[7, 11, 32, 49, 45], [3, 5, 8, 13, 21]]
    out = tmp_path / "g.safetensors"
    run_cli("grad", model_dir, "--tokens", ",".join(map(str, rows[0])), "--tokens",
            ",".join(map(str, rows[1])), "--dtype", "f64", "--dag", "0.1,0.2,0.3",
            "--out", str(out))
    cli = read_safetensors(str(out))
    model = pldr.Model(model_dir, dtype="f64")
    r = model.loss_and_grads(np.array(rows), dag=[0.1, 0.2, 0.3])
    assert r["value"] == cli["loss.value"][0]
    assert r["ce"] == cli["loss.ce"][0]
    names = model.parameter_names()
    assert sorted(r["grads"]) == sorted(names)
    assert sorted("grad." + n for n in names) == sorted(k for k in cli if k.startswith("grad."))
    for n in names:
        g = r["grads"][n]
        assert g.dtype == np.float64 and g.shape == cli["grad." + n].shape, n
        assert np.array_equal(g, cli["grad." + n]), n
    # Without the DAG terms the loss is the plain cross-entropy and the gradient changes.
    r0 = model.loss_and_grads(np.array(rows))
    assert r0["value"] == r0["ce"] and r0["value"] != r["value"]


def test_generate_equals_cli(pldr):
    prompt = "The quick brown fox"
    cli = json.loads(run_cli("generate", EVAL_MODEL, "-p", prompt, "-n", "8", "--temp", "0.8",
                             "--top-p", "0.9", "--seed", "1", "--json"))
    model = pldr.Model(EVAL_MODEL)
    g = model.generate(prompt, max_tokens=8, temperature=0.8, top_p=0.9, seed=1, details=True)
    assert g["prompt_ids"] == cli["prompt_ids"]
    assert g["ids"] == cli["ids"]
    # The text continues the prompt's text (its leading space kept), in the CLI's JSON as in
    # the module, and the CLI's streamed output is the prompt's text followed by it.
    assert g["text"] == cli["text"] and g["text"].startswith(" ")
    tok = model.tokenizer
    streamed = run_cli("generate", EVAL_MODEL, "-p", prompt, "-n", "8", "--temp", "0.8",
                       "--top-p", "0.9", "--seed", "1")
    assert streamed == tok.decode(g["prompt_ids"]) + g["text"] + "\n"
    # A batch prints each prompt's text followed by its continuation (no word glued on).
    batch = run_cli("generate", EVAL_MODEL, "-p", prompt, "-p", "Q: What is", "-n", "8",
                    "--greedy")
    greedy = model.generate(prompt, max_tokens=8, greedy=True)
    assert batch.splitlines()[0] == "[0] " + tok.decode(g["prompt_ids"]) + greedy
    assert tok.decode(g["prompt_ids"]) + g["text"] == tok.decode(g["prompt_ids"] + g["ids"])
    for ours, theirs in zip(g["tokens"], cli["steps"]):
        assert ours["logprob"] == theirs["logprob"]
        assert [list(t) for t in ours["top"]] == theirs["top"]
