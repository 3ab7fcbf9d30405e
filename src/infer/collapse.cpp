// Model collapse and model comparison (see collapse.h).
#include "infer/collapse.h"

#include <algorithm>
#include <cmath>

namespace pldr {

template <typename T>
GCache<T> prompt_g_cache(const Model<T>& m, const std::vector<int64_t>& prompt) {
    Session<T> s(m, CacheMode::KVG, std::max<int64_t>(int64_t(prompt.size()), 1));
    s.prefill(prompt);
    return s.g_cache();
}

template <typename T>
GCache<T> reference_g_cache(const Model<T>& m) {
    return prompt_g_cache(m, {m.cfg.eos_token_id});
}

template <typename T>
Model<T> collapse_model(const Model<T>& m, const GCache<T>& g) {
    if (!m.cfg.learned_g()) return m;
    const Config& c = m.cfg;
    PLDR_REQUIRE(int64_t(g.size()) == c.num_layers, "G-cache has ", g.size(),
                 " layers but the model has ", c.num_layers);
    Config fc = c;
    fc.g_type = GType::EXTERNAL;
    Model<T> out(fc);
    for (const ParamEntry& e : out.layout.entries) {
        const ParamEntry* src = m.layout.find(e.name);
        PLDR_CHECK(src && src->numel == e.numel);
        std::copy(m.params.begin() + src->offset, m.params.begin() + src->offset + e.numel,
                  out.params.begin() + e.offset);
    }
    const int64_t per = c.num_heads * c.head_dim * c.head_dim;
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const Tensor<T>& G = g[size_t(l)].G;
        PLDR_REQUIRE(G.numel() == per, "G-cache layer ", l, " has ", G.numel(),
                     " values, the model needs ", per);
        std::copy(G.data.begin(), G.data.end(), out.G_fixed.begin() + l * per);
    }
    out.set_reference_numerics(m.reference_numerics());
    out.packed = m.packed;  // the same linear weights, by name
    out.bind_linears();
    return out;
}

template <typename T>
CompareReport compare_models(const Model<T>& a, const Model<T>& b,
                             const std::vector<int64_t>& tokens, int64_t window) {
    PLDR_REQUIRE(a.cfg.vocab_size == b.cfg.vocab_size, "the models' vocabularies differ");
    PLDR_REQUIRE(window >= 2, "comparison window must be >= 2 tokens");
    PLDR_REQUIRE(int64_t(tokens.size()) >= 2, "the comparison text has fewer than 2 tokens");
    const int64_t V = a.cfg.vocab_size;
    window = std::min({window, a.cfg.max_position, b.cfg.max_position});
    CompareReport r;
    Activations<T> xa, xb;
    std::vector<double> la(static_cast<size_t>(V)), lb(static_cast<size_t>(V));
    auto log_softmax = [V](const T* x, std::vector<double>& out) {
        double mx = -INFINITY;
        for (int64_t v = 0; v < V; ++v) mx = std::max(mx, double(x[v]));
        double s = 0;
        for (int64_t v = 0; v < V; ++v) s += std::exp(double(x[v]) - mx);
        const double lse = mx + std::log(s);
        for (int64_t v = 0; v < V; ++v) out[size_t(v)] = double(x[v]) - lse;
    };
    // Windows overlap by one token so that every next-token prediction is made exactly once.
    for (size_t start = 0; start + 1 < tokens.size(); start += size_t(window - 1)) {
        const int64_t S = std::min<int64_t>(window, int64_t(tokens.size() - start));
        if (S < 2) break;
        forward(a, tokens.data() + start, 1, S, xa);
        forward(b, tokens.data() + start, 1, S, xb);
        for (int64_t s = 0; s + 1 < S; ++s) {
            log_softmax(xa.logits.ptr() + s * V, la);
            log_softmax(xb.logits.ptr() + s * V, lb);
            double kl = 0;
            for (int64_t v = 0; v < V; ++v)
                kl += std::exp(la[size_t(v)]) * (la[size_t(v)] - lb[size_t(v)]);
            r.kl_mean += kl;
            r.kl_max = std::max(r.kl_max, kl);
            const int64_t am = int64_t(std::max_element(la.begin(), la.end()) - la.begin());
            const int64_t bm = int64_t(std::max_element(lb.begin(), lb.end()) - lb.begin());
            r.top1_agree += am == bm;
            const int64_t next = tokens[start + size_t(s) + 1];
            r.nll_a -= la[size_t(next)];
            r.nll_b -= lb[size_t(next)];
            ++r.tokens;
        }
    }
    const double n = double(std::max<int64_t>(r.tokens, 1));
    r.kl_mean /= n;
    r.top1_agree /= n;
    r.nll_a /= n;
    r.nll_b /= n;
    return r;
}

#define PLDR_INSTANTIATE(T)                                                             \
    template GCache<T> reference_g_cache<T>(const Model<T>&);                           \
    template GCache<T> prompt_g_cache<T>(const Model<T>&, const std::vector<int64_t>&); \
    template Model<T> collapse_model<T>(const Model<T>&, const GCache<T>&);             \
    template CompareReport compare_models<T>(const Model<T>&, const Model<T>&,          \
                                             const std::vector<int64_t>&, int64_t);
PLDR_INSTANTIATE(float)
PLDR_INSTANTIATE(double)
#undef PLDR_INSTANTIATE

}  // namespace pldr
