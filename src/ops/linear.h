// Linear layer, forward and backward (src/ops/dense.cpp).
#pragma once
#include <cstdint>

namespace pldr {

// ---- linear: out[N,O] = in[N,I] · W[O,I]ᵀ + b[O] (b may be null) --------------------------------
template <typename T>
void linear_forward(T* out, const T* in, const T* W, const T* b, int64_t N, int64_t I, int64_t O);
// din[N,I] += dout·W (din may be null); dW[O,I] += doutᵀ·in; db[O] += Σ_n dout (db may be null).
template <typename T>
void linear_backward(T* din, T* dW, T* db, const T* dout, const T* in, const T* W, int64_t N,
                     int64_t I, int64_t O);

}  // namespace pldr
