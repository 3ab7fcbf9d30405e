// The AVX2 + FMA streaming kernel of ops/qlinear.h for q8_0 weights (bf16 weights go through
// the float32 rows kernel, ops/dense_rows.cpp). Only the functions here carry the target
// attribute, so the file builds and the program runs on any x86-64; qlinear::isa() calls them
// only on a CPU with AVX2 and FMA.
//
// q8_0 weights, q8_0 inputs (ops/qlinear.h Q8Rows): for one row of W and up to four input rows,
// groups of 8 blocks (256 weights): per block the exact int32 sum Σ q_w·q_x, by the sign trick
// (vpmaddubsw takes an unsigned and a signed operand: |q_w| times q_x with the sign of q_w, in
// int16 pairs ≤ 2·128·127, then vpmaddwd by ones to int32), the 8 blocks' lanes added into one
// vector of 8 block sums (vphaddd), then one FMA per group into the row's 8 float32 lanes
// (lane j: the blocks ≡ j mod 8, the order of rows_q8_scalar). The last group of a row, when it
// holds fewer than 256 weights, is copied into a zero-padded buffer (the inputs are zero past I).
// A row of W is a few KB, so it is read from memory once and from L1 for the following input
// rows.
//
// The sign goes onto the inputs, never onto the weights: a stored weight may be −128 (a legal I8
// value the loader accepts), whose negation wraps back to −128 in int8, while |−128| = 128 is
// exact as the unsigned operand, and the inputs are within ±127 (Q8Rows), so negating them is
// exact.
#include "ops/qlinear.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "ops/simd_x86.h"

#include <cstring>

#include "core/error.h"

namespace pldr::qlinear {

namespace {

#define PLDR_AVX2 __attribute__((target("avx2,fma")))

using simd::hsum8;

// The exact int32 sums of 8 blocks of one input row: w[k] the 32 weights of block k (zero past
// the row), wa[k] their absolute values (as unsigned bytes: 128 for −128), xq the row's 256
// input values. Lane k of the result: block k.
PLDR_AVX2 inline __m256i q8_block_sums(const __m256i* w, const __m256i* wa, const int8_t* xq) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i p[8];
    for (int k = 0; k < 8; ++k) {
        const __m256i s =
            _mm256_sign_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq) + k), w[k]);
        p[k] = _mm256_madd_epi16(_mm256_maddubs_epi16(wa[k], s), ones);  // 8 lanes of block k
    }
    // Per 128-bit half h: [Σ lanes 4h..4h+3 of p0, p1, p2, p3], then of p4..p7.
    const __m256i h03 =
        _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
    const __m256i h47 =
        _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(h03, h47, 0x20),
                            _mm256_permute2x128_si256(h03, h47, 0x31));
}

// sums[r] for the input rows n0 .. n0 + R − 1 and weight row (qw, sw).
template <int R>
PLDR_AVX2 void q8_row(const int8_t* qw, const float* sw, const Q8Rows& x, int64_t n0, float* sums) {
    const int64_t I = x.I, nb = q8_blocks(I), groups = x.blocks / kQ8Group;
    const int64_t full = I / (kQ8Group * kQ8Block);  // groups of 256 weights within the row
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    alignas(32) int8_t tail[kQ8Group * kQ8Block];
    for (int64_t g = 0; g < groups; ++g) {
        const int64_t i0 = g * kQ8Group * kQ8Block;
        const int8_t* wp = qw + i0;
        __m256 swv;
        if (g < full) {
            swv = _mm256_loadu_ps(sw + g * kQ8Group);
        } else {  // the last group: fewer than 256 weights (blocks past the row are zero)
            std::memset(tail, 0, sizeof tail);
            std::memcpy(tail, wp, size_t(I - i0));
            wp = tail;
            const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            const __m256i live =
                _mm256_cmpgt_epi32(_mm256_set1_epi32(int(nb - g * kQ8Group)), lane);
            swv = _mm256_maskload_ps(sw + g * kQ8Group, live);
        }
        __m256i w[8], wa[8];
        for (int k = 0; k < 8; ++k) {
            w[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp) + k);
            wa[k] = _mm256_abs_epi8(w[k]);
        }
        for (int r = 0; r < R; ++r) {
            const __m256i s = q8_block_sums(w, wa, x.qrow(n0 + r) + i0);
            const __m256 d = _mm256_mul_ps(swv, _mm256_loadu_ps(x.srow(n0 + r) + g * kQ8Group));
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, acc[r]);
        }
    }
    for (int r = 0; r < R; ++r) sums[r] = hsum8(acc[r]);
}

PLDR_AVX2 void rows_q8_impl(float* out, const Q8Rows& x, const LinearWeight<float>& W,
                            const float* b, int64_t O, int64_t o0, int64_t o1) {
    const int64_t I = x.I, nb = q8_blocks(I);
    float sums[4];
    for (int64_t o = o0; o < o1; ++o) {
        const int8_t* qw = W.q8 + o * I;
        const float* sw = W.q8_scale + o * nb;
        for (int64_t n0 = 0; n0 < x.N; n0 += 4) {
            const int64_t R = x.N - n0 < 4 ? x.N - n0 : 4;
            switch (R) {
                case 1:
                    q8_row<1>(qw, sw, x, n0, sums);
                    break;
                case 2:
                    q8_row<2>(qw, sw, x, n0, sums);
                    break;
                case 3:
                    q8_row<3>(qw, sw, x, n0, sums);
                    break;
                default:
                    q8_row<4>(qw, sw, x, n0, sums);
                    break;
            }
            for (int64_t r = 0; r < R; ++r) out[(n0 + r) * O + o] = b ? sums[r] + b[o] : sums[r];
        }
    }
}

#undef PLDR_AVX2

}  // namespace

// Without the target attribute (a declaration with another target would make a second version
// of the function): it only passes the call on.
void rows_q8_avx2(float* out, const Q8Rows& x, const LinearWeight<float>& W, const float* b,
                  int64_t O, int64_t o0, int64_t o1) {
    PLDR_CHECK(W.format == WeightFormat::Q8_0);
    rows_q8_impl(out, x, W, b, O, o0, o1);
}

}  // namespace pldr::qlinear

#endif
