// PLDR-LLM forward pass (spec §1): embedding·√d → LN → L × post-LN PLGA decoder layers → head.
#include "model/forward.h"

#include <algorithm>
#include <cmath>

#include "core/blas.h"
#include "model/plga_layer.h"
#include "ops/activation.h"
#include "ops/layernorm.h"
#include "ops/linear.h"

namespace pldr {

template <typename T>
void check_inputs(const Model<T>& m, const int64_t* ids, int64_t B, int64_t S) {
    PLDR_REQUIRE(B > 0 && S > 0, "empty input: batch ", B, " x length ", S);
    PLDR_REQUIRE(S <= m.cfg.max_position, "sequence of ", S,
                 " tokens is longer than max_position_embeddings (", m.cfg.max_position, ")");
    for (int64_t i = 0; i < B * S; ++i)
        PLDR_REQUIRE(ids[i] >= 0 && ids[i] < m.cfg.vocab_size, "token id ", ids[i],
                     " is outside the vocabulary [0, ", m.cfg.vocab_size, ")");
}

template <typename T>
void embed_forward(const Model<T>& m, const int64_t* ids, int64_t N, Tensor<T>& x0,
                   Tensor<T>& embed_ln, Tensor<T>& mean, Tensor<T>& rstd) {
    const int64_t d = m.cfg.hidden_size;
    x0.resize_for_overwrite({N, d});
    const T scale = m.embed_scale();
    for (int64_t n = 0; n < N; ++n) {
        const T* e = m.w.emb + ids[n] * d;
        T* o = x0.ptr() + n * d;
        for (int64_t j = 0; j < d; ++j) o[j] = e[j] * scale;
    }
    embed_ln.resize_for_overwrite({N, d});
    mean.resize({N});
    rstd.resize({N});
    layernorm_forward(embed_ln.ptr(), mean.ptr(), rstd.ptr(), x0.ptr(), m.w.ln_in_g, m.w.ln_in_b, N,
                      d, m.cfg.layer_norm_eps);
}

namespace {

// KeepActs::LAYER_INPUTS: of a layer's activations, keep the input, the deductive outputs and the
// output (the next layer's input, moved on there; the last layer's feeds the head).
template <typename T>
void keep_layer_inputs(LayerActs<T>& la) {
    LayerActs<T> kept;
    kept.x_in = std::move(la.x_in);
    kept.A_LM = std::move(la.A_LM);
    kept.A_P = std::move(la.A_P);
    kept.G = std::move(la.G);
    kept.hidden = std::move(la.hidden);
    la = std::move(kept);
}

}  // namespace

template <typename T>
void forward_layers(const Model<T>& m, const int64_t* ids, int64_t B, int64_t S, Activations<T>& a,
                    KeepActs keep) {
    check_inputs(m, ids, B, S);
    const Config& c = m.cfg;
    const int64_t d = c.hidden_size, N = B * S;
    a.B = B;
    a.S = S;
    a.kept = keep;
    a.ids.assign(ids, ids + N);
    a.pos.resize(static_cast<size_t>(N));
    for (int64_t b = 0; b < B; ++b)
        for (int64_t s = 0; s < S; ++s) a.pos[size_t(b * S + s)] = s;

    embed_forward(m, ids, N, a.x0, a.embed_ln, a.ln_mean, a.ln_rstd);
    a.x0.shape = a.embed_ln.shape = {B, S, d};
    const bool training = keep == KeepActs::TRAINING || keep == KeepActs::LAYER_INPUTS;
    if (training) a.x0 = Tensor<T>();  // the backward gathers the scaled embeddings again

    a.layers.resize(static_cast<size_t>(c.num_layers));
    Tensor<T>* x = &a.embed_ln;
    for (int64_t l = 0; l < c.num_layers; ++l) {
        LayerActs<T>& la = a.layers[size_t(l)];
        // Training: the previous output moves in (its backward needs it only as this input).
        if (training)
            la.x_in = std::move(*x);
        else
            la.x_in = *x;
        AttnInput<T> in;
        in.key_ids = ids;
        in.pos = a.pos.data();
        in.keep = training ? KeepActs::TRAINING : keep;
        decoder_layer_forward(m, l, B, S, in, la);
        if (keep == KeepActs::LAYER_INPUTS) keep_layer_inputs(la);
        x = &la.hidden;
    }
}

template <typename T>
void forward(const Model<T>& m, const int64_t* ids, int64_t B, int64_t S, Activations<T>& a) {
    forward_layers(m, ids, B, S, a);
    const int64_t d = m.cfg.hidden_size, V = m.cfg.vocab_size;
    a.logits.resize_for_overwrite({B, S, V});
    linear_forward(a.logits.ptr(), a.final_hidden().ptr(), m.lw.head, m.w.head_b, B * S, d, V);
}

template <typename T>
Tensor<T> sdpa_reference_forward(const Model<T>& m, const int64_t* ids, int64_t B, int64_t S) {
    // Deliberately naive and independent of the PLGA code: no G, no caches, plain loops.
    check_inputs(m, ids, B, S);
    const Config& c = m.cfg;
    const int64_t d = c.hidden_size, H = c.num_heads, D = c.head_dim, F = c.intermediate_size;
    const int64_t N = B * S;
    const double eps = c.layer_norm_eps;
    auto ln = [&](std::vector<T>& x, const T* g, const T* bb) {
        for (int64_t n = 0; n < N; ++n) {
            T* r = x.data() + n * d;
            T mu = 0, var = 0;
            for (int64_t j = 0; j < d; ++j) mu += r[j];
            mu /= T(d);
            for (int64_t j = 0; j < d; ++j) var += (r[j] - mu) * (r[j] - mu);
            var /= T(d);
            T rs = T(1) / std::sqrt(var + T(eps));
            for (int64_t j = 0; j < d; ++j) r[j] = (r[j] - mu) * rs * g[j] + bb[j];
        }
    };
    auto lin = [&](const std::vector<T>& x, const T* W, const T* bb, int64_t I, int64_t O) {
        std::vector<T> y(static_cast<size_t>(N * O));
        for (int64_t n = 0; n < N; ++n)
            for (int64_t o = 0; o < O; ++o) {
                T s = 0;
                for (int64_t i = 0; i < I; ++i) s += x[size_t(n * I + i)] * W[o * I + i];
                y[size_t(n * O + o)] = s + (bb ? bb[o] : T(0));
            }
        return y;
    };
    std::vector<T> x(static_cast<size_t>(N * d));
    const T es = m.embed_scale();
    for (int64_t n = 0; n < N; ++n)
        for (int64_t j = 0; j < d; ++j) x[size_t(n * d + j)] = m.w.emb[ids[n] * d + j] * es;
    ln(x, m.w.ln_in_g, m.w.ln_in_b);
    std::vector<int64_t> pos(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) pos[size_t(n)] = n % S;
    const T sc = m.score_scale();
    for (const auto& L : m.w.layers) {
        std::vector<T> q = lin(x, L.wq, L.bq, d, d), k = lin(x, L.wk, L.bk, d, d),
                       v = lin(x, L.wv, L.bv, d, d);
        rope_forward(q.data(), pos.data(), N, H, D, m.rope, c.reference_rope, m.round_f32());
        rope_forward(k.data(), pos.data(), N, H, D, m.rope, c.reference_rope, m.round_f32());
        std::vector<T> o(static_cast<size_t>(N * d), T(0)), p(static_cast<size_t>(S));
        for (int64_t b = 0; b < B; ++b)
            for (int64_t h = 0; h < H; ++h)
                for (int64_t i = 0; i < S; ++i) {
                    T mx = -INFINITY;
                    for (int64_t j = 0; j < S; ++j) {
                        T s = 0;
                        for (int64_t t = 0; t < D; ++t)
                            s += q[size_t(((b * S + i) * H + h) * D + t)] *
                                 k[size_t(((b * S + j) * H + h) * D + t)];
                        s /= sc;
                        if (j > i || ids[b * S + j] == c.pad_token_id) s += T(-1e9);
                        p[size_t(j)] = s;
                        mx = std::max(mx, s);
                    }
                    T z = 0;
                    for (int64_t j = 0; j < S; ++j)
                        z += (p[size_t(j)] = std::exp(p[size_t(j)] - mx));
                    for (int64_t j = 0; j < S; ++j)
                        for (int64_t t = 0; t < D; ++t)
                            o[size_t(((b * S + i) * H + h) * D + t)] +=
                                p[size_t(j)] / z * v[size_t(((b * S + j) * H + h) * D + t)];
                }
        std::vector<T> att = lin(o, L.wo, L.bo, d, d);
        for (size_t i = 0; i < x.size(); ++i) x[i] += att[i];
        ln(x, L.ln1_g, L.ln1_b);
        std::vector<T> h1 = lin(x, L.ffn.w1, L.ffn.b1, d, F), h2 = lin(x, L.ffn.w2, L.ffn.b2, d, F);
        for (size_t i = 0; i < h1.size(); ++i) h1[i] = silu(h1[i]) * h2[i];
        std::vector<T> f = lin(h1, L.ffn.w3, L.ffn.b3, F, d);
        for (size_t i = 0; i < x.size(); ++i) x[i] += f[i];
        ln(x, L.ln2_g, L.ln2_b);
    }
    Tensor<T> logits({B, S, c.vocab_size});
    std::vector<T> lg = lin(x, m.w.head_w, m.w.head_b, d, c.vocab_size);
    std::copy(lg.begin(), lg.end(), logits.data.begin());
    return logits;
}

template void check_inputs<float>(const Model<float>&, const int64_t*, int64_t, int64_t);
template void check_inputs<double>(const Model<double>&, const int64_t*, int64_t, int64_t);
template void embed_forward<float>(const Model<float>&, const int64_t*, int64_t, Tensor<float>&,
                                   Tensor<float>&, Tensor<float>&, Tensor<float>&);
template void embed_forward<double>(const Model<double>&, const int64_t*, int64_t, Tensor<double>&,
                                    Tensor<double>&, Tensor<double>&, Tensor<double>&);
template void forward_layers<float>(const Model<float>&, const int64_t*, int64_t, int64_t,
                                    Activations<float>&, KeepActs);
template void forward_layers<double>(const Model<double>&, const int64_t*, int64_t, int64_t,
                                     Activations<double>&, KeepActs);
template void forward<float>(const Model<float>&, const int64_t*, int64_t, int64_t,
                             Activations<float>&);
template void forward<double>(const Model<double>&, const int64_t*, int64_t, int64_t,
                              Activations<double>&);
template Tensor<float> sdpa_reference_forward<float>(const Model<float>&, const int64_t*, int64_t,
                                                     int64_t);
template Tensor<double> sdpa_reference_forward<double>(const Model<double>&, const int64_t*,
                                                       int64_t, int64_t);

}  // namespace pldr
