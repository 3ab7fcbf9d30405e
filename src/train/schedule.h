// Learning-rate schedule of the reference trainer: linear warmup then cosine decay to a floor
// (spec §5.2, `LinearWarmupCosineLRSchedule` applied through torch's `LambdaLR`).
//
//   s = min(step, total)
//   λ(s) = (1/warmup)·s                                            if s ≤ warmup
//        = ((1−α)·0.5·(1 + cos(π·((s − warmup)/(total − warmup)))) + α)   otherwise
//   lr(s) = lr_max · λ(s)
//
// Everything is evaluated in double in exactly the reference's order, so lr(s) reproduces the
// reference's lrs bit for bit. The scheduler is stepped after each optimizer step, so the
// first update uses s = 0, i.e. λ(0) = 0 (an lr-0 step that still advances the AdamW moments).
// warmup = 0 has no warmup phase (λ(0) = 1, the cosine from s = 0); warmup = total has no
// cosine phase (λ rises to 1 at s = total and stays there).
#pragma once
#include <cstdint>

namespace pldr {

struct LrSchedule {
    double lr_max = 1e-3;
    int64_t warmup = 2000;
    int64_t total = 250000;
    double alpha = 0.1;

    // Throws pldr::Error on an invalid schedule (see the checks in schedule.cpp).
    void validate() const;
    // The multiplier λ(s); step s ≥ 0 (the number of scheduler steps taken so far).
    double lambda(int64_t s) const;
    // lr_max · λ(s).
    double lr(int64_t s) const;
};

}  // namespace pldr
