// The positive map iSwiGLU (the PLDR-LLM default, spec §1.8): A_LM = Z·silu(Z) + 1e-9.
// Forward and backward of one registry entry (ops/plga_variants.h), the arithmetic in
// ops/plga_elementwise.h; docs/plga.md §2–3.
#include <algorithm>

#include "core/vmath.h"
#include "ops/plga_elementwise.h"
#include "ops/plga_variants.h"

namespace pldr {

namespace {

template <typename T>
void iswiglu_forward(const T* Z, T* A_LM, int64_t n) {
    for (int64_t i = 0; i < n; ++i) A_LM[i] = iswiglu_value(Z[i]);
}

// The forward with a vectorized exp (the float32 path): Z·(Z / (1 + exp(−Z))) + 1e-9, as
// silu in ops/activation.h.
void iswiglu_forward_vec(const double* Z, double* A_LM, int64_t n) {
    constexpr int64_t kChunk = 256;
    double e[kChunk];
    for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
        const int64_t m = std::min(kChunk, n - i0);
        for (int64_t i = 0; i < m; ++i) e[i] = -Z[i0 + i];
        vmath::exp_f64(e, e, m);
        for (int64_t i = 0; i < m; ++i) {
            const double z = Z[i0 + i];
            A_LM[i0 + i] = z * (z / (1.0 + e[i])) + 1e-9;
        }
    }
}

// d(Z·silu(Z))/dZ = silu(Z) + Z·silu'(Z).
template <typename T>
void iswiglu_backward(T* dZ, const T* Z, const T*, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dZ[i] = dZ[i] * iswiglu_slope(Z[i]);
}

}  // namespace

PLDR_POSITIVE_MAP_VEC(kPositiveMapIswiglu, "iswiglu", "Z·silu(Z) + 1e-9", iswiglu_forward,
                      iswiglu_backward, iswiglu_forward_vec);

}  // namespace pldr
