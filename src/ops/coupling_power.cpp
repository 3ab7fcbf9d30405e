// The power-law coupling (spec §1.8): A_P = A_LM^∘P, element-wise with the learned exponents P.
// Forward and backward of one registry entry (ops/plga_variants.h), the arithmetic in
// ops/plga_elementwise.h; docs/plga.md §2–3.
#include "core/vmath.h"
#include "ops/plga_elementwise.h"
#include "ops/plga_variants.h"

namespace pldr {

namespace {

template <typename T>
void power_forward(const T* A_LM, const T* P, T* A_P, int64_t n) {
    for (int64_t i = 0; i < n; ++i) A_P[i] = power_value(A_LM[i], P[i]);
}

// d(x^p)/dx = p·x^(p−1) (as torch evaluates it); d(x^p)/dp = x^p·log x.
template <typename T>
void power_backward(T* dA_LM, T* dP, const T* dA_P, const T* A_LM, const T* A_P, const T* P,
                    int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const T dap = dA_P[i];
        dA_LM[i] = power_grad_alm(dap, A_LM[i], P[i]);
        dP[i] += power_grad_p(dap, A_LM[i], A_P[i]);
    }
}

}  // namespace

PLDR_COUPLING_VEC(kCouplingPower, "power", "A_LM^∘P", power_forward, power_backward,
                  vmath::pow_f64);

}  // namespace pldr
