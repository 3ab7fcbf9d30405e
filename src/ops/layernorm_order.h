// LayerNorm's arithmetic in the order of the CPU kernel (ops/dense.cpp), written as PLDR_HD
// pieces that the CUDA kernel (src/cuda/layernorm.cu) assembles, so that the GPU gives the CPU's
// bits (float32 and float64); tests/test_cuda_shared.cpp assembles them on the CPU the way the
// kernel does and checks the bits against layernorm_forward / layernorm_backward.
//
// The CPU's row sums (dense.cpp, lane_sum): 16 lanes from +0, lane k adding the terms
// k, k + 16, ... of the row's first C − C mod 16 columns in order; then the lanes pairwise,
// acc[k] += acc[k + w] for w = 8, 4, 2, 1 (on the GPU: 16 threads and shuffles down by w); then
// the last C mod 16 terms in order into a tail from +0; the sum is acc[0] + tail.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/hd.h"

namespace pldr {

constexpr int kLnLanes = 16;

// The terms of the four row sums, in T; the activations x and dy stored as P (T itself, or bf16
// storage widened exactly to T = float by its conversion).
template <typename T, typename P = T>
struct LnTermX {  // x
    const P* x;
    PLDR_HD T operator()(int64_t c) const { return T(x[c]); }
};
template <typename T, typename P = T>
struct LnTermSqDev {  // (x − m)²
    const P* x;
    T m;
    PLDR_HD T operator()(int64_t c) const { return (T(x[c]) - m) * (T(x[c]) - m); }
};
template <typename T, typename P = T>
struct LnTermDyG {  // dy·g
    const P* dy;
    const T* g;
    PLDR_HD T operator()(int64_t c) const { return T(dy[c]) * g[c]; }
};
template <typename T, typename P = T>
struct LnTermDyGXhat {  // dy·g·((x − m)·r)
    const P *dy, *x;
    const T* g;
    T m, r;
    PLDR_HD T operator()(int64_t c) const { return T(dy[c]) * g[c] * ((T(x[c]) - m) * r); }
};

// Lane k's partial sum over the whole groups of 16.
template <typename T, typename F>
PLDR_HD inline T ln_lane_sum(const F& f, int64_t C, int k) {
    T acc = T(0);
    const int64_t main = C / kLnLanes * kLnLanes;
    for (int64_t c = k; c < main; c += kLnLanes) acc += f(c);
    return acc;
}
// The tail: the last C mod 16 terms, in order.
template <typename T, typename F>
PLDR_HD inline T ln_tail_sum(const F& f, int64_t C) {
    T tail = T(0);
    for (int64_t c = C / kLnLanes * kLnLanes; c < C; ++c) tail += f(c);
    return tail;
}
// The lanes' tree on the host (the GPU does it with shuffles); acc is overwritten.
template <typename T>
inline T ln_lane_tree(T* acc) {
    for (int w = kLnLanes / 2; w >= 1; w /= 2)
        for (int k = 0; k < w; ++k) acc[k] += acc[k + w];
    return acc[0];
}

// r = 1 / sqrt(var + eps), eps rounded to T.
template <typename T>
PLDR_HD inline T ln_rstd(T var, double eps) {
    return T(1) / std::sqrt(var + T(eps));
}
// One output: (x − m)·r·g + b (+0 without a bias, as the CPU).
template <typename T>
PLDR_HD inline T ln_out(T x, T m, T r, T g, const T* b, int64_t c) {
    return b ? (x - m) * r * g + b[c] : (x - m) * r * g + T(0);
}
// One input gradient's increment: r·(dy·g − s1 − x̂·s2), x̂ = (x − m)·r.
template <typename T>
PLDR_HD inline T ln_dx(T dy, T g, T x, T m, T r, T s1, T s2) {
    const T xh = (x - m) * r;
    return r * (dy * g - s1 - xh * s2);
}
// One gain gradient's increment: dy·((x − m)·r).
template <typename T>
PLDR_HD inline T ln_dg(T dy, T x, T m, T r) {
    return dy * ((x - m) * r);
}

}  // namespace pldr
