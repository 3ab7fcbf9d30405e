// Vectorized float32 exponentials over arrays, for the element-wise passes of the float32 path
// (SwiGLU, softmax, cross-entropy): SLEEF's exp (≤ 1 ulp) on 16 or 8 lanes where the build
// targets AVX-512 or AVX2, std::exp elsewhere and for the tails. The float64 path keeps its
// scalar std::exp and its summation order (the audit instrument's parity with the reference).
#pragma once
#include <cstdint>

namespace pldr::vmath {

// y[i] = exp(x[i] − shift); returns Σ y[i] summed in lanes (16 or 8 partial sums, then the
// tail), not left to right. x and y may be the same array.
float exp_shifted_sum(const float* x, float shift, float* y, int64_t n);

// y[i] = silu(x[i]) · g[i] (SwiGLU's gate, g may be null for silu alone). This and the backward
// below give each element the same bits wherever it sits in [0, n): every exp is the vector one,
// the ragged end padded (a range cut at any row gives the whole range's values).
void silu_mul(const float* x, const float* g, float* y, int64_t n);

// The SwiGLU backward of y = silu(h1)·h2 given dy: dh2 = dy·silu(h1), dh1 = dy·h2·silu'(h1);
// dh1 may alias dy, and dh1, dh2 may be h1, h2 themselves (each element's inputs are read before
// its outputs are written).
void silu_mul_backward(const float* dy, const float* h1, const float* h2, float* dh1, float* dh2,
                       int64_t n);

// Double precision, for the float32 path's operator G (evaluated in double, then rounded to
// float32, ops/plga.cpp): SLEEF's ≤ 1-ulp exp and pow on 8 or 4 lanes, std:: elsewhere and for
// the tails. The float64 path keeps std::exp and std::pow.
// y[i] = exp(x[i]); x and y may be the same array.
void exp_f64(const double* x, double* y, int64_t n);
// y[i] = pow(x[i], p[i]).
void pow_f64(const double* x, const double* p, double* y, int64_t n);

}  // namespace pldr::vmath
