# model.forward against a small PyTorch re-implementation of the PLDR-LLM v510 forward pass
# (spec §1), written here from the spec and the checkpoint's parameters: embedding × √d and its
# LayerNorm, per layer q/k/v, interleaved-pair RoPE, the metric A = LN(qᵀq) through the residual
# metric learner, the PLGA core (A_LM, A_P, G_LM, E), the dense projection, the two post-LN
# residuals with the SwiGLU FFN, and the untied LM head. Skipped where torch is not installed
# (Debian: python3-torch, optional in scripts/install-deps.sh).
import os
import re

import numpy as np
import pytest

from conftest import GOLDEN

torch = pytest.importorskip("torch")
F = torch.nn.functional


def layer_norm(x, w, b, eps=1e-6):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return w * (x - mu) / torch.sqrt(var + eps) + b


def glu(x, P, p):
    h = F.silu(x @ P[p + "gluw1.weight"].T + P[p + "gluw1.bias"]) * (
        x @ P[p + "gluw2.weight"].T + P[p + "gluw2.bias"])
    return h @ P[p + "gluw3.weight"].T + P[p + "gluw3.bias"]


def rope(x, halves=False):
    """x [B,S,H,dk] (float64): adjacent pairs (2m, 2m+1) rotated by p·θ_m, θ_m = 10000^(−2m/dk) (halves:
    the Llama pairing (m, m + dk/2), which the reference does not use)."""
    S, dk = x.shape[1], x.shape[3]
    # The table is float32, as the reference's (spec §1.5), also in a float64 model.
    theta = 1.0 / (10000.0 ** (torch.arange(0, dk, 2, dtype=torch.float32) / dk))
    ang = torch.arange(S, dtype=torch.float32)[:, None] * theta[None, :]
    c = torch.cos(ang).double()[None, :, None, :]
    s = torch.sin(ang).double()[None, :, None, :]
    lo, hi = (slice(0, dk // 2), slice(dk // 2, dk)) if halves else (slice(0, dk, 2), slice(1, dk, 2))
    xe, xo = x[..., lo], x[..., hi]
    y = torch.empty_like(x)
    y[..., lo] = xe * c - xo * s
    y[..., hi] = xo * c + xe * s
    return y


def torch_forward(P, info, ids, halves=False):
    B, S = ids.shape
    d, H, dk = info["hidden_size"], info["num_heads"], info["head_dim"]
    names = list(P)
    R = 1 + max(int(m.group(1)) for n in names for m in [re.search(r"reslayerAs\.(\d+)\.", n)] if m)
    N = 1 + max(int(m.group(1)) for n in names for m in [re.search(r"denseAs\.(\d+)\.", n)] if m)
    x = P["decoder.embedding.weight"][ids] * np.sqrt(d)
    x = layer_norm(x, P["decoder.layernorm1.weight"], P["decoder.layernorm1.bias"])
    mask = torch.triu(torch.ones(S, S, dtype=torch.float64), diagonal=1)
    layers = []
    for layer in range(info["num_layers"]):
        p = f"decoder.dec_layers.{layer}."
        m = p + "mha1."

        def lin(t, name):
            return t @ P[m + name + ".weight"].T + P[m + name + ".bias"]

        q = rope(lin(x, "wq").view(B, S, H, dk), halves).transpose(1, 2)  # [B,H,S,dk]
        k = rope(lin(x, "wk").view(B, S, H, dk), halves).transpose(1, 2)
        v = lin(x, "wv").view(B, S, H, dk).transpose(1, 2)
        A = layer_norm(q.transpose(-1, -2) @ q, P[m + "layernorm1.weight"], P[m + "layernorm1.bias"])
        for r in range(R):
            a_in = A
            for n in range(N):
                A = glu(A, P, m + f"reslayerAs.{r}.denseAs.{n}.")
            A = layer_norm(A + a_in, P[m + f"reslayerAs.{r}.layernormA.weight"],
                           P[m + f"reslayerAs.{r}.layernormA.bias"])
        g = m + "plgatt_layer."
        Z = P[g + "Wlst"] @ A + P[g + "blst"]
        A_LM = Z * F.silu(Z) + 1e-9
        A_P = A_LM ** P[g + "pwlst"]
        G = P[g + "alst"] @ A_P + P[g + "balst"]
        Ep = (q @ G) @ k.transpose(-1, -2) / np.sqrt(dk)
        E = torch.softmax(Ep + mask * -1e9, dim=-1)
        attn = lin((E @ v).transpose(1, 2).reshape(B, S, d), "dense")
        o1 = layer_norm(attn + x, P[p + "layernorm1.weight"], P[p + "layernorm1.bias"])
        x = layer_norm(glu(o1, P, p + "ffn.") + o1, P[p + "layernorm2.weight"],
                       P[p + "layernorm2.bias"])
        layers.append({"A": A, "A_LM": A_LM, "A_P": A_P, "G_LM": G, "E": E})
    logits = x @ P["final_layer.weight"].T + P["final_layer.bias"]
    return logits, layers


# The float32 RoPE table differs by an ulp between torch's cos/sin and the library's (SLEEF, bit
# equal to the fixtures' tables): about 1e-7 in q and k, up to a few 1e-6 after the power A_P.
# A wrong formula anywhere (pairing, LayerNorm axis, operand order of W·A or a·A_P, the
# scale, the mask) moves the values by far more.
def close(ours, theirs, what, rtol=1e-5):
    theirs = theirs.detach().numpy()
    scale = max(1.0, float(np.abs(theirs).max()))
    np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=rtol * scale, err_msg=what)


@pytest.mark.parametrize("name", ["a_tiny_v510", "b_small_v510"])
def test_forward_matches_torch(pldr, name):
    m = pldr.Model(os.path.join(GOLDEN, "models", name + ".f64"), dtype="f64", reference_numerics=False)
    info = m.info
    P = {n: torch.from_numpy(np.array(m.parameter(n), dtype=np.float64))
         for n in m.parameter_names()}
    rng = np.random.default_rng(7)
    ids = rng.integers(1, info["vocab_size"], size=(2, 11))  # no [PAD] (id 0): causal mask only
    out = m.forward(ids)
    logits, layers = torch_forward(P, info, torch.from_numpy(ids))
    close(out["logits"], logits, "logits")
    for layer, t in enumerate(layers):
        for key in ("A", "A_LM", "A_P", "G_LM", "E"):
            close(out[key][layer], t[key], f"layer {layer} {key}")
    # The comparison can fail: the same re-implementation with the wrong RoPE pairing (halves)
    # is far outside the tolerance.
    wrong, _ = torch_forward(P, info, torch.from_numpy(ids), halves=True)
    with pytest.raises(AssertionError):
        close(out["logits"], wrong, "logits (RoPE halves)")
