# The deductive outputs against a small numpy re-implementation of the PLGA operator (spec §1):
# from the module's A and the layer's parameters, A_LM = iSwiGLU(W·A + b) + 1e-9,
# A_P = A_LM ^∘ P, G_LM = a·A_P + b_a, and E = softmax((Q·G_LM)·Kᵀ/√dk + mask).
import os

import numpy as np
import pytest

from conftest import GOLDEN


def silu(x):
    return x / (1.0 + np.exp(-x))


@pytest.mark.parametrize("name", ["a_tiny_v510", "b_small_v510"])
def test_plga_operator_matches_numpy(pldr, name):
    m = pldr.Model(os.path.join(GOLDEN, "models", name + ".f64"), dtype="f64")
    ids = np.array([[5, 17, 3, 9, 42, 7, 7, 8]]) % m.info["vocab_size"]
    out = m.forward(ids)
    t = out["tensors"]
    dk = m.info["head_dim"]
    for layer in range(m.info["num_layers"]):
        p = f"decoder.dec_layers.{layer}.mha1.plgatt_layer."
        W, b, P = m.parameter(p + "Wlst"), m.parameter(p + "blst"), m.parameter(p + "pwlst")
        a, ba = m.parameter(p + "alst"), m.parameter(p + "balst")
        A = out["A"][layer][0]
        for h in range(m.info["num_heads"]):
            Z = W[h] @ A[h] + b[h]
            A_LM = Z * silu(Z) + 1e-9
            np.testing.assert_allclose(out["A_LM"][layer][0, h], A_LM, rtol=1e-10, atol=1e-14)
            A_P = out["A_LM"][layer][0, h] ** P[h]
            np.testing.assert_allclose(out["A_P"][layer][0, h], A_P, rtol=1e-12, atol=0)
            G = a[h] @ out["A_P"][layer][0, h] + ba[h]
            np.testing.assert_allclose(out["G_LM"][layer][0, h], G, rtol=1e-11, atol=1e-13)
            # Attention: q, k are [B,H,S,dk] after RoPE.
            q, k = t[f"fwd.layer{layer}.q"][0, h], t[f"fwd.layer{layer}.k"][0, h]
            S = q.shape[0]
            scores = (q @ out["G_LM"][layer][0, h]) @ k.T / np.sqrt(np.float32(dk))
            scores = np.where(np.tril(np.ones((S, S))) > 0, scores, -np.inf)
            E = np.exp(scores - scores.max(axis=1, keepdims=True))
            E /= E.sum(axis=1, keepdims=True)
            np.testing.assert_allclose(out["E"][layer][0, h], E, rtol=1e-9, atol=1e-12)
