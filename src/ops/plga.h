// The PLGA core operator G_LM (spec §1.8) for one head, forward and backward (src/ops/plga.cpp):
//   Z = W·A + b;  A_LM = f(Z);  A_P = c(A_LM, P);  G = a·A_P + b_a        (each D×D)
// f is the positive map and c the coupling of the options (ops/plga_variants.h); the PLDR-LLM
// defaults are iSwiGLU, f(Z) = Z·silu(Z) + 1e-9, and the power law, c = A_LM^∘P.
#pragma once
#include <cstdint>

#include "ops/plga_variants.h"

namespace pldr {

// Which operator: its variants and the head dimension.
struct PlgaOptions {
    const PositiveMap* positive_map = nullptr;
    const Coupling* coupling = nullptr;
    int64_t D = 0;
};
// A model's options are its config's (plga_options, model/plga_attention.h).

// One head's parameters (each D×D, U = const T), or their gradients (U = T) ...
template <typename U>
struct PlgaParams {
    U *W, *b, *P, *a, *ba;
};
// ... and the operator's saved outputs: written by the forward (U = T), read by the backward
// (U = const T).
template <typename U>
struct PlgaSaved {
    U *Z, *A_LM, *A_P, *G;
};

// Computes every saved output from A and the parameters.
template <typename T>
void plga_g_forward(const PlgaOptions& o, const PlgaParams<const T>& p, const T* A,
                    const PlgaSaved<T>& out);

// Gradients reaching the operator: dG, plus optional extra dA_LM and dA_P from other losses
// (the DAG regularizer; null when absent).
template <typename T>
struct PlgaOutGrads {
    const T* dG = nullptr;
    const T* dA_LM = nullptr;
    const T* dA_P = nullptr;
};

// Accumulates into dA and the parameter gradients g. scratch: 2·D·D.
template <typename T>
void plga_g_backward(const PlgaOptions& o, const PlgaParams<const T>& p, const T* A,
                     const PlgaSaved<const T>& s, const PlgaOutGrads<T>& dout, T* dA,
                     const PlgaParams<T>& g, T* scratch);

}  // namespace pldr
