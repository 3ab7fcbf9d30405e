// PLGA attention, forward and backward side by side (see plga_attention.h), in the order of the
// equations of docs/plga.md §2: the metric learner (model/metric_learner.h), the operator G_LM,
// then the scores, the softmax and E·V. Each backward reverses the forward above
// it. Shapes: B batch, S queries, Tk keys, H heads, D = dk, d = H·D; q/k/v live in [B,S,H,D]
// layout and the per-(b,h) matrices are strided views.
#include "model/plga_attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/blas.h"
#include "core/parallel.h"
#include "model/metric_learner.h"
#include "ops/plga.h"
#include "ops/softmax.h"

namespace pldr {

namespace {

// Σ a[i]·b[i] in 8 lanes (vectorizable without reassociating), summed in a fixed order.
template <typename T>
inline T dot_lanes(const T* a, const T* b, int64_t n) {
    T s[8] = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; ++k) s[k] += a[i + k] * b[i + k];
    T t = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
    for (; i < n; ++i) t += a[i] * b[i];
    return t;
}

// y += alpha·x.
template <typename T>
inline void axpy(T alpha, const T* x, T* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// The query rows of a causal head in blocks of 64: block b's rows see the keys [0, keys(b)) only
// (past Tp + its last row every key is masked), so the products of the scores, E·V and their
// gradients skip the masked corner: about 3/8 of them at 256 queries. The blocks end on
// multiples of 16, so every row's live columns, rounded up as the softmax rounds them
// (ops/softmax.h), lie inside its block's keys.
struct CausalBlocks {
    static constexpr int64_t kRows = 64;
    int64_t S, Tk, Tp, count;
    CausalBlocks(int64_t S_, int64_t Tk_, int64_t Tp_)
        : S(S_), Tk(Tk_), Tp(Tp_), count((S_ + kRows - 1) / kRows) {}
    int64_t row0(int64_t b) const { return b * kRows; }
    int64_t row1(int64_t b) const { return std::min(S, (b + 1) * kRows); }
    int64_t keys(int64_t b) const { return std::min(Tk, Tp + row1(b)); }
};

// One head of the scores and the output, as every full forward computes them (the training
// backward recomputes with this same code, so it gets the same bits): qg = q·G [S,D]; the scores
// (q·G)·Kᵀ / √dk [S,Tk] into ep, or into e when ep is null; e = softmax(scores + mask·(−1e9))
// with the causal mask (keys after Tp + i) and the padding mask (key_ids[j] == pad, key_ids
// null: none); o = e·V [S,D] with row stride ldo. q has row stride ldq, k and v ldkv.
// One query row (a decode step, S = 1) is plain loops: a GEMM library's call and packing cost
// more than products of one row (measured: 3 sgemm calls per head were a tenth of an M-config
// decode step). The batched decode step (decode_step_forward) runs this same code per sequence.
template <typename T>
void query_row_attention(const T* q, const T* G, const T* k, const T* v, int64_t ldkv, int64_t D,
                         int64_t Tk, int64_t Tp, T scale, bool mask, const int64_t* key_ids,
                         int64_t pad, T* qg, T* ep, T* e, T* o) {
    std::fill(qg, qg + D, T(0));
    for (int64_t i = 0; i < D; ++i) axpy(q[i], G + i * D, qg, D);  // qg = q·G
    T* sc = ep ? ep : e;
    for (int64_t j = 0; j < Tk; ++j) sc[j] = dot_lanes(qg, k + j * ldkv, D);  // (q·G)·Kᵀ
    for (int64_t j = 0; j < Tk; ++j) {
        T x = sc[j] /= scale;
        if (mask && (j > Tp || (key_ids && key_ids[j] == pad))) x += T(-1e9);
        e[j] = x;
    }
    softmax_forward(e, e, 1, Tk);
    std::fill(o, o + D, T(0));
    for (int64_t j = 0; j < Tk; ++j) axpy(e[j], v + j * ldkv, o, D);  // O = E·V
}

template <typename T>
void head_attention(const T* q, int64_t ldq, const T* G, const T* k, const T* v, int64_t ldkv,
                    int64_t S, int64_t D, int64_t Tk, int64_t Tp, T scale, bool mask,
                    const int64_t* key_ids, int64_t pad, T* qg, T* ep, T* e, T* o, int64_t ldo) {
    if (S == 1) {
        query_row_attention(q, G, k, v, ldkv, D, Tk, Tp, scale, mask, key_ids, pad, qg, ep, e, o);
        return;
    }
    gemm(false, false, S, D, D, T(1), q, ldq, G, D, T(0), qg, D);
    if (!ep && mask) {  // no scores to keep: the causal blocks only
        const CausalBlocks cb(S, Tk, Tp);
        for (int64_t b = 0; b < cb.count; ++b) {
            const int64_t r0 = cb.row0(b), r1 = cb.row1(b), n1 = cb.keys(b);
            gemm(false, true, r1 - r0, n1, D, T(1), qg + r0 * D, D, k, ldkv, T(0), e + r0 * Tk, Tk);
            for (int64_t i = r0; i < r1; ++i) {
                T* row = e + i * Tk;
                for (int64_t j = 0; j < n1; ++j) {
                    T x = row[j] / scale;
                    if (j > Tp + i || (key_ids && key_ids[j] == pad)) x += T(-1e9);
                    row[j] = x;
                }
                // keys no row of the block sees: exp gives exactly 0 for them
                std::fill(row + n1, row + Tk, -std::numeric_limits<T>::infinity());
            }
        }
        softmax_forward(e, e, S, Tk, Tp);  // the causal part: see ops/softmax.h
        for (int64_t b = 0; b < cb.count; ++b) {
            const int64_t r0 = cb.row0(b), r1 = cb.row1(b);
            gemm(false, false, r1 - r0, D, cb.keys(b), T(1), e + r0 * Tk, Tk, v, ldkv, T(0),
                 o + r0 * ldo, ldo);
        }
        return;
    }
    T* sc = ep ? ep : e;
    gemm(false, true, S, Tk, D, T(1), qg, D, k, ldkv, T(0), sc, Tk);
    for (int64_t i = 0; i < S * Tk; ++i) sc[i] /= scale;
    for (int64_t i = 0; i < S; ++i) {
        for (int64_t j = 0; j < Tk; ++j) {
            T x = sc[i * Tk + j];
            if (mask && (j > Tp + i || (key_ids && key_ids[j] == pad))) x += T(-1e9);
            e[i * Tk + j] = x;
        }
    }
    softmax_forward(e, e, S, Tk, mask ? Tp : -1);  // the causal part: see ops/softmax.h
    gemm(false, false, S, D, Tk, T(1), e, Tk, v, ldkv, T(0), o, ldo);
}

// ---- the operator: Z = W·A + b; A_LM = f(Z); A_P = c(A_LM, P); G = a·A_P + b_a, per (b,h) ----

// The operator's work in multiply-adds: W·A per (b,h), plus its element-wise passes (the positive
// map's exponential and the power, each worth tens of multiply-adds per element; counted as 64).
// Counting W·A alone kept the M config's operator (8 heads of 32 × 32) on one thread, 9 % of its
// 128-token prefill with the other thread idle.
inline int64_t operator_work(int64_t B, int64_t H, int64_t D) {
    return B * H * D * D * (D + 64);
}

template <typename T>
void operator_forward(const Model<T>& m, const LayerView<T>& w, int64_t B, LayerActs<T>& la) {
    const Config& c = m.cfg;
    const int64_t H = c.num_heads, D = c.head_dim, DD = D * D;
    const PlgaOptions opt = plga_options(c);
    la.Z.resize({B, H, D, D});
    la.A_LM.resize({B, H, D, D});
    la.A_P.resize({B, H, D, D});
    parallel_for_2d(B, H, operator_work(B, H, D) > kParallelWork, [&](int64_t b, int64_t h) {
        const int64_t o = (b * H + h) * DD, p = h * DD;
        plga_g_forward(
            opt, PlgaParams<const T>{w.W + p, w.b + p, w.P + p, w.a + p, w.ba + p}, la.A.ptr() + o,
            PlgaSaved<T>{la.Z.ptr() + o, la.A_LM.ptr() + o, la.A_P.ptr() + o, la.G.ptr() + o});
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
    Tensor<T> dA({B, H, D, D});
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

    // This token's key and value join each sequence's cache at row T_past.
    for (int64_t b = 0; b < B; ++b) {
        const DecodeSeq<T>& sq = in.seqs[b];
        std::copy(la.k.ptr() + b * d, la.k.ptr() + (b + 1) * d, sq.K_cache + sq.T_past * d);
        std::copy(la.v.ptr() + b * d, la.v.ptr() + (b + 1) * d, sq.V_cache + sq.T_past * d);
    }

    // Per (b,h) the same products as a batch-1 decode step (mask None): Ep = (q·G)·Kᵀ / √dk
    // over the sequence's T_past + 1 keys, E = softmax(Ep), O = E·V.
    la.QG.resize_for_overwrite({B, H, 1, D});
    la.Ep.resize_for_overwrite({B, H, 1, T_max});
    la.E.resize_for_overwrite({B, H, 1, T_max});
    la.O.resize_for_overwrite({B, 1, d});
    const T scale = m.score_scale();
    const T* const* Gp = G.data();
    parallel_for_2d(B, H, work > kParallelWork, [&](int64_t b, int64_t h) {
        const DecodeSeq<T>& sq = in.seqs[b];
        const int64_t Tk = sq.T_past + 1;
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
    } else {
        if (in.A_frozen) {
            la.A = Tensor<T>({B, H, D, D}, Storage<T>(in.A_frozen, in.A_frozen + B * H * DD));
        } else {
            if (in.keep == KeepActs::INFERENCE) {  // only A is needed after this layer
                la.A0 = Tensor<T>();
                la.A_ln = Tensor<T>();
                la.lnA_mean = Tensor<T>();
                la.lnA_rstd = Tensor<T>();
                la.res.clear();
                metric_learner_output(m, w, B, S, la.q.ptr(), la.A);
            } else {
                metric_learner_forward(m, w, B, S, la.q.ptr(), la);
            }
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
        }
        operator_forward(m, w, B, la);
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
    parallel_for_2d(B, H, B * H * S * Tk * D > kParallelWork, [&](int64_t b, int64_t h) {
        const int64_t bh = b * H + h;
        head_attention(la.q.ptr() + b * S * d + h * D, d, G_base + bh * DD, K + b * Tk * d + h * D,
                       Vv + b * Tk * d + h * D, d, S, D, Tk, Tp, scale, in.mask,
                       in.key_ids ? in.key_ids + b * Tk : nullptr, c.pad_token_id,
                       la.QG.ptr() + bh * S * D, keep_ep ? la.Ep.ptr() + bh * S * Tk : nullptr,
                       la.E.ptr() + bh * S * Tk, la.O.ptr() + b * S * d + h * D, d);
    });
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
    dq = Tensor<T>({B, S, d});
    dk = Tensor<T>({B, S, d});
    dv = Tensor<T>({B, S, d});
    Tensor<T> dG({B, H, D, D});
    const T scale = m.score_scale();
    // Each thread's buffers, sized once per call (per head, allocating and zero-filling them was
    // 1–3 % of an M or S training step in memset and page faults).
    const bool par = B * H * S * Tk * D > kParallelWork;
    struct Scratch {
        std::vector<T> e, qg, o, dE, dEp, dQG;
        std::vector<int64_t> keys;
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
            head_attention<T>(q, d, G, k, v, d, S, D, Tk, 0, scale, true,
                              key_ids ? key_ids + b * Tk : nullptr, c.pad_token_id, sc.qg.data(),
                              nullptr, sc.e.data(), o, O_out ? d : D);
            E = sc.e.data();
            QG = sc.qg.data();
        }
        const T* dOh = dO.ptr() + b * S * d + h * D;
        sc.dE.resize(static_cast<size_t>(S * Tk));
        sc.dQG.resize(static_cast<size_t>(S * D));
        sc.dEp.assign(static_cast<size_t>(S * Tk), T(0));  // softmax_backward accumulates
        std::vector<T>&dE = sc.dE, &dEp = sc.dEp, &dQG = sc.dQG;
        // The causal blocks (CausalBlocks): block r's rows see keys [0, n1) only, or all of them
        // where E is not exactly 0 past n1 (a forward whose masked scores were not negligible).
        // dV and dK accumulate over the blocks (their tensors start at zero).
        const CausalBlocks cb(S, Tk, 0);
        std::vector<int64_t>& n1 = sc.keys;
        n1.resize(size_t(cb.count));
        for (int64_t r = 0; r < cb.count; ++r) {
            const int64_t r0 = cb.row0(r), r1 = cb.row1(r);
            int64_t n = cb.keys(r);
            for (int64_t i = r0; i < r1 && n < Tk; ++i)
                if (!std::all_of(E + i * Tk + n, E + (i + 1) * Tk, [](T x) { return x == T(0); }))
                    n = Tk;
            n1[size_t(r)] = n;
            // dE = dO·Vᵀ (0 past n1: y·(dE − Σ) is ±0 there either way); dV += Eᵀ·dO
            gemm(false, true, r1 - r0, n, D, T(1), dOh + r0 * d, d, v, d, T(0), dE.data() + r0 * Tk,
                 Tk);
            for (int64_t i = r0; i < r1; ++i)
                std::fill(dE.data() + i * Tk + n, dE.data() + (i + 1) * Tk, T(0));
            gemm(true, false, n, D, r1 - r0, T(1), E + r0 * Tk, Tk, dOh + r0 * d, d, T(1),
                 dv.ptr() + b * Tk * d + h * D, d);
        }
        softmax_backward(dEp.data(), dE.data(), E, S, Tk, int64_t(0));
        for (auto& x : dEp) x /= scale;
        for (int64_t r = 0; r < cb.count; ++r) {  // dQG = dEp·K; dK += dEpᵀ·QG
            const int64_t r0 = cb.row0(r), r1 = cb.row1(r), n = n1[size_t(r)];
            gemm(false, false, r1 - r0, D, n, T(1), dEp.data() + r0 * Tk, Tk, k, d, T(0),
                 dQG.data() + r0 * D, D);
            gemm(true, false, n, D, r1 - r0, T(1), dEp.data() + r0 * Tk, Tk, QG + r0 * D, D, T(1),
                 dk.ptr() + b * Tk * d + h * D, d);
        }
        gemm(false, true, S, D, D, T(1), dQG.data(), D, G, D, T(0), dq.ptr() + b * S * d + h * D,
             d);  // dQ = dQG·Gᵀ
        gemm(true, false, D, D, S, T(1), q, d, dQG.data(), D, T(0), dG.ptr() + bh * DD,
             D);  // dG = Qᵀ·dQG
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
