// Softmax over the last axis, forward and backward (src/ops/dense.cpp).
#pragma once
#include <cstdint>

namespace pldr {

// ---- softmax over the last axis (C) of N rows --------------------------------------------------
// causal ≥ 0: the rows are attention scores whose keys past column causal + n (row n) carry the
// causal mask (score − 1e9, plga attention). Where those entries sit more than 150 (float32; 800
// in float64) below the row's maximum, their exponentials are exactly 0, and the row's exponentials
// and sum are computed over its live columns only (rounded up to 16 columns, the vector lanes'
// groups): the same bits as the full row (the zeros the full row adds change no lane and no sum),
// at about half the work of a causal prefill or training step. Any other row takes the full path.
template <typename T>
void softmax_forward(T* y, const T* x, int64_t N, int64_t C, int64_t causal = -1);
// dx[N,C] += y ⊙ (dy − Σ y⊙dy). causal ≥ 0 as above: a row whose y is exactly 0 past its live
// columns (and whose Σ y⊙dy is finite) skips them; y·(dy − Σ) adds ±0 there, which leaves dx and
// the sum as they are.
template <typename T>
void softmax_backward(T* dx, const T* dy, const T* y, int64_t N, int64_t C, int64_t causal = -1);

}  // namespace pldr
