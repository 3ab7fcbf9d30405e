// The collapse measurements (see measure.h).
#include "audit/measure.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "infer/collapse.h"
#include "infer/generate.h"
#include "infer/session.h"
#include "io/tokenizer.h"
#include "ops/dag.h"

namespace pldr::audit {

namespace {

template <typename T>
Tensor<double> widen(const Tensor<T>& t, const Shape& sh) {
    Tensor<double> r(sh);
    for (int64_t i = 0; i < r.numel(); ++i) r[i] = double(t[i]);
    return r;
}

template <typename T>
int64_t argmax(const T* x, int64_t n) {
    int64_t a = 0;
    for (int64_t i = 1; i < n; ++i)
        if (x[i] > x[a]) a = i;
    return a;
}

}  // namespace

template <typename T>
Deductive deductive_outputs(const Model<T>& m, const std::vector<int64_t>& ids) {
    const Config& c = m.cfg;
    const Shape sh{c.num_heads, c.head_dim, c.head_dim};
    const int64_t n = shape_numel(sh);
    Activations<T> a;
    forward(m, ids.data(), 1, int64_t(ids.size()), a);
    Deductive d;
    d.layers.resize(size_t(c.num_layers));
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const LayerActs<T>& la = a.layers[size_t(l)];
        const Tensor<T>* src[4] = {&la.A, &la.A_LM, &la.A_P, &la.G};
        for (int q = 0; q < 4; ++q)
            if (src[q]->numel() >= n) d.layers[size_t(l)][size_t(q)] = widen(*src[q], sh);
    }
    return d;
}

template <typename T>
std::vector<StepRecord> eps_g_steps(const Model<T>& m, const std::vector<int64_t>& prompt,
                                    int64_t steps) {
    const Config& c = m.cfg;
    const int64_t P = int64_t(prompt.size()), V = c.vocab_size;
    PLDR_REQUIRE(P >= 1, "empty prompt");
    steps = std::min(steps, c.max_position - P);
    const int64_t n = c.num_heads * c.head_dim * c.head_dim;
    Session<T> s(m, CacheMode::KVG, P + std::max<int64_t>(steps, 0));
    std::vector<T> logits = s.prefill(prompt);
    std::vector<std::vector<double>> Gc;
    for (const auto& g : s.g_cache()) {
        const Tensor<double> w = widen(g.G, {n});
        Gc.emplace_back(w.data.begin(), w.data.end());
    }
    std::vector<int64_t> seq = prompt;
    std::vector<StepRecord> out;
    Activations<T> a;
    std::vector<double> gu(static_cast<size_t>(n));
    for (int64_t t = 1; t <= steps; ++t) {
        StepRecord r;
        r.step = t;
        r.token = argmax(logits.data(), V);
        seq.push_back(r.token);
        logits = s.decode(r.token);
        forward(m, seq.data(), 1, int64_t(seq.size()), a);
        for (int64_t l = 0; l < c.num_layers; ++l) {
            const Tensor<T>& G = a.layers[size_t(l)].G;
            for (int64_t i = 0; i < n; ++i) gu[size_t(i)] = double(G[i]);
            r.eps_G.push_back(eps_g(gu.data(), Gc[size_t(l)].data(), n));
            r.max_dG.push_back(max_abs_diff(gu.data(), Gc[size_t(l)].data(), n));
        }
        const T* lu = a.logits.ptr() + (int64_t(seq.size()) - 1) * V;
        double top1 = -INFINITY, top2 = -INFINITY;
        for (int64_t v = 0; v < V; ++v) {
            const double x = double(logits[size_t(v)]);
            r.dlogit = std::max(r.dlogit, std::abs(x - double(lu[v])));
            if (x > top1) {
                top2 = top1;
                top1 = x;
            } else if (x > top2) {
                top2 = x;
            }
        }
        r.margin = V > 1 ? top1 - top2 : INFINITY;
        r.criterion = 2 * r.dlogit < r.margin;
        r.argmax_agree = argmax(logits.data(), V) == argmax(lu, V);
        out.push_back(std::move(r));
    }
    return out;
}

template <typename T>
std::vector<std::vector<double>> eps_g_after(const Model<T>& m, const std::vector<int64_t>& ids,
                                             int64_t prefix_len) {
    const Config& c = m.cfg;
    const int64_t n = int64_t(ids.size()), hn = c.num_heads * c.head_dim * c.head_dim;
    PLDR_REQUIRE(prefix_len >= 1 && prefix_len <= n, "eps_G: the prefix length must be in [1, ", n,
                 "] (got ", prefix_len, ")");
    check_inputs(m, ids.data(), 1, n);
    // G_LM per layer of a forward over ids[:len], batch element 0 in double (none where a layer
    // has no operator of that size: eps_G is then 0).
    auto g_of = [&](int64_t len) {
        Activations<T> a;
        forward_layers(m, ids.data(), 1, len, a);
        std::vector<std::vector<double>> g;
        for (const auto& la : a.layers)
            g.emplace_back(la.G.data.begin(), la.G.data.begin() + (la.G.numel() >= hn ? hn : 0));
        return g;
    };
    const std::vector<std::vector<double>> gc = g_of(prefix_len);
    const int64_t steps = n - prefix_len;
    std::vector<std::vector<double>> out(static_cast<size_t>(steps));
    std::string err;
#pragma omp parallel for schedule(dynamic, 1) if (steps > 1)
    for (int64_t t = 1; t <= steps; ++t) {
        try {
            const auto gu = g_of(prefix_len + t);
            std::vector<double> e;
            for (int64_t l = 0; l < c.num_layers; ++l) {
                const auto& u = gu[size_t(l)];
                e.push_back(u.size() == gc[size_t(l)].size()
                                ? eps_g(u.data(), gc[size_t(l)].data(), int64_t(u.size()))
                                : 0.0);
            }
            out[size_t(t - 1)] = std::move(e);
        } catch (const std::exception& ex) {
#pragma omp critical
            if (err.empty()) err = ex.what();
        }
    }
    PLDR_REQUIRE(err.empty(), err);
    return out;
}

double OrderTable::max(int q, int form) const {
    double r = 0;
    for (const auto& l : layers)
        r = std::max(r, form == 0 ? l[size_t(q)].rms : l[size_t(q)].signed_);
    return r;
}

OrderTable order_between(const Deductive& a, const Deductive& b) {
    PLDR_CHECK(a.layers.size() == b.layers.size());
    OrderTable t;
    t.layers.resize(a.layers.size());
    for (int q = 0; q < 4; ++q) t.present[size_t(q)] = !a.layers.empty();
    for (size_t l = 0; l < a.layers.size(); ++l) {
        for (int q = 0; q < 4; ++q) {
            const Tensor<double>& x = a.layers[l][size_t(q)];
            const Tensor<double>& y = b.layers[l][size_t(q)];
            if (x.numel() == 0 || x.numel() != y.numel()) {
                t.present[size_t(q)] = false;
                continue;
            }
            t.layers[l][size_t(q)] = order_param(x.ptr(), y.ptr(), x.numel());
        }
    }
    return t;
}

OrderTable order_max(const std::vector<OrderTable>& ts) {
    OrderTable r;
    if (ts.empty()) return r;
    r = ts[0];
    for (size_t i = 1; i < ts.size(); ++i)
        for (size_t l = 0; l < r.layers.size(); ++l)
            for (size_t q = 0; q < 4; ++q) {
                r.layers[l][q].rms = std::max(r.layers[l][q].rms, ts[i].layers[l][q].rms);
                r.layers[l][q].signed_ =
                    std::max(r.layers[l][q].signed_, ts[i].layers[l][q].signed_);
            }
    return r;
}

template <typename T>
ContinuationOrder continuation_order(const Model<T>& m, const std::vector<int64_t>& prompt,
                                     int64_t len, uint64_t seed1, uint64_t seed2) {
    len = std::min(len, m.cfg.max_position - int64_t(prompt.size()));
    PLDR_REQUIRE(len >= 1, "the prompt of ", prompt.size(),
                 " tokens leaves no room for a continuation (context ", m.cfg.max_position, ")");
    ContinuationOrder r;
    GenerateOptions opt;
    opt.max_new = len;
    opt.stop_at_eos = false;
    opt.cache = CacheMode::KVG;
    opt.sampler.temperature = 1.0;
    opt.top_report = 0;
    // The two continuations step together (one shared decode step each token).
    std::vector<GenerateOptions> opts(2, opt);
    opts[0].sampler.seed = seed1;
    opts[1].sampler.seed = seed2;
    const std::vector<GenResult> g = generate_batch(m, {prompt, prompt}, opts);
    r.cont1 = g[0].ids;
    r.cont2 = g[1].ids;
    std::vector<int64_t> s1 = prompt, s2 = prompt;
    s1.insert(s1.end(), r.cont1.begin(), r.cont1.end());
    s2.insert(s2.end(), r.cont2.begin(), r.cont2.end());
    r.table = order_between(deductive_outputs(m, s1), deductive_outputs(m, s2));
    return r;
}

template <typename T>
void block_vs_sequential(const Model<T>& m, const std::vector<ScoreRequest>& reqs,
                         BlockSeqGaps& out) {
    for (const auto& q : reqs) {
        ScoreResult b = score_request(m, q, ScoreMode::BLOCK);
        ScoreResult s = score_request(m, q, ScoreMode::SEQUENTIAL);
        for (size_t i = 0; i < b.token_logprobs.size(); ++i)
            out.token_gaps.push_back(std::abs(b.token_logprobs[i] - s.token_logprobs[i]));
        out.cand_gaps.push_back(std::abs(b.logprob - s.logprob));
    }
}

template <typename T>
void truthfulqa_gaps(const Model<T>& m, const Tokenizer& tok, const std::vector<McItem>& items,
                     int64_t n, BlockSeqGaps& out) {
    n = std::min<int64_t>(n, int64_t(items.size()));
    for (int64_t i = 0; i < n; ++i) {
        const McItem& it = items[size_t(i)];
        std::vector<double> lb, ls;
        for (const auto& ch : it.choices) {
            ScoreRequest q = encode_request(tok, it.context, " " + ch, tok.eos_id());
            ScoreResult b = score_request(m, q, ScoreMode::BLOCK);
            ScoreResult s = score_request(m, q, ScoreMode::SEQUENTIAL);
            for (size_t k = 0; k < b.token_logprobs.size(); ++k)
                out.token_gaps.push_back(std::abs(b.token_logprobs[k] - s.token_logprobs[k]));
            out.cand_gaps.push_back(std::abs(b.logprob - s.logprob));
            lb.push_back(b.logprob);
            ls.push_back(s.logprob);
        }
        const double mb = mc2_score(lb, it.labels), ms = mc2_score(ls, it.labels);
        out.mc2_block.push_back(mb);
        out.mc2_seq.push_back(ms);
        out.mc2_gaps.push_back(std::abs(mb - ms));
    }
}

std::vector<SpectralRecord> spectral(const Deductive& d, int64_t prompt_index) {
    std::vector<SpectralRecord> out;
    for (size_t l = 0; l < d.layers.size(); ++l) {
        const auto& L = d.layers[l];
        const Tensor<double>& G = L[3];
        if (G.numel() == 0) continue;
        const int64_t H = G.shape[0], D = G.shape[1], DD = D * D;
        for (int64_t h = 0; h < H; ++h) {
            SpectralRecord r;
            r.prompt = prompt_index;
            r.layer = int64_t(l);
            r.head = h;
            auto rank = [&](const Tensor<double>& t, double* ratio) -> int64_t {
                if (t.numel() == 0) return -1;
                auto sv = singular_values(t.ptr() + h * DD, D, D);
                if (ratio) *ratio = sv[0] > 0 && sv.size() > 1 ? sv[1] / sv[0] : 0;
                return numerical_rank(sv);
            };
            r.rank_A = rank(L[0], &r.s2s1_A);
            r.rank_A_LM = rank(L[1], nullptr);
            r.rank_G = rank(G, &r.s2s1_G);
            auto dag = [&](const Tensor<double>& t) {
                return t.numel() ? dag_term<double>(t.ptr() + h * DD, D, DagMode::EXACT) : NAN;
            };
            r.dag_A_LM = dag(L[1]);
            r.dag_A_P = dag(L[2]);
            r.dag_G = dag(G);
            out.push_back(r);
        }
    }
    return out;
}

template <typename T>
double sdpa_identity_residual(const Model<T>& m, const std::vector<int64_t>& ids) {
    const Config& c = m.cfg;
    const int64_t H = c.num_heads, D = c.head_dim;
    Model<T> twin;
    if (m.cfg.learned_g()) {
        GCache<T> g(static_cast<size_t>(c.num_layers));
        for (auto& gl : g) {
            gl.G = Tensor<T>({H, D, D});
            for (int64_t h = 0; h < H; ++h)
                for (int64_t i = 0; i < D; ++i) gl.G[(h * D + i) * D + i] = T(1);
        }
        twin = collapse_model(m, g);
    } else {
        twin = m;
        std::fill(twin.G_fixed.begin(), twin.G_fixed.end(), T(0));
        for (int64_t lh = 0; lh < c.num_layers * H; ++lh)
            for (int64_t i = 0; i < D; ++i) twin.G_fixed[size_t((lh * D + i) * D + i)] = T(1);
    }
    unpack_model(twin);  // both sides on the float weights (a packed model's dequantized ones)
    const int64_t S = int64_t(ids.size());
    Activations<T> a;
    forward(twin, ids.data(), 1, S, a);
    Tensor<T> ref = sdpa_reference_forward(twin, ids.data(), 1, S);
    double md = 0, mr = 0;
    for (int64_t i = 0; i < ref.numel(); ++i) {
        md = std::max(md, std::abs(double(a.logits[i]) - double(ref[i])));
        mr = std::max(mr, std::abs(double(ref[i])));
    }
    return mr > 0 ? md / mr : md;
}

template <typename T>
double absorption_residual(const Model<T>& m, const std::vector<int64_t>& ids) {
    const Config& c = m.cfg;
    const int64_t S = int64_t(ids.size()), d = c.hidden_size, H = c.num_heads, D = c.head_dim;
    Activations<T> a;
    forward(m, ids.data(), 1, S, a);
    double md = 0, mr = 0;
    std::vector<double> Q(static_cast<size_t>(S * D)), K(Q.size()), QG(Q.size()), Q2(Q.size());
    std::vector<double> WG(static_cast<size_t>(d * D)), bG(static_cast<size_t>(D));
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const LayerActs<T>& la = a.layers[size_t(l)];
        const LayerView<T>& w = m.w.layers[size_t(l)];
        const T* X = la.x_in.ptr();
        for (int64_t h = 0; h < H; ++h) {
            const T* G = la.G.ptr() + h * D * D;
            // Per-head projections: rows h·D..h·D+D−1 of Wq/Wk ([d_out, d_in], y = x·Wᵀ + b).
            for (int64_t s = 0; s < S; ++s)
                for (int64_t j = 0; j < D; ++j) {
                    const int64_t o = h * D + j;
                    double q = w.bq ? double(w.bq[o]) : 0, k = w.bk ? double(w.bk[o]) : 0;
                    for (int64_t i = 0; i < d; ++i) {
                        q += double(X[s * d + i]) * double(w.wq[o * d + i]);
                        k += double(X[s * d + i]) * double(w.wk[o * d + i]);
                    }
                    Q[size_t(s * D + j)] = q;
                    K[size_t(s * D + j)] = k;
                }
            // lhs path: (X·Wqᵀ + bq)·G*.
            for (int64_t s = 0; s < S; ++s)
                for (int64_t j = 0; j < D; ++j) {
                    double v = 0;
                    for (int64_t i = 0; i < D; ++i)
                        v += Q[size_t(s * D + i)] * double(G[i * D + j]);
                    QG[size_t(s * D + j)] = v;
                }
            // rhs path: W' = Wq_hᵀ·G* [d,D], b' = bq_h·G*, then X·W' + b'.
            for (int64_t i = 0; i < d; ++i)
                for (int64_t j = 0; j < D; ++j) {
                    double v = 0;
                    for (int64_t r = 0; r < D; ++r)
                        v += double(w.wq[(h * D + r) * d + i]) * double(G[r * D + j]);
                    WG[size_t(i * D + j)] = v;
                }
            for (int64_t j = 0; j < D; ++j) {
                double v = 0;
                for (int64_t r = 0; r < D; ++r)
                    v += (w.bq ? double(w.bq[h * D + r]) : 0) * double(G[r * D + j]);
                bG[size_t(j)] = v;
            }
            for (int64_t s = 0; s < S; ++s)
                for (int64_t j = 0; j < D; ++j) {
                    double v = bG[size_t(j)];
                    for (int64_t i = 0; i < d; ++i)
                        v += double(X[s * d + i]) * WG[size_t(i * D + j)];
                    Q2[size_t(s * D + j)] = v;
                }
            for (int64_t s = 0; s < S; ++s)
                for (int64_t t = 0; t < S; ++t) {
                    double e1 = 0, e2 = 0;
                    for (int64_t j = 0; j < D; ++j) {
                        e1 += QG[size_t(s * D + j)] * K[size_t(t * D + j)];
                        e2 += Q2[size_t(s * D + j)] * K[size_t(t * D + j)];
                    }
                    md = std::max(md, std::abs(e1 - e2));
                    mr = std::max(mr, std::abs(e1));
                }
        }
    }
    return mr > 0 ? md / mr : md;
}

template <typename T>
PaddingResult padding_sensitivity(const Model<T>& m, const std::vector<int64_t>& ids, int64_t pad) {
    const Config& c = m.cfg;
    const int64_t S = int64_t(ids.size()), V = c.vocab_size;
    pad = std::min(pad, c.max_position - S);
    PaddingResult r;
    r.pad = pad;
    std::vector<int64_t> padded = ids;
    padded.insert(padded.end(), size_t(std::max<int64_t>(pad, 0)), c.pad_token_id);
    Activations<T> a, b;
    forward(m, ids.data(), 1, S, a);
    forward(m, padded.data(), 1, int64_t(padded.size()), b);
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const Tensor<T>& x = a.layers[size_t(l)].G;
        const Tensor<T>& y = b.layers[size_t(l)].G;
        double mx = 0;
        for (int64_t i = 0; i < x.numel(); ++i)
            mx = std::max(mx, std::abs(double(x[i]) - double(y[i])));
        r.max_dG.push_back(mx);
    }
    const T* la = a.logits.ptr() + (S - 1) * V;
    const T* lb = b.logits.ptr() + (S - 1) * V;
    for (int64_t v = 0; v < V; ++v)
        r.max_dlogit = std::max(r.max_dlogit, std::abs(double(la[v]) - double(lb[v])));
    return r;
}

template <typename T>
LossVsUnigram loss_vs_unigram(const Model<T>& m, const std::vector<int64_t>& tokens) {
    PLDR_REQUIRE(tokens.size() >= 2, "the held-out text has fewer than 2 tokens");
    const int64_t V = m.cfg.vocab_size, W = std::max<int64_t>(m.cfg.max_position, 2);
    check_inputs(m, tokens.data(), 1, 1);
    for (int64_t id : tokens)
        PLDR_REQUIRE(id >= 0 && id < V, "token id ", id, " outside the vocabulary");
    LossVsUnigram r;
    Activations<T> a;
    double nll = 0;
    for (size_t start = 0; start + 1 < tokens.size(); start += size_t(W - 1)) {
        const int64_t S = std::min<int64_t>(W, int64_t(tokens.size() - start));
        if (S < 2) break;
        forward(m, tokens.data() + start, 1, S, a);
        for (int64_t s = 0; s + 1 < S; ++s) {
            const T* row = a.logits.ptr() + s * V;
            double mx = -INFINITY;
            for (int64_t v = 0; v < V; ++v) mx = std::max(mx, double(row[v]));
            double z = 0;
            for (int64_t v = 0; v < V; ++v) z += std::exp(double(row[v]) - mx);
            nll += mx + std::log(z) - double(row[tokens[start + size_t(s) + 1]]);
            ++r.tokens;
        }
    }
    r.loss = nll / double(r.tokens);
    std::map<int64_t, int64_t> counts;
    for (size_t i = 1; i < tokens.size(); ++i) ++counts[tokens[i]];
    const double n = double(tokens.size() - 1);
    for (const auto& [id, k] : counts) r.unigram_entropy -= double(k) / n * std::log(double(k) / n);
    r.degenerate = r.loss >= 0.95 * r.unigram_entropy;
    return r;
}

#define PLDR_INSTANTIATE(T)                                                                        \
    template Deductive deductive_outputs<T>(const Model<T>&, const std::vector<int64_t>&);         \
    template std::vector<std::vector<double>> eps_g_after<T>(                                      \
        const Model<T>&, const std::vector<int64_t>&, int64_t);                                    \
    template std::vector<StepRecord> eps_g_steps<T>(const Model<T>&, const std::vector<int64_t>&,  \
                                                    int64_t);                                      \
    template ContinuationOrder continuation_order<T>(const Model<T>&, const std::vector<int64_t>&, \
                                                     int64_t, uint64_t, uint64_t);                 \
    template void block_vs_sequential<T>(const Model<T>&, const std::vector<ScoreRequest>&,        \
                                         BlockSeqGaps&);                                           \
    template void truthfulqa_gaps<T>(const Model<T>&, const Tokenizer&,                            \
                                     const std::vector<McItem>&, int64_t, BlockSeqGaps&);          \
    template double sdpa_identity_residual<T>(const Model<T>&, const std::vector<int64_t>&);       \
    template double absorption_residual<T>(const Model<T>&, const std::vector<int64_t>&);          \
    template PaddingResult padding_sensitivity<T>(const Model<T>&, const std::vector<int64_t>&,    \
                                                  int64_t);                                        \
    template LossVsUnigram loss_vs_unigram<T>(const Model<T>&, const std::vector<int64_t>&);
PLDR_INSTANTIATE(float)
PLDR_INSTANTIATE(double)
#undef PLDR_INSTANTIATE

}  // namespace pldr::audit
