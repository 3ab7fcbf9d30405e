// LayerNorm over the last axis, forward and backward (src/ops/dense.cpp).
#pragma once
#include <cstdint>

namespace pldr {

// ---- layernorm over the last axis (C), biased variance; saves mean and rstd [N] ---------------
template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* x, const T* g, const T* b, int64_t N,
                       int64_t C, double eps);
template <typename T>
void layernorm_backward(T* dx, T* dg, T* db, const T* dout, const T* x, const T* mean,
                        const T* rstd, const T* g, int64_t N, int64_t C);

}  // namespace pldr
