// The training program (see trainer_loop.h).
#include "train/trainer_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/fs.h"
#include "core/gemm_bf16.h"
#include "dist/dist.h"
#include "io/config_json.h"
#include "io/json_util.h"
#include "model/init.h"
#include "train/checkpoint.h"
#include "train/clip.h"
#include "train/metrics.h"
#include "train/presets.h"

namespace pldr {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

int64_t TrainOptions::warmup_steps() const {
    return warmup >= 0 ? warmup : std::min<int64_t>(2000, steps / 10);
}

TrainConfig TrainOptions::train_config() const {
    TrainConfig c;
    c.adam.weight_decay = weight_decay;
    c.schedule.lr_max = lr;
    c.schedule.warmup = warmup_steps();
    c.schedule.total = steps;
    c.schedule.alpha = lr_alpha;
    c.dag = dag;
    c.clip = clip;
    c.clip_value = clip_value;
    c.clip_norm = clip_norm;
    c.precision = parse_precision(precision);
    c.recompute = parse_recompute(recompute);
    return c;
}

namespace {

const char* clip_name(ClipMode m) {
    return m == ClipMode::VALUE ? "value" : m == ClipMode::NORM ? "norm" : "none";
}

ojson maths(const TrainOptions& o) {
    ojson j;
    j["steps"] = o.steps;
    j["batch"] = o.batch;
    j["accum"] = o.accum;
    j["ctx"] = o.ctx;
    j["seed"] = o.seed;
    j["shuffle"] = o.shuffle;
    j["lr"] = o.lr;
    j["warmup"] = o.warmup_steps();
    j["lr_alpha"] = o.lr_alpha;
    j["weight_decay"] = o.weight_decay;
    j["dag"] = {o.dag.A, o.dag.Ap, o.dag.G};
    j["clip"] = clip_name(o.clip);
    j["clip_value"] = o.clip_value;
    j["clip_norm"] = o.clip_norm;
    j["dtype"] = o.dtype;
    j["fixed_g_identity"] = o.fixed_g_identity;
    if (o.numerics != "reference") j["numerics"] = o.numerics;  // older checkpoints lack it
    if (o.precision != "fp32") j["precision"] = o.precision;    // likewise
    j["preset"] = o.preset;
    j["config"] = o.config_path;
    return j;
}

// Overwrites the maths fields of `o` with the checkpoint's.
void apply_maths(TrainOptions& o, const ojson& j, const std::string& where) {
    // Every field is checked for its type and range: a hand-edited or corrupt state must not
    // change the maths silently (an unknown clip mode is not "no clipping").
    auto bad = [&](const char* k, const std::string& why) {
        fail(where, ": the training state's option '", k, "' ", why);
    };
    auto at = [&](const char* k) -> const ojson& {
        if (!j.contains(k))
            fail(where, ": the training state's options are incomplete (no '", k, "')");
        return j.at(k);
    };
    auto geti = [&](const char* k, int64_t lo) {
        const ojson& v = at(k);
        if (!v.is_number_integer()) bad(k, "is not an integer");
        if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
            bad(k, "is too large");
        const int64_t x = v.get<int64_t>();
        if (x < lo) bad(k, cat("is ", x, ", below ", lo));
        return x;
    };
    auto getd = [&](const char* k) {
        const ojson& v = at(k);
        if (!v.is_number() || !std::isfinite(v.get<double>())) bad(k, "is not a finite number");
        return v.get<double>();
    };
    auto getb = [&](const char* k) {
        const ojson& v = at(k);
        if (!v.is_boolean()) bad(k, "is not true or false");
        return v.get<bool>();
    };
    auto gets = [&](const char* k) {
        const ojson& v = at(k);
        if (!v.is_string()) bad(k, "is not a string");
        return v.get<std::string>();
    };
    o.steps = geti("steps", 1);
    o.batch = geti("batch", 1);
    o.accum = geti("accum", 1);
    o.ctx = geti("ctx", 0);
    {
        const ojson& v = at("seed");
        if (!v.is_number_unsigned()) bad("seed", "is not a non-negative integer");
        o.seed = v.get<uint64_t>();
    }
    o.shuffle = getb("shuffle");
    o.lr = getd("lr");
    o.warmup = geti("warmup", -1);
    o.lr_alpha = getd("lr_alpha");
    o.weight_decay = getd("weight_decay");
    const ojson& dag = at("dag");
    if (!dag.is_array() || dag.size() != 3) bad("dag", "is not an array of three numbers");
    for (const auto& x : dag)
        if (!x.is_number() || !std::isfinite(x.get<double>()))
            bad("dag", "is not an array of three numbers");
    o.dag = {dag[0].get<double>(), dag[1].get<double>(), dag[2].get<double>()};
    const std::string c = gets("clip");
    if (c == "value")
        o.clip = ClipMode::VALUE;
    else if (c == "norm")
        o.clip = ClipMode::NORM;
    else if (c == "none")
        o.clip = ClipMode::NONE;
    else
        bad("clip", "'" + c + "' is not a clip mode (value, norm or none)");
    o.clip_value = getd("clip_value");
    o.clip_norm = getd("clip_norm");
    o.dtype = gets("dtype");
    if (o.dtype != "f32" && o.dtype != "f64") bad("dtype", "'" + o.dtype + "' is not f32 or f64");
    o.fixed_g_identity = getb("fixed_g_identity");
    o.numerics = j.contains("numerics") ? gets("numerics") : "reference";
    if (o.numerics != "reference" && o.numerics != "exact")
        bad("numerics", "'" + o.numerics + "' is not reference or exact");
    o.precision = j.contains("precision") ? gets("precision") : "fp32";
    if (o.precision != "fp32" && o.precision != "bf16")
        bad("precision", "'" + o.precision + "' is not fp32 or bf16");
}

}  // namespace

void apply_checkpoint_options(TrainOptions& o, const std::string& options_json,
                              const std::string& where) {
    const ojson j = parse_json_strict(options_json, where + ": the training state's options");
    PLDR_REQUIRE(j.is_object(), where, ": the training state's options are not a JSON object");
    apply_maths(o, j, where);
}

void check_checkpoint_position(const CheckpointInfo& ck, const TrainOptions& o,
                               const std::string& where) {
    // Each optimizer step serves ranks × batch × accum chunks of the global stream (the batch
    // stored is per rank, the world size the checkpoint's): any other position is a corrupt or
    // hand-edited state (and a far one would replay or skip data silently).
    PLDR_REQUIRE(o.batch > 0 && o.accum > 0, where, ": batch and accum must be positive");
    PLDR_REQUIRE(ck.world_size > 0, where, ": the training state's world_size must be positive");
    int64_t per_rank = 0, per_step = 0, want = 0;
    const bool overflow = __builtin_mul_overflow(o.batch, o.accum, &per_rank) ||
                          __builtin_mul_overflow(per_rank, ck.world_size, &per_step) ||
                          __builtin_mul_overflow(ck.step, per_step, &want);
    PLDR_REQUIRE(!overflow && ck.data.position == want, where,
                 ": the training state's data_position ", ck.data.position, " disagrees with step ",
                 ck.step, " x ranks ", ck.world_size, " x batch ", o.batch, " x accum ", o.accum,
                 " (corrupt or edited train_state.safetensors)");
}

namespace {

// First line where two texts differ, for "does not match" messages.
std::string first_difference(const std::string& a, const std::string& b) {
    std::istringstream sa(a), sb(b);
    std::string la, lb;
    while (true) {
        const bool ga = bool(std::getline(sa, la)), gb = bool(std::getline(sb, lb));
        if (!ga && !gb) return "";
        if (!ga || !gb || la != lb) {
            auto trim = [](std::string s) {
                s.erase(0, s.find_first_not_of(' '));
                if (!s.empty() && s.back() == ',') s.pop_back();
                return s;
            };
            return trim(la) + " vs " + trim(lb);
        }
    }
}

std::string model_config_text(Config c) {
    c.dtype = "float32";
    return config_to_json(c);
}

// The model config asked for by preset / config / fixed_g, with the data's vocabulary.
Config requested_config(const TrainOptions& o, int64_t vocab, const std::string& shard_path) {
    Config c;
    if (!o.config_path.empty()) {
        c = load_config(o.config_path);
        PLDR_REQUIRE(c.vocab_size == vocab, "the data's vocabulary size (", vocab, " in ",
                     shard_path, ") differs from vocab_size ", c.vocab_size, " in ", o.config_path);
    } else {
        c = preset_config(o.preset, vocab);
    }
    if (o.fixed_g_identity) c = sdpa_twin(c);
    return c;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// FNV-1a 64 of a buffer (the parameters' agreement check across ranks).
template <typename Buffer>
uint64_t buffer_fnv(const Buffer& v) {
    return fnv1a64(v.data(), v.size() * sizeof(v[0]));
}

template <typename T>
TrainOutcome run_typed(TrainOptions o, const TrainHooks& hooks) {
    const dist::World& world = dist::world();
    const int P = world.size;
    const bool root = world.rank == 0;
    auto msg = [&](const std::string& s) {
        if (root && hooks.message) hooks.message(s);
    };
    PLDR_REQUIRE(!o.out_dir.empty(), "--out is required");
    PLDR_REQUIRE(!o.data_dir.empty(), "--data is required");
    const bool resume = !o.resume_dir.empty();
    PLDR_REQUIRE(resume || o.preset.empty() != o.config_path.empty(),
                 "give exactly one of --preset and --config");
    PLDR_REQUIRE(o.preset.empty() || o.config_path.empty(),
                 "give only one of --preset and --config");

    {
        // The output is this run's own checkpoint directory: never an input, and another
        // model's directory only when forced.
        const bool own = resume && fs::exists(o.out_dir) && fs::exists(o.resume_dir) &&
                         fs::equivalent(o.out_dir, o.resume_dir);
        InputSet in;
        in.add_dir(o.data_dir);
        in.add_file(o.config_path);
        if (resume && !own) in.add_dir(o.resume_dir);
        // The output rule (core/fs.h): a new directory, the checkpoint being resumed, or with
        // force another model directory or checkpoint.
        require_output_dir(o.out_dir, in, "--out",
                           {"config.json", "model.safetensors", kTrainStateFile, "metrics.jsonl",
                            "tokenizer.model"},
                           o.force, resume ? o.resume_dir : "");
        if (!o.metrics_path.empty())
            require_output_file(o.metrics_path, in, "--metrics", o.force || own);
    }
    const std::string train_path = (fs::path(o.data_dir) / "train.pldrtok").string();
    const std::string valid_path = (fs::path(o.data_dir) / "valid.pldrtok").string();
    PLDR_REQUIRE(fs::is_directory(o.data_dir), o.data_dir, ": data directory does not exist");
    PLDR_REQUIRE(fs::exists(train_path), o.data_dir,
                 ": no train.pldrtok (prepare the data with `pldr prepare`)");
    ShardReader train(train_path);
    std::unique_ptr<ShardReader> valid;
    if (fs::exists(valid_path)) {
        valid = std::make_unique<ShardReader>(valid_path);
        PLDR_REQUIRE(valid->vocab_size() == train.vocab_size(), valid_path, ": vocabulary size ",
                     valid->vocab_size(), " differs from train.pldrtok's ", train.vocab_size());
    }
    PLDR_REQUIRE(train.ctx() > 0, train_path, ": the shard is not packed into chunks");

    Model<T> model;
    AdamWState<T> opt;
    CheckpointInfo ck;
    // Rank 0 builds the model (new run) or loads the checkpoint; the others receive it below.
    if (!root) {
    } else if (resume) {
        PLDR_REQUIRE(recover_checkpoint(o.resume_dir), o.resume_dir,
                     ": not a training checkpoint (no ", kTrainStateFile, ")");
        const CheckpointInfo peek = read_checkpoint_info(o.resume_dir);
        PLDR_REQUIRE(peek.dtype == o.dtype, o.resume_dir,
                     ": the checkpoint was trained with --dtype ", peek.dtype, ", not ", o.dtype);
        ck = load_checkpoint<T>(o.resume_dir, &model, &opt);
        const ojson stored =
            parse_json_strict(ck.options_json, o.resume_dir + ": the training state's options");
        PLDR_REQUIRE(stored.is_object(), o.resume_dir,
                     ": the training state's options are not a JSON object");
        const ojson given = maths(o);
        const int64_t new_steps = o.steps;
        TrainOptions merged = o;
        apply_maths(merged, stored, o.resume_dir);
        // Explicitly changed maths options are refused (the caller passes them via o.given).
        for (const std::string& k : o.given) {
            if (k == "numerics") {
                const std::string was = stored.value("numerics", "reference");
                PLDR_REQUIRE(was == o.numerics, "--numerics ", o.numerics,
                             " differs from the checkpoint's ", was, " (", o.resume_dir,
                             "); a resumed run keeps its training options");
            }
            if (k == "precision") {
                const std::string was = stored.value("precision", "fp32");
                PLDR_REQUIRE(was == o.precision, "--precision ", o.precision,
                             " differs from the checkpoint's ", was, " (", o.resume_dir,
                             "); a resumed run keeps its training options");
            }
            if (k == "steps" || !stored.contains(k) || !given.contains(k)) continue;
            if (k == "warmup" && o.warmup < 0) continue;
            PLDR_REQUIRE(stored[k] == given[k], "--", k, " ", given[k].dump(),
                         " differs from the checkpoint's ", stored[k].dump(), " (", o.resume_dir,
                         "); a resumed run keeps its training options");
        }
        if (std::find(o.given.begin(), o.given.end(), "steps") != o.given.end() &&
            new_steps != merged.steps) {
            msg("note: --steps " + std::to_string(new_steps) + " replaces the checkpoint's " +
                std::to_string(merged.steps) + " (the LR schedule now spans " +
                std::to_string(new_steps) + " steps)");
            merged.steps = new_steps;
        }
        // The model source: the one given now (checked below), else the checkpoint's.
        if (!o.preset.empty() || !o.config_path.empty()) {
            merged.preset = o.preset;
            merged.config_path = o.config_path;
        } else {
            merged.preset = stored.value("preset", "");
            merged.config_path = stored.value("config", "");
        }
        if (!o.preset.empty() || !o.config_path.empty()) {
            const Config want = requested_config(merged, train.vocab_size(), train_path);
            const std::string d =
                first_difference(model_config_text(want), model_config_text(model.cfg));
            PLDR_REQUIRE(d.empty(), "the checkpoint in ", o.resume_dir, " does not match ",
                         o.config_path.empty() ? "--preset " + o.preset : o.config_path, " (", d,
                         ")");
        }
        PLDR_REQUIRE(model.cfg.vocab_size == train.vocab_size(), "the data's vocabulary size (",
                     train.vocab_size(), " in ", train_path, ") differs from the checkpoint's ",
                     model.cfg.vocab_size);
        PLDR_REQUIRE(ck.train_shard_fnv == train.checksum(), train_path,
                     ": not the training data the checkpoint in ", o.resume_dir,
                     " was trained on (checksum differs)");
        PLDR_REQUIRE(merged.dtype == ck.dtype, o.resume_dir,
                     ": the training state's options say dtype ", merged.dtype,
                     " but its metadata says ", ck.dtype);
        o = merged;
        if (ck.world_size != P) {
            // Another number of ranks: keep the global batch (and so the maths), split anew.
            const int64_t global = ck.world_size * o.batch;
            PLDR_REQUIRE(global % P == 0, o.resume_dir, ": the checkpoint's global batch of ",
                         global, " chunks (", ck.world_size, " ranks x ", o.batch,
                         ") does not split over ", P,
                         " ranks; resume with a number of ranks "
                         "that divides ",
                         global);
            o.batch = global / P;
        }
        PLDR_REQUIRE(fs::absolute(o.resume_dir) == fs::absolute(o.out_dir) ||
                         !fs::exists(fs::path(o.out_dir) / kTrainStateFile),
                     o.out_dir, " already holds another training checkpoint; choose another --out");
        PLDR_REQUIRE(ck.step <= o.steps, o.resume_dir, ": the checkpoint is at step ", ck.step,
                     ", beyond --steps ", o.steps);
    } else {
        PLDR_REQUIRE(!fs::exists(fs::path(o.out_dir) / kTrainStateFile), o.out_dir,
                     " already holds a training checkpoint; continue it with --resume ", o.out_dir,
                     " or choose another --out");
        const Config c = requested_config(o, train.vocab_size(), train_path);
        model = Model<T>(c);
        init_weights(model, o.seed);
        opt = AdamWState<T>(model.layout.total);
    }
    if (P > 1) {
        // Rank 0's options, model config and data position, then its weights, to every rank.
        std::string blob;
        if (root) {
            ojson b;
            b["options"] = maths(o);
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
            apply_maths(o, b.at("options"), "rank 0");
            o.preset = b["options"].value("preset", "");
            o.config_path = b["options"].value("config", "");
            model = Model<T>(config_from_json(b.at("config").get<std::string>(), "rank 0"));
            ck.step = b.at("step");
            ck.data.position = b.at("position");
            ck.data.epoch_rng = b.at("rng");
            ck.world_size = b.at("world_size");
        }
        dist::broadcast(model.params.data(), model.layout.total * int64_t(sizeof(T)), 0,
                        "broadcasting the weights");
    }

    PLDR_REQUIRE(o.numerics == "reference" || o.numerics == "exact",
                 "--numerics must be reference or exact (got '", o.numerics, "')");
    model.set_reference_numerics(o.numerics == "reference");

    // Context: the shard's chunk length unless a shorter one is asked for.
    if (o.ctx == 0) o.ctx = train.ctx();
    PLDR_REQUIRE(o.ctx >= 2 && o.ctx <= train.ctx(), "--ctx ", o.ctx, " must be in [2, ",
                 train.ctx(), "] (", train_path, " is packed in chunks of ", train.ctx(),
                 " tokens)");
    PLDR_REQUIRE(o.ctx - 1 <= model.cfg.max_position, "the context (", o.ctx - 1,
                 " input tokens from chunks of ", o.ctx,
                 ") is longer than max_position_embeddings = ", model.cfg.max_position);
    PLDR_REQUIRE(o.steps > 0, "--steps must be > 0 (got ", o.steps, ")");
    PLDR_REQUIRE(o.batch > 0, "--batch must be > 0 (got ", o.batch, ")");
    PLDR_REQUIRE(o.accum > 0, "--accum must be > 0 (got ", o.accum, ")");
    PLDR_REQUIRE(o.stop_at >= 0, "--stop-at must be >= 0");
    if (resume) {
        // The position counts the checkpoint's ranks × its per-rank batch (= P × o.batch now).
        CheckpointInfo at = ck;
        at.world_size = P;
        check_checkpoint_position(at, o, o.resume_dir);
    }
    PLDR_REQUIRE(o.eval_every >= 0 && o.eval_batches > 0 && o.save_every >= 0,
                 "--eval-every and --save-every must be >= 0, --eval-batches > 0");
    {
        // Every size the run derives from the options (core/error.h): the chunks of a step and
        // of the whole run (the data position), the tokens of a step, a validation's chunks.
        const int64_t per_step =
            checked_mul(checked_mul(int64_t(P), o.batch, "ranks x --batch"), o.accum,
                        "the chunks of a step (ranks x --batch x --accum)");
        checked_mul(per_step, o.steps, "the run's chunks (--steps x ranks x --batch x --accum)");
        checked_mul(per_step, o.ctx, "the tokens of a step (ranks x --batch x --accum x --ctx)");
        checked_mul(checked_mul(int64_t(P), o.batch, "ranks x --batch"), o.eval_batches,
                    "a validation's chunks (--eval-batches x ranks x --batch)");
    }
    if (valid)
        PLDR_REQUIRE(valid->ctx() >= o.ctx, valid_path, ": packed in chunks of ", valid->ctx(),
                     " tokens, shorter than the training context ", o.ctx);
    const TrainConfig tc = o.train_config();
    tc.validate();

    Trainer<T> trainer(model, tc, DistOptions{o.zero1});
    trainer.set_optimizer(std::move(opt));
    // The global data stream, the same on every rank: each step consumes P·batch chunks per
    // micro-batch, of which rank r takes the r-th run of `batch`. The position is global, so a
    // checkpoint resumes with any number of ranks.
    ChunkLoader loader(train, o.ctx, o.seed, o.shuffle);
    if (resume) loader.restore(ck.data);

    TrainOutcome out;
    out.start_step = trainer.steps_done();
    out.step = out.start_step;
    out.num_params = model.num_params();
    out.ranks = P;
    if (valid && root) out.valid_unigram_entropy = unigram_entropy(*valid, model.cfg.pad_token_id);

    const std::string metrics_path =
        o.metrics_path.empty() ? (fs::path(o.out_dir) / "metrics.jsonl").string() : o.metrics_path;
    std::optional<MetricsLog> metrics;  // rank 0 writes the metrics
    if (root) metrics.emplace(metrics_path, resume ? out.start_step : -1);
    const std::string options_json = maths(o).dump();
    std::string tokenizer_src;  // from the prepared corpus' meta.json, when it is there
    {
        const fs::path meta = fs::path(o.data_dir) / "meta.json";
        if (fs::exists(meta)) {
            const auto j = ojson::parse(read_file(meta.string()), nullptr, false);
            if (j.is_object() && j.contains("tokenizer") && j["tokenizer"].is_object() &&
                j["tokenizer"].contains("path") && j["tokenizer"]["path"].is_string() &&
                fs::is_regular_file(j["tokenizer"]["path"].get<std::string>()))
                tokenizer_src = j["tokenizer"]["path"].get<std::string>();
        }
    }

    int64_t last_saved =
        resume && fs::absolute(o.resume_dir) == fs::absolute(o.out_dir) ? out.start_step : -1;
    auto save = [&]() {
        // A checkpoint is only ever a good one: non-finite weights or moments (an update that
        // overflowed) are refused, and the previous checkpoint stays. The parameters are the
        // same on every rank; the moments are checked where they are whole (on rank 0 after
        // the ZeRO-1 gather: an error there stops every rank).
        auto require_finite = [&](const T* base, const char* what) {
            for (const ParamEntry& e : model.layout.entries)
                PLDR_REQUIRE(all_finite(base + e.offset, e.numel), "training stopped at step ",
                             trainer.steps_done(), ": ", what, e.name,
                             " is not finite; checkpoint not written; ",
                             last_saved >= 0
                                 ? "the last good checkpoint (step " + std::to_string(last_saved) +
                                       ") is kept in " + o.out_dir
                                 : std::string("no checkpoint had been written yet"));
        };
        require_finite(model.params.data(), "parameter ");
        CheckpointInfo info;
        info.step = trainer.steps_done();
        info.dtype = o.dtype;
        info.data = loader.state();
        info.train_shard_fnv = train.checksum();
        info.options_json = options_json;
        info.world_size = P;
        AdamWState<T> scratch;
        const AdamWState<T>& full = trainer.full_optimizer(scratch);  // collective
        if (root) {
            require_finite(full.m.data(), "optimizer moment of ");
            require_finite(full.v.data(), "optimizer moment of ");
        }
        if (P > 1) {
            // Every rank must hold the same parameters (the step is identical on every rank);
            // checked at each checkpoint through their hashes.
            const uint64_t h = buffer_fnv(model.params);
            const double mine[2] = {double(h >> 32), double(h & 0xffffffffu)};
            std::vector<double> all(size_t(2 * P));
            dist::allgather_values(mine, all.data(), 2, "comparing the parameters across ranks");
            for (int r = 1; r < P; ++r)
                if (all[size_t(2 * r)] != all[0] || all[size_t(2 * r + 1)] != all[1])
                    dist::abort_all(cat("the parameters of rank ", r,
                                        " differ from rank 0's at step ", info.step,
                                        " (the ranks diverged)"));
        }
        last_saved = info.step;
        if (!root) return;
        save_checkpoint(o.out_dir, model, full, info);
        // The tokenizer the shards were prepared with, so that DIR is a complete model directory.
        const fs::path tok = fs::path(o.out_dir) / "tokenizer.model";
        if (!tokenizer_src.empty() && !fs::exists(tok))
            write_file_atomic(tok.string(), read_file(tokenizer_src));  // never a partial copy
    };

    {
        std::ostringstream s;
        s << (resume ? "resuming " : "training ")
          << (model.cfg.learned_g() ? "PLDR-LLM (learned G_LM)" : "SDPA baseline (G_LM = I)")
          << ", " << model.num_params() << " parameters, " << o.dtype << "; " << train.num_chunks()
          << " training chunks of " << o.ctx << " tokens, batch " << o.batch
          << (o.accum > 1 ? " x " + std::to_string(o.accum) : "") << ", steps "
          << (resume ? std::to_string(out.start_step) + " -> " : "") << o.steps << ", lr " << o.lr
          << ", warmup " << o.warmup_steps();
        if (o.precision != "fp32")
            s << "; precision " << o.precision << " ("
              << (bf16::available() ? "matmuls on " + bf16::backend_name()
                                    : "computing in fp32: " + bf16::unavailable_reason())
              << ")";
        if (o.recompute != "selective") s << "; recompute " << o.recompute;
        if (valid)
            s << "; validation: " << valid->num_chunks() << " chunks, unigram entropy "
              << out.valid_unigram_entropy << " nats/token";
        msg(s.str());
    }
    if (P > 1) {
        const double mib = 1.0 / (1 << 20);
        const int64_t plain = 2 * model.layout.total * int64_t(sizeof(T));
        std::ostringstream s;
        s << "data parallel: " << P << " ranks (" << world.local_size << " on this host) x "
          << world.threads << " OpenMP thread" << (world.threads > 1 ? "s" : "") << " = "
          << world.local_size * world.threads << " threads on the host's " << world.cores
          << " cores" << (world.local_size * world.threads > world.cores ? " (OVERSUBSCRIBED)" : "")
          << (world.affinity < world.cores
                  ? ", each rank bound to " + std::to_string(world.affinity) + " core(s)"
                  : std::string())
          << "; global batch " << P * o.batch
          << (o.accum > 1 ? " x " + std::to_string(o.accum) : "")
          << " chunks; AdamW moments per rank " << double(trainer.optimizer_bytes()) * mib
          << " MiB ("
          << (o.zero1 ? "ZeRO-1; unsharded " + std::to_string(double(plain) * mib) + " MiB"
                      : "unsharded; --zero1 divides it by " + std::to_string(P))
          << ")";
        msg(s.str());
    }
    if (resume && ck.world_size != P)
        msg("note: the checkpoint was written by " + std::to_string(ck.world_size) + " rank(s); " +
            std::to_string(P) + " continue the same data stream with the same global batch of " +
            std::to_string(P * o.batch) + " chunks (" + std::to_string(o.batch) + " per rank)");

    auto do_eval = [&](int64_t step) {
        if (!valid || !root) return;  // rank 0 evaluates; the others wait at the next step
        EvalResult e;
        try {
            e = evaluate_shard(trainer, *valid, o.ctx, P * o.batch, o.eval_batches);
        } catch (const InternalError&) {
            throw;
        } catch (const Error& err) {
            fail("training stopped at step ", step, ": ", err.what(), "; ",
                 last_saved >= 0 ? "the last good checkpoint (step " + std::to_string(last_saved) +
                                       ") is kept in " + o.out_dir
                                 : std::string("no checkpoint had been written yet"));
        }
        out.has_eval = true;
        out.last_eval = e;
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
        if (metrics) metrics->write(j);
        if (hooks.on_eval) hooks.on_eval(EvalReport{e, step});
    };

    const auto t0 = std::chrono::steady_clock::now();
    double train_seconds = 0;
    int64_t tokens_done = 0;
    const int64_t tokens_per_step = int64_t(P) * o.batch * o.accum * (o.ctx - 1);
    double comm_seconds = 0;
    std::vector<std::vector<int64_t>> bufs(size_t(o.accum));
    std::vector<TokenBatch> micro(size_t(o.accum));
    while (trainer.steps_done() < o.steps) {
        const auto ts = std::chrono::steady_clock::now();
        for (int64_t a = 0; a < o.accum; ++a) {
            loader.skip(world.rank * o.batch);
            micro[size_t(a)] = loader.next(o.batch, bufs[size_t(a)]);
            loader.skip((P - 1 - world.rank) * o.batch);
        }
        StepResult r;
        try {
            r = trainer.step(micro);
        } catch (const InternalError&) {
            throw;
        } catch (const Error& e) {
            fail("training stopped: ", e.what(), "; ",
                 last_saved >= 0 ? "the last good checkpoint (step " + std::to_string(last_saved) +
                                       ") is kept in " + o.out_dir
                                 : std::string("no checkpoint had been written yet"));
        }
        train_seconds += seconds_since(ts);
        comm_seconds += r.comm_s;
        tokens_done += tokens_per_step;
        const int64_t step = trainer.steps_done();
        out.step = step;
        StepReport rep;
        rep.r = r;
        rep.step = step;
        rep.total = o.steps;
        rep.tokens_per_s = train_seconds > 0 ? double(tokens_done) / train_seconds : 0;
        rep.elapsed_s = seconds_since(t0);
        rep.eta_s = train_seconds / double(step - out.start_step) * double(o.steps - step);
        ojson j;
        j["type"] = "train";
        j["step"] = step;
        j["loss"] = r.loss.value;
        j["ce"] = r.loss.ce;
        j["accuracy"] = r.loss.accuracy;
        if (model.cfg.learned_g()) {
            j["dagA"] = r.loss.dagA;
            j["dagAp"] = r.loss.dagAp;
            j["dagG"] = r.loss.dagG;
        }
        j["lr"] = r.lr;
        j["grad_norm"] = r.grad_norm;
        j["clipped"] = r.clipped;
        j["tokens"] = step * tokens_per_step;
        j["tokens_per_s"] = rep.tokens_per_s;
        j["elapsed_s"] = rep.elapsed_s;
        if (P > 1) {
            j["ranks"] = P;
            j["comm_s"] = r.comm_s;
        }
        if (metrics) metrics->write(j);
        if (root && hooks.on_step) hooks.on_step(rep);

        const bool last = step == o.steps;
        if ((o.eval_every > 0 && step % o.eval_every == 0) || last) do_eval(step);
        const bool stop_at = o.stop_at > 0 && step == o.stop_at && !last;
        // Every rank stops at the same step when any of them was asked to.
        const bool interrupted =
            dist::any(hooks.stop_flag && hooks.stop_flag->load(), "agreeing on a stop request") &&
            !last;
        if (last || stop_at || interrupted || (o.save_every > 0 && step % o.save_every == 0))
            save();
        if (stop_at || interrupted) {
            out.reason = stop_at ? StopReason::STOP_AT : StopReason::INTERRUPTED;
            break;
        }
    }
    if (trainer.steps_done() == o.steps && last_saved != o.steps) save();
    dist::barrier("waiting for rank 0 to write the checkpoint");
    out.tokens_per_s = train_seconds > 0 ? double(tokens_done) / train_seconds : 0;
    out.comm_s_per_step =
        out.step > out.start_step ? comm_seconds / double(out.step - out.start_step) : 0;
    return out;
}

}  // namespace

std::string TrainOptions::maths_json() const {
    return maths(*this).dump();
}

TrainOutcome run_training(const TrainOptions& opts, const TrainHooks& hooks) {
    PLDR_REQUIRE(opts.dist_timeout >= 0 && std::isfinite(opts.dist_timeout),
                 "--dist-timeout must be > 0 seconds (got ", opts.dist_timeout, ")");
    if (opts.dist_timeout > 0) dist::set_timeout(opts.dist_timeout);
    const bool multi = dist::world().size > 1;
    try {
        if (opts.dtype == "f32") return run_typed<float>(opts, hooks);
        if (opts.dtype == "f64") return run_typed<double>(opts, hooks);
        fail("--dtype must be f32 or f64 (got '", opts.dtype, "')");
    } catch (const Error& e) {
        if (multi) dist::abort_all(e.what());  // stops every rank, never a hang
        throw;
    }
}

}  // namespace pldr
