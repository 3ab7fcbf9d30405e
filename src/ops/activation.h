// Scalar activations shared by the kernels: sigmoid, SiLU and its derivative. PLDR_HD: the CUDA
// kernels (src/cuda/) compile the same definitions.
#pragma once
#include <cmath>

#include "core/hd.h"

namespace pldr {

// ---- activations ---------------------------------------------------------------------------
template <typename T>
PLDR_HD inline T sigmoid(T x) {
    return T(1) / (T(1) + std::exp(-x));
}
template <typename T>
PLDR_HD inline T silu(T x) {
    return x / (T(1) + std::exp(-x));
}
// d silu / dx
template <typename T>
PLDR_HD inline T silu_grad(T x) {
    T s = sigmoid(x);
    return s * (T(1) + x * (T(1) - s));
}

}  // namespace pldr
