// AdamW on the GPU: the CPU's element arithmetic (train/adamw_element.h) with the CPU's scalars
// (adamw_scalars, computed on the host in double and rounded once), so every element has the
// CPU's bits in float32 and float64 (no contraction: --fmad=false; IEEE sqrt and division).
#include "cuda/common.cuh"
#include "train/adamw_element.h"

namespace pldr::cuda {

namespace {

template <class T>
__global__ void __launch_bounds__(kThreads)
    adamw_kernel(T* p, const T* g, T* m, T* v, int64_t n, AdamWScalars<T> k) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        adamw_element(p[i], g[i], m[i], v[i], k);
}

}  // namespace

template <class T>
void adamw_update(T* p, const T* g, T* m, T* v, int64_t n, int64_t t, double lr,
                  const AdamWConfig& cfg, Stream stream) {
    cfg.validate();  // the CPU's checks, in its order
    PLDR_REQUIRE(n >= 0, "adamw: negative element count ", n);
    const AdamWScalars<T> k = adamw_scalars<T>(t, lr, cfg);
    if (n == 0) return;
    PLDR_REQUIRE(p && g && m && v, "adamw: null buffer");
    adamw_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(p, g, m, v, n, k);
    PLDR_CUDA_LAUNCHED("adamw_update");
}

template void adamw_update<float>(float*, const float*, float*, float*, int64_t, int64_t, double,
                                  const AdamWConfig&, Stream);
template void adamw_update<double>(double*, const double*, double*, double*, int64_t, int64_t,
                                   double, const AdamWConfig&, Stream);

}  // namespace pldr::cuda
