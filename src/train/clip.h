// Gradient clipping and finiteness checks over a flat gradient buffer (spec §5.2: the
// reference clips by value, each element clamped to [−1, 1]; HF fine-tuning clips by norm).
#pragma once
#include <cstdint>

namespace pldr {

// Clamps every element to [−limit, limit] (torch `clip_grad_value_` / `clamp_`) and returns
// the number of elements with |g| > limit, counted before clipping (the reference's
// `grad_elements_clipped`). NaN elements stay NaN and are not counted. limit must be finite
// and ≥ 0.
template <class T>
int64_t clip_by_value(T* g, int64_t n, T limit);

// Σ g[i]² in double, over fixed blocks of 32768 elements (each block in 16 interleaved lanes,
// lane k summing its elements k, k + 16, ... in order, the lanes then added in order; the blocks'
// sums then added in order): the same bits on any thread count, with the blocks on the OpenMP
// team. Up to 16 elements, the plain sequential sum.
template <class T>
double sum_of_squares(const T* g, int64_t n);

// One read of a gradient buffer for a training step: sum_of_squares (the same bits) and the
// number of elements with |g| > limit (clip_by_value's count; limit = ∞ counts none). A finite
// sum_sq means every element is finite (squares are ≥ 0, so inf and NaN propagate); a
// non-finite one may still come from finite float64 elements whose squares overflow, which
// all_finite tells apart.
struct GradPass {
    double sum_sq = 0.0;
    int64_t over = 0;
};
template <class T>
GradPass grad_pass(const T* g, int64_t n, T limit);

// clip_by_global_norm's scaling with the norm already known (from grad_pass): a non-finite norm
// leaves g untouched.
template <class T>
void scale_to_norm(T* g, int64_t n, double max_norm, double norm);

// torch `clip_grad_norm_` (norm type 2) over one flat buffer: the total 2-norm (sum_of_squares)
// is accumulated in double; if max_norm / (norm + 1e-6) < 1, every element is multiplied by that
// factor (rounded once to T). Returns the norm before clipping. A non-finite norm (inf/NaN in the
// gradients) leaves g untouched and is returned as is, so the caller can skip the step
// (torch would scale by 0 or NaN instead). max_norm must be finite and > 0.
template <class T>
double clip_by_global_norm(T* g, int64_t n, double max_norm);

// True when no element is inf or NaN.
template <class T>
bool all_finite(const T* g, int64_t n);

}  // namespace pldr
