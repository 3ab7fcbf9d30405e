// pldr train (--preset NAME | --config CONFIG.json) --data SHARD_DIR --out DIR ...: the training
// program (pldr::api::train) with a progress bar, log lines, and SIGINT/SIGTERM handling.
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <map>

#include "common.h"

namespace pldr::cli {

namespace {

std::atomic<bool> g_stop{false};

extern "C" void on_stop_signal(int) {
    if (g_stop.load()) _exit(130);  // a second signal: give up at once
    g_stop.store(true);
}

struct TrainArgs {
    api::TrainOptions o;
    std::string dtype = "f32", numerics = "reference";
    std::string dag, fixed_g;
    double clip_value = 1.0, clip_norm = 0;
    bool no_clip = false, no_shuffle = false;
    int64_t log_every = 10;
    std::map<std::string, CLI::Option*> maths;  // maths key → its option
};

std::string hms(double s) {
    if (!std::isfinite(s) || s < 0) return "--:--";
    const long t = long(std::lround(s));
    char b[32];
    if (t >= 3600)
        std::snprintf(b, sizeof b, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        std::snprintf(b, sizeof b, "%02ld:%02ld", t / 60, t % 60);
    return b;
}

int run_train(TrainArgs& a) {
    api::TrainOptions& o = a.o;
    o.dtype = api::dtype_from_name(a.dtype);
    o.reference_numerics = a.numerics == "reference";
    if (!a.dag.empty()) o.dag = parse_dag(a.dag);
    if (!a.fixed_g.empty()) {
        require(a.fixed_g == "identity", "--fixed-g supports only 'identity' (got '", a.fixed_g,
                "')");
        o.fixed_g_identity = true;
    }
    o.shuffle = !a.no_shuffle;
    if (a.no_clip) {
        o.clip = api::ClipMode::NONE;
    } else if (a.clip_norm > 0 || a.maths["clip_norm"]->count() > 0) {
        o.clip = api::ClipMode::NORM;
        o.clip_norm = a.clip_norm;
    } else {
        o.clip = api::ClipMode::VALUE;
        o.clip_value = a.clip_value;
    }
    o.given.clear();
    for (const auto& [k, opt] : a.maths)
        if (opt->count() > 0) o.given.push_back(k);
    if (a.no_clip || a.maths["clip_value"]->count() || a.maths["clip_norm"]->count())
        o.given.push_back("clip");

    const bool tty = ::isatty(STDOUT_FILENO) != 0;
    bool bar_open = false;
    api::TrainCallbacks h;
    h.stop_flag = &g_stop;
    h.on_message = [&](const std::string& s) {
        if (bar_open) std::printf("\n"), bar_open = false;
        std::printf("%s\n", s.c_str());
        std::fflush(stdout);
    };
    h.on_step = [&](const api::TrainStep& r) {
        if (tty) {
            const int width = 24;
            const int fill = int(double(width) * double(r.step) / double(r.total));
            std::printf("\r[%s%s] %lld/%lld loss %.4f acc %.3f lr %.2e %.0f tok/s ETA %s\x1b[K",
                        std::string(size_t(fill), '#').c_str(),
                        std::string(size_t(width - fill), '.').c_str(), (long long)r.step,
                        (long long)r.total, r.loss.value, r.loss.accuracy, r.lr, r.tokens_per_s,
                        hms(r.eta_s).c_str());
            bar_open = true;
            std::fflush(stdout);
        } else if (r.step % std::max<int64_t>(1, a.log_every) == 0 || r.step == r.total) {
            std::printf(
                "step %lld/%lld  loss %.4f  acc %.4f  lr %.3e  %.0f tok/s  elapsed %s  "
                "ETA %s\n",
                (long long)r.step, (long long)r.total, r.loss.value, r.loss.accuracy, r.lr,
                r.tokens_per_s, hms(r.elapsed_s).c_str(), hms(r.eta_s).c_str());
            std::fflush(stdout);
        }
        return true;
    };
    h.on_eval = [&](const api::TrainEval& ev) {
        const api::ShardEval& r = ev.result;
        h.on_message("validation at step " + std::to_string(ev.step) + ": " + [&] {
            char b[256];
            std::snprintf(b, sizeof b, "loss %.4f  ce %.4f  accuracy %.4f  perplexity %.2f", r.loss,
                          r.ce, r.accuracy, r.perplexity);
            std::string s = b;
            if (r.dagA != 0 || r.dagAp != 0 || r.dagG != 0) {  // learned G_LM only
                std::snprintf(b, sizeof b, "  dag A %.4g  Ap %.4g  G %.4g", r.dagA, r.dagAp,
                              r.dagG);
                s += b;
            }
            std::snprintf(b, sizeof b, "  (%lld tokens)", (long long)r.tokens);
            s += b;
            return s;
        }());
    };

    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);

    const api::TrainSummary out = api::train(o, h);
    if (bar_open) std::printf("\n");
    const char* why = out.stop_reason == "completed" ? "finished"
                      : out.stop_reason == "stop_at" ? "stopped (--stop-at)"
                                                     : "interrupted";
    if (!out.root) return 0;  // rank 0 reports
    std::printf("%s at step %lld: checkpoint in %s (%.0f tokens/s", why, (long long)out.steps_done,
                o.out_dir.c_str(), out.tokens_per_s);
    if (out.ranks > 1)
        std::printf(" over %d ranks; collectives %.1f ms per step", out.ranks,
                    1e3 * out.comm_s_per_step);
    std::printf(")");
    if (out.has_eval)
        std::printf("; last validation loss %.4f (unigram entropy %.4f)", out.last_eval.value,
                    out.valid_unigram_entropy);
    std::printf("\n");
    if (out.stop_reason != "completed")
        std::printf("continue with: pldr train --resume %s --data %s --out %s\n", o.out_dir.c_str(),
                    o.data_dir.c_str(), o.out_dir.c_str());
    return 0;
}

}  // namespace

void add_train(CLI::App& app) {
    auto a = std::make_shared<TrainArgs>();
    api::TrainOptions& o = a->o;
    auto* cmd = app.add_subcommand("train",
                                   "train a PLDR-LLM (or its SDPA baseline) on token "
                                   "shards, with checkpoints and exact resume");
    auto* pre = cmd->add_option("--preset", o.preset, "model shape: tiny, small or v51-110M")
                    ->check(CLI::IsMember({"tiny", "small", "v51-110M"}));
    auto* cfg = cmd->add_option("--config", o.config_path, "model config.json");
    pre->excludes(cfg);
    cmd->add_option("--data", o.data_dir, "shard directory from pldr prepare")->required();
    cmd->add_option("--out", o.out_dir, "checkpoint directory (a loadable model directory)")
        ->required()
        ->check(output_path());
    add_force(cmd, &o.force);
    cmd->add_option("--resume", o.resume_dir, "continue from this checkpoint directory");
    auto& m = a->maths;
    m["steps"] =
        cmd->add_option("--steps", o.steps, "total optimizer steps")->capture_default_str();
    m["batch"] = cmd->add_option("--batch", o.batch, "chunks per batch")->capture_default_str();
    m["accum"] = cmd->add_option("--accum", o.accum, "micro-batches per step (accumulation)")
                     ->capture_default_str();
    m["ctx"] = cmd->add_option("--ctx", o.ctx, "tokens per chunk (default: the shard's)");
    m["seed"] =
        cmd->add_option("--seed", o.seed, "init and data-order seed")->capture_default_str();
    m["shuffle"] = cmd->add_flag("--no-shuffle", a->no_shuffle,
                                 "serve chunks in file order (the reference's order)");
    m["lr"] = cmd->add_option("--lr", o.lr, "peak learning rate")->capture_default_str();
    m["warmup"] =
        cmd->add_option("--warmup", o.warmup, "warmup steps (default: min(2000, steps/10))");
    m["lr_alpha"] = cmd->add_option("--lr-alpha", o.lr_alpha, "final LR fraction of the cosine")
                        ->capture_default_str();
    m["weight_decay"] = cmd->add_option("--weight-decay", o.weight_decay, "AdamW weight decay")
                            ->capture_default_str();
    m["dag"] = cmd->add_option("--dag", a->dag, "DAG loss coefficients c_A,c_Ap,c_G");
    auto* cv = cmd->add_option("--clip-value", a->clip_value, "clip each gradient element")
                   ->capture_default_str();
    auto* cn = cmd->add_option("--clip-norm", a->clip_norm, "clip the gradient's global 2-norm");
    auto* nc = cmd->add_flag("--no-clip", a->no_clip, "no gradient clipping");
    cv->excludes(cn);
    nc->excludes(cv);
    nc->excludes(cn);
    m["clip_value"] = cv;
    m["clip_norm"] = cn;
    m["fixed_g_identity"] =
        cmd->add_option("--fixed-g", a->fixed_g, "identity: train the SDPA baseline (G_LM = I)");
    m["dtype"] = cmd->add_option("--dtype", a->dtype, "compute precision: f32 or f64")
                     ->check(CLI::IsMember({"f32", "f64"}))
                     ->capture_default_str();
    m["precision"] = cmd->add_option("--precision", o.precision,
                                     "fp32, or bf16: mixed precision (bf16 products, float32 "
                                     "master weights; float32 where the CPU has no bf16)")
                         ->check(CLI::IsMember({"fp32", "bf16"}))
                         ->capture_default_str();
    m["numerics"] = cmd->add_option("--numerics", a->numerics,
                                    "f64: reference (the reference's float32 islands) or exact")
                        ->check(CLI::IsMember({"reference", "exact"}))
                        ->capture_default_str();
    cmd->add_option("--stop-at", o.stop_at, "stop after this step (as an interruption would)");
    cmd->add_option("--eval-every", o.eval_every, "validation period (0 = only at the end)")
        ->capture_default_str();
    cmd->add_option("--eval-batches", o.eval_batches, "validation batches")->capture_default_str();
    cmd->add_option("--save-every", o.save_every, "checkpoint period (0 = at the end / on stop)")
        ->capture_default_str();
    cmd->add_option("--metrics", o.metrics_path, "metrics JSONL (default: OUT/metrics.jsonl)")
        ->check(output_path());
    cmd->add_option("--log-every", a->log_every, "log-line period when stdout is not a terminal")
        ->capture_default_str();
    cmd->add_option("--recompute", o.recompute,
                    "activations the backward recomputes: none (keep all: most memory), "
                    "selective (cheap ones) or full (checkpoint each layer: least memory, ~1/5 "
                    "more FLOPs); same result")
        ->check(CLI::IsMember({"none", "selective", "full"}))
        ->capture_default_str();
    cmd->add_flag("--zero1", o.zero1,
                  "under mpirun: shard the AdamW moments across ranks (ZeRO-1, same result)");
    cmd->add_option("--dist-timeout", o.dist_timeout,
                    "under mpirun: seconds a collective may wait before every rank is stopped "
                    "(default: PLDR_DIST_TIMEOUT or 300)");
    cmd->callback([a]() { return run_train(*a); });
}

}  // namespace pldr::cli
