# The module's behaviour: zero-copy read-only arrays, sessions, callbacks and stop strings,
# tokenizer round trips, and errors as pldr.Error with the library's message.
import sys
import threading
import time

import numpy as np
import pytest

from conftest import DEFAULT_MODEL, EVAL_MODEL


@pytest.fixture(scope="module")
def model(pldr):
    return pldr.Model(DEFAULT_MODEL)


def test_arrays_share_library_buffers(model):
    out = model.forward(model.tokenizer.encode("Fellow citizens"))
    g = out["G_LM"][0]
    assert g.base is not None  # a view of the library's buffer (a capsule owns it)
    assert not g.flags.writeable and not g.flags.owndata
    assert g.shape == (1, model.info["num_heads"], model.info["head_dim"], model.info["head_dim"])
    with pytest.raises(ValueError):
        g[0, 0, 0, 0] = 1.0
    del out  # the arrays keep their buffers alive
    assert np.isfinite(g).all()


def test_forward_batch_rows_match_single(model):
    ids = np.array([[5, 17, 3, 99], [42, 7, 7, 8]])
    both = model.forward(ids)["logits"]
    one = model.forward(ids[1])["logits"]
    assert both.shape == (2, 4, model.info["vocab_size"])
    assert np.allclose(both[1], one[0], rtol=0, atol=1e-5)


def test_session_matches_generate(pldr, model):
    prompt = model.tokenizer.encode("The state of the Union is")
    g = model.generate(prompt, max_tokens=6, greedy=True, details=True, stop_at_eos=False)
    s = pldr.Session(model)
    logits = s.prefill(prompt)
    ids = []
    for _ in range(6):
        ids.append(int(np.argmax(logits)))
        logits = s.decode(ids[-1])
    assert ids == g["ids"]
    assert len(s) == len(prompt) + 6
    cache = s.g_cache()
    assert len(cache) == model.info["num_layers"]
    assert cache[0]["G_LM"].shape == (model.info["num_heads"], model.info["head_dim"],
                                      model.info["head_dim"])


def test_callback_and_stop(model):
    seen = []
    text = model.generate("The state of the Union is", max_tokens=10, greedy=True,
                          callback=lambda i, t, lp, so_far: seen.append(i) or len(seen) < 3)
    assert len(seen) == 3 and isinstance(text, str)
    full = model.generate("The state of the Union is", max_tokens=12, greedy=True,
                          details=True, stop_at_eos=False)
    assert full["finish_reason"] == "length"
    word = full["text"].split()[1]
    cut = model.generate("The state of the Union is", max_tokens=12, greedy=True, stop=[word],
                         details=True, stop_at_eos=False)
    assert cut["finish_reason"] == "stop"
    assert word not in cut["text"] and full["text"].startswith(cut["text"])


def test_callback_exception_propagates(model):
    def boom(*a):
        raise KeyError("from the callback")
    with pytest.raises(KeyError, match="from the callback"):
        model.generate("The state", max_tokens=4, callback=boom)


def test_tokenizer_round_trip(model):
    tok = model.tokenizer
    ids = tok.encode("The state of the Union is strong.")
    assert tok.decode(ids) == "The state of the Union is strong."
    assert "".join(tok.token_text(i) for i in ids).strip() == "The state of the Union is strong."
    assert tok.vocab_size == model.info["vocab_size"]


def test_errors_are_pldr_errors(pldr, tmp_path):
    with pytest.raises(pldr.Error, match="no-such-dir"):
        pldr.Model(str(tmp_path / "no-such-dir"))
    with pytest.raises(pldr.Error, match="dtype must be f32 or f64"):
        pldr.Model(EVAL_MODEL, dtype="f16")
    m = pldr.Model(EVAL_MODEL)
    with pytest.raises(pldr.Error, match="outside|vocab"):
        m.forward([1, 2, 10 ** 9])
    with pytest.raises(pldr.Error, match=r"temperature must be in \[0, inf\) \(got -1\)"):
        m.generate("Hello", temperature=-1)
    with pytest.raises(pldr.Error, match="mode must be block, sequential or cached"):
        m.score("a", " b", mode="fast")
    with pytest.raises(RuntimeError):  # pldr.Error is a RuntimeError
        m.score("a", "")


def test_gil_released_during_compute(pldr, model):
    # A Python thread runs while another thread is inside the library. The switch interval is
    # set far beyond the test's length, so the calling thread gives up the GIL only where the
    # library releases it: the ticker (which releases it in each sleep) can count only while
    # the call is inside the library. A binding that held the GIL counts exactly 0, however
    # fast or slow the machine; one that releases it counts on every call but the fastest.
    ticks = [0]
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.0002)

    interval = sys.getswitchinterval()
    t = threading.Thread(target=ticker)
    t.start()
    counts = []
    try:
        time.sleep(0.01)  # the ticker is running
        sys.setswitchinterval(100.0)
        for _ in range(20):
            before = ticks[0]
            model.generate("The state of the Union is", max_tokens=48, greedy=True,
                           stop_at_eos=False)
            counts.append(ticks[0] - before)
            if sum(counts) >= 3:
                break
    finally:
        sys.setswitchinterval(interval)
        stop.set()
        t.join()
    assert sum(counts) >= 3, counts


def test_g_lm_stats(pldr, model):
    ids = model.tokenizer.encode("Fellow citizens")
    st = pldr.g_lm_stats(model, ids)
    g = model.forward(ids)["G_LM"]
    assert len(st) == len(g)
    for s, arr in zip(st, g):
        assert s["mean"] == pytest.approx(float(np.mean(arr.astype(np.float64))), rel=1e-12)
        assert s["min"] == float(arr.min()) and s["max"] == float(arr.max())


def test_saved_model_is_mapped_with_the_same_values(pldr, model, tmp_path):
    # A model pldr wrote loads as a mapping of its file (or read with map_file=False): same logits.
    from conftest import run_cli
    out = tmp_path / "m"
    run_cli("convert", model.info["dir"], "--dtype", "f32", "--out", str(out))
    a = pldr.Model(str(out))
    b = pldr.Model(str(out), map_file=False)
    assert a.info["mapped"] and not b.info["mapped"]
    ids = [5, 17, 3, 9]
    np.testing.assert_array_equal(a.forward(ids)["logits"], b.forward(ids)["logits"])
