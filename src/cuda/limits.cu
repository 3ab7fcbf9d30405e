// The device's limits (limits.h): the read bandwidth and the products' peaks, timed with events
// on one stream.
#include <algorithm>
#include <string>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/gemm.h"
#include "cuda/limits.h"

namespace pldr::cuda {

namespace {

// Each thread sums its 16-byte words (grid-stride) and writes one value, so no load is dead.
__global__ void __launch_bounds__(kThreads)
    read_kernel(float* sink, const float4* src, int64_t n4) {
    float acc = 0;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4;
         i += int64_t(gridDim.x) * blockDim.x) {
        const float4 v = src[i];
        acc += v.x + v.y + v.z + v.w;
    }
    sink[int64_t(blockIdx.x) * blockDim.x + threadIdx.x] = acc;
}

// Small values from the index (no zeros: a product of zeros may draw less power).
template <class U>
__global__ void __launch_bounds__(kThreads) fill_kernel(U* x, int64_t n) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        const float v = float(int((i * 2654435761u) % 17u) - 8) / 64.0f;
        if constexpr (std::is_same_v<U, bf16>)
            x[i].bits = __bfloat16_as_ushort(__float2bfloat16_rn(v));
        else
            x[i] = v;
    }
}

template <class U>
void fill(U* x, int64_t n, Stream s) {
    fill_kernel<U><<<grid_for(n), kThreads, 0, s>>>(x, n);
    PLDR_CUDA_LAUNCHED("fill");
}

// Events around `body`, best of `timed` after `untimed`, in seconds.
template <class F>
double best_seconds(Stream s, int untimed, int timed, F&& body) {
    cudaEvent_t a, b;
    PLDR_CUDA_CALL(cudaEventCreate(&a));
    PLDR_CUDA_CALL(cudaEventCreate(&b));
    double best = 1e300;
    try {
        for (int i = 0; i < untimed; ++i) body();
        for (int i = 0; i < timed; ++i) {
            PLDR_CUDA_CALL(cudaEventRecord(a, s));
            body();
            PLDR_CUDA_CALL(cudaEventRecord(b, s));
            PLDR_CUDA_CALL(cudaEventSynchronize(b));
            float ms = 0;
            PLDR_CUDA_CALL(cudaEventElapsedTime(&ms, a, b));
            best = std::min(best, double(ms) * 1e-3);
        }
    } catch (...) {
        cudaEventDestroy(a);
        cudaEventDestroy(b);
        throw;
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return best;
}

void select(int device) {
    PLDR_REQUIRE(device >= 0, "CUDA device index ", device, " is negative");
    PLDR_CUDA_CALL(cudaSetDevice(device));
}

}  // namespace

double read_bandwidth_gbs(int device, int64_t bytes) {
    select(device);
    size_t free_b = 0, total_b = 0;
    PLDR_CUDA_CALL(cudaMemGetInfo(&free_b, &total_b));
    bytes = std::min<int64_t>(bytes, int64_t(free_b / 4));
    const int64_t n4 = bytes / 16;
    PLDR_REQUIRE(n4 >= 1 << 16, "read bandwidth: only ", free_b, " bytes of device memory free");
    int sms = 0;
    PLDR_CUDA_CALL(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    const unsigned blocks = unsigned(std::max(1, sms) * 8);
    Stream s = nullptr;
    Scratch<float> buf(n4 * 4, s), sink(int64_t(blocks) * kThreads, s);
    fill(buf.get(), n4 * 4, s);
    const double t = best_seconds(s, 1, 5, [&] {
        read_kernel<<<blocks, kThreads, 0, s>>>(sink.get(), reinterpret_cast<float4*>(buf.get()),
                                                n4);
        PLDR_CUDA_LAUNCHED("read");
    });
    PLDR_CUDA_CALL(cudaStreamSynchronize(s));
    return double(n4 * 16) / t / 1e9;
}

double gemm_gflops(int device, const std::string& type, int64_t n) {
    PLDR_REQUIRE(type == "f32" || type == "tf32" || type == "bf16", "GEMM peak: '", type,
                 "' is not f32, tf32 or bf16");
    PLDR_REQUIRE(n >= 64 && n <= 32768, "GEMM peak: n = ", n, " is outside [64, 32768]");
    select(device);
    Stream s = nullptr;
    Gemm g(s);
    Scratch<float> C(n * n, s);
    double t = 0;
    if (type == "bf16") {
        Scratch<bf16> A(n * n, s), B(n * n, s);
        fill(A.get(), n * n, s);
        fill(B.get(), n * n, s);
        t = best_seconds(s, 2, 5, [&] {
            g.bf16(false, false, n, n, n, 1.0f, A.get(), n, B.get(), n, 0.0f, C.get(), n);
        });
    } else {
        g.set_tf32(type == "tf32");
        Scratch<float> A(n * n, s), B(n * n, s);
        fill(A.get(), n * n, s);
        fill(B.get(), n * n, s);
        t = best_seconds(s, 2, 5, [&] {
            g.f32(false, false, n, n, n, 1.0f, A.get(), n, B.get(), n, 0.0f, C.get(), n);
        });
    }
    PLDR_CUDA_CALL(cudaStreamSynchronize(s));
    return 2.0 * double(n) * double(n) * double(n) / t / 1e9;
}

int64_t pool_peak_bytes(int device, bool reset) {
    select(device);
    cudaMemPool_t pool = nullptr;
    PLDR_CUDA_CALL(cudaDeviceGetDefaultMemPool(&pool, device));
    unsigned long long high = 0;
    PLDR_CUDA_CALL(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high));
    if (reset) {
        unsigned long long zero = 0;  // the only value the attribute takes: the mark starts again
        PLDR_CUDA_CALL(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
    }
    return int64_t(high);
}

}  // namespace pldr::cuda
