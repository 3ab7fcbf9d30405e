// The DAG terms on the GPU (kernels.h dag_instances): ops/dag_expm.h's per-instance algorithms,
// one thread block per instance, with the block as the executor: each whole-matrix step spread
// over the block's threads, a barrier after it; the products one chain of (fused, for the
// reference's float32) multiply-adds over k per element, as the CPU's; the column sums top to
// bottom. The scratch is global memory: 17 matrices per block (about 0.3 MB a block at D = 64 and
// the reference's gradient; at most 256 MB in all, the grid capped to fit).
#include <algorithm>
#include <cmath>

#include "cuda/common.cuh"
#include "ops/dag_expm.h"

namespace pldr::cuda {

namespace {

constexpr int kDagThreads = 256;
// norm1 keeps one column sum per thread slot: the reference's gradient works on 2n × 2n blocks.
static_assert(2 * kDagMaxSide <= kDagThreads, "norm1's red holds one value per column");
// The scratch of all the blocks together, at most (the grid is capped to fit; at least 1 block).
constexpr int64_t kDagScratchBytes = int64_t(256) << 20;

// ops/dag_expm.h's executor over one block. red: kDagThreads values of shared memory.
template <typename S>
struct BlockEx {
    S* base;
    int64_t slot_elems;
    S* red;

    __device__ S* slot(int i) { return base + int64_t(i) * slot_elems; }
    __device__ void barrier() { __syncthreads(); }

    // C = A·B, one chain over k per element: fused multiply-adds, or (Fused = false, built with
    // --fmad=false) the multiply and the add rounded apart, as the CPU's plain product.
    template <bool Fused>
    __device__ void product(const S* A, const S* B, S* C, int64_t n) {
        for (int64_t e = threadIdx.x; e < n * n; e += blockDim.x) {
            const int64_t i = e / n, j = e % n;
            S c = S(0);
            for (int64_t k = 0; k < n; ++k)
                c = Fused ? fma(A[i * n + k], B[k * n + j], c) : c + A[i * n + k] * B[k * n + j];
            C[e] = c;
        }
        __syncthreads();
    }
    __device__ void mm(const S* A, const S* B, S* C, int64_t n) { product<true>(A, B, C, n); }
    __device__ void mm_plain(const S* A, const S* B, S* C, int64_t n) {
        product<false>(A, B, C, n);
    }
    template <class F>
    __device__ void each(int64_t count, F f) {
        for (int64_t e = threadIdx.x; e < count; e += blockDim.x) f(e);
        __syncthreads();
    }
    __device__ S norm1(const S* A, int64_t n) {
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
            S c = S(0);
            for (int64_t i = 0; i < n; ++i) c += fabs(A[i * n + j]);
            red[j] = c;
        }
        __syncthreads();
        S best = red[0];
        for (int64_t j = 1; j < n; ++j) {
            if (isnan(red[j])) {
                best = red[j];
                break;
            }
            best = best < red[j] ? red[j] : best;
        }
        __syncthreads();  // (before red is written again)
        return best;
    }
    // Every thread checks its share, the block's answer reaches all (a barrier).
    __device__ bool all_finite(const S* A, int64_t count) {
        int ok = 1;
        for (int64_t e = threadIdx.x; e < count; e += blockDim.x) ok &= isfinite(A[e]) ? 1 : 0;
        return __syncthreads_and(ok) != 0;
    }
    __device__ S max_entry(const S* A, int64_t count) {
        S m = S(0);
        for (int64_t e = threadIdx.x; e < count; e += blockDim.x) m = m < A[e] ? A[e] : m;
        red[threadIdx.x] = m;
        __syncthreads();
        S best = S(0);
        for (int t = 0; t < int(blockDim.x); ++t) best = best < red[t] ? red[t] : best;
        __syncthreads();
        return best;
    }
};

template <class T>
__global__ void __launch_bounds__(kDagThreads)
    dag_kernel(const T* X, int64_t count, int64_t n, bool reference, T* dX, float seed,
               double scale, double* vals, void* scratch, int64_t slot_elems) {
    __shared__ float red_f[kDagThreads];
    __shared__ double red_d[kDagThreads];
    const int64_t nn = n * n;
    for (int64_t inst = blockIdx.x; inst < count; inst += gridDim.x) {
        const T* x = X + inst * nn;
        T* dx = dX ? dX + inst * nn : nullptr;
        double v;
        if (reference) {
            BlockEx<float> ex{static_cast<float*>(scratch) +
                                  int64_t(blockIdx.x) * dag_detail::kDagSlots * slot_elems,
                              slot_elems, red_f};
            v = double(dag_detail::dag_ref_instance(ex, x, n, dx, seed));  // y: see kernels.h
        } else {
            BlockEx<double> ex{static_cast<double*>(scratch) +
                                   int64_t(blockIdx.x) * dag_detail::kDagSlots * slot_elems,
                               slot_elems, red_d};
            v = dag_detail::dag_exact_instance(ex, x, n, dx, scale);
        }
        if (threadIdx.x == 0) vals[inst] = v;
        __syncthreads();  // (the next instance reuses the scratch)
    }
}

}  // namespace

template <class T>
void dag_instances(const T* X, int64_t count, int64_t n, bool reference, T* dX, float seed,
                   double scale, double* vals, Stream stream) {
    PLDR_REQUIRE(count >= 1 && n >= 1,
                 "dag_instances: need count >= 1 and n >= 1, got count=", count, " n=", n);
    PLDR_REQUIRE(n <= kDagMaxSide, "dag_instances: matrices of side ", n, " exceed ", kDagMaxSide);
    PLDR_REQUIRE(X && vals, "dag_instances: null buffer");
    // The reference's backward exponentiates a 2n × 2n block matrix.
    const int64_t side = reference && dX ? 2 * n : n;
    const int64_t slot_elems = side * side;
    const size_t elem = reference ? sizeof(float) : sizeof(double);
    int device = 0, sms = 1;
    PLDR_CUDA_CALL(cudaGetDevice(&device));
    PLDR_CUDA_CALL(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    const int64_t per_block = dag_detail::kDagSlots * slot_elems * int64_t(elem);
    const int64_t blocks =
        std::max<int64_t>(1, std::min({count, 2 * int64_t(sms), kDagScratchBytes / per_block}));
    Scratch<unsigned char> scratch(blocks * per_block, stream);
    dag_kernel<T><<<unsigned(blocks), kDagThreads, 0, stream>>>(
        X, count, n, reference, dX, seed, scale, vals, scratch.get(), slot_elems);
    PLDR_CUDA_LAUNCHED("dag_instances");
}

template void dag_instances<float>(const float*, int64_t, int64_t, bool, float*, float, double,
                                   double*, Stream);
template void dag_instances<double>(const double*, int64_t, int64_t, bool, double*, float, double,
                                    double*, Stream);

}  // namespace pldr::cuda
