// LayerNorm forward and backward on the GPU, in the CPU's summation order (ops/layernorm_order.h)
// for each row: float32 and float64 give ops/dense.cpp's bits for the output and dx; bf16
// activations give its float32 bits on the widened inputs, rounded once.
//
// Forward and the backward's dx: 16 threads (half a warp) per row, thread k holding lane k of
// the CPU's 16 lanes; the lanes' tree is a shuffle down by 8, 4, 2, 1 within the half warp; each
// thread then adds the row's tail itself (at most 15 terms). The backward's dg and db: sums over
// the rows in chunks (cuda/colsum.cuh: a fixed order, not the CPU's sequential one, whose single
// thread per column left the GPU idle at training's 32k rows).
#include "cuda/colsum.cuh"
#include "cuda/common.cuh"
#include "ops/layernorm_order.h"

namespace pldr::cuda {

namespace {

constexpr unsigned kFull = 0xffffffffu;

// The CPU's lane tree over the 16 lanes of this half warp; lane 0's result broadcast to all 16.
template <class A>
__device__ __forceinline__ A half_warp_tree(A acc) {
    for (int w = kLnLanes / 2; w >= 1; w /= 2) acc += __shfl_down_sync(kFull, acc, w, kLnLanes);
    return __shfl_sync(kFull, acc, 0, kLnLanes);
}

// Half warps past the last row work on row N − 1 (every thread of a warp must take part in the
// shuffles) and store nothing.
__device__ __forceinline__ int64_t half_warp_row(int64_t N, bool& live) {
    const int64_t n = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kLnLanes;
    live = n < N;
    return live ? n : N - 1;
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    ln_forward_kernel(T* out, Acc<T>* mean, Acc<T>* rstd, const T* x, const Acc<T>* g,
                      const Acc<T>* b, int64_t N, int64_t C, double eps) {
    using A = Acc<T>;
    bool live;
    const int64_t n = half_warp_row(N, live);
    const int lane = int(threadIdx.x % kLnLanes);
    const T* xr = x + n * C;
    const A m = (half_warp_tree(ln_lane_sum<A>(LnTermX<A, T>{xr}, C, lane)) +
                 ln_tail_sum<A>(LnTermX<A, T>{xr}, C)) /
                A(C);
    const LnTermSqDev<A, T> sq{xr, m};
    const A v = (half_warp_tree(ln_lane_sum<A>(sq, C, lane)) + ln_tail_sum<A>(sq, C)) / A(C);
    const A r = ln_rstd(v, eps);
    if (!live) return;
    T* o = out + n * C;
    for (int64_t c = lane; c < C; c += kLnLanes) store(o, c, ln_out(A(xr[c]), m, r, g[c], b, c));
    if (lane == 0) {
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = r;
    }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    ln_backward_dx_kernel(T* dx, const T* dout, const T* x, const Acc<T>* mean, const Acc<T>* rstd,
                          const Acc<T>* g, int64_t N, int64_t C) {
    using A = Acc<T>;
    bool live;
    const int64_t n = half_warp_row(N, live);
    const int lane = int(threadIdx.x % kLnLanes);
    const T* xr = x + n * C;
    const T* dy = dout + n * C;
    const A m = mean[n], r = rstd[n];
    const LnTermDyG<A, T> t1{dy, g};
    const LnTermDyGXhat<A, T> t2{dy, xr, g, m, r};
    const A s1 = (half_warp_tree(ln_lane_sum<A>(t1, C, lane)) + ln_tail_sum<A>(t1, C)) / A(C);
    const A s2 = (half_warp_tree(ln_lane_sum<A>(t2, C, lane)) + ln_tail_sum<A>(t2, C)) / A(C);
    if (!live) return;
    T* d = dx + n * C;
    for (int64_t c = lane; c < C; c += kLnLanes)
        store(d, c, A(d[c]) + ln_dx(A(dy[c]), g[c], A(xr[c]), m, r, s1, s2));
}

// dg's term of row n, column c (ops/layernorm_order.h ln_dg), for column_sums.
template <class T>
struct LnDgTerm {
    const T *dout, *x;
    const Acc<T>*mean, *rstd;
    int64_t C;
    __device__ Acc<T> operator()(int64_t n, int64_t c) const {
        using A = Acc<T>;
        return ln_dg(A(dout[n * C + c]), A(x[n * C + c]), mean[n], rstd[n]);
    }
};

unsigned half_warp_blocks(int64_t N) {
    const int64_t rows_per_block = kThreads / kLnLanes;
    return unsigned((N + rows_per_block - 1) / rows_per_block);
}

}  // namespace

template <class T>
void layernorm_forward(T* out, Acc<T>* mean, Acc<T>* rstd, const T* x, const Acc<T>* g,
                       const Acc<T>* b, int64_t N, int64_t C, double eps, Stream stream) {
    PLDR_REQUIRE(N >= 0 && C > 0, "layernorm: bad shape [", N, ", ", C, "]");
    if (N == 0) return;
    require_grid_rows(half_warp_blocks(N), "layernorm");
    ln_forward_kernel<T>
        <<<half_warp_blocks(N), kThreads, 0, stream>>>(out, mean, rstd, x, g, b, N, C, eps);
    PLDR_CUDA_LAUNCHED("layernorm_forward");
}

template <class T>
void layernorm_backward(T* dx, Acc<T>* dg, Acc<T>* db, const T* dout, const T* x,
                        const Acc<T>* mean, const Acc<T>* rstd, const Acc<T>* g, int64_t N,
                        int64_t C, Stream stream) {
    PLDR_REQUIRE(N >= 0 && C > 0, "layernorm: bad shape [", N, ", ", C, "]");
    if (N == 0) return;
    if (dg) column_sums(dg, N, C, LnDgTerm<T>{dout, x, mean, rstd, C}, stream);
    if (db) column_sums(db, N, C, PlainTerm<T, Acc<T>>{dout, C}, stream);
    if (dx) {
        ln_backward_dx_kernel<T>
            <<<half_warp_blocks(N), kThreads, 0, stream>>>(dx, dout, x, mean, rstd, g, N, C);
        PLDR_CUDA_LAUNCHED("layernorm_backward (dx)");
    }
}

#define PLDR_INSTANTIATE(T)                                                                      \
    template void layernorm_forward<T>(T*, Acc<T>*, Acc<T>*, const T*, const Acc<T>*,            \
                                       const Acc<T>*, int64_t, int64_t, double, Stream);         \
    template void layernorm_backward<T>(T*, Acc<T>*, Acc<T>*, const T*, const T*, const Acc<T>*, \
                                        const Acc<T>*, const Acc<T>*, int64_t, int64_t, Stream);
PLDR_INSTANTIATE(float)
PLDR_INSTANTIATE(double)
PLDR_INSTANTIATE(bf16)
#undef PLDR_INSTANTIATE

}  // namespace pldr::cuda
