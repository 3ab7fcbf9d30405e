// The positive map iSwiGLU (the PLDR-LLM default, spec §1.8): A_LM = Z·silu(Z) + 1e-9.
// Forward and backward of one registry entry (ops/plga_variants.h); docs/plga.md §2–3.
#include "ops/activation.h"
#include "ops/plga_variants.h"

namespace pldr {

namespace {

template <typename T>
void iswiglu_forward(const T* Z, T* A_LM, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
        A_LM[i] = Z[i] * silu(Z[i]) + T(1e-9);  // iSwiGLU(x) = x·silu(x), then the floor
}

// d(Z·silu(Z))/dZ = silu(Z) + Z·silu'(Z).
template <typename T>
void iswiglu_backward(T* dZ, const T* Z, const T*, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const T z = Z[i];
        dZ[i] = dZ[i] * (silu(z) + z * silu_grad(z));
    }
}

}  // namespace

PLDR_POSITIVE_MAP(kPositiveMapIswiglu, "iswiglu", "Z·silu(Z) + 1e-9", iswiglu_forward,
                  iswiglu_backward);

}  // namespace pldr
