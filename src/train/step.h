// One training step as a library call: forward, loss (masked CE + DAG), backward, clipping,
// AdamW and the LR schedule (spec §5), with gradient accumulation over micro-batches.
#pragma once
#include <cstdint>
#include <vector>

#include "train/adamw.h"
#include "train/loss.h"
#include "train/schedule.h"

namespace pldr {

enum class ClipMode { VALUE, NORM, NONE };

struct TrainConfig {
    AdamWConfig adam;
    LrSchedule schedule;
    DagCoeffs dag;
    ClipMode clip = ClipMode::VALUE;  // the reference clips each element to ±clip_value
    double clip_value = 1.0;
    double clip_norm = 1.0;
    void validate() const;
};

struct StepResult {
    LossResult loss;       // averaged over the micro-batches (value, ce, accuracy, dag)
    double lr = 0;         // the learning rate this step used
    int64_t clipped = 0;   // gradient elements with |g| > clip_value (VALUE mode)
    double grad_norm = 0;  // global 2-norm before clipping
    int64_t step = 0;      // optimizer steps taken after this one
};

// A batch of training sequences: tokens [B, S1] (input = tokens[:, :-1], targets = [:, 1:]).
struct TokenBatch {
    const int64_t* tokens = nullptr;
    int64_t B = 0, S1 = 0;
};

template <typename T>
class Trainer {
  public:
    Trainer(Model<T>& model, const TrainConfig& cfg);

    // One optimizer step over `micro` micro-batches (gradient accumulation: the loss is the
    // mean of the micro-batch losses). Step k (1-based) uses lr = schedule.lr(k − 1), so the
    // first step runs at λ(0) (0 with warmup, as the reference). A non-finite loss or gradient
    // refuses the step: pldr::Error is thrown and parameters, moments and the step count are
    // left untouched.
    StepResult step(const std::vector<TokenBatch>& micro);
    StepResult step(const TokenBatch& b) { return step(std::vector<TokenBatch>{b}); }
    // Loss without gradients (validation). A non-finite loss throws pldr::Error naming the
    // tensor where non-finite values first appear.
    LossResult evaluate(const TokenBatch& b);

    Model<T>& model() { return model_; }
    AdamWState<T>& optimizer() { return opt_; }
    const AdamWState<T>& optimizer() const { return opt_; }
    const TrainConfig& config() const { return cfg_; }
    int64_t steps_done() const { return opt_.step; }

  private:
    Model<T>& model_;
    TrainConfig cfg_;
    AdamWState<T> opt_;
    std::vector<T> grads_;
    Activations<T> acts_;
};

}  // namespace pldr
