// The training program behind `pldr train`: model from a preset, a config.json or a checkpoint;
// batches from a packed shard; the training step (train/step.h); periodic validation; metrics
// JSONL; transactional checkpoints (train/checkpoint.h); exact resume; stop requests.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/model.h"
#include "train/data_loader.h"
#include "train/shard.h"
#include "train/step.h"

namespace pldr {

struct TrainOptions {
    // Model source (exactly one of preset / config_path for a new run; with resume_dir either
    // may be given and must then match the checkpoint).
    std::string preset, config_path;
    // Fine-tuning: a new run that starts from this model directory's config and weights (with
    // a fresh optimizer state); excludes preset, config_path and resume_dir.
    std::string init_dir;
    bool fixed_g_identity = false;  // train the SDPA baseline (custom_G_type "identity")
    std::string data_dir;           // train.pldrtok [+ valid.pldrtok]
    std::string out_dir;            // checkpoint directory (gets a copy of the shards'
                                    // tokenizer.model when meta.json names one)
    std::string resume_dir;         // continue from this checkpoint ("" = new run)
    bool force = false;         // out_dir may be another model directory or checkpoint (core/fs.h)
    std::string metrics_path;   // "" = <out_dir>/metrics.jsonl
    std::string dtype = "f32";  // compute (and checkpoint) precision
    // "reference": the reference's float32 islands inside float64 (model.h); "exact": pure
    // float64 (the data-parallel equivalence test needs it: a float32 rounding of q, k or the
    // DAG terms turns a summation-order difference of 1e-16 into one of 1e-8).
    std::string numerics = "reference";

    // The training maths: stored in the checkpoint; a resumed run must not change them.
    int64_t steps = 1000;  // total optimizer steps (the LR schedule spans them)
    int64_t batch = 16;    // chunks per micro-batch
    int64_t accum = 1;     // micro-batches per optimizer step
    int64_t ctx = 0;       // tokens per chunk (0 = the shard's); the model sees ctx − 1
    uint64_t seed = 1234;  // weight init and data order
    bool shuffle = true;   // shuffled chunk order per epoch (false: the reference's file order)
    double lr = 1e-3;
    int64_t warmup = -1;  // −1: min(2000, steps / 10)
    double lr_alpha = 0.1;
    double weight_decay = 0.1;
    DagCoeffs dag;
    ClipMode clip = ClipMode::VALUE;
    double clip_value = 1.0, clip_norm = 1.0;
    // "fp32", or "bf16": mixed precision (TrainConfig::precision; float32 models only).
    std::string precision = "fp32";

    // Run control (may change on resume).
    int64_t stop_at = 0;       // > 0: stop (with a checkpoint) after this step
    int64_t eval_every = 100;  // validation period in steps (0 = only at the end)
    int64_t eval_batches = 8;  // validation batches of `batch` chunks
    int64_t save_every = 500;  // checkpoint period in steps (0 = only at the end / on stop)
    // Collapse audits (TrainHooks::audit_*) every audit_every steps, at the start of a new run
    // and at the end (0 = never).
    int64_t audit_every = 0;

    // Data parallel (under mpirun; docs/distributed.md). No effect in a single process.
    bool zero1 = false;  // shard the AdamW moments across ranks (ZeRO stage 1)
    // What the forward keeps for the backward (TrainConfig::recompute): "none", "selective" or
    // "full" (activation checkpointing). The same bits in every case, so it may change on resume.
    std::string recompute = "selective";
    double dist_timeout = 0;  // seconds a collective may wait (0: PLDR_DIST_TIMEOUT or 300)

    // Names of the maths options set explicitly (maths_json keys, e.g. "lr"). On resume, these
    // must equal the checkpoint's (an error otherwise), except "steps", which may extend or
    // shorten the schedule; the others are taken from the checkpoint.
    std::vector<std::string> given;

    int64_t warmup_steps() const;
    TrainConfig train_config() const;
    // The maths fields as JSON (the checkpoint's "options").
    std::string maths_json() const;
};

struct StepReport {
    StepResult r;
    int64_t step = 0, total = 0;
    double tokens_per_s = 0;  // over this run's steps so far
    double eta_s = 0;
    double elapsed_s = 0;
};

struct EvalReport {
    EvalResult r;
    int64_t step = 0;
};

enum class StopReason { COMPLETED, STOP_AT, INTERRUPTED };

struct TrainOutcome {
    StopReason reason = StopReason::COMPLETED;
    int64_t step = 0;        // steps done
    int64_t start_step = 0;  // steps done when this run started (resume)
    int64_t num_params = 0;
    double tokens_per_s = 0;  // this run
    bool has_eval = false;
    EvalResult last_eval;
    double valid_unigram_entropy = -1;  // nats/token of the valid shard (−1: no valid shard)
    double comm_s_per_step = 0;         // data parallel: mean seconds per step in the collectives
    int ranks = 1;                      // data-parallel ranks
};

struct TrainHooks {
    std::function<void(const std::string&)> message;  // informational lines
    std::function<void(const StepReport&)> on_step;
    std::function<void(const EvalReport&)> on_eval;
    // Polled after every step; true = write a checkpoint and stop (SIGINT/SIGTERM).
    const std::atomic<bool>* stop_flag = nullptr;
    // The collapse audit of the model as it stands (TrainOptions::audit_every), as one JSON
    // object that goes under "audit" in metrics.jsonl. The API supplies it (train does not
    // include audit/); the second argument is the run's tokenizer.model ("" = none).
    std::function<std::string(const Model<float>&, const std::string&)> audit_f32;
    std::function<std::string(const Model<double>&, const std::string&)> audit_f64;
    // Where the steps' forward and backward run (StepBackend, train/step.h), made once for the
    // run's model; unset: the CPU. The API supplies it for --device cuda (train does not include
    // the backend).
    std::function<std::shared_ptr<StepBackend<float>>(Model<float>&)> backend_f32;
    std::function<std::shared_ptr<StepBackend<double>>(Model<double>&)> backend_f64;
};

struct CheckpointInfo;

// The token shards of a data directory: train.pldrtok and, where there is one, valid.pldrtok
// (the same vocabulary; the training shard packed in chunks).
struct Shards {
    std::string train_path, valid_path;
    ShardReader train;
    std::unique_ptr<ShardReader> valid;
    explicit Shards(const std::string& dir);
};

// Applies a checkpoint's stored training options (its "options" JSON) to `o`, checking every
// field's type and range (an unknown clip mode or dtype is an error). Errors name `where`.
void apply_checkpoint_options(TrainOptions& o, const std::string& options_json,
                              const std::string& where);
// The options of a run resumed from a checkpoint whose stored options are `options_json`: the
// checkpoint's maths, with `o`'s run control and model source (or else the checkpoint's).
// Refuses a maths option named in o.given that differs from the checkpoint's, except "steps",
// whose change it reports through `note`.
TrainOptions resumed_options(const TrainOptions& o, const std::string& options_json,
                             const std::function<void(const std::string&)>& note);
// The model config asked for by the preset / config and fixed_g options, with the data's
// vocabulary (`shard_path` names the data in errors).
Config requested_config(const TrainOptions& o, int64_t vocab, const std::string& shard_path);
// The first line where two configs' JSON differ ("" when they agree), their dtypes aside.
std::string config_difference(Config want, Config have);
// The options that need no file (an output, data, exactly one model source), and the output: this
// run's own checkpoint directory, never an input, never another model's directory.
void check_output_options(const TrainOptions& o);
// The run's options against the data and the model (the context, the counts, the periods); sets
// o.ctx to the shard's chunk length when it is 0. `resumed`: the checkpoint of a resumed run.
void check_run_options(TrainOptions& o, const Shards& data, const Config& cfg,
                       const CheckpointInfo* resumed, int P);
// A checkpoint's data position must be step × batch × accum (the chunks its steps consumed).
void check_checkpoint_position(const CheckpointInfo& ck, const TrainOptions& o,
                               const std::string& where);

// Runs training. Throws pldr::Error (one line) on bad options, bad data, a checkpoint that does
// not fit, or a refused (non-finite) step — in the last case the checkpoint on disk (the last
// good one) is left untouched and the message says which step it holds.
//
// Under mpirun (dist::world().size > 1) every rank calls it with the same options: rank 0
// builds or loads the model and broadcasts it, each rank trains on its slice of every global
// batch (rank r takes chunks r·batch … (r+1)·batch − 1 of each group of size·batch in the data
// stream), rank 0 alone evaluates, calls the hooks and writes metrics and checkpoints, and an
// error on any rank prints "pldr: error: rank R of N: …" and stops every rank (MPI_Abort).
TrainOutcome run_training(const TrainOptions& opts, const TrainHooks& hooks = {});

}  // namespace pldr
