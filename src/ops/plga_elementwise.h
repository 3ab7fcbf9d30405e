// The element-wise arithmetic of the registered PLGA variants (ops/plga_variants.h), written once
// (PLDR_HD) for the CPU kernel files (ops/positive_map_*.cpp, ops/coupling_*.cpp) and the CUDA
// kernels (src/cuda/plga.cu). A new variant adds its two or three functions here, its kernel file,
// and its case in src/cuda/plga.cu (tests/test_cuda_shared.cpp fails until the GPU knows it).
#pragma once
#include <cmath>

#include "core/hd.h"
#include "ops/activation.h"

namespace pldr {

// ---- positive maps: A_LM = f(Z), and the slope f'(Z) that the backward multiplies dA_LM by ----

// iSwiGLU (the PLDR-LLM default): f(z) = z·silu(z) + 1e-9.
template <typename T>
PLDR_HD inline T iswiglu_value(T z) {
    return z * silu(z) + T(1e-9);  // iSwiGLU(x) = x·silu(x), then the floor
}
// d(z·silu(z))/dz = silu(z) + z·silu'(z).
template <typename T>
PLDR_HD inline T iswiglu_slope(T z) {
    return silu(z) + z * silu_grad(z);
}

// softplus: f(z) = log(1 + e^z) + 1e-9, without overflow: max(z, 0) + log1p(e^−|z|). (z < 0 ? 0
// : z is std::max(z, 0) to the bit, −0 and NaN included; nvcc refuses std::max in device code.)
template <typename T>
PLDR_HD inline T softplus_value(T z) {
    return (z < T(0) ? T(0) : z) + std::log1p(std::exp(-std::fabs(z))) + T(1e-9);
}
// d softplus(z)/dz = σ(z).
template <typename T>
PLDR_HD inline T softplus_slope(T z) {
    return sigmoid(z);
}

// ---- couplings: A_P = c(A_LM, P), and the two partial derivatives times dA_P ------------------

// The power law: A_P = A_LM^P.
template <typename T>
PLDR_HD inline T power_value(T alm, T p) {
    return std::pow(alm, p);
}
// dA_P · d(x^p)/dx = dA_P · p·x^(p−1) (as torch evaluates it).
template <typename T>
PLDR_HD inline T power_grad_alm(T dap, T alm, T p) {
    return dap * (p * std::pow(alm, p - T(1)));
}
// dA_P · d(x^p)/dp = dA_P · x^p·log x.
template <typename T>
PLDR_HD inline T power_grad_p(T dap, T alm, T ap) {
    return dap * (ap * std::log(alm));
}

}  // namespace pldr
