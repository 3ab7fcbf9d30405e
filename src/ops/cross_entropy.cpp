// The masked cross-entropy (spec §5.1), forward, backward and fused.
#include "ops/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/parallel.h"
#include "core/vmath.h"

namespace pldr {

template <typename T>
double cross_entropy_forward(T* ce_rows, int64_t* n_scored, int64_t* n_correct, const T* logits,
                             const int64_t* targets, int64_t N, int64_t V, int64_t ignore_id) {
    // Rows in parallel (each row's arithmetic is unchanged), then the scored rows summed in
    // row order as before, so the result does not depend on the thread count.
    std::vector<T> ce(static_cast<size_t>(N));
    std::vector<char> hit(static_cast<size_t>(N));
#pragma omp parallel if (N * V > 65536)
    {
        std::vector<T> ex;  // float32: exp(x − max) of one row (vectorized, core/vmath.h)
        if constexpr (std::is_same_v<T, float>) ex.resize(static_cast<size_t>(V));
#pragma omp for
        for (int64_t n = 0; n < N; ++n) {
            const T* x = logits + n * V;
            int64_t am = 0;
            for (int64_t v = 1; v < V; ++v)
                if (x[v] > x[am]) am = v;
            T mx = x[am];
            T s = 0;
            if constexpr (std::is_same_v<T, float>)
                s = vmath::exp_shifted_sum(x, mx, ex.data(), V);
            else
                for (int64_t v = 0; v < V; ++v) s += std::exp(x[v] - mx);
            const int64_t t = targets[n];
            ce[size_t(n)] = -((x[t] - mx) - std::log(s));
            hit[size_t(n)] = am == t;
        }
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
            if constexpr (std::is_same_v<T, float>)
                s = vmath::exp_shifted_sum(x, mx, ex.data(), V);
            else
                for (int64_t v = 0; v < V; ++v) s += (ex[size_t(v)] = std::exp(x[v] - mx));
            for (int64_t v = 0; v < V; ++v) d[v] += scale * (ex[size_t(v)] / s);
            d[t] -= scale;
        }
    }
}

template <typename T>
void cross_entropy_fused_rows(T* dlogits, T* ce_rows, char* hit_rows, const T* logits,
                              const int64_t* targets, int64_t N, int64_t V, int64_t ignore_id,
                              T scale) {
    // The arithmetic of cross_entropy_forward and cross_entropy_backward (into a zeroed dlogits),
    // row by row, with each exp(x − max) evaluated once and kept in the gradient row.
    parallel_for(N, N * V > 65536, [&](int64_t n) {
        const T* x = logits + n * V;
        T* d = dlogits + n * V;
        int64_t am = 0;
        for (int64_t v = 1; v < V; ++v)
            if (x[v] > x[am]) am = v;
        const T mx = x[am];
        const int64_t t = targets[n];
        const T xt = x[t];  // read before d (which may be x itself) is written
        T s = 0;
        if constexpr (std::is_same_v<T, float>)
            s = vmath::exp_shifted_sum(x, mx, d, V);
        else
            for (int64_t v = 0; v < V; ++v) s += (d[v] = std::exp(x[v] - mx));
        ce_rows[n] = -((xt - mx) - std::log(s));
        hit_rows[n] = am == t;
        if (t == ignore_id) {
            std::fill(d, d + V, T(0));
            return;
        }
        for (int64_t v = 0; v < V; ++v) d[v] = T(0) + scale * (d[v] / s);
        d[t] -= scale;
    });
}

template <typename T>
double cross_entropy_fused(T* dlogits, int64_t* n_correct, const T* logits, const int64_t* targets,
                           int64_t N, int64_t V, int64_t ignore_id, T scale) {
    std::vector<T> ce(static_cast<size_t>(N));
    std::vector<char> hit(static_cast<size_t>(N));
    cross_entropy_fused_rows(dlogits, ce.data(), hit.data(), logits, targets, N, V, ignore_id,
                             scale);
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

#define PLDR_INSTANTIATE(T)                                                                     \
    template double cross_entropy_forward<T>(T*, int64_t*, int64_t*, const T*, const int64_t*,  \
                                             int64_t, int64_t, int64_t);                        \
    template void cross_entropy_backward<T>(T*, const T*, const int64_t*, int64_t, int64_t,     \
                                            int64_t, T);                                        \
    template double cross_entropy_fused<T>(T*, int64_t*, const T*, const int64_t*, int64_t,     \
                                           int64_t, int64_t, T);                                \
    template void cross_entropy_fused_rows<T>(T*, T*, char*, const T*, const int64_t*, int64_t, \
                                              int64_t, int64_t, T);
PLDR_INSTANTIATE(float)
PLDR_INSTANTIATE(double)
#undef PLDR_INSTANTIATE

}  // namespace pldr
