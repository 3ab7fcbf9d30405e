// The masked cross-entropy over a chunk of rows on the GPU (ops/cross_entropy.h,
// cross_entropy_fused_rows): one block per row. The row's arg-max is the CPU's (the first index
// of the largest value; a NaN in column 0 wins, as the CPU's scan keeps it; other NaNs never do);
// its exp-sum runs in another order than the CPU's (a block reduction), so the CE and the
// gradient agree within the float rounding of the sum and of CUDA's exp and log.
#include <cmath>

#include "cuda/common.cuh"

namespace pldr::cuda {

namespace {

constexpr int kWarps = kThreads / 32;

struct ArgMax {
    double val;  // the row's values widened (exact for float and bf16)
    int64_t idx;
};
__device__ __forceinline__ ArgMax better(ArgMax a, ArgMax b) {
    return (b.val > a.val || (b.val == a.val && b.idx < a.idx)) ? b : a;
}

template <class A>
__device__ A block_sum(A v, A* shared) {
    for (int w = 16; w >= 1; w /= 2) v += __shfl_down_sync(0xffffffffu, v, w);
    if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = v;
    __syncthreads();
    A s = A(0);
    for (int k = 0; k < kWarps; ++k) s += shared[k];  // every thread, the same order
    __syncthreads();
    return s;
}

__device__ ArgMax block_argmax(ArgMax a, ArgMax* shared) {
    for (int w = 16; w >= 1; w /= 2) {
        ArgMax o;
        o.val = __shfl_down_sync(0xffffffffu, a.val, w);
        o.idx = __shfl_down_sync(0xffffffffu, a.idx, w);
        a = better(a, o);
    }
    if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = a;
    __syncthreads();
    ArgMax r = shared[0];
    for (int k = 1; k < kWarps; ++k) r = better(r, shared[k]);
    __syncthreads();
    return r;
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    ce_rows_kernel(T* dlogits, Acc<T>* ce_rows, char* hit_rows, const T* logits,
                   const int64_t* targets, int64_t V, int64_t ignore_id, Acc<T> scale) {
    using A = Acc<T>;
    __shared__ ArgMax s_arg[kWarps];
    __shared__ A s_sum[kWarps];
    const int64_t n = blockIdx.x;
    const T* x = logits + n * V;
    T* d = dlogits + n * V;
    const int64_t t = targets[n];
    const bool t_ok = t >= 0 && t < V;
    // The CPU's arg-max: am = 0, then every v with x[v] > x[am].
    ArgMax a{-INFINITY, INT64_MAX};
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) a = better(a, ArgMax{double(A(x[v])), v});
    a = block_argmax(a, s_arg);
    const A x0 = A(x[0]);
    const int64_t am = (x0 != x0 || a.idx == INT64_MAX) ? 0 : a.idx;
    const A mx = A(x[am]);
    const A xt = t_ok ? A(x[t]) : A(NAN);  // read before any thread writes d (which may be x)
    A part = A(0);
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) part += std::exp(A(x[v]) - mx);
    const A s =
        block_sum(part, s_sum);  // (its barriers also order the reads above before the writes)
    if (threadIdx.x == 0) {
        ce_rows[n] = -((xt - mx) - std::log(s));
        hit_rows[n] = char(am == t);
    }
    const bool ignored = t == ignore_id;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
        A g = A(0);
        if (!ignored) {
            g = A(0) + scale * (std::exp(A(x[v]) - mx) / s);
            if (v == t) g -= scale;
            if (!t_ok) g = A(NAN);
        }
        store(d, v, g);
    }
}

}  // namespace

template <class T>
void cross_entropy_fused_rows(T* dlogits, Acc<T>* ce_rows, char* hit_rows, const T* logits,
                              const int64_t* targets, int64_t N, int64_t V, int64_t ignore_id,
                              Acc<T> scale, Stream stream) {
    PLDR_REQUIRE(N >= 0 && V > 0, "cross_entropy: bad shape [", N, ", ", V, "]");
    if (N == 0) return;
    require_grid_rows(N, "cross_entropy");
    ce_rows_kernel<T><<<unsigned(N), kThreads, 0, stream>>>(dlogits, ce_rows, hit_rows, logits,
                                                            targets, V, ignore_id, scale);
    PLDR_CUDA_LAUNCHED("cross_entropy_fused_rows");
}

#define PLDR_INSTANTIATE(T)                                                                 \
    template void cross_entropy_fused_rows<T>(T*, Acc<T>*, char*, const T*, const int64_t*, \
                                              int64_t, int64_t, int64_t, Acc<T>, Stream);
PLDR_INSTANTIATE(float)
PLDR_INSTANTIATE(double)
PLDR_INSTANTIATE(bf16)
#undef PLDR_INSTANTIATE

}  // namespace pldr::cuda
