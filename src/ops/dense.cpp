// Linear, LayerNorm, GLU and softmax kernels (forward and backward). See ops.h.
#include <algorithm>
#include <cmath>

#include <type_traits>

#include "core/blas.h"
#include "core/gemm_bf16.h"
#include "core/parallel.h"
#include "core/vmath.h"
#include "core/zero.h"
#include "ops/activation.h"
#include "ops/glu.h"
#include "ops/layernorm.h"
#include "ops/linear.h"
#include "ops/softmax.h"

namespace pldr {

template <typename T>
void linear_forward(T* out, const T* in, const T* W, const T* b, int64_t N, int64_t I, int64_t O) {
    if constexpr (std::is_same_v<T, float>) {  // decode, batched decode: W streamed once
        if (!bf16::autocast_active() && dense_rows_forward(out, in, W, b, N, I, O)) return;
        // prefill, training: where oneDNN takes the product, the bias in its kernel
        if (b && !bf16::autocast_active() && gemm_bias(true, N, O, I, in, I, W, I, b, out, O))
            return;
    }
    if (b) fill_rows(out, b, N, O);  // the products below accumulate into it (beta = 1)
    if constexpr (std::is_same_v<T, float>) {
        if (bf16::autocast_active()) {  // mixed precision (core/gemm_bf16.h): W rounded once
            bf16::gemm_f32(false, true, N, O, I, 1.0f, in, I, false, W, I, true, b ? 1.0f : 0.0f,
                           out, O);
            return;
        }
    }
    if (N == 1) {  // one token (decode): a matrix-vector product streams W once
        gemv(O, I, T(1), W, I, in, b ? T(1) : T(0), out);
        return;
    }
    gemm(false, true, N, O, I, T(1), in, I, W, I, b ? T(1) : T(0), out, O);
}

template <typename T>
void linear_backward(T* din, T* dW, T* db, const T* dout, const T* in, const T* W, int64_t N,
                     int64_t I, int64_t O) {
    bool cast = false;
    if constexpr (std::is_same_v<T, float>) cast = bf16::autocast_active();
    if (cast) {  // mixed precision: bf16 operands, float32 accumulation into din and dW
        if constexpr (std::is_same_v<T, float>) {
            if (din)
                bf16::gemm_f32(false, false, N, I, O, 1.0f, dout, O, false, W, I, true, 1.0f, din,
                               I);
            if (dW)
                bf16::gemm_f32(true, false, O, I, N, 1.0f, dout, O, false, in, I, false, 1.0f, dW,
                               I);
        }
    } else {
        if (din) gemm(false, false, N, I, O, T(1), dout, O, W, I, T(1), din, I);
        if (dW) gemm(true, false, O, I, N, T(1), dout, O, in, I, T(1), dW, I);
    }
    if (db) {  // columns in blocks over the threads, each column summed over n in order
        constexpr int64_t kCols = 256;
        parallel_for((O + kCols - 1) / kCols, N * O >= kBiasParallelElems, [&](int64_t k) {
            const int64_t o0 = k * kCols, o1 = std::min(O, o0 + kCols);
            for (int64_t n = 0; n < N; ++n)
                for (int64_t o = o0; o < o1; ++o) db[o] += dout[n * O + o];
        });
    }
}

namespace {

// Σ_c f(c) over c < C in 16 interleaved lanes, added pairwise at the end, then the tail: the
// compiler vectorizes it, where one running sum is a chain of dependent additions (the
// metric learner's LayerNorms over rows of 32 or 64 were 5 % of an M-size prefill). A fixed
// order: every caller gets the same bits for the same row.
template <typename T, typename F>
inline T lane_sum(int64_t C, F&& f) {
    constexpr int64_t L = 16;
    T acc[L] = {};
    int64_t c = 0;
    for (; c + L <= C; c += L)
        for (int64_t k = 0; k < L; ++k) acc[k] += f(c + k);
    for (int64_t w = L / 2; w >= 1; w /= 2)
        for (int64_t k = 0; k < w; ++k) acc[k] += acc[k + w];
    T tail = 0;
    for (; c < C; ++c) tail += f(c);
    return acc[0] + tail;
}

}  // namespace

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* x, const T* g, const T* b, int64_t N,
                       int64_t C, double eps) {
    parallel_for(N, N * C >= 16384, [&](int64_t n) {  // from a 128-token prefill at d = 128
        const T* xr = x + n * C;
        const T m = lane_sum<T>(C, [xr](int64_t c) { return xr[c]; }) / T(C);
        const T v = lane_sum<T>(C, [xr, m](int64_t c) { return (xr[c] - m) * (xr[c] - m); }) / T(C);
        const T r = T(1) / std::sqrt(v + T(eps));
        T* o = out + n * C;
        if (b)
            for (int64_t c = 0; c < C; ++c) o[c] = (xr[c] - m) * r * g[c] + b[c];
        else
            for (int64_t c = 0; c < C; ++c) o[c] = (xr[c] - m) * r * g[c] + T(0);
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = r;
    });
}

template <typename T>
void layernorm_backward(T* dx, T* dg, T* db, const T* dout, const T* x, const T* mean,
                        const T* rstd, const T* g, int64_t N, int64_t C) {
    // The rows' input gradients are independent: over the team by rows. The gain and bias
    // gradients sum each column over n in order: over the team by blocks of columns. The bits
    // are those of one pass over the rows (ops/layernorm_order.h; the GPU's kernel gives them).
    const bool par = N * C >= 16384;
    if (dx) {
        parallel_for(N, par, [&](int64_t n) {
            const T* xr = x + n * C;
            const T* dy = dout + n * C;
            const T m = mean[n], r = rstd[n];
            // dxhat = dy ⊙ g; dx = r · (dxhat − mean(dxhat) − xhat · mean(dxhat ⊙ xhat))
            const T s1 = lane_sum<T>(C, [dy, g](int64_t c) { return dy[c] * g[c]; }) / T(C);
            const T s2 =
                lane_sum<T>(C, [=](int64_t c) { return dy[c] * g[c] * ((xr[c] - m) * r); }) / T(C);
            T* d = dx + n * C;
            for (int64_t c = 0; c < C; ++c) {
                const T xh = (xr[c] - m) * r;
                d[c] += r * (dy[c] * g[c] - s1 - xh * s2);
            }
        });
    }
    if (!dg && !db) return;
    constexpr int64_t kCols = 64;
    parallel_for((C + kCols - 1) / kCols, par, [&](int64_t k) {
        const int64_t c0 = k * kCols, c1 = std::min(C, c0 + kCols);
        for (int64_t n = 0; n < N; ++n) {
            const T* xr = x + n * C;
            const T* dy = dout + n * C;
            const T m = mean[n], r = rstd[n];
            if (dg)
                for (int64_t c = c0; c < c1; ++c) dg[c] += dy[c] * ((xr[c] - m) * r);
            if (db)
                for (int64_t c = c0; c < c1; ++c) db[c] += dy[c];
        }
    });
}

// Elements per task of the float32 SwiGLU passes.
constexpr int64_t kGluChunk = 4096;

template <typename T>
void glu_gate(T* gated, const T* h1, const T* h2, int64_t NF) {
    if constexpr (std::is_same_v<T, float>) {  // vectorized exp (core/vmath.h)
        const int64_t chunks = (NF + kGluChunk - 1) / kGluChunk;
        parallel_for(chunks, NF > 65536, [&](int64_t c) {
            const int64_t i = c * kGluChunk;
            vmath::silu_mul(h1 + i, h2 + i, gated + i, std::min(kGluChunk, NF - i));
        });
    } else {
        parallel_for(NF, NF > 65536, [&](int64_t i) { gated[i] = silu(h1[i]) * h2[i]; });
    }
}

template <typename T>
void glu_forward(T* out, T* h1, T* h2, T* gated, const T* x, const GluParams<T>& p, int64_t N,
                 int64_t I, int64_t F, int64_t O) {
    const GluLinears<T> w{LinearWeight<T>(p.w1), p.b1, LinearWeight<T>(p.w2), p.b2,
                          LinearWeight<T>(p.w3), p.b3};
    glu_forward(out, h1, h2, gated, x, w, N, I, F, O);
}

template <typename T>
void glu_forward(T* out, T* h1, T* h2, T* gated, const T* x, const GluLinears<T>& p, int64_t N,
                 int64_t I, int64_t F, int64_t O) {
    const LinearOut<T> h[] = {{h1, p.w1, p.b1, F}, {h2, p.w2, p.b2, F}};
    linear_forward_same_input(x, N, I, h, 2);
    glu_gate(gated, h1, h2, N * F);
    linear_forward(out, gated, p.w3, p.b3, N, F, O);
}

namespace {

// The GLU's backward from dgated (dout·W3ᵀ, in its own buffer) on: dh1 and dh2 to where the
// caller says (dh1 may be dgated, or h1 itself; dh2 may be h2), then the first two linears.
template <typename T>
void glu_backward_from_dgated(T* dx, const GluGrads<T>& g, const T* x, const T* h1, const T* h2,
                              T* dgated, T* dh1, T* dh2, const GluParams<T>& p, int64_t N,
                              int64_t I, int64_t F) {
    const int64_t NF = N * F;
    if constexpr (std::is_same_v<T, float>) {
        const int64_t chunks = (NF + kGluChunk - 1) / kGluChunk;
        parallel_for(chunks, NF > 65536, [&](int64_t c) {
            const int64_t i = c * kGluChunk, n = std::min(kGluChunk, NF - i);
            vmath::silu_mul_backward(dgated + i, h1 + i, h2 + i, dh1 + i, dh2 + i, n);
        });
    } else {
        parallel_for(NF, NF > 65536, [&](int64_t i) {
            const T dgi = dgated[i], x1 = h1[i], x2 = h2[i];
            dh2[i] = dgi * silu(x1);
            dh1[i] = dgi * x2 * silu_grad(x1);
        });
    }
    linear_backward(dx, g.w1, g.b1, dh1, x, p.w1, N, I, F);
    linear_backward(dx, g.w2, g.b2, dh2, x, p.w2, N, I, F);
}

}  // namespace

template <typename T>
void glu_backward(T* dx, const GluGrads<T>& g, const T* dout, const T* x, const T* h1, const T* h2,
                  const T* gated, const GluParams<T>& p, int64_t N, int64_t I, int64_t F, int64_t O,
                  T* scratch) {
    const int64_t NF = N * F;
    T* dgated = scratch;  // [N,F], becomes dh1 in place
    T* dh2 = scratch + NF;
    if (!gated) {  // not kept (training's memory plan): the forward's values, recomputed
        glu_gate(dh2, h1, h2, NF);
        gated = dh2;
    }
    zero_on_team(dgated, NF);
    linear_backward(dgated, g.w3, g.b3, dout, gated, p.w3, N, F, O);
    glu_backward_from_dgated(dx, g, x, h1, h2, dgated, dgated, dh2, p, N, I, F);
}

template <typename T>
void glu_backward_in_place(T* dx, const GluGrads<T>& g, const T* dout, const T* x, T* h1, T* h2,
                           const GluParams<T>& p, int64_t N, int64_t I, int64_t F, int64_t O,
                           T* scratch) {
    const int64_t NF = N * F;
    // gated, recomputed (the forward's bits), for W3's gradient; then the same buffer takes
    // dgated = dout·W3ᵀ. These are glu_backward's products, one at a time.
    glu_gate(scratch, h1, h2, NF);
    linear_backward<T>(nullptr, g.w3, g.b3, dout, scratch, p.w3, N, F, O);
    zero_on_team(scratch, NF);
    linear_backward<T>(scratch, nullptr, nullptr, dout, nullptr, p.w3, N, F, O);
    glu_backward_from_dgated(dx, g, x, h1, h2, scratch, h1, h2, p, N, I, F);
}

namespace {

// The row's maximum in 16 interleaved lanes (vectorisable: the plain running maximum was one
// chain of dependent compares per element). max is exact, so only NaN and ±0 could tell the
// orders apart, and neither changes a softmax: a NaN makes the whole row NaN, x − (±0) is x.
template <typename T>
T row_max(const T* x, int64_t n) {
    constexpr int64_t L = 16;
    if (n < 2 * L) {
        T mx = x[0];
        for (int64_t c = 1; c < n; ++c) mx = std::max(mx, x[c]);
        return mx;
    }
    T m[L];
    for (int64_t k = 0; k < L; ++k) m[k] = x[k];
    int64_t c = L;
    for (; c + L <= n; c += L)
        for (int64_t k = 0; k < L; ++k) m[k] = m[k] < x[c + k] ? x[c + k] : m[k];
    T mx = m[0];
    for (int64_t k = 1; k < L; ++k) mx = std::max(mx, m[k]);
    for (; c < n; ++c) mx = std::max(mx, x[c]);
    return mx;
}

// Live columns of row n under the causal layout: up to key causal + n, rounded up to the
// exponential's vector groups (16 lanes), at most C.
inline int64_t live_columns(int64_t C, int64_t causal, int64_t n) {
    if (causal < 0) return C;
    const int64_t w = causal + n + 1;
    return std::min(C, (w + 15) / 16 * 16);
}

}  // namespace

template <typename T>
void softmax_forward(T* y, const T* x, int64_t N, int64_t C, int64_t causal) {
    parallel_for(N, N * C > 65536, [&](int64_t n) {
        const T* xr = x + n * C;
        T* yr = y + n * C;
        int64_t w = live_columns(C, causal, n);
        T mx = row_max(xr, w);
        if (w < C) {
            const T out = row_max(xr + w, C - w);
            mx = std::max(mx, out);
            // exp underflows to exactly 0 below about -104 (float32) and -745 (float64)
            const T zero_below = std::is_same_v<T, float> ? T(-150) : T(-800);
            if (!(out - mx < zero_below)) w = C;  // the masked part is not exactly 0: the full row
        }
        T s = 0;
        if constexpr (std::is_same_v<T, float>) {
            s = vmath::exp_shifted_sum(xr, mx, yr, w);
        } else {
            for (int64_t c = 0; c < w; ++c) {
                yr[c] = std::exp(xr[c] - mx);
                s += yr[c];
            }
        }
        for (int64_t c = 0; c < w; ++c) yr[c] /= s;
        std::fill(yr + w, yr + C, T(0));
    });
}

template <typename T>
void softmax_backward(T* dx, const T* dy, const T* y, int64_t N, int64_t C, int64_t causal) {
    parallel_for(N, N * C > 65536, [&](int64_t n) {
        const T* yr = y + n * C;
        const T* dr = dy + n * C;
        int64_t w = live_columns(C, causal, n);
        if (w < C && !std::all_of(yr + w, yr + C, [](T v) { return v == T(0); })) w = C;
        T dot = 0;
        for (int64_t c = 0; c < w; ++c) dot += yr[c] * dr[c];
        if (!std::isfinite(dot)) {  // 0·(dy − Σ) past w may be NaN: the full row
            for (int64_t c = w; c < C; ++c) dot += yr[c] * dr[c];
            w = C;
        }
        T* o = dx + n * C;
        for (int64_t c = 0; c < w; ++c) o[c] += yr[c] * (dr[c] - dot);
    });
}

#define PLDR_INSTANTIATE(T)                                                                        \
    template void linear_forward<T>(T*, const T*, const T*, const T*, int64_t, int64_t, int64_t);  \
    template void linear_backward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t,   \
                                     int64_t);                                                     \
    template void glu_gate<T>(T*, const T*, const T*, int64_t);                                    \
    template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t, \
                                       double);                                                    \
    template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*,        \
                                        const T*, int64_t, int64_t);                               \
    template void glu_forward<T>(T*, T*, T*, T*, const T*, const GluParams<T>&, int64_t, int64_t,  \
                                 int64_t, int64_t);                                                \
    template void glu_forward<T>(T*, T*, T*, T*, const T*, const GluLinears<T>&, int64_t, int64_t, \
                                 int64_t, int64_t);                                                \
    template void glu_backward<T>(T*, const GluGrads<T>&, const T*, const T*, const T*, const T*,  \
                                  const T*, const GluParams<T>&, int64_t, int64_t, int64_t,        \
                                  int64_t, T*);                                                    \
    template void glu_backward_in_place<T>(T*, const GluGrads<T>&, const T*, const T*, T*, T*,     \
                                           const GluParams<T>&, int64_t, int64_t, int64_t,         \
                                           int64_t, T*);                                           \
    template void softmax_forward<T>(T*, const T*, int64_t, int64_t, int64_t);                     \
    template void softmax_backward<T>(T*, const T*, const T*, int64_t, int64_t, int64_t);
PLDR_INSTANTIATE(float)
PLDR_INSTANTIATE(double)
#undef PLDR_INSTANTIATE

}  // namespace pldr
