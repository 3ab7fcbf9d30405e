// Backward pass (see backward.h). Mirrors decoder_layer_forward and forward() step by step;
// docs/plga.md derives each rule.
#include "model/backward.h"

#include <algorithm>

#include "core/blas.h"

namespace pldr {

namespace {

template <typename T>
void layer_backward(const Model<T>& m, int64_t l, const Activations<T>& a,
                    const DeductiveGrads<T>* extra, Tensor<T>& dhidden, ModelView<T>& g,
                    Tensor<T>& dx_in) {
    const Config& c = m.cfg;
    const LayerView<T>& w = m.w.layers[size_t(l)];
    LayerView<T>& gw = g.layers[size_t(l)];
    const LayerActs<T>& la = a.layers[size_t(l)];
    const int64_t B = a.B, S = a.S, H = c.num_heads, D = c.head_dim, d = c.hidden_size;
    const int64_t N = B * S, DD = D * D, F = c.intermediate_size, Tk = S;

    // hidden = LN2(ffn_out + out1)
    Tensor<T> r2({B, S, d}), dr2({B, S, d});
    for (int64_t i = 0; i < r2.numel(); ++i) r2[i] = la.ffn_out[i] + la.out1[i];
    layernorm_backward(dr2.ptr(), gw.ln2_g, gw.ln2_b, dhidden.ptr(), r2.ptr(), la.ln2_mean.ptr(),
                       la.ln2_rstd.ptr(), w.ln2_g, N, d);
    // ffn_out = GLU(out1); the residual passes dr2 to out1 too.
    Tensor<T> dout1 = dr2;
    std::vector<T> scratch(static_cast<size_t>(2 * N * F));
    glu_backward(dout1.ptr(),
                 GluGrads<T>{gw.ffn.w1, gw.ffn.b1, gw.ffn.w2, gw.ffn.b2, gw.ffn.w3, gw.ffn.b3},
                 dr2.ptr(), la.out1.ptr(), la.ffn.h1.ptr(), la.ffn.h2.ptr(), la.ffn.gated.ptr(),
                 GluParams<T>{w.ffn.w1, w.ffn.b1, w.ffn.w2, w.ffn.b2, w.ffn.w3, w.ffn.b3}, N, d, F,
                 d, scratch.data());
    // out1 = LN1(attn_out + x_in)
    Tensor<T> r1({B, S, d}), dr1({B, S, d});
    for (int64_t i = 0; i < r1.numel(); ++i) r1[i] = la.attn_out[i] + la.x_in[i];
    layernorm_backward(dr1.ptr(), gw.ln1_g, gw.ln1_b, dout1.ptr(), r1.ptr(), la.ln1_mean.ptr(),
                       la.ln1_rstd.ptr(), w.ln1_g, N, d);
    dx_in = dr1;  // residual
    // attn_out = O·Woᵀ + bo
    Tensor<T> dO({B, S, d});
    linear_backward(dO.ptr(), gw.wo, gw.bo, dr1.ptr(), la.O.ptr(), w.wo, N, d, d);

    // Attention per (b,h): O = E·V; E = softmax(Ep + mask); Ep = (Q·G)·Kᵀ / scale.
    Tensor<T> dq({B, S, d}), dk({B, S, d}), dv({B, S, d}), dG({B, H, D, D});
    const T scale = m.score_scale();
#pragma omp parallel for collapse(2) if (B * H * S * Tk * D > kParallelWork)
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h) {
            const int64_t bh = b * H + h;
            const T* q = la.q.ptr() + b * S * d + h * D;
            const T* k = la.k.ptr() + b * Tk * d + h * D;
            const T* v = la.v.ptr() + b * Tk * d + h * D;
            const T* E = la.E.ptr() + bh * S * Tk;
            const T* QG = la.QG.ptr() + bh * S * D;
            const T* G = la.G.ptr() + bh * DD;
            const T* dOh = dO.ptr() + b * S * d + h * D;
            std::vector<T> dE(static_cast<size_t>(S * Tk)), dEp(static_cast<size_t>(S * Tk), T(0)),
                dQG(static_cast<size_t>(S * D));
            gemm(false, true, S, Tk, D, T(1), dOh, d, v, d, T(0), dE.data(), Tk);  // dE = dO·Vᵀ
            gemm(true, false, Tk, D, S, T(1), E, Tk, dOh, d, T(0), dv.ptr() + b * Tk * d + h * D,
                 d);  // dV = Eᵀ·dO
            softmax_backward(dEp.data(), dE.data(), E, S, Tk);
            for (auto& x : dEp) x /= scale;
            gemm(false, false, S, D, Tk, T(1), dEp.data(), Tk, k, d, T(0), dQG.data(), D);
            gemm(true, false, Tk, D, S, T(1), dEp.data(), Tk, QG, D, T(0),
                 dk.ptr() + b * Tk * d + h * D, d);  // dK
            gemm(false, true, S, D, D, T(1), dQG.data(), D, G, D, T(0),
                 dq.ptr() + b * S * d + h * D, d);  // dQ = dQG·Gᵀ
            gemm(true, false, D, D, S, T(1), q, d, dQG.data(), D, T(0), dG.ptr() + bh * DD,
                 D);  // dG = Qᵀ·dQG
        }

    if (c.learned_g()) {
        if (extra && extra->dG.numel())
            for (int64_t i = 0; i < dG.numel(); ++i) dG[i] += extra->dG[i];
        // G = a·A_P + b_a; A_P = A_LM^P; A_LM = iSwiGLU(W·A + b) + 1e-9.
        Tensor<T> dA({B, H, D, D});
        const T* xA_LM = (extra && extra->dA_LM.numel()) ? extra->dA_LM.ptr() : nullptr;
        const T* xA_P = (extra && extra->dA_P.numel()) ? extra->dA_P.ptr() : nullptr;
#pragma omp parallel for if (B * H * D * D * D > kParallelWork)
        for (int64_t h = 0; h < H; ++h) {
            std::vector<T> sc(static_cast<size_t>(2 * DD));
            const int64_t p = h * DD;
            for (int64_t b = 0; b < B; ++b) {
                const int64_t o = (b * H + h) * DD;
                plga_g_backward(dA.ptr() + o, gw.W + p, gw.b + p, gw.P + p, gw.a + p, gw.ba + p,
                                dG.ptr() + o, xA_LM ? xA_LM + o : nullptr,
                                xA_P ? xA_P + o : nullptr, la.A.ptr() + o, la.Z.ptr() + o,
                                la.A_LM.ptr() + o, la.A_P.ptr() + o, w.W + p, w.P + p, w.a + p, D,
                                sc.data());
            }
        }
        // Metric learner in reverse: res units, then LN_A, then A0 = qᵀq.
        const int64_t rows = B * H * D;
        for (int64_t r = c.num_reslayerA - 1; r >= 0; --r) {
            const ResUnitActs<T>& ru = la.res[size_t(r)];
            const ResUnitView<T>& rw = w.res[size_t(r)];
            ResUnitView<T>& rg = gw.res[size_t(r)];
            Tensor<T> dsum({B, H, D, D});
            layernorm_backward(dsum.ptr(), rg.ln_g, rg.ln_b, dA.ptr(), ru.sum.ptr(), ru.mean.ptr(),
                               ru.rstd.ptr(), rw.ln_g, rows, D);
            Tensor<T> dy = dsum;
            std::vector<T> sc(static_cast<size_t>(2 * rows * c.A_dff));
            for (int64_t n = c.num_denseA - 1; n >= 0; --n) {
                const GluActs<T>& ga = ru.glu[size_t(n)];
                const GluView<T>& gv = rw.glu[size_t(n)];
                GluView<T>& gg = rg.glu[size_t(n)];
                Tensor<T> dxn({B, H, D, D});
                glu_backward(dxn.ptr(), GluGrads<T>{gg.w1, gg.b1, gg.w2, gg.b2, gg.w3, gg.b3},
                             dy.ptr(), ga.x.ptr(), ga.h1.ptr(), ga.h2.ptr(), ga.gated.ptr(),
                             GluParams<T>{gv.w1, gv.b1, gv.w2, gv.b2, gv.w3, gv.b3}, rows, D,
                             c.A_dff, D, sc.data());
                dy = std::move(dxn);
            }
            for (int64_t i = 0; i < dA.numel(); ++i) dA[i] = dsum[i] + dy[i];  // d(unit input)
        }
        Tensor<T> dA0({B, H, D, D});
        layernorm_backward(dA0.ptr(), gw.lnA_g, gw.lnA_b, dA.ptr(), la.A0.ptr(), la.lnA_mean.ptr(),
                           la.lnA_rstd.ptr(), w.lnA_g, rows, D);
        // A0 = qᵀq ⇒ dq += q·(dA0 + dA0ᵀ)
#pragma omp parallel for collapse(2) if (B * H * S * D * D > kParallelWork)
        for (int64_t b = 0; b < B; ++b)
            for (int64_t h = 0; h < H; ++h) {
                const T* g0 = dA0.ptr() + (b * H + h) * DD;
                std::vector<T> sym(static_cast<size_t>(DD));
                for (int64_t i = 0; i < D; ++i)
                    for (int64_t j = 0; j < D; ++j) sym[i * D + j] = g0[i * D + j] + g0[j * D + i];
                const T* q = la.q.ptr() + b * S * d + h * D;
                gemm(false, false, S, D, D, T(1), q, d, sym.data(), D, T(1),
                     dq.ptr() + b * S * d + h * D, d);
            }
    }

    // RoPE (transpose rotation), then the three projections.
    rope_backward(dq.ptr(), a.pos.data(), N, H, D, m.rope, c.reference_rope, m.round_f32());
    rope_backward(dk.ptr(), a.pos.data(), N, H, D, m.rope, c.reference_rope, m.round_f32());
    linear_backward(dx_in.ptr(), gw.wq, gw.bq, dq.ptr(), la.x_in.ptr(), w.wq, N, d, d);
    linear_backward(dx_in.ptr(), gw.wk, gw.bk, dk.ptr(), la.x_in.ptr(), w.wk, N, d, d);
    linear_backward(dx_in.ptr(), gw.wv, gw.bv, dv.ptr(), la.x_in.ptr(), w.wv, N, d, d);
}

}  // namespace

template <typename T>
void backward(const Model<T>& m, const Activations<T>& a, const Tensor<T>& dlogits,
              const std::vector<DeductiveGrads<T>>* extra, T* grads) {
    const Config& c = m.cfg;
    const int64_t d = c.hidden_size, N = a.B * a.S, V = c.vocab_size;
    ModelView<T> g = bind_view(m.layout, c, grads);
    const Tensor<T>& xL = c.num_layers ? a.layers.back().hidden : a.embed_ln;
    Tensor<T> dx({a.B, a.S, d});
    linear_backward(dx.ptr(), g.head_w, g.head_b, dlogits.ptr(), xL.ptr(), m.w.head_w, N, d, V);
    for (int64_t l = c.num_layers - 1; l >= 0; --l) {
        Tensor<T> dx_in;
        layer_backward(m, l, a, extra ? &(*extra)[size_t(l)] : nullptr, dx, g, dx_in);
        dx = std::move(dx_in);
    }
    Tensor<T> dx0({a.B, a.S, d});
    layernorm_backward(dx0.ptr(), g.ln_in_g, g.ln_in_b, dx.ptr(), a.x0.ptr(), a.ln_mean.ptr(),
                       a.ln_rstd.ptr(), m.w.ln_in_g, N, d);
    const T scale = m.embed_scale();
    for (int64_t n = 0; n < N; ++n) {
        T* e = g.emb + a.ids[size_t(n)] * d;
        for (int64_t j = 0; j < d; ++j) e[j] += dx0[n * d + j] * scale;
    }
}

template void backward<float>(const Model<float>&, const Activations<float>&, const Tensor<float>&,
                              const std::vector<DeductiveGrads<float>>*, float*);
template void backward<double>(const Model<double>&, const Activations<double>&,
                               const Tensor<double>&, const std::vector<DeductiveGrads<double>>*,
                               double*);

}  // namespace pldr
