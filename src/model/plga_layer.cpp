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

}  // namespace

template <typename T>
void decoder_layer_forward(const Model<T>& m, int64_t l, int64_t B, int64_t S,
                           const AttnInput<T>& in, LayerActs<T>& la) {
    const Config& c = m.cfg;
    const LayerView<T>& w = m.w.layers[size_t(l)];
    const LayerLinears<T>& lw = m.lw.layers[size_t(l)];  // dense or packed (model/packed.h)
    const int64_t H = c.num_heads, D = c.head_dim, d = c.hidden_size, N = B * S;

    // 1-3. Projections and RoPE on q, k.
    la.q.resize_for_overwrite({B, S, d});
    la.k.resize_for_overwrite({B, S, d});
    la.v.resize_for_overwrite({B, S, d});
    const LinearOut<T> qkv[] = {
        {la.q.ptr(), lw.wq, w.bq, d}, {la.k.ptr(), lw.wk, w.bk, d}, {la.v.ptr(), lw.wv, w.bv, d}};
    linear_forward_same_input(la.x_in.ptr(), N, d, qkv, 3);
    rope_forward(la.q.ptr(), in.pos, N, H, D, m.rope, c.reference_rope, m.round_f32());
    rope_forward(la.k.ptr(), in.pos, N, H, D, m.rope, c.reference_rope, m.round_f32());

    // 4-7. PLGA attention: the metric learner, the operator G_LM, the scores, E·V.
    plga_attention_forward(m, l, B, S, in, la);

    la.attn_out.resize_for_overwrite({B, S, d});
    linear_forward(la.attn_out.ptr(), la.O.ptr(), lw.wo, w.bo, N, d, d);
    const bool training = in.keep == KeepActs::TRAINING;
    if (training) {  // the memory plan (KeepActs): the backward recomputes these per head
        la.QG = Tensor<T>();
        la.E = Tensor<T>();
        la.O = Tensor<T>();
    }

    // Post-LN residual blocks.
    Tensor<T> r1;  // (each sum below writes every element of its output)
    r1.resize_for_overwrite({B, S, d});
    add_residual(r1.ptr(), la.attn_out.ptr(), la.x_in.ptr(), r1.numel());
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
    glu_forward(la.ffn_out.ptr(), la.ffn.h1.ptr(), la.ffn.h2.ptr(), la.ffn.gated.ptr(),
                la.out1.ptr(), GluLinears<T>{lw.w1, w.ffn.b1, lw.w2, w.ffn.b2, lw.w3, w.ffn.b3}, N,
                d, F, d);
    if (training) la.ffn.gated = Tensor<T>();  // recomputed from h1, h2 by glu_backward
    Tensor<T> r2;
    r2.resize_for_overwrite({B, S, d});
    add_residual(r2.ptr(), la.ffn_out.ptr(), la.out1.ptr(), r2.numel());
    if (training) la.out1 = Tensor<T>();  // LN1(attn_out + x_in) again in the backward
    la.hidden.resize_for_overwrite({B, S, d});
    la.ln2_mean.resize({N});
    la.ln2_rstd.resize({N});
    layernorm_forward(la.hidden.ptr(), la.ln2_mean.ptr(), la.ln2_rstd.ptr(), r2.ptr(), w.ln2_g,
                      w.ln2_b, N, d, c.layer_norm_eps);
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
        // ffn_out = GLU(out1); the residual passes d(r2) to out1 too.
        {
            const Tensor<T> dr2 = dout1;
            Tensor<T> scratch;  // glu_backward zeroes what it accumulates into
            scratch.resize_for_overwrite({2 * N * F});
            glu_backward(
                dout1.ptr(),
                GluGrads<T>{gw.ffn.w1, gw.ffn.b1, gw.ffn.w2, gw.ffn.b2, gw.ffn.w3, gw.ffn.b3},
                dr2.ptr(), out1, la.ffn.h1.ptr(), la.ffn.h2.ptr(),
                la.ffn.gated.numel() ? la.ffn.gated.ptr() : nullptr,
                GluParams<T>{w.ffn.w1, w.ffn.b1, w.ffn.w2, w.ffn.b2, w.ffn.w3, w.ffn.b3}, N, d, F,
                d, scratch.ptr());
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
