// The forward's outputs in golden naming (see named_outputs.h).
#include "model/named_outputs.h"

#include <cmath>

namespace pldr {

template <typename T>
Tensor<T> heads_first(const Tensor<T>& x, int64_t B, int64_t S, int64_t H, int64_t D) {
    Tensor<T> y({B, H, S, D});
    for (int64_t b = 0; b < B; ++b)
        for (int64_t s = 0; s < S; ++s)
            for (int64_t h = 0; h < H; ++h)
                for (int64_t i = 0; i < D; ++i)
                    y[((b * H + h) * S + s) * D + i] = x[((b * S + s) * H + h) * D + i];
    return y;
}

template <typename T>
std::vector<NamedTensor<T>> forward_tensors(const Model<T>& m, const Activations<T>& a) {
    const Config& c = m.cfg;
    const int64_t B = a.B, S = a.S, H = c.num_heads, D = c.head_dim;
    std::vector<NamedTensor<T>> out;
    // A tensor the forward did not keep (KeepActs) is left out.
    auto add = [&](const std::string& n, Tensor<T> t) {
        if (t.numel()) out.push_back({n, std::move(t)});
    };
    // The reference mask: max(padding, look-ahead), 1 = masked, [B,1,S,S].
    Tensor<T> mask({B, 1, S, S});
    for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < S; ++i)
            for (int64_t j = 0; j < S; ++j)
                mask[(b * S + i) * S + j] =
                    (j > i || a.ids[size_t(b * S + j)] == c.pad_token_id) ? T(1) : T(0);
    add("fwd.mask", mask);
    add("fwd.embed_ln", a.embed_ln);
    for (size_t l = 0; l < a.layers.size(); ++l) {
        const LayerActs<T>& la = a.layers[l];
        const std::string p = "fwd.layer" + std::to_string(l) + ".";
        Tensor<T> qr = la.q, kr = la.k;
        qr.shape = kr.shape = {B, S, H, D};
        add(p + "q_rope", qr);
        add(p + "k_rope", kr);
        add(p + "q", heads_first(la.q, B, S, H, D));
        add(p + "k", heads_first(la.k, B, S, H, D));
        add(p + "v", heads_first(la.v, B, S, H, D));
        if (c.learned_g()) {
            if (la.A_ln.numel()) add(p + "A_ln", la.A_ln);
            add(p + "A", la.A);
            add(p + "A_LM", la.A_LM);
            add(p + "Ap", la.A_P);
        }
        add(p + "G_LM", la.G);
        add(p + "Ep", la.Ep);
        if (la.Ep.numel() == B * H * S * S) {
            Tensor<T> sm = la.Ep;
            for (int64_t b = 0; b < B; ++b)
                for (int64_t h = 0; h < H; ++h)
                    for (int64_t i = 0; i < S * S; ++i)
                        sm[(b * H + h) * S * S + i] += mask[b * S * S + i] * T(-1e9);
            add(p + "scores_masked", sm);
        }
        add(p + "E", la.E);
        add(p + "attn_out", la.attn_out);
        add(p + "out1", la.out1);
        add(p + "ffn_out", la.ffn_out);
        add(p + "hidden", la.hidden);
    }
    add("fwd.logits", a.logits);
    return out;
}

template std::vector<NamedTensor<float>> forward_tensors<float>(const Model<float>&,
                                                                const Activations<float>&);
template std::vector<NamedTensor<double>> forward_tensors<double>(const Model<double>&,
                                                                  const Activations<double>&);
template Tensor<float> heads_first<float>(const Tensor<float>&, int64_t, int64_t, int64_t, int64_t);
template Tensor<double> heads_first<double>(const Tensor<double>&, int64_t, int64_t, int64_t,
                                            int64_t);

template <typename T>
std::string first_non_finite(const std::vector<NamedTensor<T>>& ts) {
    for (const auto& nt : ts) {
        const bool masked = nt.name == "fwd.mask" ||
                            (nt.name.size() > 14 &&
                             nt.name.compare(nt.name.size() - 14, 14, ".scores_masked") == 0);
        for (size_t i = 0; i < nt.t.data.size(); ++i) {
            const double v = double(nt.t.data[i]);
            if (std::isnan(v) || (std::isinf(v) && !(masked && v < 0)))
                return cat(nt.name, " (", v, " at element ", i, ")");
        }
    }
    return "";
}
template std::string first_non_finite<float>(const std::vector<NamedTensor<float>>&);
template std::string first_non_finite<double>(const std::vector<NamedTensor<double>>&);

}  // namespace pldr
