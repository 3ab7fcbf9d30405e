// The AVX2 + FMA streaming kernels of ops/qlinear.h (bf16 and q8_0 weights, float32 inputs and
// sums). Only the functions here carry the target attribute, so the file builds and the program
// runs on any x86-64; qlinear::isa() calls them only on a CPU with AVX2 and FMA.
//
// For one row of W and up to four input rows at a time: each block of 32 weights is widened to
// four float32 vectors once (q8_0: int8 → int32 → float, times the block's scale, which is the
// dequantized weight float(q)·scale exactly; bf16: the bits shifted into a float), then
// multiplied into every input row with FMAs, K independent accumulators per row to hide the FMA
// latency. The ragged end of a row (I % 32 inputs) is done in scalar code. A row of W is a few
// KB, so it is read from memory once and from L1 for the following groups of input rows.
#include "ops/qlinear.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

namespace pldr::qlinear {

namespace {

#define PLDR_AVX2 __attribute__((target("avx2,fma")))

PLDR_AVX2 inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// Eight bf16 weights.
PLDR_AVX2 inline __m256 bf16_load8(const uint16_t* w) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// sums[r] = Σ_i x[r·I + i] · W_row[i] for r < R, over the 32-wide blocks of the row; the caller
// adds the ragged end. F loads the four weight vectors of block `blk`.
template <int R, typename F>
PLDR_AVX2 inline void row_blocks(const float* x, int64_t I, int64_t full, const F& load,
                                 float* sums) {
    constexpr int K = R <= 2 ? 4 : 2;  // accumulators per input row
    __m256 acc[R][K];
    for (int r = 0; r < R; ++r)
        for (int k = 0; k < K; ++k) acc[r][k] = _mm256_setzero_ps();
    for (int64_t blk = 0; blk < full; ++blk) {
        __m256 w[4];
        load(blk, w);
        for (int r = 0; r < R; ++r) {
            const float* xr = x + r * I + blk * kQ8Block;
            for (int k = 0; k < 4; ++k)
                acc[r][k % K] = _mm256_fmadd_ps(w[k], _mm256_loadu_ps(xr + 8 * k), acc[r][k % K]);
        }
    }
    for (int r = 0; r < R; ++r) {
        __m256 a = acc[r][0];
        for (int k = 1; k < K; ++k) a = _mm256_add_ps(a, acc[r][k]);
        sums[r] = hsum(a);
    }
}

// Eight q8_0 values as floats (unscaled).
PLDR_AVX2 inline __m256 q8_int8(const int8_t* q) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
}

// q8_0 blocks: per block and input row, t = Σ float(q)·x over the 32 inputs (8 lanes), then
// acc += t · scale: one multiply by the scale per block instead of one per weight (the products
// differ from those with the rounded weights float(q)·scale by at most one rounding each).
struct Q8Row {
    const int8_t* q;
    const float* scale;
    template <int R>
    PLDR_AVX2 void blocks(const float* x, int64_t I, int64_t full, float* sums) const {
        __m256 acc[R];
        for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
        for (int64_t blk = 0; blk < full; ++blk) {
            const int8_t* qb = q + blk * kQ8Block;
            const __m256 w0 = q8_int8(qb), w1 = q8_int8(qb + 8), w2 = q8_int8(qb + 16),
                         w3 = q8_int8(qb + 24);
            const __m256 s = _mm256_set1_ps(scale[blk]);
            for (int r = 0; r < R; ++r) {
                const float* xr = x + r * I + blk * kQ8Block;
                __m256 t = _mm256_mul_ps(w0, _mm256_loadu_ps(xr));
                t = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xr + 8), t);
                t = _mm256_fmadd_ps(w2, _mm256_loadu_ps(xr + 16), t);
                t = _mm256_fmadd_ps(w3, _mm256_loadu_ps(xr + 24), t);
                acc[r] = _mm256_fmadd_ps(t, s, acc[r]);
            }
        }
        for (int r = 0; r < R; ++r) sums[r] = hsum(acc[r]);
    }
    float value(int64_t i) const { return q8_value(q[i], scale[i / kQ8Block]); }
};
struct Bf16Row {
    const uint16_t* w;
    template <int R>
    PLDR_AVX2 void blocks(const float* x, int64_t I, int64_t full, float* sums) const {
        row_blocks<R>(x, I, full, *this, sums);
    }
    PLDR_AVX2 void operator()(int64_t blk, __m256* out) const {
        const uint16_t* p = w + blk * kQ8Block;
        out[0] = bf16_load8(p);
        out[1] = bf16_load8(p + 8);
        out[2] = bf16_load8(p + 16);
        out[3] = bf16_load8(p + 24);
    }
    float value(int64_t i) const { return bf16_value(w[i]); }
};

// The whole row: the 32-wide blocks, then the ragged end in scalar code.
template <int R, typename Row>
PLDR_AVX2 void row_dot(const Row& row, const float* x, int64_t I, float* sums) {
    const int64_t full = I / kQ8Block;
    row.template blocks<R>(x, I, full, sums);
    for (int64_t i = full * kQ8Block; i < I; ++i) {
        const float wi = row.value(i);
        for (int r = 0; r < R; ++r) sums[r] += wi * x[r * I + i];
    }
}

template <int R>
PLDR_AVX2 void one_row(const LinearWeight<float>& W, int64_t o, const float* x, int64_t I,
                       float* sums) {
    if (W.format == WeightFormat::Q8_0)
        row_dot<R>(Q8Row{W.q8 + o * I, W.q8_scale + o * q8_blocks(I)}, x, I, sums);
    else
        row_dot<R>(Bf16Row{W.bf16 + o * I}, x, I, sums);
}

PLDR_AVX2 void rows_impl(float* out, const float* in, const LinearWeight<float>& W, const float* b,
                         int64_t N, int64_t I, int64_t O, int64_t o0, int64_t o1) {
    float sums[4];
    for (int64_t o = o0; o < o1; ++o) {
        for (int64_t n0 = 0; n0 < N; n0 += 4) {
            const int64_t R = N - n0 < 4 ? N - n0 : 4;
            const float* x = in + n0 * I;
            switch (R) {
                case 1:
                    one_row<1>(W, o, x, I, sums);
                    break;
                case 2:
                    one_row<2>(W, o, x, I, sums);
                    break;
                case 3:
                    one_row<3>(W, o, x, I, sums);
                    break;
                default:
                    one_row<4>(W, o, x, I, sums);
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
void rows_avx2(float* out, const float* in, const LinearWeight<float>& W, const float* b, int64_t N,
               int64_t I, int64_t O, int64_t o0, int64_t o1) {
    rows_impl(out, in, W, b, N, I, O, o0, o1);
}

}  // namespace pldr::qlinear

#endif
