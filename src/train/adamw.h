// AdamW, bit-exact with torch's single-tensor (non-foreach) CPU path (torch 1.13, spec §5.2,
// golden/trajectory/README.md "Bit-exact operation order").
//
// One update at step count t (1-based, already incremented), lr from the schedule:
//   1. p   ← p · (1 − lr·wd)
//   2. m   ← fma(g, 1 − β1, m·β1)              (m·β1 rounded first)
//   3. v   ← fma((1 − β2)·g, g, v·β2)          ((1 − β2)·g and v·β2 rounded first)
//   4. den ← sqrt(v) / sqrt(1 − β2^t) + eps
//   5. p   ← p + ((−lr/(1 − β1^t))·m) / den
// The scalar factors (1 − lr·wd, β1, 1 − β1, β2, 1 − β2, −lr/(1 − β1^t), sqrt(1 − β2^t), eps)
// are computed in double and rounded once to T; every other operation rounds to T.
// Weight decay applies to every parameter. An lr-0 step leaves p bit-identical but still
// advances m, v and t (the reference's first step).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/alloc.h"

namespace pldr {

struct AdamWConfig {
    double beta1 = 0.9, beta2 = 0.95, eps = 1e-5, weight_decay = 0.1;
    // Throws pldr::Error unless 0 ≤ β < 1, eps > 0 and weight_decay ≥ 0 (all finite).
    void validate() const;
};

// One AdamW update of n elements at step count t ≥ 1 (the count after this step), lr ≥ 0.
// T = float or double. Element-wise, so the result does not depend on threading.
template <class T>
void adamw_update(T* p, const T* g, T* m, T* v, int64_t n, int64_t t, double lr,
                  const AdamWConfig& cfg);

// Optimizer state for one flat parameter buffer: exp_avg (m), exp_avg_sq (v), and the step
// count t (number of updates applied, including lr-0 ones). The moments start as zero pages
// (core/alloc.h): a state that is built and then replaced (the trainer's, by a checkpoint's)
// costs no memory.
template <class T>
struct AdamWState {
    ZeroPages<T> m, v;
    int64_t step = 0;

    AdamWState() = default;
    explicit AdamWState(int64_t n) : m(std::size_t(n)), v(std::size_t(n)) {}
    int64_t size() const { return int64_t(m.size()); }
};

// Increments state.step, then applies adamw_update with t = state.step.
// n must equal state.size().
template <class T>
void adamw_step(AdamWState<T>& state, T* params, const T* grads, int64_t n, double lr,
                const AdamWConfig& cfg);

}  // namespace pldr
