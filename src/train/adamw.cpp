#include "train/adamw.h"

#include <cmath>

#include "core/error.h"

namespace pldr {

void AdamWConfig::validate() const {
    PLDR_REQUIRE(beta1 >= 0 && beta1 < 1, "adamw: beta1 must be in [0, 1), got ", beta1);
    PLDR_REQUIRE(beta2 >= 0 && beta2 < 1, "adamw: beta2 must be in [0, 1), got ", beta2);
    PLDR_REQUIRE(std::isfinite(eps) && eps > 0, "adamw: eps must be finite and > 0, got ", eps);
    PLDR_REQUIRE(std::isfinite(weight_decay) && weight_decay >= 0,
                 "adamw: weight_decay must be finite and >= 0, got ", weight_decay);
}

namespace {

// Elements per OpenMP chunk threshold: below it the loop runs on the calling thread.
constexpr int64_t kParallelMin = int64_t(1) << 16;

template <class T>
void update_range(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v,
                  int64_t n, T decay, T b1, T omb1, T b2, T omb2, T neg_step, T bc2_sqrt, T eps) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
        const T gi = g[i];
        const T pi = p[i] * decay;
        const T mi = std::fma(gi, omb1, m[i] * b1);
        const T vi = std::fma(omb2 * gi, gi, v[i] * b2);
        const T den = std::sqrt(vi) / bc2_sqrt + eps;
        p[i] = pi + (neg_step * mi) / den;
        m[i] = mi;
        v[i] = vi;
    }
}

}  // namespace

template <class T>
void adamw_update(T* p, const T* g, T* m, T* v, int64_t n, int64_t t, double lr,
                  const AdamWConfig& cfg) {
    cfg.validate();
    PLDR_REQUIRE(n >= 0, "adamw: negative element count ", n);
    PLDR_REQUIRE(t >= 1, "adamw: step count must be >= 1, got ", t);
    PLDR_REQUIRE(std::isfinite(lr) && lr >= 0, "adamw: lr must be finite and >= 0, got ", lr);
    if (n == 0) return;
    PLDR_REQUIRE(p && g && m && v, "adamw: null buffer");
    // Scalars exactly as torch computes them in Python (double), then cast to the tensor dtype.
    const double td = double(t);  // torch keeps the step as a float tensor and uses .item()
    const double bias_correction1 = 1.0 - std::pow(cfg.beta1, td);
    const double bias_correction2 = 1.0 - std::pow(cfg.beta2, td);
    const double step_size = lr / bias_correction1;
    const double bias_correction2_sqrt = std::sqrt(bias_correction2);
    update_range<T>(p, g, m, v, n, T(1.0 - lr * cfg.weight_decay), T(cfg.beta1), T(1.0 - cfg.beta1),
                    T(cfg.beta2), T(1.0 - cfg.beta2), T(-step_size), T(bias_correction2_sqrt),
                    T(cfg.eps));
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

template void adamw_update<float>(float*, const float*, float*, float*, int64_t, int64_t, double,
                                  const AdamWConfig&);
template void adamw_update<double>(double*, const double*, double*, double*, int64_t, int64_t,
                                   double, const AdamWConfig&);
template void adamw_step<float>(AdamWState<float>&, float*, const float*, int64_t, double,
                                const AdamWConfig&);
template void adamw_step<double>(AdamWState<double>&, double*, const double*, int64_t, double,
                                 const AdamWConfig&);

}  // namespace pldr
