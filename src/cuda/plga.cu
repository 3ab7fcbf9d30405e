// The PLGA operator's element-wise steps on the GPU, every registered variant (ops/plga_variants.h)
// with the CPU's arithmetic (ops/plga_elementwise.h). As on the CPU (ops/plga.cpp) the forwards
// evaluate in double and round once to T; the backwards run in T. The products W·A and a·A_P are
// cuBLASLt's (cuda/gemm.h).
#include <cstring>

#include "cuda/common.cuh"
#include "ops/plga_elementwise.h"

namespace pldr::cuda {

namespace {

// The variants by name; one enumerator and one case per registered variant.
enum class Map { ISWIGLU, SOFTPLUS };
enum class Coup { POWER };

bool map_of(const std::string& name, Map& m) {
    if (name == "iswiglu") return m = Map::ISWIGLU, true;
    if (name == "softplus") return m = Map::SOFTPLUS, true;
    return false;
}
bool coupling_of(const std::string& name, Coup& c) {
    if (name == "power") return c = Coup::POWER, true;
    return false;
}

Map require_map(const std::string& name) {
    Map m{};
    PLDR_REQUIRE(map_of(name, m), "plga_positive_map '", name, "' has no CUDA kernel");
    return m;
}
Coup require_coupling(const std::string& name) {
    Coup c{};
    PLDR_REQUIRE(coupling_of(name, c), "plga_coupling '", name, "' has no CUDA kernel");
    return c;
}

__device__ __forceinline__ double map_value(Map m, double z) {
    switch (m) {
        case Map::ISWIGLU:
            return iswiglu_value(z);
        case Map::SOFTPLUS:
            return softplus_value(z);
    }
    return NAN;
}
template <class T>
__device__ __forceinline__ T map_slope(Map m, T z) {
    switch (m) {
        case Map::ISWIGLU:
            return iswiglu_slope(z);
        case Map::SOFTPLUS:
            return softplus_slope(z);
    }
    return T(NAN);
}

#define PLDR_GRID_LOOP(i, n)                                                  \
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
         i += int64_t(gridDim.x) * blockDim.x)

template <class T>
__global__ void __launch_bounds__(kThreads)
    map_forward_kernel(Map m, const T* Z, T* A_LM, int64_t n) {
    PLDR_GRID_LOOP(i, n) A_LM[i] = T(map_value(m, double(Z[i])));
}
template <class T>
__global__ void __launch_bounds__(kThreads)
    map_backward_kernel(Map m, T* dZ, const T* Z, int64_t n) {
    PLDR_GRID_LOOP(i, n) dZ[i] = dZ[i] * map_slope(m, Z[i]);
}
template <class T>
__global__ void __launch_bounds__(kThreads)
    coupling_forward_kernel(Coup c, const T* A_LM, const T* P, T* A_P, int64_t n) {
    PLDR_GRID_LOOP(i, n) {
        double v = NAN;
        switch (c) {
            case Coup::POWER:
                v = power_value(double(A_LM[i]), double(P[i]));
                break;
        }
        A_P[i] = T(v);
    }
}
template <class T>
__global__ void __launch_bounds__(kThreads)
    coupling_backward_kernel(Coup c, T* dA_LM, T* dP, const T* dA_P, const T* A_LM, const T* A_P,
                             const T* P, int64_t n) {
    PLDR_GRID_LOOP(i, n) {
        const T dap = dA_P[i];
        switch (c) {
            case Coup::POWER:
                dA_LM[i] = power_grad_alm(dap, A_LM[i], P[i]);
                dP[i] += power_grad_p(dap, A_LM[i], A_P[i]);
                break;
        }
    }
}

#undef PLDR_GRID_LOOP

}  // namespace

bool cuda_has_positive_map(const std::string& name) {
    Map m{};
    return map_of(name, m);
}
bool cuda_has_coupling(const std::string& name) {
    Coup c{};
    return coupling_of(name, c);
}

template <class T>
void positive_map_forward(const std::string& name, const T* Z, T* A_LM, int64_t n, Stream stream) {
    const Map m = require_map(name);
    PLDR_REQUIRE(n >= 0, "positive map: negative element count ", n);
    if (n == 0) return;
    map_forward_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(m, Z, A_LM, n);
    PLDR_CUDA_LAUNCHED("positive_map_forward");
}

template <class T>
void positive_map_backward(const std::string& name, T* dZ, const T* Z, const T*, int64_t n,
                           Stream stream) {
    const Map m = require_map(name);
    PLDR_REQUIRE(n >= 0, "positive map: negative element count ", n);
    if (n == 0) return;
    map_backward_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(m, dZ, Z, n);
    PLDR_CUDA_LAUNCHED("positive_map_backward");
}

template <class T>
void coupling_forward(const std::string& name, const T* A_LM, const T* P, T* A_P, int64_t n,
                      Stream stream) {
    const Coup c = require_coupling(name);
    PLDR_REQUIRE(n >= 0, "coupling: negative element count ", n);
    if (n == 0) return;
    coupling_forward_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(c, A_LM, P, A_P, n);
    PLDR_CUDA_LAUNCHED("coupling_forward");
}

template <class T>
void coupling_backward(const std::string& name, T* dA_LM, T* dP, const T* dA_P, const T* A_LM,
                       const T* A_P, const T* P, int64_t n, Stream stream) {
    const Coup c = require_coupling(name);
    PLDR_REQUIRE(n >= 0, "coupling: negative element count ", n);
    if (n == 0) return;
    coupling_backward_kernel<T>
        <<<grid_for(n), kThreads, 0, stream>>>(c, dA_LM, dP, dA_P, A_LM, A_P, P, n);
    PLDR_CUDA_LAUNCHED("coupling_backward");
}

#define PLDR_INSTANTIATE(T)                                                                      \
    template void positive_map_forward<T>(const std::string&, const T*, T*, int64_t, Stream);    \
    template void positive_map_backward<T>(const std::string&, T*, const T*, const T*, int64_t,  \
                                           Stream);                                              \
    template void coupling_forward<T>(const std::string&, const T*, const T*, T*, int64_t,       \
                                      Stream);                                                   \
    template void coupling_backward<T>(const std::string&, T*, T*, const T*, const T*, const T*, \
                                       const T*, int64_t, Stream);
PLDR_INSTANTIATE(float)
PLDR_INSTANTIATE(double)
#undef PLDR_INSTANTIATE

}  // namespace pldr::cuda
