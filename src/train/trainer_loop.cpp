// The training program (see trainer_loop.h): the run's setup, then the loop, one step at a time:
// data, the optimizer step (forward, backward, reduce, clip, update: Trainer::step), log,
// validation, checkpoint.
#include "train/trainer_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/fs.h"
#include "core/gemm_bf16.h"
#include "dist/dist.h"
#include "io/config_json.h"
#include "io/json_util.h"
#include "io/model_load.h"
#include "model/init.h"
#include "train/checkpoint.h"
#include "train/clip.h"
#include "train/metrics.h"

namespace pldr {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// FNV-1a 64 of a buffer (the parameters' agreement check across ranks).
template <typename Buffer>
uint64_t buffer_fnv(const Buffer& v) {
    return fnv1a64(v.data(), v.size() * sizeof(v[0]));
}

// Rank 0 of a resumed run: the checkpoint's model and optimizer state, and the run's options
// (resumed_options) checked against the checkpoint, the data and the number of ranks `P`.
template <typename T>
void load_resumed(TrainOptions& o, const Shards& data, int P, Model<T>& model, AdamWState<T>& opt,
                  CheckpointInfo& ck, const std::function<void(const std::string&)>& msg) {
    PLDR_REQUIRE(recover_checkpoint(o.resume_dir), o.resume_dir, ": not a training checkpoint (no ",
                 kTrainStateFile, ")");
    const CheckpointInfo peek = read_checkpoint_info(o.resume_dir);
    PLDR_REQUIRE(peek.dtype == o.dtype, o.resume_dir, ": the checkpoint was trained with --dtype ",
                 peek.dtype, ", not ", o.dtype);
    ck = load_checkpoint<T>(o.resume_dir, &model, &opt);
    const TrainOptions merged = resumed_options(o, ck.options_json, msg);
    if (!o.preset.empty() || !o.config_path.empty()) {
        const Config want = requested_config(merged, data.train.vocab_size(), data.train_path);
        const std::string d = config_difference(want, model.cfg);
        PLDR_REQUIRE(d.empty(), "the checkpoint in ", o.resume_dir, " does not match ",
                     o.config_path.empty() ? "--preset " + o.preset : o.config_path, " (", d, ")");
    }
    PLDR_REQUIRE(model.cfg.vocab_size == data.train.vocab_size(), "the data's vocabulary size (",
                 data.train.vocab_size(), " in ", data.train_path,
                 ") differs from the checkpoint's ", model.cfg.vocab_size);
    PLDR_REQUIRE(ck.train_shard_fnv == data.train.checksum(), data.train_path,
                 ": not the training data the checkpoint in ", o.resume_dir,
                 " was trained on (checksum differs)");
    PLDR_REQUIRE(merged.dtype == ck.dtype, o.resume_dir,
                 ": the training state's options say dtype ", merged.dtype,
                 " but its metadata says ", ck.dtype);
    o = merged;
    if (ck.world_size != P) {
        // Another number of ranks: keep the global batch (and so the maths), split anew.
        const int64_t global = ck.world_size * o.batch;
        PLDR_REQUIRE(global % P == 0, o.resume_dir, ": the checkpoint's global batch of ", global,
                     " chunks (", ck.world_size, " ranks x ", o.batch, ") does not split over ", P,
                     " ranks; resume with a number of ranks that divides ", global);
        o.batch = global / P;
    }
    PLDR_REQUIRE(fs::absolute(o.resume_dir) == fs::absolute(o.out_dir) ||
                     !fs::exists(fs::path(o.out_dir) / kTrainStateFile),
                 o.out_dir, " already holds another training checkpoint; choose another --out");
    PLDR_REQUIRE(ck.step <= o.steps, o.resume_dir, ": the checkpoint is at step ", ck.step,
                 ", beyond --steps ", o.steps);
}

// Rank 0 of a new run: the model of the preset or config, initialized from the seed, or with
// --init the model directory's config and weights (fine-tuning).
template <typename T>
void create_model(const TrainOptions& o, const Shards& data, Model<T>& model, AdamWState<T>& opt) {
    PLDR_REQUIRE(!fs::exists(fs::path(o.out_dir) / kTrainStateFile), o.out_dir,
                 " already holds a training checkpoint; continue it with --resume ", o.out_dir,
                 " or choose another --out");
    if (!o.init_dir.empty()) {
        model = load_model<T>(o.init_dir, /*pack=*/false);
        PLDR_REQUIRE(model.cfg.vocab_size == data.train.vocab_size(),
                     "the data's vocabulary size (", data.train.vocab_size(), " in ",
                     data.train_path, ") differs from vocab_size ", model.cfg.vocab_size, " of ",
                     o.init_dir, " (prepare the data with its tokenizer.model)");
    } else {
        model = Model<T>(requested_config(o, data.train.vocab_size(), data.train_path));
        init_weights(model, o.seed);
    }
    opt = AdamWState<T>(model.layout.total);
}

// Data parallel: rank 0's options, model config and data position, then its weights, to every
// rank.
template <typename T>
void share_setup(TrainOptions& o, Model<T>& model, CheckpointInfo& ck) {
    const bool root = dist::is_root();
    std::string blob;
    if (root) {
        ojson b;
        b["options"] = o.maths_json();
        b["config"] = config_to_json(model.cfg);
        b["step"] = ck.step;
        b["position"] = ck.data.position;
        b["rng"] = ck.data.epoch_rng;
        b["world_size"] = ck.world_size;
        blob = b.dump();
    }
    dist::broadcast(blob, 0, "broadcasting the run's setup");
    if (!root) {
        const ojson b = ojson::parse(blob);
        const std::string options = b.at("options").get<std::string>();
        apply_checkpoint_options(o, options, "rank 0");
        const ojson opts = ojson::parse(options);
        o.preset = opts.value("preset", "");
        o.config_path = opts.value("config", "");
        model = Model<T>(config_from_json(b.at("config").get<std::string>(), "rank 0"));
        ck.step = b.at("step");
        ck.data.position = b.at("position");
        ck.data.epoch_rng = b.at("rng");
        ck.world_size = b.at("world_size");
    }
    dist::broadcast(model.params.data(), model.layout.total * int64_t(sizeof(T)), 0,
                    "broadcasting the weights");
}

// The tokenizer the shards were prepared with (their meta.json names it), or "".
std::string tokenizer_source(const std::string& data_dir) {
    const fs::path meta = fs::path(data_dir) / "meta.json";
    if (!fs::exists(meta)) return "";
    const auto j = ojson::parse(read_file(meta.string()), nullptr, false);
    if (j.is_object() && j.contains("tokenizer") && j["tokenizer"].is_object() &&
        j["tokenizer"].contains("path") && j["tokenizer"]["path"].is_string() &&
        fs::is_regular_file(j["tokenizer"]["path"].get<std::string>()))
        return j["tokenizer"]["path"].get<std::string>();
    return "";
}

// One run of training: the setup (constructor), then train(), the loop.
template <typename T>
class Run {
  public:
    Run(TrainOptions o, const TrainHooks& hooks);
    TrainOutcome train();

  private:
    void msg(const std::string& s) const {
        if (root_ && hooks_.message) hooks_.message(s);
    }
    void describe() const;
    void next_batches();
    StepResult optimizer_step();
    void log_step(const StepResult& r, int64_t step);
    void validate(int64_t step);
    void audit(int64_t step);
    void checkpoint();
    void require_finite(const T* base, const char* what) const;
    // "training stopped...: <why>; " and where the last good checkpoint is.
    [[noreturn]] void stopped(const std::string& why) const;

    const dist::World& world_ = dist::world();
    const int P_ = world_.size;
    const bool root_ = world_.rank == 0;
    TrainOptions o_;
    const TrainHooks& hooks_;
    const bool resume_;
    Shards data_;
    Model<T> model_;
    CheckpointInfo ck_;
    std::unique_ptr<Trainer<T>> trainer_;
    std::unique_ptr<ChunkLoader> loader_;
    TrainOutcome out_;
    std::optional<MetricsLog> metrics_;  // rank 0 writes the metrics
    std::string options_json_, tokenizer_src_;
    int64_t last_saved_ = -1;  // the step of the last checkpoint written in --out (−1: none)
    // The loop's counters and its batches.
    std::chrono::steady_clock::time_point t0_;
    double train_seconds_ = 0, comm_seconds_ = 0, audit_seconds_ = 0;
    int64_t audits_ = 0;
    int64_t tokens_done_ = 0, tokens_per_step_ = 0;
    std::vector<std::vector<int64_t>> bufs_;
    std::vector<TokenBatch> micro_;
};

template <typename T>
Run<T>::Run(TrainOptions o, const TrainHooks& hooks)
    : o_((check_output_options(o), std::move(o))),
      hooks_(hooks),
      resume_(!o_.resume_dir.empty()),
      data_(o_.data_dir) {
    // Rank 0 builds the model (new run) or loads the checkpoint; the others receive it.
    AdamWState<T> opt;
    if (root_ && resume_)
        load_resumed(o_, data_, P_, model_, opt, ck_, [&](const std::string& s) { msg(s); });
    else if (root_)
        create_model(o_, data_, model_, opt);
    if (P_ > 1) share_setup(o_, model_, ck_);

    PLDR_REQUIRE(o_.numerics == "reference" || o_.numerics == "exact",
                 "--numerics must be reference or exact (got '", o_.numerics, "')");
    model_.set_reference_numerics(o_.numerics == "reference");
    check_run_options(o_, data_, model_.cfg, resume_ ? &ck_ : nullptr, P_);
    const TrainConfig tc = o_.train_config();
    tc.validate();

    std::shared_ptr<StepBackend<T>> backend;  // --device: where the steps run
    if constexpr (std::is_same_v<T, float>) {
        if (hooks_.backend_f32) backend = hooks_.backend_f32(model_);
    } else {
        if (hooks_.backend_f64) backend = hooks_.backend_f64(model_);
    }
    trainer_ = std::make_unique<Trainer<T>>(model_, tc, DistOptions{o_.zero1}, std::move(backend));
    trainer_->set_optimizer(std::move(opt));
    // The global data stream, the same on every rank: each step consumes P·batch chunks per
    // micro-batch, of which rank r takes the r-th run of `batch`. The position is global, so a
    // checkpoint resumes with any number of ranks.
    loader_ = std::make_unique<ChunkLoader>(data_.train, o_.ctx, o_.seed, o_.shuffle);
    if (resume_) loader_->restore(ck_.data);

    out_.start_step = trainer_->steps_done();
    out_.step = out_.start_step;
    out_.num_params = model_.num_params();
    out_.ranks = P_;
    if (data_.valid && root_)
        out_.valid_unigram_entropy = unigram_entropy(*data_.valid, model_.cfg.pad_token_id);
    const std::string metrics_path = o_.metrics_path.empty()
                                         ? (fs::path(o_.out_dir) / "metrics.jsonl").string()
                                         : o_.metrics_path;
    if (root_) metrics_.emplace(metrics_path, resume_ ? out_.start_step : -1);
    options_json_ = o_.maths_json();
    tokenizer_src_ = tokenizer_source(o_.data_dir);
    // A fine-tuned model keeps its own tokenizer when the shards name none.
    if (tokenizer_src_.empty() && !o_.init_dir.empty() &&
        fs::is_regular_file(fs::path(o_.init_dir) / "tokenizer.model"))
        tokenizer_src_ = (fs::path(o_.init_dir) / "tokenizer.model").string();
    if (resume_ && fs::absolute(o_.resume_dir) == fs::absolute(o_.out_dir))
        last_saved_ = out_.start_step;
    tokens_per_step_ = int64_t(P_) * o_.batch * o_.accum * (o_.ctx - 1);
    bufs_.resize(size_t(o_.accum));
    micro_.resize(size_t(o_.accum));
    describe();
}

// The run in one line (and data parallel, the ranks and threads in another).
template <typename T>
void Run<T>::describe() const {
    {
        std::ostringstream s;
        s << (resume_ ? "resuming " : "training ")
          << (model_.cfg.learned_g() ? "PLDR-LLM (learned G_LM)" : "SDPA baseline (G_LM = I)")
          << ", " << model_.num_params() << " parameters, " << o_.dtype << "; "
          << data_.train.num_chunks() << " training chunks of " << o_.ctx << " tokens, batch "
          << o_.batch << (o_.accum > 1 ? " x " + std::to_string(o_.accum) : "") << ", steps "
          << (resume_ ? std::to_string(out_.start_step) + " -> " : "") << o_.steps << ", lr "
          << o_.lr << ", warmup " << o_.warmup_steps();
        if (o_.precision != "fp32")
            s << "; precision " << o_.precision << " ("
              << (bf16::available() ? "matmuls on " + bf16::backend_name()
                                    : "computing in fp32: " + bf16::unavailable_reason())
              << ")";
        if (o_.recompute != "selective") s << "; recompute " << o_.recompute;
        if (data_.valid)
            s << "; validation: " << data_.valid->num_chunks() << " chunks, unigram entropy "
              << out_.valid_unigram_entropy << " nats/token";
        msg(s.str());
    }
    if (P_ > 1) {
        const double mib = 1.0 / (1 << 20);
        const int64_t plain = 2 * model_.layout.total * int64_t(sizeof(T));
        const dist::World& w = world_;
        std::ostringstream s;
        s << "data parallel: " << P_ << " ranks (" << w.local_size << " on this host) x "
          << w.threads << " OpenMP thread" << (w.threads > 1 ? "s" : "") << " = "
          << w.local_size * w.threads << " threads on the host's " << w.cores << " cores"
          << (w.local_size * w.threads > w.cores ? " (OVERSUBSCRIBED)" : "")
          << (w.affinity < w.cores
                  ? ", each rank bound to " + std::to_string(w.affinity) + " core(s)"
                  : std::string())
          << "; global batch " << P_ * o_.batch
          << (o_.accum > 1 ? " x " + std::to_string(o_.accum) : "")
          << " chunks; AdamW moments per rank " << double(trainer_->optimizer_bytes()) * mib
          << " MiB ("
          << (o_.zero1 ? "ZeRO-1; unsharded " + std::to_string(double(plain) * mib) + " MiB"
                       : "unsharded; --zero1 divides it by " + std::to_string(P_))
          << ")";
        msg(s.str());
    }
    if (resume_ && ck_.world_size != P_)
        msg("note: the checkpoint was written by " + std::to_string(ck_.world_size) + " rank(s); " +
            std::to_string(P_) + " continue the same data stream with the same global batch of " +
            std::to_string(P_ * o_.batch) + " chunks (" + std::to_string(o_.batch) + " per rank)");
}

template <typename T>
void Run<T>::stopped(const std::string& why) const {
    fail("training stopped", why, "; ",
         last_saved_ >= 0 ? "the last good checkpoint (step " + std::to_string(last_saved_) +
                                ") is kept in " + o_.out_dir
                          : std::string("no checkpoint had been written yet"));
}

// Data: this rank's `batch` chunks of each micro-batch's P·batch in the global stream.
template <typename T>
void Run<T>::next_batches() {
    for (int64_t a = 0; a < o_.accum; ++a) {
        loader_->skip(world_.rank * o_.batch);
        micro_[size_t(a)] = loader_->next(o_.batch, bufs_[size_t(a)]);
        loader_->skip((P_ - 1 - world_.rank) * o_.batch);
    }
}

// Forward, backward, reduce, clip, update (Trainer::step); a refused step stops the run.
template <typename T>
StepResult Run<T>::optimizer_step() {
    try {
        return trainer_->step(micro_);
    } catch (const InternalError&) {
        throw;
    } catch (const Error& e) {
        stopped(cat(": ", e.what()));
    }
}

// Log: the step's metrics line and the hook.
template <typename T>
void Run<T>::log_step(const StepResult& r, int64_t step) {
    StepReport rep;
    rep.r = r;
    rep.step = step;
    rep.total = o_.steps;
    rep.tokens_per_s = train_seconds_ > 0 ? double(tokens_done_) / train_seconds_ : 0;
    rep.elapsed_s = seconds_since(t0_);
    rep.eta_s = train_seconds_ / double(step - out_.start_step) * double(o_.steps - step);
    ojson j;
    j["type"] = "train";
    j["step"] = step;
    j["loss"] = r.loss.value;
    j["ce"] = r.loss.ce;
    j["accuracy"] = r.loss.accuracy;
    if (model_.cfg.learned_g()) {
        j["dagA"] = r.loss.dagA;
        j["dagAp"] = r.loss.dagAp;
        j["dagG"] = r.loss.dagG;
    }
    j["lr"] = r.lr;
    j["grad_norm"] = r.grad_norm;
    j["clipped"] = r.clipped;
    j["tokens"] = step * tokens_per_step_;
    j["tokens_per_s"] = rep.tokens_per_s;
    j["elapsed_s"] = rep.elapsed_s;
    if (P_ > 1) {
        j["ranks"] = P_;
        j["comm_s"] = r.comm_s;
    }
    if (metrics_) metrics_->write(j);
    if (root_ && hooks_.on_step) hooks_.on_step(rep);
}

// Validation on rank 0 (the others wait at the next step's collectives).
template <typename T>
void Run<T>::validate(int64_t step) {
    if (!data_.valid || !root_) return;
    EvalResult e;
    try {
        e = evaluate_shard(*trainer_, *data_.valid, o_.ctx, P_ * o_.batch, o_.eval_batches);
    } catch (const InternalError&) {
        throw;
    } catch (const Error& err) {
        stopped(cat(" at step ", step, ": ", err.what()));
    }
    out_.has_eval = true;
    out_.last_eval = e;
    ojson j;
    j["type"] = "eval";
    j["step"] = step;
    j["loss"] = e.loss;
    j["ce"] = e.ce;
    j["accuracy"] = e.accuracy;
    j["perplexity"] = e.perplexity;
    j["dagA"] = e.dagA;
    j["dagAp"] = e.dagAp;
    j["dagG"] = e.dagG;
    j["tokens"] = e.tokens;
    if (metrics_) metrics_->write(j);
    if (hooks_.on_eval) hooks_.on_eval(EvalReport{e, step});
}

// The collapse audit on rank 0 (TrainHooks::audit_*): one "audit" line in the metrics, with its
// cost beside the training time so far.
template <typename T>
void Run<T>::audit(int64_t step) {
    if (!root_ || o_.audit_every <= 0) return;
    const auto& f = [this]() -> const auto& {
        if constexpr (std::is_same_v<T, float>)
            return hooks_.audit_f32;
        else
            return hooks_.audit_f64;
    }
    ();
    if (!f) return;
    const auto ts = std::chrono::steady_clock::now();
    trainer_->sync_params();  // (the audit reads the host model)
    ojson a;
    try {
        a = ojson::parse(f(model_, tokenizer_src_));
    } catch (const InternalError&) {
        throw;
    } catch (const Error& err) {
        stopped(cat(" at step ", step, ": the audit: ", err.what()));
    }
    const double dt = seconds_since(ts);
    audit_seconds_ += dt;
    ++audits_;
    ojson j;
    j["type"] = "audit";
    j["step"] = step;
    j["tokens"] = step * tokens_per_step_;
    j["seconds"] = dt;
    j["train_seconds"] = train_seconds_;
    j["audit"] = std::move(a);
    if (metrics_) metrics_->write(j);
}

// A checkpoint is only ever a good one: non-finite weights or moments (an update that
// overflowed) are refused, and the previous checkpoint stays.
template <typename T>
void Run<T>::require_finite(const T* base, const char* what) const {
    for (const ParamEntry& e : model_.layout.entries)
        PLDR_REQUIRE(
            all_finite(base + e.offset, e.numel), "training stopped at step ",
            trainer_->steps_done(), ": ", what, e.name, " is not finite; checkpoint not written; ",
            last_saved_ >= 0 ? "the last good checkpoint (step " + std::to_string(last_saved_) +
                                   ") is kept in " + o_.out_dir
                             : std::string("no checkpoint had been written yet"));
}

// Checkpoint (collective): rank 0 writes it. The parameters are the same on every rank; the
// moments are checked where they are whole (on rank 0 after the ZeRO-1 gather: an error there
// stops every rank).
template <typename T>
void Run<T>::checkpoint() {
    trainer_->sync_params();
    require_finite(model_.params.data(), "parameter ");
    CheckpointInfo info;
    info.step = trainer_->steps_done();
    info.dtype = o_.dtype;
    info.data = loader_->state();
    info.train_shard_fnv = data_.train.checksum();
    info.options_json = options_json_;
    info.world_size = P_;
    AdamWState<T> scratch;
    const AdamWState<T>& full = trainer_->full_optimizer(scratch);  // collective
    if (root_) {
        require_finite(full.m.data(), "optimizer moment of ");
        require_finite(full.v.data(), "optimizer moment of ");
    }
    if (P_ > 1) {
        // Every rank must hold the same parameters (the step is identical on every rank);
        // checked at each checkpoint through their hashes.
        const uint64_t h = buffer_fnv(model_.params);
        const double mine[2] = {double(h >> 32), double(h & 0xffffffffu)};
        std::vector<double> all(size_t(2 * P_));
        dist::allgather_values(mine, all.data(), 2, "comparing the parameters across ranks");
        for (int r = 1; r < P_; ++r)
            if (all[size_t(2 * r)] != all[0] || all[size_t(2 * r + 1)] != all[1])
                dist::abort_all(cat("the parameters of rank ", r, " differ from rank 0's at step ",
                                    info.step, " (the ranks diverged)"));
    }
    last_saved_ = info.step;
    if (!root_) return;
    save_checkpoint(o_.out_dir, model_, full, info);
    // The tokenizer the shards were prepared with, so that DIR is a complete model directory.
    const fs::path tok = fs::path(o_.out_dir) / "tokenizer.model";
    if (!tokenizer_src_.empty() && !fs::exists(tok))
        write_file_atomic(tok.string(), read_file(tokenizer_src_));  // never a partial copy
}

template <typename T>
TrainOutcome Run<T>::train() {
    t0_ = std::chrono::steady_clock::now();
    if (out_.start_step == 0) audit(0);  // the initial model: the curves' first point
    while (trainer_->steps_done() < o_.steps) {
        const auto ts = std::chrono::steady_clock::now();
        next_batches();                         // data
        const StepResult r = optimizer_step();  // forward, backward, reduce, clip, update
        train_seconds_ += seconds_since(ts);
        comm_seconds_ += r.comm_s;
        tokens_done_ += tokens_per_step_;
        const int64_t step = trainer_->steps_done();
        out_.step = step;
        log_step(r, step);  // log

        const bool last = step == o_.steps;
        if ((o_.eval_every > 0 && step % o_.eval_every == 0) || last) validate(step);
        const bool stop_soon = o_.stop_at > 0 && step == o_.stop_at;
        if (o_.audit_every > 0 && (step % o_.audit_every == 0 || last || stop_soon)) audit(step);
        const bool stop_at = o_.stop_at > 0 && step == o_.stop_at && !last;
        // Every rank stops at the same step when any of them was asked to.
        const bool interrupted =
            dist::any(hooks_.stop_flag && hooks_.stop_flag->load(), "agreeing on a stop request") &&
            !last;
        if (last || stop_at || interrupted || (o_.save_every > 0 && step % o_.save_every == 0))
            checkpoint();
        if (stop_at || interrupted) {
            out_.reason = stop_at ? StopReason::STOP_AT : StopReason::INTERRUPTED;
            break;
        }
    }
    if (trainer_->steps_done() == o_.steps && last_saved_ != o_.steps) checkpoint();
    if (audits_ > 0) {
        char b[160];
        std::snprintf(b, sizeof b, "audit: %lld audits took %.1f s, %.1f%% of the training time",
                      static_cast<long long>(audits_), audit_seconds_,
                      100 * audit_seconds_ / std::max(train_seconds_, 1e-9));
        msg(b);
    }
    dist::barrier("waiting for rank 0 to write the checkpoint");
    out_.tokens_per_s = train_seconds_ > 0 ? double(tokens_done_) / train_seconds_ : 0;
    out_.comm_s_per_step =
        out_.step > out_.start_step ? comm_seconds_ / double(out_.step - out_.start_step) : 0;
    return out_;
}

}  // namespace

TrainOutcome run_training(const TrainOptions& opts, const TrainHooks& hooks) {
    PLDR_REQUIRE(opts.dist_timeout >= 0 && std::isfinite(opts.dist_timeout),
                 "--dist-timeout must be > 0 seconds (got ", opts.dist_timeout, ")");
    if (opts.dist_timeout > 0) dist::set_timeout(opts.dist_timeout);
    const bool multi = dist::world().size > 1;
    try {
        // A resumed run keeps its maths, the compute dtype included, unless --dtype is given
        // (then it must match). Data parallel, every rank must pick the same type before any
        // reads the checkpoint: there --dtype stays as given.
        TrainOptions o = opts;
        if (!multi && !o.resume_dir.empty() &&
            std::find(o.given.begin(), o.given.end(), "dtype") == o.given.end() &&
            recover_checkpoint(o.resume_dir))
            o.dtype = read_checkpoint_info(o.resume_dir).dtype;
        if (o.dtype == "f32") return Run<float>(o, hooks).train();
        if (o.dtype == "f64") return Run<double>(o, hooks).train();
        fail("--dtype must be f32 or f64 (got '", o.dtype, "')");
    } catch (const Error& e) {
        if (multi) dist::abort_all(e.what());  // stops every rank, never a hang
        throw;
    }
}

}  // namespace pldr
