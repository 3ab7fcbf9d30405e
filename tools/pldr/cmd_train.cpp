// pldr train (--preset NAME | --config CONFIG.json) --data SHARD_DIR --out DIR ...: the training
// program (pldr::api::train) with a progress bar, log lines, and SIGINT/SIGTERM handling.
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <map>

#include "common.h"
#include "options_cli.h"

namespace pldr::cli {

namespace {

std::atomic<bool> g_stop{false};

extern "C" void on_stop_signal(int) {
    if (g_stop.load()) _exit(130);  // a second signal: give up at once
    g_stop.store(true);
}

struct TrainArgs {
    api::TrainOptions o;                        // the flags of PLDR_TRAIN_OPTIONS (pldr/options.h)
    std::map<std::string, CLI::Option*> flags;  // member → its flag
    // The CLI's spellings of three members: --numerics reference|exact, --fixed-g identity,
    // --no-clip (with --clip-norm choosing the norm).
    std::string numerics = "reference", fixed_g;
    CLI::Option *numerics_flag = nullptr, *fixed_g_flag = nullptr, *no_clip_flag = nullptr;
    int64_t log_every = 10;
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
    o.reference_numerics = a.numerics == "reference";
    if (!a.fixed_g.empty()) {
        require(a.fixed_g == "identity", "--fixed-g supports only 'identity' (got '", a.fixed_g,
                "')");
        o.fixed_g_identity = true;
    }
    const bool no_clip = a.no_clip_flag->count() > 0;
    o.clip = no_clip                             ? api::ClipMode::NONE
             : a.flags["clip_norm"]->count() > 0 ? api::ClipMode::NORM
                                                 : api::ClipMode::VALUE;
    // The maths members given on the command line (a resume refuses a different value).
    o.given.clear();
    api::for_each_option(o, [&](const api::OptionSpec& s, const auto&) {
        const auto f = a.flags.find(s.name);
        if (s.on(PLDR_OPT_MATHS) && f != a.flags.end() && f->second->count() > 0)
            o.given.push_back(s.name);
    });
    if (a.fixed_g_flag->count() > 0) o.given.push_back("fixed_g_identity");
    if (a.numerics_flag->count() > 0) o.given.push_back("numerics");
    if (no_clip || a.flags["clip_value"]->count() > 0 || a.flags["clip_norm"]->count() > 0)
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
    add_option_flags(cmd, o, &a->flags);
    auto& f = a->flags;
    f["preset"]->excludes(f["config_path"]);
    f["data_dir"]->required();
    f["out_dir"]->required()->check(output_path());
    f["metrics_path"]->check(output_path());
    f["clip_value"]->excludes(f["clip_norm"]);
    a->no_clip_flag = cmd->add_flag("--no-clip")->description("no gradient clipping");
    a->no_clip_flag->excludes(f["clip_value"])->excludes(f["clip_norm"]);
    a->fixed_g_flag =
        cmd->add_option("--fixed-g", a->fixed_g, "identity: train the SDPA baseline (G_LM = I)");
    a->numerics_flag = cmd->add_option("--numerics", a->numerics,
                                       "f64: reference (the reference's float32 islands) or exact")
                           ->check(CLI::IsMember({"reference", "exact"}))
                           ->capture_default_str();
    cmd->add_option("--log-every", a->log_every, "log-line period when stdout is not a terminal")
        ->capture_default_str();
    cmd->callback([a]() { return run_train(*a); });
}

}  // namespace pldr::cli
