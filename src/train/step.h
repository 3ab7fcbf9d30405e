// One training step as a library call: forward, loss (masked CE + DAG), backward, clipping,
// AdamW and the LR schedule (spec §5), with gradient accumulation over micro-batches.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/alloc.h"
#include "core/gemm_bf16.h"
#include "train/adamw.h"
#include "train/clip.h"
#include "train/loss.h"
#include "train/schedule.h"

namespace pldr {

enum class ClipMode { VALUE, NORM, NONE };

enum class Recompute { NONE, SELECTIVE, FULL };
const char* recompute_name(Recompute r);
Recompute parse_recompute(const std::string& s);  // "none" | "selective" | "full"; throws
KeepActs keep_of(Recompute r);

struct TrainConfig {
    AdamWConfig adam;
    LrSchedule schedule;
    DagCoeffs dag;
    ClipMode clip = ClipMode::VALUE;  // the reference clips each element to ±clip_value
    double clip_value = 1.0;
    double clip_norm = 1.0;
    // BF16: mixed precision (spec §5.2) — the linear layers' products of the forward and backward
    // in bf16 with float32 accumulation (core/gemm_bf16.h), everything else, the master weights
    // and the optimizer state in float32. Float32 models only; where the CPU has no bf16
    // products (or PLDR_FORCE_FP32=1) the step runs in float32.
    Precision precision = Precision::FP32;
    // What the forward keeps for the backward (model/activations.h, KeepActs): NONE keeps every
    // activation (the most memory, measured no faster than SELECTIVE: a baseline);
    // SELECTIVE recomputes the cheap, large activations (scores, softmax, the FFN
    // gate, the learner's internals); FULL keeps only each layer's input and runs each layer's
    // forward again in the backward (activation checkpointing: the least memory, about a fifth
    // more FLOPs). The same bits in every case.
    Recompute recompute = Recompute::SELECTIVE;
    void validate() const;
};

struct StepResult {
    LossResult loss;       // averaged over the micro-batches (value, ce, accuracy, dag)
    double lr = 0;         // the learning rate this step used
    int64_t clipped = 0;   // gradient elements with |g| > clip_value (VALUE mode)
    double grad_norm = 0;  // global 2-norm before clipping
    int64_t step = 0;      // optimizer steps taken after this one
    double comm_s = 0;     // data parallel: seconds in the gradient and parameter collectives
};

// A batch of training sequences: tokens [B, S1] (input = tokens[:, :-1], targets = [:, 1:]).
struct TokenBatch {
    const int64_t* tokens = nullptr;
    int64_t B = 0, S1 = 0;
};

// Data parallelism (docs/distributed.md). Under mpirun (dist::world().size > 1) every rank
// calls step() with its own micro-batches, the same number of the same shape on every rank;
// the step is that of one process given the union of the ranks' micro-batches j as its
// micro-batch j: the CE gradient is divided by the global count of scored tokens of each
// micro-batch (not averaged over ranks' means), the DAG terms are averaged over the global
// batch. The summed gradient is reduce-scattered (each rank gets one contiguous shard),
// clipped, and then either all-gathered for an identical full AdamW step on every rank, or,
// with zero1, only the rank's shard of the parameters is updated with its shard of the moments
// (ZeRO stage 1: optimizer memory / N) and the parameters are all-gathered. Both give the same
// bits. Outside mpirun these options change nothing.
struct DistOptions {
    bool zero1 = false;
};

// Where a Trainer's forward and backward run when not on the CPU (the CUDA backend:
// cuda_model/, cuda::make_step_backend). It holds its own copy of the model's parameters.
// Two ways to split a step:
//   - not resident(): loss_and_grads adds each micro-batch's gradient into the Trainer's host
//     buffer; clipping and AdamW run on the host; parameters_changed() follows every update;
//   - resident(): the gradient and the AdamW moments stay on the backend. The Trainer calls
//     zero_grads(), accumulate() per micro-batch, then grad_pass() (and grads_finite() where
//     the sum of squares is not finite), clip_by_value() or scale_to_norm(), and adamw(), which
//     updates the backend's parameters and moments and writes the parameters back into the host
//     model; set_moments() and get_moments() carry the moments in and out (resume, checkpoints).
// The Trainer keeps the step's logic (statistics, refusal, the schedule, the step count) either
// way, so every backend takes the CPU's steps.
// Throws the one line of a StepBackend asked for a resident step it does not hold.
[[noreturn]] void step_backend_not_resident(const std::string& name);

template <typename T>
class StepBackend {
  public:
    virtual ~StepBackend() = default;
    // loss_and_grads of train/loss.h for one micro-batch: ACCUMULATES d value / d params ·
    // grad_scale into grads (the host buffer of the model's layout); grads null: the loss alone
    // (validation). ce_denominator as loss_and_grads's.
    virtual LossResult loss_and_grads(const TokenBatch& b, const DagCoeffs& dag, T* grads,
                                      double grad_scale, double ce_denominator) = 0;
    virtual void parameters_changed() = 0;
    // Where it runs ("cuda:0"), for messages.
    virtual std::string name() const = 0;
    // The step's precision (TrainConfig::precision), before any step; by default FP32 only.
    virtual void set_precision(Precision p) {
        PLDR_REQUIRE(p == Precision::FP32, "--device ", name(),
                     ": --precision bf16 does not run there yet; use --precision fp32 "
                     "(docs/gpu.md)");
    }

    // ---- a resident backend (see above); the defaults say it is not one
    virtual bool resident() const { return false; }
    virtual void zero_grads() { step_backend_not_resident(name()); }
    // loss_and_grads into the backend's own gradient.
    virtual LossResult accumulate(const TokenBatch&, const DagCoeffs&, double, double) {
        step_backend_not_resident(name());
    }
    virtual GradPass grad_pass(T) { step_backend_not_resident(name()); }
    virtual bool grads_finite() { step_backend_not_resident(name()); }
    virtual void download_grads(T*) { step_backend_not_resident(name()); }
    virtual void clip_by_value(T) { step_backend_not_resident(name()); }
    virtual void scale_to_norm(double, double) { step_backend_not_resident(name()); }
    // AdamW step t (1-based) at lr. The host model's parameters are stale after it, until
    // download_params brings them (the Trainer calls it before anything reads them).
    virtual void adamw(int64_t, double, const AdamWConfig&) { step_backend_not_resident(name()); }
    // The parameters into the host model, when a step changed them since the last download.
    virtual void download_params() { step_backend_not_resident(name()); }
    virtual void set_moments(const AdamWState<T>&) { step_backend_not_resident(name()); }
    virtual void get_moments(AdamWState<T>&) { step_backend_not_resident(name()); }
};

template <typename T>
class Trainer {
  public:
    // backend: where the forward and backward run (null: here, on the CPU).
    Trainer(Model<T>& model, const TrainConfig& cfg, const DistOptions& dist = {},
            std::shared_ptr<StepBackend<T>> backend = nullptr);

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

    // The model, its parameters current (a resident backend's downloaded first, when a step
    // changed them: sync_params).
    Model<T>& model() {
        sync_params();
        return model_;
    }
    // A resident backend's parameters into the host model where a step changed them since (the
    // steps leave them on the device; every read of the host model's parameters comes after
    // this: the checkpoint, the audit, model(), the naming of a non-finite loss).
    void sync_params() {
        if (backend_ && backend_->resident()) backend_->download_params();
    }
    // This rank's optimizer state: the whole buffer, or with zero1 the rank's shard
    // [shard_begin(), shard_begin() + optimizer().size()). With a resident backend the moments
    // live there, and only full_optimizer() brings them back (step is always current).
    AdamWState<T>& optimizer() { return opt_; }
    const AdamWState<T>& optimizer() const { return opt_; }
    const TrainConfig& config() const { return cfg_; }
    int64_t steps_done() const { return opt_.step; }
    bool sharded() const { return sharded_; }
    int64_t shard_begin() const { return lo_; }
    // Bytes of AdamW moments this rank holds.
    int64_t optimizer_bytes() const { return 2 * opt_.size() * int64_t(sizeof(T)); }

    // Collective. The full optimizer state for a checkpoint, valid on rank 0: `opt_` itself,
    // or the shards gathered into `scratch`.
    const AdamWState<T>& full_optimizer(AdamWState<T>& scratch);
    // Collective. Installs rank 0's full optimizer state `full` (ignored on other ranks) on
    // every rank (broadcast, or scattered into the shards with zero1).
    void set_optimizer(AdamWState<T>&& full);

  private:
    // The steps of step(). Forward and backward over the micro-batches into grads_ (`counts`:
    // data parallel, each micro-batch's global count of scored targets; empty: one process).
    std::vector<LossResult> forward_backward(const std::vector<TokenBatch>& micro,
                                             const std::vector<double>& counts);
    // The gradient this rank clips and applies: grads_, or data parallel its reduce-scattered
    // shard of the ranks' sum ([lo_, lo_ + shard_n_) either way). Adds the seconds waited.
    T* reduce(double& comm_s);
    // Throws (the step refused) on a non-finite loss or gradient, naming where it appears.
    void refuse_non_finite(const LossResult& loss, bool non_finite_grad,
                           const std::vector<TokenBatch>& micro, const T* g);
    // AdamW on the parameters whose moments this rank holds (all, or with zero1 its shard),
    // then data parallel the all-gather that gives every rank the same parameters.
    void update(T* g, double lr, double& comm_s);
    // step() on a resident backend: the gradient, the clipping and AdamW there.
    StepResult step_resident(const std::vector<TokenBatch>& micro);

    Model<T>& model_;
    TrainConfig cfg_;
    AdamWState<T> opt_;
    ZeroPages<T> grads_;  // zeroed by handing the pages back (core/alloc.h)
    Activations<T> acts_;
    bool distributed_ = false, sharded_ = false;
    int64_t lo_ = 0, shard_n_ = 0;  // this rank's shard of the flat parameter buffer (one
                                    // process: all of it)
    std::vector<T> gshard_;         // the reduced gradient of the shard
    std::shared_ptr<StepBackend<T>> backend_;
};

}  // namespace pldr
