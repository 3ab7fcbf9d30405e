// One element of the AdamW update (train/adamw.h), written once (PLDR_HD) for the CPU's scalar
// path (train/adamw.cpp; its vector path performs the same correctly rounded operations, tested
// bit for bit) and the CUDA kernel (src/cuda/adamw.cu). With no contraction of a·b + c on either
// side (-ffp-contract=off, nvcc --fmad=false) and IEEE division and square root, both give the
// same bits.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/hd.h"
#include "train/adamw.h"

namespace pldr {

// The scalar factors of one update, computed in double and rounded once to T (adamw.h).
template <class T>
struct AdamWScalars {
    T decay, b1, omb1, b2, omb2, neg_step, bc2_sqrt, eps;
};
// Those of step count t ≥ 1 and learning rate lr ≥ 0; throws pldr::Error on bad arguments (as
// adamw_update).
template <class T>
AdamWScalars<T> adamw_scalars(int64_t t, double lr, const AdamWConfig& cfg);

template <class T>
PLDR_HD inline void adamw_element(T& p, T g, T& m, T& v, const AdamWScalars<T>& k) {
    const T pi = p * k.decay;                          // 1. p·(1 − lr·wd)
    const T mi = std::fma(g, k.omb1, m * k.b1);        // 2. fma(g, 1−β1, m·β1)
    const T vi = std::fma(k.omb2 * g, g, v * k.b2);    // 3. fma((1−β2)·g, g, v·β2)
    const T den = std::sqrt(vi) / k.bc2_sqrt + k.eps;  // 4. sqrt(v)/sqrt(1−β2^t) + eps
    p = pi + (k.neg_step * mi) / den;                  // 5. p + ((−step_size)·m)/den
    m = mi;
    v = vi;
}

}  // namespace pldr
