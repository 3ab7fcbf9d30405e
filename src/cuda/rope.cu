// RoPE on the GPU, both layouts (interleaved pairs, halves), forward and backward, with the CPU's
// rotation (ops/rope_rotate.h) and the CPU's float32 table uploaded once: the CPU's operations,
// none contracted (the CPU's may be: GCC 12 fuses its pairs on AVX-512, so within one rounding);
// bf16 values rotate in float32 and round once.
#include <cmath>
#include <type_traits>

#include "cuda/common.cuh"
#include "ops/rope_rotate.h"

namespace pldr::cuda {

DeviceRopeTable::DeviceRopeTable(const RopeTable& t) : max_pos_(t.max_pos), half_(t.half) {
    const size_t n = size_t(t.max_pos * t.half);
    PLDR_CHECK(t.cos.size() == n && t.sin.size() == n);
    const bool f64 = t.kind == RopeTableKind::FLOAT64;
    PLDR_CHECK(!f64 || (t.cos64.size() == n && t.sin64.size() == n));
    auto upload = [&](auto** dst, const auto& src) {
        using U = typename std::remove_reference_t<decltype(src)>::value_type;
        PLDR_CUDA_CALL(cudaMalloc(reinterpret_cast<void**>(dst), (n ? n : 1) * sizeof(U)));
        PLDR_CUDA_CALL(cudaMemcpy(*dst, src.data(), n * sizeof(U), cudaMemcpyHostToDevice));
    };
    try {
        upload(&cos_, t.cos);
        upload(&sin_, t.sin);
        if (f64) {  // the pure float64 table (--numerics exact): the rotation reads it instead
            upload(&cos64_, t.cos64);
            upload(&sin64_, t.sin64);
        }
        // cudaMemcpy from pageable memory may return before its copy lands: complete it here,
        // for the kernels of streams that do not wait for the legacy stream (a model's)
        PLDR_CUDA_CALL(cudaStreamSynchronize(cudaStreamLegacy));
    } catch (...) {
        cudaFree(cos_);
        cudaFree(sin_);
        cudaFree(cos64_);
        cudaFree(sin64_);
        throw;
    }
}

DeviceRopeTable::~DeviceRopeTable() {
    cudaFree(cos_);
    cudaFree(sin_);
    cudaFree(cos64_);
    cudaFree(sin64_);
}

void rope_check_positions(const int64_t* pos_host, int64_t N, int64_t max_pos) {
    for (int64_t n = 0; n < N; ++n)
        PLDR_REQUIRE(pos_host[n] >= 0 && pos_host[n] < max_pos, "position ", pos_host[n],
                     " is outside the RoPE table (max_position_embeddings ", max_pos, ")");
}

namespace {

// One thread per (token, head, pair m).
template <class T, bool kForward>
__global__ void __launch_bounds__(kThreads)
    rope_kernel(T* x, const int64_t* pos, int64_t N, int64_t H, int64_t D, const float* cos_t,
                const float* sin_t, const double* cos64, const double* sin64, int64_t max_pos,
                bool interleaved, bool round_f32, int* bad_pos) {
    using A = Acc<T>;
    const int64_t half = D / 2, total = N * H * half;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
         i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t m = i % half, nh = i / half, n = nh / H;
        T* v = x + nh * D;
        const int64_t i0 = interleaved ? 2 * m : m;
        const int64_t i1 = interleaved ? 2 * m + 1 : m + half;
        const int64_t p = pos[n];
        if (p < 0 || p >= max_pos) {  // never read outside the table
            store(v, i0, A(NAN));
            store(v, i1, A(NAN));
            if (bad_pos) *bad_pos = 1;
            continue;
        }
        A v0 = A(v[i0]), v1 = A(v[i1]);
        const int64_t e = p * half + m;
        const A c = cos64 ? A(cos64[e]) : A(cos_t[e]), s = sin64 ? A(sin64[e]) : A(sin_t[e]);
        if constexpr (kForward)
            rope_rotate_pair(v0, v1, c, s, interleaved, round_f32);
        else
            rope_unrotate_pair(v0, v1, c, s, round_f32);
        store(v, i0, v0);
        store(v, i1, v1);
    }
}

template <class T, bool kForward>
void launch(T* x, const int64_t* pos, int64_t N, int64_t H, int64_t D, const DeviceRopeTable& t,
            bool interleaved, bool round_f32, int* bad_pos, Stream stream) {
    PLDR_REQUIRE(N >= 0 && H > 0 && D > 0 && D % 2 == 0, "rope: bad shape [", N, ", ", H, ", ", D,
                 "]");
    PLDR_REQUIRE(D / 2 == t.half(), "rope: head dimension ", D, " does not match the table's ",
                 2 * t.half());
    const int64_t total = N * H * (D / 2);
    if (total == 0) return;
    rope_kernel<T, kForward><<<grid_for(total), kThreads, 0, stream>>>(
        x, pos, N, H, D, t.cos(), t.sin(), t.cos64(), t.sin64(), t.max_pos(), interleaved,
        round_f32, bad_pos);
    PLDR_CUDA_LAUNCHED(kForward ? "rope_forward" : "rope_backward");
}

}  // namespace

template <class T>
void rope_forward(T* x, const int64_t* pos, int64_t N, int64_t H, int64_t D,
                  const DeviceRopeTable& t, bool interleaved, bool round_input_f32, int* bad_pos,
                  Stream stream) {
    launch<T, true>(x, pos, N, H, D, t, interleaved, round_input_f32, bad_pos, stream);
}

template <class T>
void rope_backward(T* dx, const int64_t* pos, int64_t N, int64_t H, int64_t D,
                   const DeviceRopeTable& t, bool interleaved, bool round_grad_f32, int* bad_pos,
                   Stream stream) {
    launch<T, false>(dx, pos, N, H, D, t, interleaved, round_grad_f32, bad_pos, stream);
}

#define PLDR_INSTANTIATE(T)                                                          \
    template void rope_forward<T>(T*, const int64_t*, int64_t, int64_t, int64_t,     \
                                  const DeviceRopeTable&, bool, bool, int*, Stream); \
    template void rope_backward<T>(T*, const int64_t*, int64_t, int64_t, int64_t,    \
                                   const DeviceRopeTable&, bool, bool, int*, Stream);
PLDR_INSTANTIATE(float)
PLDR_INSTANTIATE(double)
PLDR_INSTANTIATE(bf16)
#undef PLDR_INSTANTIATE

}  // namespace pldr::cuda
