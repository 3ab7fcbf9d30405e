// One head of PLGA attention, forward and backward side by side (see attention.h). Shapes: S
// queries, Tk keys, D = dk; the rows of q, k, v and their gradients are strided views of
// [B,S,H,D] tensors.
#include "ops/attention.h"

#include <algorithm>
#include <limits>

#include "core/blas.h"
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

}  // namespace

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
void head_attention_forward(const T* q, int64_t ldq, const T* G, const T* k, const T* v,
                            int64_t ldkv, int64_t S, int64_t D, int64_t Tk, int64_t Tp, T scale,
                            bool mask, const int64_t* key_ids, int64_t pad, T* qg, T* ep, T* e,
                            T* o, int64_t ldo) {
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

template <typename T>
void head_attention_backward(const T* q, const T* k, const T* v, int64_t ld, const T* G, const T* E,
                             const T* QG, const T* dO, int64_t S, int64_t D, T scale,
                             AttentionGradScratch<T>& scratch, T* dq, T* dk, T* dv, T* dG) {
    const int64_t Tk = S;
    scratch.dE.resize(static_cast<size_t>(S * Tk));
    scratch.dQG.resize(static_cast<size_t>(S * D));
    scratch.dEp.assign(static_cast<size_t>(S * Tk), T(0));  // softmax_backward accumulates
    std::vector<T>&dE = scratch.dE, &dEp = scratch.dEp, &dQG = scratch.dQG;
    // The causal blocks (CausalBlocks): block r's rows see keys [0, n1) only, or all of them
    // where E is not exactly 0 past n1 (a forward whose masked scores were not negligible).
    // dV and dK accumulate over the blocks.
    const CausalBlocks cb(S, Tk, 0);
    std::vector<int64_t>& n1 = scratch.keys;
    n1.resize(size_t(cb.count));
    for (int64_t r = 0; r < cb.count; ++r) {
        const int64_t r0 = cb.row0(r), r1 = cb.row1(r);
        int64_t n = cb.keys(r);
        for (int64_t i = r0; i < r1 && n < Tk; ++i)
            if (!std::all_of(E + i * Tk + n, E + (i + 1) * Tk, [](T x) { return x == T(0); }))
                n = Tk;
        n1[size_t(r)] = n;
        // dE = dO·Vᵀ (0 past n1: y·(dE − Σ) is ±0 there either way); dV += Eᵀ·dO
        gemm(false, true, r1 - r0, n, D, T(1), dO + r0 * ld, ld, v, ld, T(0), dE.data() + r0 * Tk,
             Tk);
        for (int64_t i = r0; i < r1; ++i)
            std::fill(dE.data() + i * Tk + n, dE.data() + (i + 1) * Tk, T(0));
        gemm(true, false, n, D, r1 - r0, T(1), E + r0 * Tk, Tk, dO + r0 * ld, ld, T(1), dv, ld);
    }
    softmax_backward(dEp.data(), dE.data(), E, S, Tk, int64_t(0));
    for (auto& x : dEp) x /= scale;
    for (int64_t r = 0; r < cb.count; ++r) {  // dQG = dEp·K; dK += dEpᵀ·QG
        const int64_t r0 = cb.row0(r), r1 = cb.row1(r), n = n1[size_t(r)];
        gemm(false, false, r1 - r0, D, n, T(1), dEp.data() + r0 * Tk, Tk, k, ld, T(0),
             dQG.data() + r0 * D, D);
        gemm(true, false, n, D, r1 - r0, T(1), dEp.data() + r0 * Tk, Tk, QG + r0 * D, D, T(1), dk,
             ld);
    }
    gemm(false, true, S, D, D, T(1), dQG.data(), D, G, D, T(0), dq, ld);  // dQ = dQG·Gᵀ
    gemm(true, false, D, D, S, T(1), q, ld, dQG.data(), D, T(0), dG, D);  // dG = Qᵀ·dQG
}

template <typename T>
void gram_forward(const T* q, int64_t ldq, int64_t S, int64_t D, T* A0) {
    gemm(true, false, D, D, S, T(1), q, ldq, q, ldq, T(0), A0, D);
}

template <typename T>
void gram_backward(T* dq, const T* q, int64_t ldq, const T* dA0, int64_t S, int64_t D) {
    std::vector<T> sym(static_cast<size_t>(D * D));
    for (int64_t i = 0; i < D; ++i)
        for (int64_t j = 0; j < D; ++j) sym[i * D + j] = dA0[i * D + j] + dA0[j * D + i];
    gemm(false, false, S, D, D, T(1), q, ldq, sym.data(), D, T(1), dq, ldq);
}

#define PLDR_INSTANTIATE(T)                                                                        \
    template void head_attention_forward<T>(const T*, int64_t, const T*, const T*, const T*,       \
                                            int64_t, int64_t, int64_t, int64_t, int64_t, T, bool,  \
                                            const int64_t*, int64_t, T*, T*, T*, T*, int64_t);     \
    template void query_row_attention<T>(const T*, const T*, const T*, const T*, int64_t, int64_t, \
                                         int64_t, int64_t, T, bool, const int64_t*, int64_t, T*,   \
                                         T*, T*, T*);                                              \
    template void head_attention_backward<T>(const T*, const T*, const T*, int64_t, const T*,      \
                                             const T*, const T*, const T*, int64_t, int64_t, T,    \
                                             AttentionGradScratch<T>&, T*, T*, T*, T*);            \
    template void gram_forward<T>(const T*, int64_t, int64_t, int64_t, T*);                        \
    template void gram_backward<T>(T*, const T*, int64_t, const T*, int64_t, int64_t);
PLDR_INSTANTIATE(float)
PLDR_INSTANTIATE(double)
#undef PLDR_INSTANTIATE

}  // namespace pldr
