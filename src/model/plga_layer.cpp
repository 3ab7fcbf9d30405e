// The decoder layer, forward then backward (see plga_layer.h); the attention between the
// projections is model/plga_attention.cpp. Shapes: B batch, S tokens, H heads, D = dk, d = H·D,
// F = dff; q/k/v live in [B,S,H,D] layout.
#include "model/plga_layer.h"

#include <algorithm>
#include <cmath>

#include "core/blas.h"
#include "core/zero.h"
#include "ops/glu.h"
#include "ops/layernorm.h"
#include "ops/linear.h"
#include "ops/rope.h"

namespace pldr {

namespace {

// out = a + b over n elements (the residual sums): element-wise, so the same bits on the team
// (a [tokens, d] sum of a training batch is 1.8M elements at 110M).
template <typename T>
void add_residual(T* out, const T* a, const T* b, int64_t n) {
    constexpr int64_t kChunk = int64_t(1) << 15;
    parallel_for((n + kChunk - 1) / kChunk, n >= kBiasParallelElems, [&](int64_t c) {
        const int64_t i1 = std::min(n, (c + 1) * kChunk);
        for (int64_t i = c * kChunk; i < i1; ++i) out[i] = a[i] + b[i];
    });
}

// Whether an inference forward of N rows runs its row-wise steps in one region each
// (parallel_rows): when every projection of the layer would split the rows over the team anyway
// (small float32 weights in panels: the M config's prompts), each thread runs its share of the
// rows through the projections, RoPE, the residual sums, the LayerNorms and the SwiGLU, with no
// fork and join between them and its rows in its own cache. The same products on the same rows,
// and element- or row-wise steps: the same bits. Not in training (its memory plan frees
// activations between the steps).
template <typename T>
bool rows_in_one_region(const LayerLinears<T>& lw, KeepActs keep, int64_t N, int64_t d, int64_t F) {
    return prompt_in_few_regions() && keep != KeepActs::TRAINING &&
           linear_splits_rows(lw.wq, N, d, d) && linear_splits_rows(lw.wk, N, d, d) &&
           linear_splits_rows(lw.wv, N, d, d) && linear_splits_rows(lw.wo, N, d, d) &&
           linear_splits_rows(lw.w1, N, d, F) && linear_splits_rows(lw.w2, N, d, F) &&
           linear_splits_rows(lw.w3, N, F, d);
}

}  // namespace

template <typename T>
void decoder_layer_forward(const Model<T>& m, int64_t l, int64_t B, int64_t S,
                           const AttnInput<T>& in, LayerActs<T>& la) {
    const Config& c = m.cfg;
    const LayerView<T>& w = m.w.layers[size_t(l)];
    const LayerLinears<T>& lw = m.lw.layers[size_t(l)];  // dense or packed (model/packed.h)
    const int64_t H = c.num_heads, D = c.head_dim, d = c.hidden_size, N = B * S;
    const int64_t F = c.intermediate_size;
    const bool training = in.keep == KeepActs::TRAINING;
    const bool by_rows = rows_in_one_region(lw, in.keep, N, d, F);
    // Each row-wise step over rows [r0, r1): on all rows in turn, or in one region for all steps.
    auto rows = [&](auto&& step) {
        if (!by_rows) step(int64_t(0), N);
    };
    if (by_rows) require_rope_positions(in.pos, N, m.rope);  // nothing throws inside the region

    // 1-3. Projections and RoPE on q, k.
    la.q.resize_for_overwrite({B, S, d});
    la.k.resize_for_overwrite({B, S, d});
    la.v.resize_for_overwrite({B, S, d});
    auto project = [&](int64_t r0, int64_t r1) {
        const int64_t n = r1 - r0, o = r0 * d;
        const LinearOut<T> qkv[] = {{la.q.ptr() + o, lw.wq, w.bq, d},
                                    {la.k.ptr() + o, lw.wk, w.bk, d},
                                    {la.v.ptr() + o, lw.wv, w.bv, d}};
        linear_forward_same_input(la.x_in.ptr() + o, n, d, qkv, 3);
        for (T* x : {la.q.ptr(), la.k.ptr()})
            rope_forward(x + o, in.pos + r0, n, H, D, m.rope, c.reference_rope, m.round_f32());
    };
    rows(project);
    if (by_rows) parallel_rows(N, true, project);

    // 4-7. PLGA attention: the metric learner, the operator G_LM, the scores, E·V.
    plga_attention_forward(m, l, B, S, in, la);

    la.attn_out.resize_for_overwrite({B, S, d});
    auto attn_out = [&](int64_t r0, int64_t r1) {
        linear_forward(la.attn_out.ptr() + r0 * d, la.O.ptr() + r0 * d, lw.wo, w.bo, r1 - r0, d, d);
    };
    rows(attn_out);
    if (training) {  // the memory plan (KeepActs): the backward recomputes these per head
        la.QG = Tensor<T>();
        la.E = Tensor<T>();
        la.O = Tensor<T>();
    }

    // Post-LN residual blocks. (Each sum below writes every element of its output.)
    Tensor<T> res1, res2;
    res1.resize_for_overwrite({B, S, d});
    la.out1.resize_for_overwrite({B, S, d});
    la.ln1_mean.resize({N});
    la.ln1_rstd.resize({N});
    auto block1 = [&](int64_t r0, int64_t r1) {
        const int64_t n = r1 - r0, o = r0 * d;
        add_residual(res1.ptr() + o, la.attn_out.ptr() + o, la.x_in.ptr() + o, n * d);
        layernorm_forward(la.out1.ptr() + o, la.ln1_mean.ptr() + r0, la.ln1_rstd.ptr() + r0,
                          res1.ptr() + o, w.ln1_g, w.ln1_b, n, d, c.layer_norm_eps);
    };
    rows(block1);
    la.ffn.h1.resize_for_overwrite({N, F});
    la.ffn.h2.resize_for_overwrite({N, F});
    la.ffn.gated.resize_for_overwrite({N, F});
    la.ffn_out.resize_for_overwrite({B, S, d});
    auto ffn = [&](int64_t r0, int64_t r1) {
        const int64_t f = r0 * F;
        glu_forward(la.ffn_out.ptr() + r0 * d, la.ffn.h1.ptr() + f, la.ffn.h2.ptr() + f,
                    la.ffn.gated.ptr() + f, la.out1.ptr() + r0 * d,
                    GluLinears<T>{lw.w1, w.ffn.b1, lw.w2, w.ffn.b2, lw.w3, w.ffn.b3}, r1 - r0, d, F,
                    d);
    };
    rows(ffn);
    if (training) la.ffn.gated = Tensor<T>();  // recomputed from h1, h2 by glu_backward
    res2.resize_for_overwrite({B, S, d});
    auto sum2 = [&](int64_t r0, int64_t r1) {
        const int64_t o = r0 * d;
        add_residual(res2.ptr() + o, la.ffn_out.ptr() + o, la.out1.ptr() + o, (r1 - r0) * d);
    };
    rows(sum2);
    if (training) la.out1 = Tensor<T>();  // LN1(attn_out + x_in) again in the backward
    la.hidden.resize_for_overwrite({B, S, d});
    la.ln2_mean.resize({N});
    la.ln2_rstd.resize({N});
    auto ln2 = [&](int64_t r0, int64_t r1) {
        const int64_t o = r0 * d;
        layernorm_forward(la.hidden.ptr() + o, la.ln2_mean.ptr() + r0, la.ln2_rstd.ptr() + r0,
                          res2.ptr() + o, w.ln2_g, w.ln2_b, r1 - r0, d, c.layer_norm_eps);
    };
    rows(ln2);
    if (by_rows)
        parallel_rows(N, true, [&](int64_t r0, int64_t r1) {
            attn_out(r0, r1);
            block1(r0, r1);
            ffn(r0, r1);
            sum2(r0, r1);
            ln2(r0, r1);
        });
}

template <typename T>
void decoder_layer_backward(const Model<T>& m, int64_t l, const Activations<T>& a,
                            const DeductiveGrads<T>* extra, const Tensor<T>& dhidden,
                            ModelView<T>& g, Tensor<T>& dx_in, LayerActs<T>* consume) {
    const Config& c = m.cfg;
    const LayerView<T>& w = m.w.layers[size_t(l)];
    LayerView<T>& gw = g.layers[size_t(l)];
    const int64_t B = a.B, S = a.S, H = c.num_heads, D = c.head_dim, d = c.hidden_size;
    const int64_t N = B * S, F = c.intermediate_size;
    LayerActs<T> again;  // KeepActs::LAYER_INPUTS: this layer's forward once more, from its input
    if (a.kept == KeepActs::LAYER_INPUTS) {
        again.x_in = a.layers[size_t(l)].x_in;
        AttnInput<T> in;
        in.key_ids = a.ids.data();
        in.pos = a.pos.data();
        in.keep = KeepActs::TRAINING;
        decoder_layer_forward(m, l, B, S, in, again);
    }
    const LayerActs<T>& la = a.kept == KeepActs::LAYER_INPUTS ? again : a.layers[size_t(l)];
    // Each temporary lives in the scope that needs it, and the activations go as soon as the
    // backward has passed them, where they are this function's to free (recomputed here, or
    // handed over by the caller: `consume`): the step's peak memory is this function's.
    LayerActs<T>* dying = a.kept == KeepActs::LAYER_INPUTS ? &again : consume;
    PLDR_CHECK(!dying || dying == &la);
    auto release = [&](Tensor<T> LayerActs<T>::*t) {
        if (dying) dying->*t = Tensor<T>();
    };
    // r1 = attn_out + x_in, LN1's input (recomputed where needed rather than kept).
    auto sum_r1 = [&](Tensor<T>& r1) {
        r1.resize_for_overwrite({B, S, d});
        add_residual(r1.ptr(), la.attn_out.ptr(), la.x_in.ptr(), r1.numel());
    };

    Tensor<T> dr1;
    {
        // out1 = LN1(r1): a training forward keeps no out1; the same bits again from r1.
        Tensor<T> out1_again;
        if (!la.out1.numel()) {
            Tensor<T> r1, mean({N}), rstd({N});
            sum_r1(r1);
            out1_again.resize_for_overwrite({B, S, d});
            layernorm_forward(out1_again.ptr(), mean.ptr(), rstd.ptr(), r1.ptr(), w.ln1_g, w.ln1_b,
                              N, d, c.layer_norm_eps);
        }
        const T* out1 = la.out1.numel() ? la.out1.ptr() : out1_again.ptr();
        // hidden = LN2(ffn_out + out1)
        // d(out1): LN2's input gradient, then the FFN's too (the gradients accumulate into
        // zeros)
        Tensor<T> dout1 = zeros_on_team<T>({B, S, d});
        {
            Tensor<T> r2;
            r2.resize_for_overwrite({B, S, d});
            add_residual(r2.ptr(), la.ffn_out.ptr(), out1, r2.numel());
            layernorm_backward(dout1.ptr(), gw.ln2_g, gw.ln2_b, dhidden.ptr(), r2.ptr(),
                               la.ln2_mean.ptr(), la.ln2_rstd.ptr(), w.ln2_g, N, d);
        }
        release(&LayerActs<T>::ffn_out);
        // ffn_out = GLU(out1); the residual passes d(r2) to out1 too: dout1 is both the GLU's
        // output gradient and what its input gradient accumulates into (glu.h). Where this
        // function frees the activations, h1 and h2 become dh1 and dh2 (half the scratch: the
        // step's peak memory is here, at the top layer).
        {
            const GluGrads<T> gg{gw.ffn.w1, gw.ffn.b1, gw.ffn.w2, gw.ffn.b2, gw.ffn.w3, gw.ffn.b3};
            const GluParams<T> gp{w.ffn.w1, w.ffn.b1, w.ffn.w2, w.ffn.b2, w.ffn.w3, w.ffn.b3};
            Tensor<T> scratch;  // the GLU backward zeroes what it accumulates into
            if (dying && !la.ffn.gated.numel()) {
                scratch.resize_for_overwrite({N * F});
                glu_backward_in_place(dout1.ptr(), gg, dout1.ptr(), out1, dying->ffn.h1.ptr(),
                                      dying->ffn.h2.ptr(), gp, N, d, F, d, scratch.ptr());
            } else {
                scratch.resize_for_overwrite({2 * N * F});
                glu_backward(dout1.ptr(), gg, dout1.ptr(), out1, la.ffn.h1.ptr(), la.ffn.h2.ptr(),
                             la.ffn.gated.numel() ? la.ffn.gated.ptr() : nullptr, gp, N, d, F, d,
                             scratch.ptr());
            }
        }
        if (dying) dying->ffn = GluActs<T>();
        out1_again = Tensor<T>();
        release(&LayerActs<T>::out1);
        // out1 = LN1(attn_out + x_in)
        Tensor<T> r1;
        sum_r1(r1);
        release(&LayerActs<T>::attn_out);
        dr1 = zeros_on_team<T>({B, S, d});
        layernorm_backward(dr1.ptr(), gw.ln1_g, gw.ln1_b, dout1.ptr(), r1.ptr(), la.ln1_mean.ptr(),
                           la.ln1_rstd.ptr(), w.ln1_g, N, d);
    }
    // attn_out = O·Woᵀ + bo (a training forward kept no O: its weight gradient waits for the
    // attention backward, which recomputes O head by head).
    Tensor<T> dO = zeros_on_team<T>({B, S, d});
    const bool has_O = la.O.numel() > 0;
    linear_backward(dO.ptr(), has_O ? gw.wo : nullptr, gw.bo, dr1.ptr(), la.O.ptr(), w.wo, N, d, d);

    // PLGA attention: E·V, the softmax, the scores, the operator, the metric learner.
    Tensor<T> dq, dk, dv;
    {
        Tensor<T> O;
        plga_attention_backward(m, l, la, B, S, a.ids.data(), extra, dO, gw, dq, dk, dv,
                                has_O ? nullptr : &O);
        if (!has_O) linear_backward<T>(nullptr, gw.wo, nullptr, dr1.ptr(), O.ptr(), w.wo, N, d, d);
    }
    if (dying) {  // the projections' weight gradients need only the layer input from here on
        Tensor<T> x_in = std::move(dying->x_in);
        *dying = LayerActs<T>();
        dying->x_in = std::move(x_in);
    }
    dO = Tensor<T>();
    dx_in = std::move(dr1);  // the residual; the projections' input gradients add to it

    // RoPE (transpose rotation), then the three projections.
    rope_backward(dq.ptr(), a.pos.data(), N, H, D, m.rope, c.reference_rope, m.round_f32());
    rope_backward(dk.ptr(), a.pos.data(), N, H, D, m.rope, c.reference_rope, m.round_f32());
    linear_backward(dx_in.ptr(), gw.wq, gw.bq, dq.ptr(), la.x_in.ptr(), w.wq, N, d, d);
    linear_backward(dx_in.ptr(), gw.wk, gw.bk, dk.ptr(), la.x_in.ptr(), w.wk, N, d, d);
    linear_backward(dx_in.ptr(), gw.wv, gw.bv, dv.ptr(), la.x_in.ptr(), w.wv, N, d, d);
}

template void decoder_layer_forward<float>(const Model<float>&, int64_t, int64_t, int64_t,
                                           const AttnInput<float>&, LayerActs<float>&);
template void decoder_layer_forward<double>(const Model<double>&, int64_t, int64_t, int64_t,
                                            const AttnInput<double>&, LayerActs<double>&);

template void decoder_layer_backward<float>(const Model<float>&, int64_t, const Activations<float>&,
                                            const DeductiveGrads<float>*, const Tensor<float>&,
                                            ModelView<float>&, Tensor<float>&, LayerActs<float>*);
template void decoder_layer_backward<double>(const Model<double>&, int64_t,
                                             const Activations<double>&,
                                             const DeductiveGrads<double>*, const Tensor<double>&,
                                             ModelView<double>&, Tensor<double>&,
                                             LayerActs<double>*);

}  // namespace pldr
