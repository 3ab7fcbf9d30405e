// Softmax over the last axis, forward and backward (src/ops/dense.cpp).
#pragma once
#include <cstdint>

namespace pldr {

// ---- softmax over the last axis (C) of N rows --------------------------------------------------
template <typename T>
void softmax_forward(T* y, const T* x, int64_t N, int64_t C);
// dx[N,C] += y ⊙ (dy − Σ y⊙dy)
template <typename T>
void softmax_backward(T* dx, const T* dy, const T* y, int64_t N, int64_t C);

}  // namespace pldr
