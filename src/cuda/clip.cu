// Gradient clipping on the GPU (train/clip.h): by value, and by global norm with the CPU's sum of
// squares to the bit (train/clip_order.h: one thread per (block of 32768, lane), then each
// block's 16 lanes in order, then the blocks in order, as the CPU adds them).
#include <cmath>
#include <limits>

#include "cuda/common.cuh"
#include "train/clip_order.h"

namespace pldr::cuda {

namespace {

template <class T>
__global__ void __launch_bounds__(kThreads)
    clip_value_kernel(T* g, int64_t n, T limit, unsigned long long* over) {
    unsigned long long count = 0;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        const T x = g[i];
        count += static_cast<unsigned long long>(grad_over(x, limit));
        g[i] = clip_value_element(x, limit, -limit);
    }
    for (int w = 16; w >= 1; w /= 2) count += __shfl_down_sync(0xffffffffu, count, w);
    if (threadIdx.x % 32 == 0 && count) atomicAdd(over, count);
}

// Thread j: lane j % 16 of block j / 16 (its Σx² in double, and its elements' count of
// |x| > limit).
template <class T>
__global__ void __launch_bounds__(kThreads)
    lane_sums_kernel(const T* g, int64_t n, T limit, double* lanes, unsigned long long* over) {
    const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t blocks = (n + kGradSumBlock - 1) / kGradSumBlock;
    unsigned long long count = 0;
    if (j < blocks * kGradSumLanes) {
        const int64_t b = j / kGradSumLanes;
        const int k = int(j % kGradSumLanes);
        const int64_t i0 = b * kGradSumBlock;
        const int64_t len = n - i0 < kGradSumBlock ? n - i0 : kGradSumBlock;
        lanes[j] = grad_lane_sum_sq(g + i0, len, k);
        for (int64_t i = k; i < len; i += kGradSumLanes)
            count += static_cast<unsigned long long>(grad_over(g[i0 + i], limit));
    }
    for (int w = 16; w >= 1; w /= 2) count += __shfl_down_sync(0xffffffffu, count, w);
    if (threadIdx.x % 32 == 0 && count) atomicAdd(over, count);
}

// Each block's lanes in order (one thread per block).
__global__ void __launch_bounds__(kThreads)
    block_sums_kernel(const double* lanes, int64_t blocks, double* parts) {
    const int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (b >= blocks) return;
    double s = 0.0;
    for (int k = 0; k < kGradSumLanes; ++k) s += lanes[b * kGradSumLanes + k];
    parts[b] = s;
}

// The blocks in order (one thread: a 110M model's gradient has 3,400 blocks).
__global__ void total_kernel(const double* parts, int64_t blocks, double* total) {
    double s = 0.0;
    for (int64_t b = 0; b < blocks; ++b) s += parts[b];
    *total = s;
}

template <class T>
__global__ void __launch_bounds__(kThreads) scale_kernel(T* g, int64_t n, T c) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        g[i] = g[i] * c;
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    finite_kernel(const T* g, int64_t n, unsigned int* bad) {
    bool ok = true;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        ok = ok && (g[i] - g[i] == T(0));  // the CPU's test: x − x is 0 unless x is inf or NaN
    if (!ok) atomicOr(bad, 1u);
}

}  // namespace

template <class T>
int64_t clip_by_value(T* g, int64_t n, T limit, Stream stream) {
    PLDR_REQUIRE(n >= 0, "clip_by_value: negative element count ", n);
    PLDR_REQUIRE(std::isfinite(double(limit)) && limit >= T(0),
                 "clip_by_value: limit must be finite and >= 0, got ", limit);
    if (n == 0) return 0;
    PLDR_REQUIRE(g != nullptr, "clip_by_value: null buffer");
    Scratch<unsigned long long> over(1, stream);
    PLDR_CUDA_CALL(cudaMemsetAsync(over.get(), 0, sizeof(unsigned long long), stream));
    clip_value_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(g, n, limit, over.get());
    PLDR_CUDA_LAUNCHED("clip_by_value");
    unsigned long long h = 0;
    copy_to_host(&h, over.get(), 1, stream);
    return int64_t(h);
}

template <class T>
GradPass grad_pass(const T* g, int64_t n, T limit, Stream stream) {
    PLDR_REQUIRE(n >= 0, "grad_pass: negative element count ", n);
    PLDR_REQUIRE(!(limit < T(0)), "grad_pass: negative limit ", limit);
    GradPass r;
    if (n == 0) return r;
    PLDR_REQUIRE(g != nullptr, "grad_pass: null buffer");
    const int64_t blocks = (n + kGradSumBlock - 1) / kGradSumBlock;
    const int64_t lanes = blocks * kGradSumLanes;
    // [lanes | parts | total] doubles, then the count.
    Scratch<double> buf(lanes + blocks + 1, stream);
    Scratch<unsigned long long> over(1, stream);
    PLDR_CUDA_CALL(cudaMemsetAsync(over.get(), 0, sizeof(unsigned long long), stream));
    double* parts = buf.get() + lanes;
    double* total = parts + blocks;
    lane_sums_kernel<T><<<unsigned((lanes + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
        g, n, limit, buf.get(), over.get());
    PLDR_CUDA_LAUNCHED("grad_pass (lanes)");
    block_sums_kernel<<<unsigned((blocks + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
        buf.get(), blocks, parts);
    PLDR_CUDA_LAUNCHED("grad_pass (blocks)");
    total_kernel<<<1, 1, 0, stream>>>(parts, blocks, total);
    PLDR_CUDA_LAUNCHED("grad_pass (total)");
    unsigned long long h = 0;
    PLDR_CUDA_CALL(
        cudaMemcpyAsync(&r.sum_sq, total, sizeof(double), cudaMemcpyDeviceToHost, stream));
    copy_to_host(&h, over.get(), 1, stream);
    r.over = int64_t(h);
    return r;
}

template <class T>
void scale_to_norm(T* g, int64_t n, double max_norm, double norm, Stream stream) {
    PLDR_REQUIRE(std::isfinite(max_norm) && max_norm > 0,
                 "clip_by_global_norm: max_norm must be finite and > 0, got ", max_norm);
    if (n == 0 || !std::isfinite(norm)) return;
    PLDR_REQUIRE(g != nullptr, "clip_by_global_norm: null buffer");
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0) {
        scale_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(g, n, T(coef));
        PLDR_CUDA_LAUNCHED("scale_to_norm");
    }
}

template <class T>
double clip_by_global_norm(T* g, int64_t n, double max_norm, Stream stream) {
    PLDR_REQUIRE(n >= 0, "clip_by_global_norm: negative element count ", n);
    PLDR_REQUIRE(std::isfinite(max_norm) && max_norm > 0,
                 "clip_by_global_norm: max_norm must be finite and > 0, got ", max_norm);
    if (n == 0) return 0.0;
    const double norm =
        std::sqrt(grad_pass(g, n, std::numeric_limits<T>::infinity(), stream).sum_sq);
    scale_to_norm(g, n, max_norm, norm, stream);
    return norm;
}

template <class T>
bool all_finite(const T* g, int64_t n, Stream stream) {
    PLDR_REQUIRE(n >= 0, "all_finite: negative element count ", n);
    if (n == 0) return true;
    PLDR_REQUIRE(g != nullptr, "all_finite: null buffer");
    Scratch<unsigned int> bad(1, stream);
    PLDR_CUDA_CALL(cudaMemsetAsync(bad.get(), 0, sizeof(unsigned int), stream));
    finite_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(g, n, bad.get());
    PLDR_CUDA_LAUNCHED("all_finite");
    unsigned int h = 0;
    copy_to_host(&h, bad.get(), 1, stream);
    return h == 0;
}

#define PLDR_INSTANTIATE(T)                                              \
    template int64_t clip_by_value<T>(T*, int64_t, T, Stream);           \
    template GradPass grad_pass<T>(const T*, int64_t, T, Stream);        \
    template void scale_to_norm<T>(T*, int64_t, double, double, Stream); \
    template double clip_by_global_norm<T>(T*, int64_t, double, Stream); \
    template bool all_finite<T>(const T*, int64_t, Stream);
PLDR_INSTANTIATE(float)
PLDR_INSTANTIATE(double)
#undef PLDR_INSTANTIATE

}  // namespace pldr::cuda
