#include "train/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace pldr {

void LrSchedule::validate() const {
    PLDR_REQUIRE(std::isfinite(lr_max) && lr_max > 0,
                 "lr schedule: lr_max must be finite and > 0, got ", lr_max);
    PLDR_REQUIRE(total > 0, "lr schedule: total steps must be > 0, got ", total);
    PLDR_REQUIRE(warmup >= 0, "lr schedule: warmup steps must be >= 0, got ", warmup);
    PLDR_REQUIRE(warmup <= total, "lr schedule: warmup steps (", warmup,
                 ") must not exceed total steps (", total, ")");
    PLDR_REQUIRE(alpha >= 0 && alpha <= 1, "lr schedule: alpha must be in [0, 1], got ", alpha);
}

double LrSchedule::lambda(int64_t step) const {
    validate();
    PLDR_REQUIRE(step >= 0, "lr schedule: step must be >= 0, got ", step);
    // The reference converts everything to Python floats first.
    const double total_d = double(total);
    const double warmup_d = double(warmup);
    const double s = std::min(double(step), total_d);
    // warmup = 0: no warmup phase, the cosine starts at s = 0 (the reference divides by zero).
    if (warmup > 0 && s <= warmup_d) return (1.0 / warmup_d) * s;
    // Here s > warmup (or warmup = 0): either way warmup < total, so decay_rate > 0; with
    // warmup == total every s ≤ total = warmup took the branch above.
    const double decay_step = s - warmup_d;
    const double decay_rate = total_d - warmup_d;
    return (1.0 - alpha) * 0.5 * (1.0 + std::cos(std::numbers::pi * (decay_step / decay_rate))) +
           alpha;
}

double LrSchedule::lr(int64_t step) const {
    return lr_max * lambda(step);
}

}  // namespace pldr
