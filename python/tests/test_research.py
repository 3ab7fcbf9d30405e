# The module as a research library (issue 36): a session's outputs, bytes-safe token text,
# strict token ids, text that matches the CLI's, argument errors as pldr.Error, paths as
# os.PathLike, and fine-tuning from a model directory.
import numpy as np
import pytest

from conftest import DEFAULT_MODEL, EVAL_MODEL


@pytest.fixture(scope="module")
def model(pldr):
    return pldr.Model(DEFAULT_MODEL)


def test_last_outputs_after_prefill_and_decode(pldr, model):
    prompt = model.tokenizer.encode("The state of the Union is")
    full = model.forward(prompt)
    s = pldr.Session(model)
    logits = s.prefill(prompt)
    out = s.last_outputs()
    V, L = model.info["vocab_size"], model.info["num_layers"]
    # The last position's logits, as the prefill returned them and as forward computes them.
    assert out["logits"].shape == (1, 1, V)
    assert np.array_equal(out["logits"][0, 0], logits)
    assert np.allclose(out["logits"][0, 0], full["logits"][0, -1], rtol=0, atol=1e-4)
    assert len(out["G_LM"]) == L
    assert np.allclose(out["G_LM"][0], full["G_LM"][0], rtol=0, atol=1e-5)
    assert out["E"][0].shape == full["E"][0].shape  # [1,H,S,S] over the whole prompt
    nxt = int(np.argmax(logits))
    logits = s.decode(nxt)
    out = s.last_outputs()
    assert np.array_equal(out["logits"][0, 0], logits)
    # One new query against all S+1 keys.
    assert out["E"][0].shape[-2:] == (1, len(prompt) + 1)
    assert np.isfinite(out["G_LM"][0]).all()


def test_byte_pieces_never_raise_unicode_errors(pldr, model):
    tok = model.tokenizer
    # Byte-fallback pieces <0xNN> are ids 6 + NN: 0x80 is a lone continuation byte.
    assert tok.piece(134) == "<0x80>"
    assert tok.token_text(134) == "\ufffd"
    assert tok.token_bytes(134) == b"\x80"
    assert tok.token_bytes(tok.encode(" the")[0]) == b" the"
    # A prompt that ends inside a character ("\xe2"): greedy decoding continues it with 0x80,
    # a token that is not UTF-8 by itself, in the details and in the callback.
    prompt = tok.encode("The state of the Union") + [232]
    seen = []
    g = model.generate(prompt, max_tokens=4, greedy=True, stop_at_eos=False, details=True,
                       callback=lambda i, t, lp, so_far: seen.append((i, t, so_far)))
    assert g["ids"][0] == 134 and g["tokens"][0]["bytes"] == b"\x80"
    assert g["tokens"][0]["text"] == "\ufffd"
    assert [t["bytes"] for t in g["tokens"]] == [tok.token_bytes(i) for i in g["ids"]]
    assert [s[0] for s in seen] == g["ids"] and all(isinstance(s[2], str) for s in seen)
    assert seen[-1][2] == g["text"]
    assert model.generate(prompt, max_tokens=4, greedy=True, stop_at_eos=False) == g["text"]


def test_token_ids_must_be_integers(pldr, model):
    good = model.score([5, 17, 3], [9, 4])
    assert model.score(np.array([5, 17, 3], dtype=np.int32), np.array([9, 4], np.uint16))[
        "logprob"] == good["logprob"]
    for bad in ([1.9, 2.9], np.array([1.9, 2.9]), np.array([1, 2], dtype=np.float32),
                [1 + 0j, 2], np.array([True, False]), [True, 3], ["a", "b"], [2**70]):
        with pytest.raises(TypeError, match=r"score\(context\)"):
            model.score(bad, [9, 4])
        with pytest.raises(TypeError, match=r"generate\(prompt\)"):
            model.generate(bad, max_tokens=1)
    with pytest.raises(TypeError, match=r"score\(continuation\).*integers"):
        model.score([5, 17, 3], [9.5])
    with pytest.raises(TypeError, match=r"forward\(ids\)"):
        model.forward(np.array([[1.0, 2.0]]))
    with pytest.raises(TypeError, match=r"decode\(ids\)"):
        model.tokenizer.decode([65.7])


def test_two_dimensional_ids_refused_where_one_sequence_is_meant(pldr, model):
    two = np.array([[5, 17, 3], [9, 4, 8]])
    for call in (lambda: model.score(two, [9, 4]), lambda: model.score([9, 4], two),
                 lambda: model.generate(two, max_tokens=1),
                 lambda: pldr.Session(model).prefill(two)):
        with pytest.raises(pldr.Error, match="1-D"):
            call()
    assert model.forward(two)["logits"].shape[:2] == (2, 3)  # forward takes a batch


def test_bad_argument_values_are_argument_errors(pldr, model):
    assert issubclass(pldr.ArgumentError, pldr.Error)
    assert issubclass(pldr.ArgumentError, ValueError)
    for kw, name in ((dict(temperature=-1), "temperature"), (dict(top_p=1.5), "top_p"),
                     (dict(max_tokens=2**70), "max_tokens"), (dict(cache="bogus"), "bogus")):
        with pytest.raises(ValueError, match=name) as e:
            model.generate("The", **kw)
        assert isinstance(e.value, pldr.Error) and "--" not in str(e.value)
    with pytest.raises(pldr.ArgumentError, match="mode"):
        model.score("The", " Union", mode="bogus")
    with pytest.raises(pldr.ArgumentError, match="dag"):
        pldr.train(data_dir="x", out_dir="y", preset="tiny", dag=(-1, 0, 0))
    with pytest.raises(pldr.ArgumentError, match="no token ids"):
        model.score([], [4])
    with pytest.raises(pldr.ArgumentError, match="1-D"):
        model.generate(np.array([[5, 17]]), max_tokens=1)
    with pytest.raises(TypeError, match="temperature"):  # a wrong type stays a TypeError
        model.generate("The", temperature="hot")


def test_paths_and_dtypes(pldr, model, tmp_path):
    import pathlib
    m64 = pldr.Model(pathlib.Path(DEFAULT_MODEL), dtype=np.float64)
    assert m64.info["dtype"] == "f64"
    s = pldr.Session(model)
    ids = model.tokenizer.encode("The state of the Union is")
    first = s.prefill(ids)
    s.save_g_cache(tmp_path / "g.safetensors")
    t = pldr.Session(model)
    t.load_g_cache(tmp_path / "g.safetensors")
    assert np.allclose(t.prefill(ids), first, rtol=0, atol=1e-4)
    with pytest.raises(TypeError, match=r"save_g_cache\(path\)"):
        s.save_g_cache(42)
    r = pldr.audit(model, prompts=["The state of the Union is"], steps=2,
                   out_dir=tmp_path / "audit")
    assert isinstance(r, dict) and (tmp_path / "audit" / "audit.json").exists()
