# The output rule and the checked sizes through the Python module (docs/errors.md "Outputs"):
# save_g_cache never replaces the model the session's model was loaded from, replaces another
# model's file only with force=True, and refuses an empty path; a generation whose prompt plus
# max_tokens overflows int64 is refused before any token.
import shutil

import pytest

from conftest import DEFAULT_MODEL, EVAL_MODEL


def test_save_g_cache_never_replaces_its_model(pldr, tmp_path):
    own, other = tmp_path / "own", tmp_path / "other"
    shutil.copytree(EVAL_MODEL, own)
    shutil.copytree(EVAL_MODEL, other)
    before = (own / "model.safetensors").read_bytes()
    s = pldr.Session(pldr.Model(str(own)))
    s.prefill([1, 2, 3])
    for force in (False, True):
        with pytest.raises(pldr.Error, match="would overwrite the input"):
            s.save_g_cache(str(own / "model.safetensors"), force=force)
    assert (own / "model.safetensors").read_bytes() == before
    with pytest.raises(pldr.Error, match="is empty: give an output path"):
        s.save_g_cache("")
    with pytest.raises(pldr.Error, match="would replace a file of a model directory"):
        s.save_g_cache(str(other / "model.safetensors"))
    assert (other / "model.safetensors").read_bytes() == before
    s.save_g_cache(str(own / "g.safetensors"))  # a new file beside the model
    assert (own / "g.safetensors").stat().st_size > 0
    s.save_g_cache(str(other / "model.safetensors"), force=True)
    assert (other / "model.safetensors").read_bytes() != before


def test_audit_out_dir_follows_the_rule(pldr, tmp_path):
    m = pldr.Model(EVAL_MODEL)
    other = tmp_path / "other"
    shutil.copytree(EVAL_MODEL, other)
    with pytest.raises(pldr.Error, match="is a model directory; writing there would replace it"):
        pldr.audit(m, steps=1, out_dir=str(other))
    with pytest.raises(pldr.Error, match="is the input directory"):
        pldr.audit(m, steps=1, out_dir=EVAL_MODEL, force=True)


def test_generation_past_int64_is_refused_before_any_token(pldr):
    m = pldr.Model(DEFAULT_MODEL)
    seen = []
    with pytest.raises(pldr.Error, match="the prompt plus -n new tokens is too large"):
        m.generate("The state of the Union is", max_tokens=2 ** 63 - 1,
                   callback=lambda *a: seen.append(a))
    assert seen == []
