// The SwiGLU gate of the GLU blocks on the GPU (ops/glu.h's glu_gate and the element step of
// glu_backward), with the CPU's definitions of silu and silu' (ops/activation.h). float64 agrees
// with the CPU within CUDA's exp (≤ 1 ulp against glibc's); float32 within that and SLEEF's
// (the CPU's float32 gate, core/vmath.h); bf16 activations are computed in float32 and rounded.
#include "cuda/common.cuh"
#include "ops/activation.h"

namespace pldr::cuda {

namespace {

template <class T>
__global__ void __launch_bounds__(kThreads)
    gate_kernel(T* gated, const T* h1, const T* h2, int64_t n) {
    using A = Acc<T>;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        store(gated, i, silu(A(h1[i])) * A(h2[i]));
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    gate_backward_kernel(T* dh1, T* dh2, const T* dgated, const T* h1, const T* h2, int64_t n) {
    using A = Acc<T>;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        const A dg = A(dgated[i]), a = A(h1[i]), b = A(h2[i]);
        store(dh2, i, dg * silu(a));
        store(dh1, i, dg * b * silu_grad(a));  // after the read of dgated[i]: dh1 may alias it
    }
}

}  // namespace

template <class T>
void glu_gate(T* gated, const T* h1, const T* h2, int64_t n, Stream stream) {
    PLDR_REQUIRE(n >= 0, "glu_gate: negative element count ", n);
    if (n == 0) return;
    gate_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(gated, h1, h2, n);
    PLDR_CUDA_LAUNCHED("glu_gate");
}

template <class T>
void glu_gate_backward(T* dh1, T* dh2, const T* dgated, const T* h1, const T* h2, int64_t n,
                       Stream stream) {
    PLDR_REQUIRE(n >= 0, "glu_gate_backward: negative element count ", n);
    if (n == 0) return;
    gate_backward_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(dh1, dh2, dgated, h1, h2, n);
    PLDR_CUDA_LAUNCHED("glu_gate_backward");
}

#define PLDR_INSTANTIATE(T)                                             \
    template void glu_gate<T>(T*, const T*, const T*, int64_t, Stream); \
    template void glu_gate_backward<T>(T*, T*, const T*, const T*, const T*, int64_t, Stream);
PLDR_INSTANTIATE(float)
PLDR_INSTANTIATE(double)
PLDR_INSTANTIATE(bf16)
#undef PLDR_INSTANTIATE

}  // namespace pldr::cuda
