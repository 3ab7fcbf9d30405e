// The rotation of one RoPE pair, forward and backward: ops/rope.cpp and the CUDA kernel
// (src/cuda/rope.cu) both run it (tests/test_cuda_shared.cpp checks the kernel's bits against
// rope_forward / rope_backward). c and s are the table's entries widened to T; (v0, v1) are the
// pair (2m, 2m+1) when interleaved, else (m, m + D/2).
//
// ops/rope.cpp passes round_input_f32 = false and rounds the inputs in a loop of its own before:
// with the rounding inside its rotation loop, GCC 12 at -O3 with AVX-512 (-march=native) dropped
// it in the vectorized float64 forward (right at -O2, with -march=x86-64-v3, or with
// -fno-tree-vectorize). The float64 golden tests catch that.
#pragma once
#include "core/hd.h"

namespace pldr {

// round_input_f32: the reference's x.float() before the rotation (float64 parity quirk).
template <typename T>
PLDR_HD inline void rope_rotate_pair(T& v0, T& v1, T c, T s, bool interleaved,
                                     bool round_input_f32) {
    T x0 = v0, x1 = v1;
    if (round_input_f32) {
        x0 = T(float(x0));
        x1 = T(float(x1));
    }
    if (interleaved) {
        v0 = x0 * c - x1 * s;
        v1 = x1 * c + x0 * s;
    } else {  // HF: x·cos + rotate_half(x)·sin
        v0 = x0 * c + (-x1) * s;
        v1 = x1 * c + x0 * s;
    }
}

// The transpose rotation of the gradient (the same for both layouts). round_grad_f32: the
// reference's autograd casts each product's gradient back to the float32 input and sums the two
// contributions in float32.
template <typename T>
PLDR_HD inline void rope_unrotate_pair(T& v0, T& v1, T c, T s, bool round_grad_f32) {
    const T d0 = v0, d1 = v1;
    if (round_grad_f32) {
        v0 = T(float(d0 * c) + float(d1 * s));
        v1 = T(float(d1 * c) - float(d0 * s));
    } else {
        v0 = d0 * c + d1 * s;
        v1 = d1 * c - d0 * s;
    }
}

}  // namespace pldr
