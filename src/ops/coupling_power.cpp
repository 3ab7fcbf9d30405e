// The power-law coupling (spec §1.8): A_P = A_LM^∘P, element-wise with the learned exponents P.
// Forward and backward of one registry entry (ops/plga_variants.h); docs/plga.md §2–3.
#include <cmath>

#include "core/vmath.h"
#include "ops/plga_variants.h"

namespace pldr {

namespace {

template <typename T>
void power_forward(const T* A_LM, const T* P, T* A_P, int64_t n) {
    for (int64_t i = 0; i < n; ++i) A_P[i] = std::pow(A_LM[i], P[i]);
}

// d(x^p)/dx = p·x^(p−1) (as torch evaluates it); d(x^p)/dp = x^p·log x.
template <typename T>
void power_backward(T* dA_LM, T* dP, const T* dA_P, const T* A_LM, const T* A_P, const T* P,
                    int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const T dap = dA_P[i];
        dA_LM[i] = dap * (P[i] * std::pow(A_LM[i], P[i] - T(1)));
        dP[i] += dap * (A_P[i] * std::log(A_LM[i]));
    }
}

}  // namespace

PLDR_COUPLING_VEC(kCouplingPower, "power", "A_LM^∘P", power_forward, power_backward,
                  vmath::pow_f64);

}  // namespace pldr
