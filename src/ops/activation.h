// Scalar activations shared by the kernels: sigmoid, SiLU and its derivative.
#pragma once
#include <cmath>

namespace pldr {

// ---- activations ---------------------------------------------------------------------------
template <typename T>
inline T sigmoid(T x) {
    return T(1) / (T(1) + std::exp(-x));
}
template <typename T>
inline T silu(T x) {
    return x / (T(1) + std::exp(-x));
}
// d silu / dx
template <typename T>
inline T silu_grad(T x) {
    T s = sigmoid(x);
    return s * (T(1) + x * (T(1) - s));
}

}  // namespace pldr
