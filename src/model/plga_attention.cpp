// PLGA attention, forward and backward side by side (see plga_attention.h), in the order of the
// equations of docs/plga.md §2: the metric learner (model/metric_learner.h), the operator G_LM
// (ops/plga.h), then the scores, the softmax and E·V of each head (ops/attention.h). Each
// backward reverses the forward above it. Shapes: B batch, S queries, Tk keys, H heads, D = dk,
// d = H·D; q/k/v live in [B,S,H,D] layout and the per-(b,h) matrices are strided views.
#include "model/plga_attention.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "core/parallel.h"
#include "core/zero.h"
#include "model/metric_learner.h"
#include "ops/attention.h"

namespace pldr {

namespace {

// ---- the operator: Z = W·A + b; A_LM = f(Z); A_P = c(A_LM, P); G = a·A_P + b_a, per (b,h) ----

// The operator's work in multiply-adds: W·A per (b,h), plus its element-wise passes (the positive
// map's exponential and the power, each worth tens of multiply-adds per element; counted as 64).
// Counting W·A alone kept the M config's operator (8 heads of 32 × 32) on one thread, 9 % of its
// 128-token prefill with the other thread idle.
inline int64_t operator_work(int64_t B, int64_t H, int64_t D) {
    return B * H * D * D * (D + 64);
}

// The operator's saved outputs Z, A_LM and A_P, sized for B·H pairs (G is the caller's).
template <typename T>
void operator_outputs(int64_t B, int64_t H, int64_t D, LayerActs<T>& la) {
    la.Z.resize({B, H, D, D});
    la.A_LM.resize({B, H, D, D});
    la.A_P.resize({B, H, D, D});
}

// One (b,h) pair's operator: head h's parameters at offset p = h·D², the pair's A and outputs
// at offset o = (b·H + h)·D².
template <typename T>
void operator_pair(const PlgaOptions& opt, const LayerView<T>& w, int64_t p, int64_t o,
                   LayerActs<T>& la) {
    plga_g_forward(
        opt, PlgaParams<const T>{w.W + p, w.b + p, w.P + p, w.a + p, w.ba + p}, la.A.ptr() + o,
        PlgaSaved<T>{la.Z.ptr() + o, la.A_LM.ptr() + o, la.A_P.ptr() + o, la.G.ptr() + o});
}

template <typename T>
void operator_forward(const Model<T>& m, const LayerView<T>& w, int64_t B, LayerActs<T>& la) {
    const Config& c = m.cfg;
    const int64_t H = c.num_heads, D = c.head_dim, DD = D * D;
    const PlgaOptions opt = plga_options(c);
    operator_outputs(B, H, D, la);
    parallel_for_2d(B, H, operator_work(B, H, D) > kParallelWork, [&](int64_t b, int64_t h) {
        operator_pair(opt, w, h * DD, (b * H + h) * DD, la);
    });
}

// Given dG (plus the extra dA_LM, dA_P of other losses), accumulates the operator's parameter
// gradients and returns dA [B,H,D,D].
template <typename T>
Tensor<T> operator_backward(const Model<T>& m, const LayerView<T>& w, const LayerActs<T>& la,
                            int64_t B, const Tensor<T>& dG, const DeductiveGrads<T>* extra,
                            LayerView<T>& gw) {
    const Config& c = m.cfg;
    const int64_t H = c.num_heads, D = c.head_dim, DD = D * D;
    const PlgaOptions opt = plga_options(c);
    Tensor<T> dA = zeros_on_team<T>({B, H, D, D});
    const T* xA_LM = (extra && extra->dA_LM.numel()) ? extra->dA_LM.ptr() : nullptr;
    const T* xA_P = (extra && extra->dA_P.numel()) ? extra->dA_P.ptr() : nullptr;
    parallel_for(H, operator_work(B, H, D) > kParallelWork, [&](int64_t h) {
        std::vector<T> sc(static_cast<size_t>(2 * DD));
        const int64_t p = h * DD;
        for (int64_t b = 0; b < B; ++b) {
            const int64_t o = (b * H + h) * DD;
            plga_g_backward(opt, PlgaParams<const T>{w.W + p, w.b + p, w.P + p, w.a + p, w.ba + p},
                            la.A.ptr() + o,
                            PlgaSaved<const T>{la.Z.ptr() + o, la.A_LM.ptr() + o, la.A_P.ptr() + o,
                                               la.G.ptr() + o},
                            PlgaOutGrads<T>{dG.ptr() + o, xA_LM ? xA_LM + o : nullptr,
                                            xA_P ? xA_P + o : nullptr},
                            dA.ptr() + o,
                            PlgaParams<T>{gw.W + p, gw.b + p, gw.P + p, gw.a + p, gw.ba + p},
                            sc.data());
        }
    });
    return dA;
}

// ---- a batched decode step: B sequences of one token, each with its own cache and operator ----

template <typename T>
void decode_step_forward(const Model<T>& m, int64_t l, int64_t B, const AttnInput<T>& in,
                         LayerActs<T>& la) {
    const Config& c = m.cfg;
    const LayerView<T>& w = m.w.layers[size_t(l)];
    const int64_t H = c.num_heads, D = c.head_dim, d = c.hidden_size, DD = D * D, HDD = H * DD;
    PLDR_CHECK(!in.mask && !in.key_ids && !in.K_cache && !in.V_cache && in.T_past == 0 &&
               !in.A_frozen && !in.A_LM_frozen && !in.A_P_frozen && !in.G_frozen);

    // The operator of each sequence: its frozen G, the model's fixed G, or recomputed from its
    // frozen A (all such sequences through the operator at once, as a batch of R).
    std::vector<const T*> G(static_cast<size_t>(B));
    std::vector<int64_t> rec;
    int64_t T_max = 0, work = 0;
    for (int64_t b = 0; b < B; ++b) {
        const DecodeSeq<T>& sq = in.seqs[b];
        PLDR_CHECK(sq.K_cache && sq.V_cache && sq.T_past >= 0);
        T_max = std::max(T_max, sq.T_past + 1);
        work += H * (sq.T_past + 1) * D;
        if (sq.G) {
            G[size_t(b)] = sq.G;
        } else if (!c.learned_g()) {
            G[size_t(b)] = m.G_fixed_layer(l);
        } else {
            PLDR_CHECK(sq.A);
            rec.push_back(b);
        }
    }
    const int64_t R = int64_t(rec.size());
    la.A.resize_for_overwrite({R, H, D, D});
    for (int64_t j = 0; j < R; ++j)
        std::copy(in.seqs[rec[size_t(j)]].A, in.seqs[rec[size_t(j)]].A + HDD, la.A.ptr() + j * HDD);
    la.G.resize_for_overwrite({R, H, D, D});
    if (R > 0) operator_forward(m, w, R, la);
    for (int64_t j = 0; j < R; ++j) G[size_t(rec[size_t(j)])] = la.G.ptr() + j * HDD;

    // Per (b,h): this token's key and value of head h join the sequence's cache at row T_past
    // (there, over the team: a new row's first write may fault a page in), then the same
    // products as a batch-1 decode step (mask None): Ep = (q·G)·Kᵀ / √dk over the sequence's
    // T_past + 1 keys, E = softmax(Ep), O = E·V. Balanced: a thread that finishes its pairs
    // takes the other's last ones.
    la.QG.resize_for_overwrite({B, H, 1, D});
    la.Ep.resize_for_overwrite({B, H, 1, T_max});
    la.E.resize_for_overwrite({B, H, 1, T_max});
    la.O.resize_for_overwrite({B, 1, d});
    const T scale = m.score_scale();
    const T* const* Gp = G.data();
    parallel_for_balanced(B * H, work > kParallelWork, [&](int64_t bh) {
        const int64_t b = bh / H, h = bh % H;
        const DecodeSeq<T>& sq = in.seqs[b];
        const int64_t Tk = sq.T_past + 1;
        const int64_t at = sq.T_past * d + h * D;
        std::copy(la.k.ptr() + b * d + h * D, la.k.ptr() + b * d + (h + 1) * D, sq.K_cache + at);
        std::copy(la.v.ptr() + b * d + h * D, la.v.ptr() + b * d + (h + 1) * D, sq.V_cache + at);
        const T* q = la.q.ptr() + b * d + h * D;
        T* qg = la.QG.ptr() + (b * H + h) * D;
        T* ep = la.Ep.ptr() + (b * H + h) * T_max;
        T* e = la.E.ptr() + (b * H + h) * T_max;
        query_row_attention(q, Gp[b] + h * DD, sq.K_cache + h * D, sq.V_cache + h * D, d, D, Tk,
                            Tk - 1, scale, false, nullptr, 0, qg, ep, e,
                            la.O.ptr() + b * d + h * D);
        std::fill(ep + Tk, ep + T_max, T(0));
        std::fill(e + Tk, e + T_max, T(0));
    });
}

}  // namespace

bool& prompt_in_few_regions() {
    static bool on = true;
    return on;
}

// ---- the attention: G, then Ep = (Q·G)·Kᵀ / √dk, E = softmax(Ep + mask·(−1e9)), O = E·V -----

template <typename T>
void plga_attention_forward(const Model<T>& m, int64_t l, int64_t B, int64_t S,
                            const AttnInput<T>& in, LayerActs<T>& la) {
    const Config& c = m.cfg;
    const LayerView<T>& w = m.w.layers[size_t(l)];
    const int64_t H = c.num_heads, D = c.head_dim, d = c.hidden_size;
    const int64_t DD = D * D;
    if (in.seqs) {
        PLDR_CHECK(S == 1);
        decode_step_forward(m, l, B, in, la);
        return;
    }

    // The operator G_LM per (b,h), at G_base + (b·H + h)·D². An inference forward with a
    // frozen operator (the G-cache's decode step, or a preset G; KeepActs::INFERENCE: no
    // activations kept) reads it where it lies. It used to copy it, and A, A_LM and A_P into
    // fresh allocations, per layer and token, only to drop them.
    const bool by_ref = in.G_frozen && in.keep == KeepActs::INFERENCE;
    if (by_ref)
        la.A = la.A_LM = la.A_P = la.G = Tensor<T>();
    else
        la.G.resize_for_overwrite({B, H, D, D});
    const T* const G_base = by_ref ? in.G_frozen : la.G.ptr();
    int64_t by_heads = 0;  // the learner's blocks, when the heads run in one region (below)
    if (by_ref) {
        // nothing to compute or copy
    } else if (in.G_frozen) {  // the G-cache (or a preset operator): skip the learner and operator
        auto frozen = [&](Tensor<T>& dst, const T* src) {
            if (src) dst = Tensor<T>({B, H, D, D}, Storage<T>(src, src + B * H * DD));
        };
        frozen(la.A, in.A_frozen);
        frozen(la.A_LM, in.A_LM_frozen);
        frozen(la.A_P, in.A_P_frozen);
        std::copy(in.G_frozen, in.G_frozen + B * H * DD, la.G.ptr());
    } else if (!c.learned_g()) {
        for (int64_t b = 0; b < B; ++b)
            std::copy(m.G_fixed_layer(l), m.G_fixed_layer(l) + H * DD, la.G.ptr() + b * H * DD);
    } else if (in.A_frozen) {
        la.A = Tensor<T>({B, H, D, D}, Storage<T>(in.A_frozen, in.A_frozen + B * H * DD));
        operator_forward(m, w, B, la);
    } else if (in.keep != KeepActs::INFERENCE) {
        metric_learner_forward(m, w, B, S, la.q.ptr(), la);
        if (in.keep == KeepActs::TRAINING) {
            // The backward's checkpoints: A0 with LN_A's statistics and each residual
            // unit's input (the unit's GLUs, sum and statistics are recomputed from it).
            la.A_ln = Tensor<T>();
            for (ResUnitActs<T>& ru : la.res) {
                ru.sum = Tensor<T>();
                ru.mean = Tensor<T>();
                ru.rstd = Tensor<T>();
            }
        }
        operator_forward(m, w, B, la);
    } else {  // only A is needed after this layer
        la.A0 = Tensor<T>();
        la.A_ln = Tensor<T>();
        la.lnA_mean = Tensor<T>();
        la.lnA_rstd = Tensor<T>();
        la.res.clear();
        // Where the learner's blocks are whole heads, one per thread (a prompt of B·H·D rows
        // within the blocks' size), the heads run in one region below, each thread through its
        // heads' Gram matrices, learner block, operators and attention.
        by_heads = prompt_in_few_regions() ? metric_learner_pair_blocks(c, B * H) : 0;
        if (!by_heads) {
            metric_learner_output(m, w, B, S, la.q.ptr(), la.A);
            operator_forward(m, w, B, la);
        }
    }

    // Keys and values: the past (KV-cache) followed by this chunk.
    const int64_t Tp = in.T_past, Tk = Tp + S;
    const T* K = la.k.ptr();
    const T* Vv = la.v.ptr();
    if (in.K_cache) {
        PLDR_CHECK(B == 1 && in.V_cache);
        K = in.K_cache;
        Vv = in.V_cache;
    } else {
        PLDR_CHECK(Tp == 0);
    }
    // This chunk's keys and values of head h join the cache at row Tp.
    auto cache_head = [&](int64_t h) {
        for (int64_t s = 0; s < S; ++s) {
            const int64_t from = s * d + h * D, to = (Tp + s) * d + h * D;
            std::copy(la.k.ptr() + from, la.k.ptr() + from + D, in.K_cache + to);
            std::copy(la.v.ptr() + from, la.v.ptr() + from + D, in.V_cache + to);
        }
    };
    if (in.K_cache && !by_heads) {
        std::copy(la.k.data.begin(), la.k.data.end(), in.K_cache + Tp * d);
        std::copy(la.v.data.begin(), la.v.data.end(), in.V_cache + Tp * d);
    }

    // Scores Ep = (Q·G)·Kᵀ / sqrt(dk); E = softmax(Ep + mask·(−1e9)); O = E·V. Only a forward
    // that keeps everything (audits, inspection) keeps Ep; training and plain inference do not
    // (the backward needs E only), and so run the causal blocks.
    const bool keep_ep = in.keep == KeepActs::ALL;
    la.QG.resize_for_overwrite({B, H, S, D});
    if (keep_ep)
        la.Ep.resize_for_overwrite({B, H, S, Tk});
    else
        la.Ep = Tensor<T>();
    la.E.resize_for_overwrite({B, H, S, Tk});
    la.O.resize_for_overwrite({B, S, d});
    const T scale = m.score_scale();
    auto attend = [&](int64_t b, int64_t h) {
        const int64_t bh = b * H + h;
        head_attention_forward(la.q.ptr() + b * S * d + h * D, d, G_base + bh * DD,
                               K + b * Tk * d + h * D, Vv + b * Tk * d + h * D, d, S, D, Tk, Tp,
                               scale, in.mask, in.key_ids ? in.key_ids + b * Tk : nullptr,
                               c.pad_token_id, la.QG.ptr() + bh * S * D,
                               keep_ep ? la.Ep.ptr() + bh * S * Tk : nullptr,
                               la.E.ptr() + bh * S * Tk, la.O.ptr() + b * S * d + h * D, d);
    };
    if (!by_heads) {
        parallel_for_2d(B, H, B * H * S * Tk * D > kParallelWork, attend);
        return;
    }
    // The heads in one region: block i of the learner's is pairs [i·per, (i+1)·per). The same
    // Gram products, learner block, operators and attention as the regions above run, each on
    // its own (b,h): the same bits.
    Tensor<T> A0;
    A0.resize_for_overwrite({B, H, D, D});
    la.A.resize_for_overwrite({B, H, D, D});
    operator_outputs(B, H, D, la);
    const PlgaOptions opt = plga_options(c);
    const int64_t per = B * H / by_heads;
#pragma omp parallel num_threads(int(by_heads))
    for (int64_t i = omp_get_thread_num(); i < by_heads; i += omp_get_num_threads()) {
        for (int64_t p = i * per; p < (i + 1) * per; ++p)
            gram_forward(la.q.ptr() + p / H * S * d + p % H * D, d, S, D, A0.ptr() + p * DD);
        metric_learner_output_rows(m, w, A0.ptr(), i * per * D, (i + 1) * per * D, la.A.ptr());
        for (int64_t p = i * per; p < (i + 1) * per; ++p) {
            operator_pair(opt, w, p % H * DD, p * DD, la);
            if (in.K_cache) cache_head(p % H);
            attend(p / H, p % H);
        }
    }
}

template <typename T>
void plga_attention_backward(const Model<T>& m, int64_t l, const LayerActs<T>& la, int64_t B,
                             int64_t S, const int64_t* key_ids, const DeductiveGrads<T>* extra,
                             const Tensor<T>& dO, LayerView<T>& gw, Tensor<T>& dq, Tensor<T>& dk,
                             Tensor<T>& dv, Tensor<T>* O_out) {
    const Config& c = m.cfg;
    const LayerView<T>& w = m.w.layers[size_t(l)];
    const int64_t H = c.num_heads, D = c.head_dim, d = c.hidden_size, DD = D * D, Tk = S;
    // A training forward kept neither E nor Q·G: recompute them per head (with O, if asked).
    const bool recompute = la.E.numel() == 0;
    PLDR_CHECK(!recompute || la.QG.numel() == 0);
    if (recompute && O_out) O_out->resize_for_overwrite({B, S, d});

    // O = E·V; E = softmax(Ep + mask); Ep = (Q·G)·Kᵀ / scale, per (b,h).
    dq = zeros_on_team<T>({B, S, d});
    dk = zeros_on_team<T>({B, S, d});
    dv = zeros_on_team<T>({B, S, d});
    Tensor<T> dG = zeros_on_team<T>({B, H, D, D});
    const T scale = m.score_scale();
    // Each thread's buffers, sized once per call (per head, allocating and zero-filling them was
    // 1–3 % of an M or S training step in memset and page faults).
    const bool par = B * H * S * Tk * D > kParallelWork;
    struct Scratch {
        std::vector<T> e, qg, o;  // the recomputed forward's
        AttentionGradScratch<T> grad;
    };
    std::vector<Scratch> scratch(size_t(team_for(B * H, par) ? omp_get_max_threads() : 1));
    parallel_for_2d(B, H, par, [&](int64_t b, int64_t h) {
        const int64_t bh = b * H + h;
        Scratch& sc = scratch[scratch.size() > 1 ? size_t(omp_get_thread_num()) : 0];
        const T* q = la.q.ptr() + b * S * d + h * D;
        const T* k = la.k.ptr() + b * Tk * d + h * D;
        const T* v = la.v.ptr() + b * Tk * d + h * D;
        const T* G = la.G.ptr() + bh * DD;
        const T* E = recompute ? nullptr : la.E.ptr() + bh * S * Tk;
        const T* QG = recompute ? nullptr : la.QG.ptr() + bh * S * D;
        if (recompute) {
            sc.e.resize(static_cast<size_t>(S * Tk));
            sc.qg.resize(static_cast<size_t>(S * D));
            if (!O_out) sc.o.resize(static_cast<size_t>(S * D));
            T* o = O_out ? O_out->ptr() + b * S * d + h * D : sc.o.data();
            head_attention_forward<T>(q, d, G, k, v, d, S, D, Tk, 0, scale, true,
                                      key_ids ? key_ids + b * Tk : nullptr, c.pad_token_id,
                                      sc.qg.data(), nullptr, sc.e.data(), o, O_out ? d : D);
            E = sc.e.data();
            QG = sc.qg.data();
        }
        head_attention_backward(q, k, v, d, G, E, QG, dO.ptr() + b * S * d + h * D, S, D, scale,
                                sc.grad, dq.ptr() + b * S * d + h * D,
                                dk.ptr() + b * Tk * d + h * D, dv.ptr() + b * Tk * d + h * D,
                                dG.ptr() + bh * DD);
    });
    if (!c.learned_g()) return;  // a fixed G is a constant

    if (extra && extra->dG.numel())
        for (int64_t i = 0; i < dG.numel(); ++i) dG[i] += extra->dG[i];
    Tensor<T> dA = operator_backward(m, w, la, B, dG, extra, gw);
    if (la.A0.numel()) {
        metric_learner_backward(m, w, la.q.ptr(), la, B, S, dA, gw, dq);
    } else {  // a forward that kept only A (KeepActs): recompute the learner from q
        // (each residual unit's GLUs once more, one unit at a time, inside the backward)
        LayerActs<T> ml;
        metric_learner_forward(m, w, B, S, la.q.ptr(), ml);
        metric_learner_backward(m, w, la.q.ptr(), ml, B, S, dA, gw, dq);
    }
}

#define PLDR_INSTANTIATE(T)                                                                \
    template void plga_attention_forward<T>(const Model<T>&, int64_t, int64_t, int64_t,    \
                                            const AttnInput<T>&, LayerActs<T>&);           \
    template void plga_attention_backward<T>(                                              \
        const Model<T>&, int64_t, const LayerActs<T>&, int64_t, int64_t, const int64_t*,   \
        const DeductiveGrads<T>*, const Tensor<T>&, LayerView<T>&, Tensor<T>&, Tensor<T>&, \
        Tensor<T>&, Tensor<T>*);
PLDR_INSTANTIATE(float)
PLDR_INSTANTIATE(double)
#undef PLDR_INSTANTIATE

}  // namespace pldr
