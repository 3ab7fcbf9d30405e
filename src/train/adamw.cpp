#include "train/adamw.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "core/error.h"
#include "train/adamw_element.h"

namespace pldr {

void AdamWConfig::validate() const {
    PLDR_REQUIRE(beta1 >= 0 && beta1 < 1, "adamw: beta1 must be in [0, 1), got ", beta1);
    PLDR_REQUIRE(beta2 >= 0 && beta2 < 1, "adamw: beta2 must be in [0, 1), got ", beta2);
    PLDR_REQUIRE(std::isfinite(eps) && eps > 0, "adamw: eps must be finite and > 0, got ", eps);
    PLDR_REQUIRE(std::isfinite(weight_decay) && weight_decay >= 0,
                 "adamw: weight_decay must be finite and >= 0, got ", weight_decay);
}

namespace {

// Below this many elements the update runs on the calling thread.
constexpr int64_t kParallelMin = int64_t(1) << 16;
// Elements per OpenMP work item (a multiple of every vector width).
constexpr int64_t kBlock = 8192;

// Explicit SIMD where available: GCC does not vectorize sqrt under -fmath-errno (the default),
// and the optimize attribute cannot turn that off per function. Every vector operation here
// (mul, add, div, sqrt, fmadd) is exactly rounded like its scalar counterpart, so the vector and
// scalar paths give the same bits (tested).
#if defined(__AVX512F__)
#define PLDR_ADAMW_SIMD 1
struct VecF {
    using V = __m512;
    static constexpr int64_t W = 16;
    static V set1(float x) { return _mm512_set1_ps(x); }
    static V load(const float* p) { return _mm512_loadu_ps(p); }
    static void store(float* p, V x) { _mm512_storeu_ps(p, x); }
    static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
    static V add(V a, V b) { return _mm512_add_ps(a, b); }
    static V div(V a, V b) { return _mm512_div_ps(a, b); }
    // maskz form: the plain one trips a GCC 12 -Wmaybe-uninitialized false positive.
    static V sqrt(V a) { return _mm512_maskz_sqrt_ps(__mmask16(0xFFFF), a); }
    static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
};
struct VecD {
    using V = __m512d;
    static constexpr int64_t W = 8;
    static V set1(double x) { return _mm512_set1_pd(x); }
    static V load(const double* p) { return _mm512_loadu_pd(p); }
    static void store(double* p, V x) { _mm512_storeu_pd(p, x); }
    static V mul(V a, V b) { return _mm512_mul_pd(a, b); }
    static V add(V a, V b) { return _mm512_add_pd(a, b); }
    static V div(V a, V b) { return _mm512_div_pd(a, b); }
    static V sqrt(V a) { return _mm512_maskz_sqrt_pd(__mmask8(0xFF), a); }
    static V fma(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
};
#elif defined(__AVX__) && defined(__FMA__)
#define PLDR_ADAMW_SIMD 1
struct VecF {
    using V = __m256;
    static constexpr int64_t W = 8;
    static V set1(float x) { return _mm256_set1_ps(x); }
    static V load(const float* p) { return _mm256_loadu_ps(p); }
    static void store(float* p, V x) { _mm256_storeu_ps(p, x); }
    static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
    static V add(V a, V b) { return _mm256_add_ps(a, b); }
    static V div(V a, V b) { return _mm256_div_ps(a, b); }
    static V sqrt(V a) { return _mm256_sqrt_ps(a); }
    static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
};
struct VecD {
    using V = __m256d;
    static constexpr int64_t W = 4;
    static V set1(double x) { return _mm256_set1_pd(x); }
    static V load(const double* p) { return _mm256_loadu_pd(p); }
    static void store(double* p, V x) { _mm256_storeu_pd(p, x); }
    static V mul(V a, V b) { return _mm256_mul_pd(a, b); }
    static V add(V a, V b) { return _mm256_add_pd(a, b); }
    static V div(V a, V b) { return _mm256_div_pd(a, b); }
    static V sqrt(V a) { return _mm256_sqrt_pd(a); }
    static V fma(V a, V b, V c) { return _mm256_fmadd_pd(a, b, c); }
};
#else
#define PLDR_ADAMW_SIMD 0
#endif

// The update of elements [0, n), in the documented order (see adamw.h).
template <class T>
void update_block(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v,
                  int64_t n, const AdamWScalars<T>& k) {
    int64_t i = 0;
#if PLDR_ADAMW_SIMD
    using S = std::conditional_t<std::is_same_v<T, float>, VecF, VecD>;
    const auto vdecay = S::set1(k.decay), vb1 = S::set1(k.b1), vomb1 = S::set1(k.omb1),
               vb2 = S::set1(k.b2), vomb2 = S::set1(k.omb2), vneg = S::set1(k.neg_step),
               vbc2 = S::set1(k.bc2_sqrt), veps = S::set1(k.eps);
    for (; i + S::W <= n; i += S::W) {
        const auto gi = S::load(g + i);
        const auto pi = S::mul(S::load(p + i), vdecay);
        const auto mi = S::fma(gi, vomb1, S::mul(S::load(m + i), vb1));
        const auto vi = S::fma(S::mul(vomb2, gi), gi, S::mul(S::load(v + i), vb2));
        const auto den = S::add(S::div(S::sqrt(vi), vbc2), veps);
        S::store(p + i, S::add(pi, S::div(S::mul(vneg, mi), den)));
        S::store(m + i, mi);
        S::store(v + i, vi);
    }
#endif
    for (; i < n; ++i) adamw_element(p[i], g[i], m[i], v[i], k);  // train/adamw_element.h
}

template <class T>
void update_range(T* p, const T* g, T* m, T* v, int64_t n, const AdamWScalars<T>& k) {
    if (n < kParallelMin) {
        update_block(p, g, m, v, n, k);
        return;
    }
    const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
        const int64_t i = b * kBlock;
        update_block(p + i, g + i, m + i, v + i, std::min(kBlock, n - i), k);
    }
}

}  // namespace

template <class T>
AdamWScalars<T> adamw_scalars(int64_t t, double lr, const AdamWConfig& cfg) {
    cfg.validate();
    PLDR_REQUIRE(t >= 1, "adamw: step count must be >= 1, got ", t);
    PLDR_REQUIRE(std::isfinite(lr) && lr >= 0, "adamw: lr must be finite and >= 0, got ", lr);
    // Scalars exactly as torch computes them in Python (double), then cast to the tensor dtype.
    const double td = double(t);  // torch keeps the step as a float tensor and uses .item()
    const double bias_correction1 = 1.0 - std::pow(cfg.beta1, td);
    const double bias_correction2 = 1.0 - std::pow(cfg.beta2, td);
    const double step_size = lr / bias_correction1;
    const double bias_correction2_sqrt = std::sqrt(bias_correction2);
    return {T(1.0 - lr * cfg.weight_decay),
            T(cfg.beta1),
            T(1.0 - cfg.beta1),
            T(cfg.beta2),
            T(1.0 - cfg.beta2),
            T(-step_size),
            T(bias_correction2_sqrt),
            T(cfg.eps)};
}

template <class T>
void adamw_update(T* p, const T* g, T* m, T* v, int64_t n, int64_t t, double lr,
                  const AdamWConfig& cfg) {
    cfg.validate();  // (the checks in the order they always ran: config, count, t, lr)
    PLDR_REQUIRE(n >= 0, "adamw: negative element count ", n);
    const AdamWScalars<T> k = adamw_scalars<T>(t, lr, cfg);
    if (n == 0) return;
    PLDR_REQUIRE(p && g && m && v, "adamw: null buffer");
    update_range<T>(p, g, m, v, n, k);
}

template <class T>
void adamw_step(AdamWState<T>& state, T* params, const T* grads, int64_t n, double lr,
                const AdamWConfig& cfg) {
    PLDR_REQUIRE(n == state.size(), "adamw: state holds ", state.size(),
                 " elements but the parameter buffer has ", n);
    PLDR_REQUIRE(int64_t(state.v.size()) == n, "adamw: state m/v size mismatch");
    cfg.validate();
    PLDR_REQUIRE(std::isfinite(lr) && lr >= 0, "adamw: lr must be finite and >= 0, got ", lr);
    ++state.step;
    adamw_update(params, grads, state.m.data(), state.v.data(), n, state.step, lr, cfg);
}

template AdamWScalars<float> adamw_scalars<float>(int64_t, double, const AdamWConfig&);
template AdamWScalars<double> adamw_scalars<double>(int64_t, double, const AdamWConfig&);
template void adamw_update<float>(float*, const float*, float*, float*, int64_t, int64_t, double,
                                  const AdamWConfig&);
template void adamw_update<double>(double*, const double*, double*, double*, int64_t, int64_t,
                                   double, const AdamWConfig&);
template void adamw_step<float>(AdamWState<float>&, float*, const float*, int64_t, double,
                                const AdamWConfig&);
template void adamw_step<double>(AdamWState<double>&, double*, const double*, int64_t, double,
                                 const AdamWConfig&);

}  // namespace pldr
