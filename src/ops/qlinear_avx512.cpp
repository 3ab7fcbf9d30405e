// The AVX-512 VNNI streaming kernel of ops/qlinear.h (q8_0 weights, q8_0 inputs). Only the
// functions here carry the target attribute, so the file builds and the program runs on any
// x86-64; qlinear::isa() calls them only on a CPU with AVX-512 F, BW, VL and VNNI.
//
// For one row of W and up to four input rows, groups of 8 blocks (256 weights, four 64-byte
// vectors): vpdpbusd multiplies unsigned by signed bytes, so the weights go in as |q_w| (128 for
// a stored −128, exact as an unsigned byte) and their sign goes onto the inputs through a mask
// (q_x negated where q_w < 0, exact as the inputs are within ±127; negating a weight of −128
// would wrap back to −128), then vpdpbusd sums each 4 products into one int32 lane: lanes
// 0–7 of a vector hold block 2k, lanes 8–15 block 2k + 1. Those 64 lanes are added into the 8
// exact block sums (two rounds of 128-bit shuffles and adds, one of 64-bit unpacks, one of
// 32-bit swaps, a permute), then one FMA per group into the row's 8 float32 lanes, as in
// rows_q8_scalar and rows_q8_avx2: all three give the same bits. The last group of a row, when
// it holds fewer than 256 weights, is read by masked loads (the inputs are zero past I).
#include "ops/qlinear.h"

#if defined(__x86_64__) || defined(__i386__)
// GCC 12's AVX-512 intrinsics start from self-initialized "undefined" vectors (`__m512i __Y =
// __Y;`), which -Wmaybe-uninitialized reports when they are inlined into a function compiled for
// another target (GCC bug 105593); the warning is off for the lines of those headers only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "ops/simd_x86.h"
#pragma GCC diagnostic pop

#include "core/error.h"

namespace pldr::qlinear {

namespace {

#define PLDR_AVX512 __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")))

using simd::hsum8;

// The exact int32 sums of 8 blocks of one input row: wa[k] the absolute weights of blocks 2k and
// 2k + 1 (zero past the row), wneg[k] their sign bits, xq the row's 256 input values. Lane k:
// block k.
PLDR_AVX512 inline __m256i block_sums(const __m512i* wa, const __mmask64* wneg, const int8_t* xq) {
    const __m512i zero = _mm512_setzero_si512();
    __m512i p[4];
    for (int k = 0; k < 4; ++k) {
        const __m512i x = _mm512_loadu_si512(xq + 64 * k);
        p[k] = _mm512_dpbusd_epi32(zero, wa[k], _mm512_mask_sub_epi8(x, wneg[k], zero, x));
    }
    // 128-bit lanes: p[k] = [b(2k).lo, b(2k).hi, b(2k+1).lo, b(2k+1).hi] (4 int32 each).
    // s03 lane j = 4 partial sums of block j, s47 lane j = of block 4 + j.
    const __m512i s03 = _mm512_add_epi32(_mm512_shuffle_i64x2(p[0], p[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                         _mm512_shuffle_i64x2(p[0], p[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i s47 = _mm512_add_epi32(_mm512_shuffle_i64x2(p[2], p[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                         _mm512_shuffle_i64x2(p[2], p[3], _MM_SHUFFLE(3, 1, 3, 1)));
    // lane j: [2 partials of block j, 2 partials of block 4 + j]
    const __m512i t =
        _mm512_add_epi32(_mm512_unpacklo_epi64(s03, s47), _mm512_unpackhi_epi64(s03, s47));
    // lane j: [block j, block j, block 4 + j, block 4 + j]
    const __m512i u = _mm512_add_epi32(t, _mm512_shuffle_epi32(t, _MM_PERM_CDAB));
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castsi512_si256(_mm512_permutexvar_epi32(order, u));
}

// Byte mask of [lo, hi) ∩ [0, 64).
PLDR_AVX512 inline __mmask64 byte_mask(int64_t lo, int64_t hi) {
    const int64_t a = lo < 0 ? 0 : lo > 64 ? 64 : lo, z = hi < a ? a : hi > 64 ? 64 : hi;
    const uint64_t m = z - a == 64 ? ~uint64_t(0) : ((uint64_t(1) << (z - a)) - 1) << a;
    return _cvtu64_mask64(m);
}

// sums[r] for the input rows n0 .. n0 + R − 1 and weight row (qw, sw).
template <int R>
PLDR_AVX512 void q8_row(const int8_t* qw, const float* sw, const Q8Rows& x, int64_t n0,
                        float* sums) {
    const int64_t I = x.I, nb = q8_blocks(I), groups = x.blocks / kQ8Group;
    const int64_t full = I / (kQ8Group * kQ8Block);  // groups of 256 weights within the row
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t g = 0; g < groups; ++g) {
        const int64_t i0 = g * kQ8Group * kQ8Block;
        __m512i w[4];
        __m256 swv;
        if (g < full) {
            for (int k = 0; k < 4; ++k) w[k] = _mm512_loadu_si512(qw + i0 + 64 * k);
            swv = _mm256_loadu_ps(sw + g * kQ8Group);
        } else {  // the last group: fewer than 256 weights, masked (no read past the row)
            for (int k = 0; k < 4; ++k)
                w[k] = _mm512_maskz_loadu_epi8(byte_mask(0, I - i0 - 64 * k), qw + i0 + 64 * k);
            const __mmask8 live = __mmask8((1u << (nb - g * kQ8Group)) - 1);
            swv = _mm256_maskz_loadu_ps(live, sw + g * kQ8Group);
        }
        __m512i wa[4];
        __mmask64 wneg[4];
        for (int k = 0; k < 4; ++k) {
            wa[k] = _mm512_abs_epi8(w[k]);
            wneg[k] = _mm512_movepi8_mask(w[k]);
        }
        for (int r = 0; r < R; ++r) {
            const __m256i s = block_sums(wa, wneg, x.qrow(n0 + r) + i0);
            const __m256 d = _mm256_mul_ps(swv, _mm256_loadu_ps(x.srow(n0 + r) + g * kQ8Group));
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, acc[r]);
        }
    }
    for (int r = 0; r < R; ++r) sums[r] = hsum8(acc[r]);
}

PLDR_AVX512 void rows_impl(float* out, const Q8Rows& x, const LinearWeight<float>& W,
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

#undef PLDR_AVX512

}  // namespace

// Without the target attribute (a declaration with another target would make a second version
// of the function): it only passes the call on.
void rows_q8_avx512(float* out, const Q8Rows& x, const LinearWeight<float>& W, const float* b,
                    int64_t O, int64_t o0, int64_t o1) {
    PLDR_CHECK(W.format == WeightFormat::Q8_0);
    rows_impl(out, x, W, b, O, o0, o1);
}

}  // namespace pldr::qlinear

#endif
