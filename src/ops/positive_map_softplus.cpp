// The positive map softplus: A_LM = softplus(Z) + 1e-9 = log(1 + e^Z) + 1e-9.
// Forward and backward of one registry entry (ops/plga_variants.h), the arithmetic in
// ops/plga_elementwise.h; docs/plga.md §2.
#include "ops/plga_elementwise.h"
#include "ops/plga_variants.h"

namespace pldr {

namespace {

// log(1 + e^z) without overflow: max(z, 0) + log1p(e^−|z|).
template <typename T>
void softplus_forward(const T* Z, T* A_LM, int64_t n) {
    for (int64_t i = 0; i < n; ++i) A_LM[i] = softplus_value(Z[i]);
}

// d softplus(z)/dz = σ(z).
template <typename T>
void softplus_backward(T* dZ, const T* Z, const T*, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dZ[i] = dZ[i] * softplus_slope(Z[i]);
}

}  // namespace

PLDR_POSITIVE_MAP(kPositiveMapSoftplus, "softplus", "softplus(Z) + 1e-9", softplus_forward,
                  softplus_backward);

}  // namespace pldr
