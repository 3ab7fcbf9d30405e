// The training options (see trainer_loop.h): the data shards and the checks of the options
// against them, the maths fields as JSON, a checkpoint's options
// read back with every field checked, the options of a resumed run, the model config they ask
// for, and the checks of the output directory.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/fs.h"
#include "io/config_json.h"
#include "io/json_util.h"
#include "train/checkpoint.h"
#include "train/presets.h"
#include "train/trainer_loop.h"

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
    if (!o.init_dir.empty()) j["init"] = o.init_dir;  // provenance of a fine-tuned run
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

std::string TrainOptions::maths_json() const {
    return maths(*this).dump();
}

TrainOptions resumed_options(const TrainOptions& o, const std::string& options_json,
                             const std::function<void(const std::string&)>& note) {
    const ojson stored =
        parse_json_strict(options_json, o.resume_dir + ": the training state's options");
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
        note("note: --steps " + std::to_string(new_steps) + " replaces the checkpoint's " +
             std::to_string(merged.steps) + " (the LR schedule now spans " +
             std::to_string(new_steps) + " steps)");
        merged.steps = new_steps;
    }
    // The model source: the one given now (checked by the caller), else the checkpoint's.
    if (!o.preset.empty() || !o.config_path.empty()) {
        merged.preset = o.preset;
        merged.config_path = o.config_path;
    } else {
        merged.preset = stored.value("preset", "");
        merged.config_path = stored.value("config", "");
    }
    return merged;
}

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

std::string config_difference(Config want, Config have) {
    want.dtype = have.dtype = "float32";
    return first_difference(config_to_json(want), config_to_json(have));
}

void check_output_options(const TrainOptions& o) {
    PLDR_REQUIRE(!o.out_dir.empty(), "--out is required");
    PLDR_REQUIRE(!o.data_dir.empty(), "--data is required");
    const bool resume = !o.resume_dir.empty();
    if (!o.init_dir.empty()) {
        PLDR_REQUIRE(o.preset.empty() && o.config_path.empty() && !resume,
                     "--init takes the model directory's own config: give no --preset, --config "
                     "or --resume with it");
        PLDR_REQUIRE(!o.fixed_g_identity,
                     "--init keeps the model's own G_LM: the SDPA baseline (fixed G) does not "
                     "apply");
    }
    PLDR_REQUIRE(resume || !o.init_dir.empty() || o.preset.empty() != o.config_path.empty(),
                 "give exactly one of --preset, --config and --init");
    PLDR_REQUIRE(o.preset.empty() || o.config_path.empty(),
                 "give only one of --preset and --config");
    // The output is this run's own checkpoint directory: never an input, and another model's
    // directory only when forced.
    const bool own = resume && fs::exists(o.out_dir) && fs::exists(o.resume_dir) &&
                     fs::equivalent(o.out_dir, o.resume_dir);
    InputSet in;
    in.add_dir(o.data_dir);
    in.add_file(o.config_path);
    if (!o.init_dir.empty()) in.add_dir(o.init_dir);
    if (resume && !own) in.add_dir(o.resume_dir);
    // The output rule (core/fs.h): a new directory, the checkpoint being resumed, or with force
    // another model directory or checkpoint.
    require_output_dir(
        o.out_dir, in, "--out",
        {"config.json", "model.safetensors", kTrainStateFile, "metrics.jsonl", "tokenizer.model"},
        o.force, resume ? o.resume_dir : "");
    if (!o.metrics_path.empty())
        require_output_file(o.metrics_path, in, "--metrics", o.force || own);
}

namespace {
ShardReader open_train_shard(const std::string& dir, const std::string& path) {
    PLDR_REQUIRE(fs::is_directory(dir), dir, ": data directory does not exist");
    PLDR_REQUIRE(fs::exists(path), dir,
                 ": no train.pldrtok (prepare the data with `pldr prepare`)");
    return ShardReader(path);
}
}  // namespace

Shards::Shards(const std::string& dir)
    : train_path((fs::path(dir) / "train.pldrtok").string()),
      valid_path((fs::path(dir) / "valid.pldrtok").string()),
      train(open_train_shard(dir, train_path)) {
    if (fs::exists(valid_path)) {
        valid = std::make_unique<ShardReader>(valid_path);
        PLDR_REQUIRE(valid->vocab_size() == train.vocab_size(), valid_path, ": vocabulary size ",
                     valid->vocab_size(), " differs from train.pldrtok's ", train.vocab_size());
    }
    PLDR_REQUIRE(train.ctx() > 0, train_path, ": the shard is not packed into chunks");
}

// The run's options against the data and the model (the context, the counts, the periods).
void check_run_options(TrainOptions& o, const Shards& data, const Config& cfg,
                       const CheckpointInfo* resumed, int P) {
    // Context: the shard's chunk length unless a shorter one is asked for.
    const int64_t chunk = data.train.ctx();
    if (o.ctx == 0) o.ctx = chunk;
    PLDR_REQUIRE(o.ctx >= 2 && o.ctx <= chunk, "--ctx ", o.ctx, " must be in [2, ", chunk, "] (",
                 data.train_path, " is packed in chunks of ", chunk, " tokens)");
    PLDR_REQUIRE(o.ctx - 1 <= cfg.max_position, "the context (", o.ctx - 1,
                 " input tokens from chunks of ", o.ctx,
                 ") is longer than max_position_embeddings = ", cfg.max_position);
    PLDR_REQUIRE(o.steps > 0, "--steps must be > 0 (got ", o.steps, ")");
    PLDR_REQUIRE(o.batch > 0, "--batch must be > 0 (got ", o.batch, ")");
    PLDR_REQUIRE(o.accum > 0, "--accum must be > 0 (got ", o.accum, ")");
    PLDR_REQUIRE(o.stop_at >= 0, "--stop-at must be >= 0");
    if (resumed) {
        // The position counts the checkpoint's ranks × its per-rank batch (= P × o.batch now).
        CheckpointInfo at = *resumed;
        at.world_size = P;
        check_checkpoint_position(at, o, o.resume_dir);
    }
    PLDR_REQUIRE(o.eval_every >= 0 && o.eval_batches > 0 && o.save_every >= 0,
                 "--eval-every and --save-every must be >= 0, --eval-batches > 0");
    PLDR_REQUIRE(o.audit_every >= 0, "--audit-every must be >= 0 (got ", o.audit_every, ")");
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
    if (data.valid)
        PLDR_REQUIRE(data.valid->ctx() >= o.ctx, data.valid_path, ": packed in chunks of ",
                     data.valid->ctx(), " tokens, shorter than the training context ", o.ctx);
}

}  // namespace pldr
