// The PLGA core operator G_LM(A) (spec §1.8) and the masked cross-entropy, forward and backward.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/blas.h"
#include "ops/ops.h"

namespace pldr {

namespace {

template <typename T>
void plga_g_eval(T* Z, T* A_LM, T* A_P, T* G, const T* A, const T* W, const T* b, const T* P,
                 const T* a, const T* ba, int64_t D) {
    const int64_t DD = D * D;
    gemm(false, false, D, D, D, T(1), W, D, A, D, T(0), Z, D);  // Z = W·A
    for (int64_t i = 0; i < DD; ++i) {
        Z[i] += b[i];
        A_LM[i] = Z[i] * silu(Z[i]) + T(1e-9);  // iSwiGLU(x) = x·silu(x), then the floor
        A_P[i] = std::pow(A_LM[i], P[i]);
    }
    gemm(false, false, D, D, D, T(1), a, D, A_P, D, T(0), G, D);  // G = a·A_P
    for (int64_t i = 0; i < DD; ++i) G[i] += ba[i];
}

}  // namespace

template <typename T>
void plga_g_forward(T* Z, T* A_LM, T* A_P, T* G, const T* A, const T* W, const T* b, const T* P,
                    const T* a, const T* ba, int64_t D) {
    if constexpr (std::is_same_v<T, double>) {
        plga_g_eval(Z, A_LM, A_P, G, A, W, b, P, a, ba, D);
    } else {
        // float32: the operator is evaluated in double and rounded once per output. Many A_LM
        // entries sit near the 1e-9 floor, and A_P = A_LM^P amplifies every relative error of
        // those tiny entries: float32 rounding inside W·A + b made our float32 A_P 3× less
        // accurate than the reference's on the golden b_small model (1.35e-4 vs 4.5e-5 of
        // max|A_P|). The D×D work per head is negligible next to the projections.
        const size_t DD = size_t(D * D);
        std::vector<double> buf(11 * DD);
        double* in[7] = {};
        const T* src[7] = {A, W, b, P, a, ba, nullptr};
        for (int i = 0; i < 6; ++i) {
            in[i] = buf.data() + i * DD;
            std::copy(src[i], src[i] + DD, in[i]);
        }
        double *z = buf.data() + 6 * DD, *alm = z + DD, *ap = alm + DD, *g = ap + DD;
        plga_g_eval(z, alm, ap, g, in[0], in[1], in[2], in[3], in[4], in[5], D);
        for (size_t i = 0; i < DD; ++i) {
            Z[i] = T(z[i]);
            A_LM[i] = T(alm[i]);
            A_P[i] = T(ap[i]);
            G[i] = T(g[i]);
        }
    }
}

template <typename T>
void plga_g_backward(T* dA, T* dW, T* db, T* dP, T* da, T* dba, const T* dG, const T* dA_LM_extra,
                     const T* dA_P_extra, const T* A, const T* Z, const T* A_LM, const T* A_P,
                     const T* W, const T* P, const T* a, int64_t D, T* scratch) {
    const int64_t DD = D * D;
    T* dAp = scratch;
    T* dZ = scratch + DD;
    for (int64_t i = 0; i < DD; ++i) dba[i] += dG[i];
    gemm(false, true, D, D, D, T(1), dG, D, A_P, D, T(1), da, D);  // da += dG·A_Pᵀ
    gemm(true, false, D, D, D, T(1), a, D, dG, D, T(0), dAp, D);   // dA_P = aᵀ·dG
    for (int64_t i = 0; i < DD; ++i) {
        T dap = dAp[i] + (dA_P_extra ? dA_P_extra[i] : T(0));
        // d(x^p)/dx = p·x^(p−1) (as torch evaluates it); d(x^p)/dp = x^p·log x.
        T dalm = dap * (P[i] * std::pow(A_LM[i], P[i] - T(1)));
        if (dA_LM_extra) dalm += dA_LM_extra[i];
        dP[i] += dap * (A_P[i] * std::log(A_LM[i]));
        const T z = Z[i];
        dZ[i] = dalm * (silu(z) + z * silu_grad(z));
    }
    gemm(false, true, D, D, D, T(1), dZ, D, A, D, T(1), dW, D);  // dW += dZ·Aᵀ
    for (int64_t i = 0; i < DD; ++i) db[i] += dZ[i];
    gemm(true, false, D, D, D, T(1), W, D, dZ, D, T(1), dA, D);  // dA += Wᵀ·dZ
}

template <typename T>
double cross_entropy_forward(T* ce_rows, int64_t* n_scored, int64_t* n_correct, const T* logits,
                             const int64_t* targets, int64_t N, int64_t V, int64_t ignore_id) {
    // Rows in parallel (each row's arithmetic is unchanged), then the scored rows summed in
    // row order as before, so the result does not depend on the thread count.
    std::vector<T> ce(static_cast<size_t>(N));
    std::vector<char> hit(static_cast<size_t>(N));
#pragma omp parallel for if (N * V > 65536)
    for (int64_t n = 0; n < N; ++n) {
        const T* x = logits + n * V;
        int64_t am = 0;
        for (int64_t v = 1; v < V; ++v)
            if (x[v] > x[am]) am = v;
        T mx = x[am];
        T s = 0;
        for (int64_t v = 0; v < V; ++v) s += std::exp(x[v] - mx);
        const int64_t t = targets[n];
        ce[size_t(n)] = -((x[t] - mx) - std::log(s));
        hit[size_t(n)] = am == t;
    }
    double total = 0;
    int64_t scored = 0, correct = 0;
    for (int64_t n = 0; n < N; ++n) {
        if (ce_rows) ce_rows[n] = ce[size_t(n)];
        if (targets[n] != ignore_id) {
            total += double(ce[size_t(n)]);
            ++scored;
            if (hit[size_t(n)]) ++correct;
        }
    }
    if (n_scored) *n_scored = scored;
    if (n_correct) *n_correct = correct;
    return total;
}

template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const int64_t* targets, int64_t N,
                            int64_t V, int64_t ignore_id, T scale) {
#pragma omp parallel if (N * V > 65536)
    {
        std::vector<T> ex(static_cast<size_t>(V));  // exp(x − max) of one row, computed once
#pragma omp for
        for (int64_t n = 0; n < N; ++n) {
            const int64_t t = targets[n];
            if (t == ignore_id) continue;
            const T* x = logits + n * V;
            T* d = dlogits + n * V;
            T mx = *std::max_element(x, x + V);
            T s = 0;
            for (int64_t v = 0; v < V; ++v) s += (ex[size_t(v)] = std::exp(x[v] - mx));
            for (int64_t v = 0; v < V; ++v) d[v] += scale * (ex[size_t(v)] / s);
            d[t] -= scale;
        }
    }
}

template <typename T>
double cross_entropy_fused(T* dlogits, int64_t* n_correct, const T* logits, const int64_t* targets,
                           int64_t N, int64_t V, int64_t ignore_id, T scale) {
    // The arithmetic of cross_entropy_forward and cross_entropy_backward (into a zeroed dlogits),
    // row by row, with each exp(x − max) evaluated once and kept in the gradient row.
    std::vector<T> ce(static_cast<size_t>(N));
    std::vector<char> hit(static_cast<size_t>(N));
#pragma omp parallel for if (N * V > 65536)
    for (int64_t n = 0; n < N; ++n) {
        const T* x = logits + n * V;
        T* d = dlogits + n * V;
        int64_t am = 0;
        for (int64_t v = 1; v < V; ++v)
            if (x[v] > x[am]) am = v;
        const T mx = x[am];
        T s = 0;
        for (int64_t v = 0; v < V; ++v) s += (d[v] = std::exp(x[v] - mx));
        const int64_t t = targets[n];
        ce[size_t(n)] = -((x[t] - mx) - std::log(s));
        hit[size_t(n)] = am == t;
        if (t == ignore_id) {
            std::fill(d, d + V, T(0));
            continue;
        }
        for (int64_t v = 0; v < V; ++v) d[v] = T(0) + scale * (d[v] / s);
        d[t] -= scale;
    }
    double total = 0;
    int64_t correct = 0;
    for (int64_t n = 0; n < N; ++n)
        if (targets[n] != ignore_id) {
            total += double(ce[size_t(n)]);
            if (hit[size_t(n)]) ++correct;
        }
    if (n_correct) *n_correct = correct;
    return total;
}

#define PLDR_INSTANTIATE(T)                                                                      \
    template void plga_g_forward<T>(T*, T*, T*, T*, const T*, const T*, const T*, const T*,      \
                                    const T*, const T*, int64_t);                                \
    template void plga_g_backward<T>(T*, T*, T*, T*, T*, T*, const T*, const T*, const T*,       \
                                     const T*, const T*, const T*, const T*, const T*, const T*, \
                                     const T*, int64_t, T*);                                     \
    template double cross_entropy_forward<T>(T*, int64_t*, int64_t*, const T*, const int64_t*,   \
                                             int64_t, int64_t, int64_t);                         \
    template void cross_entropy_backward<T>(T*, const T*, const int64_t*, int64_t, int64_t,      \
                                            int64_t, T);                                         \
    template double cross_entropy_fused<T>(T*, int64_t*, const T*, const int64_t*, int64_t,      \
                                           int64_t, int64_t, T);
PLDR_INSTANTIATE(float)
PLDR_INSTANTIATE(double)
#undef PLDR_INSTANTIATE

}  // namespace pldr
