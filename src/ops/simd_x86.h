// Small x86 SIMD helpers shared by the kernels behind target attributes (dense_rows.cpp,
// qlinear_avx2.cpp, qlinear_avx512.cpp). Only these functions carry the attribute, so the files
// build for any x86-64; callers run them only on a CPU with the instructions.
#pragma once
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

namespace pldr::simd {

// The 8 lanes of v summed in one fixed order: (lo + hi) halves, then pairs, then the last two.
// Every kernel (and so every instruction set) that must give the same bits reduces this way.
__attribute__((target("avx2,fma"))) inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

}  // namespace pldr::simd
#endif
