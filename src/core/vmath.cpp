// See core/vmath.h.
#include "core/vmath.h"

#include <algorithm>
#include <cmath>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#include <sleef.h>
#endif

namespace pldr::vmath {

namespace {

// y[i] = exp(x[i]) for i < n rounded down to the lanes; returns how many were done.
int64_t exp_body(const float* x, float* y, int64_t n) {
    int64_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, Sleef_expf16_u10(_mm512_loadu_ps(x + i)));
#elif defined(__AVX2__)
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, Sleef_expf8_u10(_mm256_loadu_ps(x + i)));
#else
    (void)x;
    (void)y;
    (void)n;
#endif
    return i;
}

// Elements per pass of the two-step loops below (on the stack): a multiple of the lanes.
constexpr int64_t kChunk = 512;

// e[i] = exp(e[i]) for i < m ≤ kChunk, in place in a buffer of kChunk, every element through the
// vector function: the ragged end too, padded with zeros up to the lanes. An element's value then
// does not depend on where it sits in the range a caller passes (a prompt's rows split over the
// threads at any row: model/plga_layer.cpp), as it did with std::exp for the last m % 16.
void exp_chunk(float* e, int64_t m) {
    const int64_t padded = std::min(kChunk, (m + 15) / 16 * 16);
    std::fill(e + m, e + padded, 0.0f);
    const int64_t done = exp_body(e, e, padded);
    for (int64_t i = done; i < m; ++i) e[i] = std::exp(e[i]);
}

}  // namespace

float exp_shifted_sum(const float* x, float shift, float* y, int64_t n) {
    int64_t i = 0;
    float total = 0;
#if defined(__AVX512F__)
    const __m512 s = _mm512_set1_ps(shift);
    __m512 acc = _mm512_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        const __m512 e = Sleef_expf16_u10(_mm512_sub_ps(_mm512_loadu_ps(x + i), s));
        _mm512_storeu_ps(y + i, e);
        acc = _mm512_add_ps(acc, e);
    }
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, acc);
    for (float v : lanes) total += v;
#elif defined(__AVX2__)
    const __m256 s = _mm256_set1_ps(shift);
    __m256 acc = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) {
        const __m256 e = Sleef_expf8_u10(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
        _mm256_storeu_ps(y + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc);
    for (float v : lanes) total += v;
#endif
    for (; i < n; ++i) total += (y[i] = std::exp(x[i] - shift));
    return total;
}

void silu_mul(const float* x, const float* g, float* y, int64_t n) {
    float e[kChunk];
    for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
        const int64_t m = std::min(kChunk, n - i0);
        for (int64_t i = 0; i < m; ++i) e[i] = -x[i0 + i];
        exp_chunk(e, m);
        if (g) {
            for (int64_t i = 0; i < m; ++i) y[i0 + i] = x[i0 + i] / (1.0f + e[i]) * g[i0 + i];
        } else {
            for (int64_t i = 0; i < m; ++i) y[i0 + i] = x[i0 + i] / (1.0f + e[i]);
        }
    }
}

void silu_mul_backward(const float* dy, const float* h1, const float* h2, float* dh1, float* dh2,
                       int64_t n) {
    // A chunk's results go to local buffers first and out after: the outputs may alias the
    // inputs (dh1 = dy, or dh1 = h1 and dh2 = h2), and locals keep the arithmetic loop free of
    // aliasing, so that it vectorizes whatever the caller passes.
    float e[kChunk], a[kChunk], b[kChunk];
    for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
        const int64_t m = std::min(kChunk, n - i0);
        for (int64_t i = 0; i < m; ++i) e[i] = -h1[i0 + i];
        exp_chunk(e, m);
        for (int64_t i = 0; i < m; ++i) {
            const float x = h1[i0 + i], d = dy[i0 + i], g = h2[i0 + i];
            const float sg = 1.0f / (1.0f + e[i]);  // sigmoid(x)
            a[i] = d * (x / (1.0f + e[i]));         // dh2 = dy·silu(x), as ops/activation.h
            b[i] = d * g * (sg * (1.0f + x * (1.0f - sg)));  // dh1
        }
        std::copy(a, a + m, dh2 + i0);
        std::copy(b, b + m, dh1 + i0);
    }
}

void exp_f64(const double* x, double* y, int64_t n) {
    int64_t i = 0;
#if defined(__AVX512F__)
    for (; i + 8 <= n; i += 8) _mm512_storeu_pd(y + i, Sleef_expd8_u10(_mm512_loadu_pd(x + i)));
#elif defined(__AVX2__)
    for (; i + 4 <= n; i += 4) _mm256_storeu_pd(y + i, Sleef_expd4_u10(_mm256_loadu_pd(x + i)));
#endif
    for (; i < n; ++i) y[i] = std::exp(x[i]);
}

void pow_f64(const double* x, const double* p, double* y, int64_t n) {
    int64_t i = 0;
#if defined(__AVX512F__)
    for (; i + 8 <= n; i += 8)
        _mm512_storeu_pd(y + i, Sleef_powd8_u10(_mm512_loadu_pd(x + i), _mm512_loadu_pd(p + i)));
#elif defined(__AVX2__)
    for (; i + 4 <= n; i += 4)
        _mm256_storeu_pd(y + i, Sleef_powd4_u10(_mm256_loadu_pd(x + i), _mm256_loadu_pd(p + i)));
#endif
    for (; i < n; ++i) y[i] = std::pow(x[i], p[i]);
}

}  // namespace pldr::vmath
