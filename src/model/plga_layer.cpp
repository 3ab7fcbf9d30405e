// Decoder layer forward (see plga_layer.h). Shapes: B batch, S queries, Tk keys, H heads,
// D = dk, d = H·D. q/k/v live in [B,S,H,D] layout; per-(b,h) matrices are strided views.
#include "model/plga_layer.h"

#include <algorithm>
#include <cmath>

#include "core/blas.h"

namespace pldr {

namespace {

// The residual GLU metric learner (spec §1.4 steps 4–6, §1.7): A0 = qᵀq → LN → R res units.
template <typename T>
void metric_learner_forward(const Model<T>& m, const LayerView<T>& w, int64_t B, int64_t S,
                            LayerActs<T>& la) {
    const Config& c = m.cfg;
    const int64_t H = c.num_heads, D = c.head_dim, d = c.hidden_size;
    const int64_t rows = B * H * D;
    la.A0.resize_for_overwrite({B, H, D, D});
#pragma omp parallel for collapse(2) if (B * H * S * D * D > kParallelWork)
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h) {
            const T* q = la.q.ptr() + b * S * d + h * D;  // [S,D] with row stride d
            gemm(true, false, D, D, S, T(1), q, d, q, d, T(0), la.A0.ptr() + (b * H + h) * D * D,
                 D);
        }
    la.A_ln.resize_for_overwrite({B, H, D, D});
    la.lnA_mean.resize({rows});
    la.lnA_rstd.resize({rows});
    layernorm_forward(la.A_ln.ptr(), la.lnA_mean.ptr(), la.lnA_rstd.ptr(), la.A0.ptr(), w.lnA_g,
                      w.lnA_b, rows, D, c.layer_norm_eps);
    la.res.resize(static_cast<size_t>(c.num_reslayerA));
    const Tensor<T>* cur = &la.A_ln;
    for (int64_t r = 0; r < c.num_reslayerA; ++r) {
        ResUnitActs<T>& ru = la.res[size_t(r)];
        const ResUnitView<T>& rw = w.res[size_t(r)];
        ru.in = *cur;
        ru.glu.resize(static_cast<size_t>(c.num_denseA));
        const Tensor<T>* x = &ru.in;
        Tensor<T> y({B, H, D, D});
        for (int64_t n = 0; n < c.num_denseA; ++n) {
            GluActs<T>& g = ru.glu[size_t(n)];
            g.x = *x;
            g.h1.resize_for_overwrite({rows, c.A_dff});
            g.h2.resize_for_overwrite({rows, c.A_dff});
            g.gated.resize_for_overwrite({rows, c.A_dff});
            const GluView<T>& gw = rw.glu[size_t(n)];
            glu_forward(y.ptr(), g.h1.ptr(), g.h2.ptr(), g.gated.ptr(), g.x.ptr(),
                        GluParams<T>{gw.w1, gw.b1, gw.w2, gw.b2, gw.w3, gw.b3}, rows, D, c.A_dff,
                        D);
            x = &y;
        }
        ru.sum.resize({B, H, D, D});
        for (int64_t i = 0; i < ru.sum.numel(); ++i) ru.sum[i] = y[i] + ru.in[i];
        ru.mean.resize({rows});
        ru.rstd.resize({rows});
        Tensor<T>& out = (r + 1 == c.num_reslayerA) ? la.A : y;
        out.resize({B, H, D, D});
        layernorm_forward(out.ptr(), ru.mean.ptr(), ru.rstd.ptr(), ru.sum.ptr(), rw.ln_g, rw.ln_b,
                          rows, D, c.layer_norm_eps);
        if (r + 1 < c.num_reslayerA) {
            la.A = out;  // keep the chain: next unit reads la.A via cur
            cur = &la.A;
        }
    }
    if (c.num_reslayerA == 0) la.A = la.A_ln;
}

}  // namespace

template <typename T>
void decoder_layer_forward(const Model<T>& m, int64_t l, int64_t B, int64_t S,
                           const AttnInput<T>& in, LayerActs<T>& la) {
    const Config& c = m.cfg;
    const LayerView<T>& w = m.w.layers[size_t(l)];
    const int64_t H = c.num_heads, D = c.head_dim, d = c.hidden_size, N = B * S;
    const int64_t DD = D * D;

    // 1-3. Projections and RoPE on q, k.
    la.q.resize_for_overwrite({B, S, d});
    la.k.resize_for_overwrite({B, S, d});
    la.v.resize_for_overwrite({B, S, d});
    linear_forward(la.q.ptr(), la.x_in.ptr(), w.wq, w.bq, N, d, d);
    linear_forward(la.k.ptr(), la.x_in.ptr(), w.wk, w.bk, N, d, d);
    linear_forward(la.v.ptr(), la.x_in.ptr(), w.wv, w.bv, N, d, d);
    rope_forward(la.q.ptr(), in.pos, N, H, D, m.rope, c.reference_rope, m.round_f32());
    rope_forward(la.k.ptr(), in.pos, N, H, D, m.rope, c.reference_rope, m.round_f32());

    // 4-7. The operator G_LM per (b,h).
    la.G.resize({B, H, D, D});
    if (in.G_frozen) {  // the G-cache (or a preset operator): skip the learner and operator
        auto frozen = [&](Tensor<T>& dst, const T* src) {
            if (src) dst = Tensor<T>({B, H, D, D}, std::vector<T>(src, src + B * H * DD));
        };
        frozen(la.A, in.A_frozen);
        frozen(la.A_LM, in.A_LM_frozen);
        frozen(la.A_P, in.A_P_frozen);
        std::copy(in.G_frozen, in.G_frozen + B * H * DD, la.G.ptr());
    } else if (!c.learned_g()) {
        for (int64_t b = 0; b < B; ++b)
            std::copy(m.G_fixed_layer(l), m.G_fixed_layer(l) + H * DD, la.G.ptr() + b * H * DD);
    } else {
        if (in.A_frozen) {
            la.A = Tensor<T>({B, H, D, D}, std::vector<T>(in.A_frozen, in.A_frozen + B * H * DD));
        } else {
            metric_learner_forward(m, w, B, S, la);
        }
        la.Z.resize({B, H, D, D});
        la.A_LM.resize({B, H, D, D});
        la.A_P.resize({B, H, D, D});
#pragma omp parallel for collapse(2) if (B * H * D * D * D > kParallelWork)
        for (int64_t b = 0; b < B; ++b)
            for (int64_t h = 0; h < H; ++h) {
                const int64_t o = (b * H + h) * DD, p = h * DD;
                plga_g_forward(la.Z.ptr() + o, la.A_LM.ptr() + o, la.A_P.ptr() + o, la.G.ptr() + o,
                               la.A.ptr() + o, w.W + p, w.b + p, w.P + p, w.a + p, w.ba + p, D);
            }
    }

    // Keys and values: the past (KV-cache) followed by this chunk.
    const int64_t Tp = in.T_past, Tk = Tp + S;
    const T* K = la.k.ptr();
    const T* Vv = la.v.ptr();
    if (in.K_cache) {
        PLDR_CHECK(B == 1 && in.V_cache);
        std::copy(la.k.data.begin(), la.k.data.end(), in.K_cache + Tp * d);
        std::copy(la.v.data.begin(), la.v.data.end(), in.V_cache + Tp * d);
        K = in.K_cache;
        Vv = in.V_cache;
    } else {
        PLDR_CHECK(Tp == 0);
    }

    // 7. Scores Ep = (Q·G)·Kᵀ / sqrt(dk); E = softmax(Ep + mask·(−1e9)); O = E·V.
    la.QG.resize_for_overwrite({B, H, S, D});
    la.Ep.resize_for_overwrite({B, H, S, Tk});
    la.E.resize_for_overwrite({B, H, S, Tk});
    la.O.resize_for_overwrite({B, S, d});
    const T scale = m.score_scale();
#pragma omp parallel for collapse(2) if (B * H * S * Tk * D > kParallelWork)
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h) {
            const T* q = la.q.ptr() + b * S * d + h * D;
            const T* kk = K + b * Tk * d + h * D;
            const T* vv = Vv + b * Tk * d + h * D;
            T* qg = la.QG.ptr() + (b * H + h) * S * D;
            T* ep = la.Ep.ptr() + (b * H + h) * S * Tk;
            T* e = la.E.ptr() + (b * H + h) * S * Tk;
            gemm(false, false, S, D, D, T(1), q, d, la.G.ptr() + (b * H + h) * DD, D, T(0), qg, D);
            gemm(false, true, S, Tk, D, T(1), qg, D, kk, d, T(0), ep, Tk);
            for (int64_t i = 0; i < S * Tk; ++i) ep[i] /= scale;
            for (int64_t i = 0; i < S; ++i) {
                for (int64_t j = 0; j < Tk; ++j) {
                    T x = ep[i * Tk + j];
                    if (in.mask &&
                        (j > Tp + i || (in.key_ids && in.key_ids[b * Tk + j] == c.pad_token_id)))
                        x += T(-1e9);
                    e[i * Tk + j] = x;
                }
            }
            softmax_forward(e, e, S, Tk);
            gemm(false, false, S, D, Tk, T(1), e, Tk, vv, d, T(0), la.O.ptr() + b * S * d + h * D,
                 d);
        }
    la.attn_out.resize_for_overwrite({B, S, d});
    linear_forward(la.attn_out.ptr(), la.O.ptr(), w.wo, w.bo, N, d, d);

    // Post-LN residual blocks.
    Tensor<T> r1({B, S, d});
    for (int64_t i = 0; i < r1.numel(); ++i) r1[i] = la.attn_out[i] + la.x_in[i];
    la.out1.resize_for_overwrite({B, S, d});
    la.ln1_mean.resize({N});
    la.ln1_rstd.resize({N});
    layernorm_forward(la.out1.ptr(), la.ln1_mean.ptr(), la.ln1_rstd.ptr(), r1.ptr(), w.ln1_g,
                      w.ln1_b, N, d, c.layer_norm_eps);
    const int64_t F = c.intermediate_size;
    la.ffn.h1.resize_for_overwrite({N, F});
    la.ffn.h2.resize_for_overwrite({N, F});
    la.ffn.gated.resize_for_overwrite({N, F});
    la.ffn_out.resize_for_overwrite({B, S, d});
    glu_forward(
        la.ffn_out.ptr(), la.ffn.h1.ptr(), la.ffn.h2.ptr(), la.ffn.gated.ptr(), la.out1.ptr(),
        GluParams<T>{w.ffn.w1, w.ffn.b1, w.ffn.w2, w.ffn.b2, w.ffn.w3, w.ffn.b3}, N, d, F, d);
    Tensor<T> r2({B, S, d});
    for (int64_t i = 0; i < r2.numel(); ++i) r2[i] = la.ffn_out[i] + la.out1[i];
    la.hidden.resize_for_overwrite({B, S, d});
    la.ln2_mean.resize({N});
    la.ln2_rstd.resize({N});
    layernorm_forward(la.hidden.ptr(), la.ln2_mean.ptr(), la.ln2_rstd.ptr(), r2.ptr(), w.ln2_g,
                      w.ln2_b, N, d, c.layer_norm_eps);
}

template void decoder_layer_forward<float>(const Model<float>&, int64_t, int64_t, int64_t,
                                           const AttnInput<float>&, LayerActs<float>&);
template void decoder_layer_forward<double>(const Model<double>&, int64_t, int64_t, int64_t,
                                            const AttnInput<double>&, LayerActs<double>&);

}  // namespace pldr
