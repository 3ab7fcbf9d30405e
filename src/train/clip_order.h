// The element arithmetic and the summation order of gradient clipping (train/clip.h), written
// once (PLDR_HD) for the CPU (train/clip.cpp) and the CUDA kernels (src/cuda/clip.cu), so that the
// GPU's global norm has the CPU's bits.
//
// sum_of_squares' order: the buffer in blocks of kGradSumBlock elements; in a block, lane k
// (k < kGradSumLanes) sums x² of the elements k, k + 16, k + 32, ... in order, in double, from
// +0; the block's sum is lane 0 + lane 1 + ... + lane 15, in order, from +0; the total is the
// blocks' sums added in order, from +0. (The CPU keeps the 16 lanes in vector registers; the
// GPU gives each (block, lane) a thread.)
#pragma once
#include <cstdint>

#include "core/hd.h"

namespace pldr {

constexpr int64_t kGradSumBlock = int64_t(1) << 15;
constexpr int kGradSumLanes = 16;

// Σ x² over lane k of a block of len elements.
template <class T>
PLDR_HD inline double grad_lane_sum_sq(const T* block, int64_t len, int k) {
    double s = 0.0;
    for (int64_t i = k; i < len; i += kGradSumLanes) {
        const double x = double(block[i]);
        s += x * x;
    }
    return s;
}

// 1 when |x| > limit (NaN: 0), the count clip_by_value reports.
template <class T>
PLDR_HD inline int64_t grad_over(T x, T limit) {
    return int64_t(x > limit) + int64_t(x < -limit);
}

// x clamped to [lo, limit] with lo = −limit (torch clamp_: NaN stays NaN).
template <class T>
PLDR_HD inline T clip_value_element(T x, T limit, T lo) {
    return x > limit ? limit : x < lo ? lo : x;
}

}  // namespace pldr
