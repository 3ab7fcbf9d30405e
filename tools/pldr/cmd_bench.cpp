// pldr bench (MODEL_DIR | --config S|M|110M) [--batch B] [--threads N] [--only LIST] ...:
// prefill, decode (per cache mode, batch 1 and batch B) and training tokens/s, each as a fraction
// of the limit this run measures on this machine: the SGEMM peak for prefill and training (FLOPs
// counted as in bench/README.md), the read bandwidth over the bytes a token must read for decode.
// Each workload runs in a child process (this binary, re-executed with --one), so its peak RSS is
// its own. Output: a markdown table (or JSON with --output json); --json FILE also writes the
// JSON, atomically. --check-bandwidth compares the read bandwidth with likwid-bench's load_avx.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench_product.h"
#include "bench_report.h"
#include "common.h"
#include "pldr/bench.hpp"

extern char** environ;

namespace pldr::cli {

namespace {

using nlohmann::json;

struct BenchArgs {
    std::string dir, config, only, caches = "kvg,kv,none", one;  // only "": per device
    std::string output = "md", json_path, weights, precision = "fp32", recompute = "selective";
    std::string save_model, limits = "adjacent", probe, device = "cpu", tokenizer;
    int threads = 2, reps = 0, warmup = 1, rounds = 3;
    double min_time = -1;
    int64_t batch = 8, prompt_prefill = 128, prompt_decode = 32, n_new = 64, context = 1024;
    int64_t train_batch = 8, train_seq = 256;
    bool no_isolate = false, check_bandwidth = false, force = false;
};

api::BenchOptions options_of(const BenchArgs& a) {
    api::BenchOptions o;
    o.model_dir = a.dir;
    if (!a.config.empty()) o.config = a.config;
    o.threads = a.threads;
    o.reps = a.reps;
    o.min_time = a.min_time;
    o.warmup = a.warmup;
    o.context = a.context;
    o.n_new = a.n_new;
    o.train_batch = a.train_batch;
    o.train_seq = a.train_seq;
    o.weights = a.weights;
    o.device = a.device;
    return o;
}

json to_json(const api::BenchResult& r, const api::BenchOptions& o) {
    json j;
    j["model"] = r.model;
    j["weights"] = r.weights;
    j["precision"] = r.precision;
    j["bf16_products"] = r.bf16_products;
    j["workload"] = api::name_of(r.workload);
    if (r.workload == api::BenchWorkload::DECODE) {
        j["cache"] = api::name_of(o.cache);
        j["batch"] = o.batch;
        j["prompt"] = o.prompt;
        j["n_new"] = o.n_new;
    } else if (r.workload == api::BenchWorkload::PREFILL) {
        j["prompt"] = o.prompt;
    } else {
        j["batch"] = o.train_batch;
        j["seq"] = o.train_seq;
        j["loss"] = r.loss;
        j["recompute"] = r.recompute;
    }
    j["threads"] = r.threads;
    j["params"] = r.num_params;
    auto stats_json = [](const api::BenchStats& s) {
        return json{{"median", s.median}, {"min", s.min},   {"max", s.max},
                    {"mean", s.mean},     {"sd", s.stddev}, {"n", s.n}};
    };
    j["tok_s"] = stats_json(r.tok_s);
    j["tok_s_reps"] = r.tok_s_reps;
    if (!r.batch1_reps.empty()) {
        j["batch1_tok_s_reps"] = r.batch1_reps;
        j["x_batch1_pairs"] = stats_json(r.x_batch1);
    }
    j["flops_per_token"] = r.flops_per_token;
    j["bytes_per_token"] = r.bytes_per_token;
    j["peak_rss_bytes"] = r.peak_rss_bytes;
    j["device"] = r.device;
    if (r.device != "cpu") {
        j["device_param_bytes"] = r.device_param_bytes;
        j["device_peak_bytes"] = r.device_peak_bytes;
        if (!r.device_phases.empty()) {
            json phases = json::array();
            for (const auto& p : r.device_phases)
                phases.push_back(
                    {{"phase", p.name}, {"depth", p.depth}, {"calls", p.calls}, {"ms", p.ms}});
            j["device_phases"] = phases;
        }
    }
    j["load"] = {r.load_before, r.load_after};
    return j;
}

// Runs this binary with `args` in a child process; its standard output, and whether it exited 0.
std::pair<std::string, bool> run_self(const std::vector<std::string>& args) {
    int fd[2];
    require(::pipe(fd) == 0, "bench: pipe: ", std::strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd[1], 1);
    posix_spawn_file_actions_addclose(&fa, fd[0]);
    std::vector<char*> argv;
    for (const auto& s : args) argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(fd[1]);
    if (rc != 0) {
        ::close(fd[0]);
        fail("bench: cannot start a child process: ", std::strerror(rc));
    }
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = ::read(fd[0], buf, sizeof buf)) != 0;) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) break;
        out.append(buf, size_t(n));
    }
    ::close(fd[0]);
    int st = 0;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return {out, WIFEXITED(st) && WEXITSTATUS(st) == 0};
}

// One workload in a child process (this binary with --one); its JSON line.
json run_child(const std::vector<std::string>& args) {
    const auto [out, ok] = run_self(args);
    require(ok, "bench: the ", args[3], " workload failed (its error is above)");
    const size_t at = out.rfind("{\"bench_result\"");
    require(at != std::string::npos, "bench: the ", args[3], " workload printed no result");
    return json::parse(out.substr(at))["bench_result"];
}

// The limits named in `kinds` ("read", "sgemm", "bf16"), each measured in a process of its own
// (this binary with --probe), so that its buffers count in no workload's peak RSS.
json probe_limits(const std::vector<std::string>& kinds, int threads, const std::string& device) {
    json j;
    for (const auto& k : kinds) {
        const auto [out, ok] = run_self({"pldr", "bench", "--probe", k, "--threads",
                                         std::to_string(threads), "--device", device});
        const size_t at = out.rfind("{\"probe\"");
        require(ok && at != std::string::npos, "bench: measuring the ", k, " limit failed");
        j[k] = json::parse(out.substr(at))["probe"];
    }
    return j;
}

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// likwid-bench's load_avx read bandwidth on `threads` threads (GB/s), or -1 when unavailable.
double likwid_read_gbs(int threads) {
    const std::string cmd =
        "likwid-bench -t load_avx -w S0:1GB:" + std::to_string(threads) + " 2>/dev/null";
    FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) return -1;
    double mbs = -1;
    char line[512];
    while (std::fgets(line, sizeof line, p))
        if (std::strncmp(line, "MByte/s:", 8) == 0) mbs = std::atof(line + 8);
    ::pclose(p);
    return mbs > 0 ? mbs / 1e3 : -1;
}

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    for (std::string x; std::getline(ss, x, ',');)
        if (!x.empty()) out.push_back(x);
    return out;
}

// The workload list, each run as a child (or in this process with --no-isolate): inference for
// each weight format, training for each precision (on float32 weights). A job is
// "WORKLOAD,CACHE,BATCH,WEIGHTS,PRECISION,RECOMPUTE".
std::vector<std::string> bench_jobs(const BenchArgs& a) {
    std::vector<std::string> weights = split(a.weights), precisions = split(a.precision),
                             recomputes = split(a.recompute);
    for (const auto& r : recomputes)
        require(r == "none" || r == "selective" || r == "full", "--recompute: '", r,
                "' is not none, selective or full");
    require(!recomputes.empty(), "--recompute: give none, selective, full or a list");
    for (const auto& w : weights)
        require(w == "f32" || w == "bf16" || w == "q8", "--weights: '", w,
                "' is not f32, bf16 or q8");
    for (const auto& p : precisions)
        require(p == "fp32" || p == "bf16", "--precision: '", p, "' is not fp32 or bf16");
    require(!precisions.empty(), "--precision: give fp32, bf16 or both");
    if (weights.empty()) weights.push_back("-");  // as loaded
    std::vector<std::string> jobs;
    for (const auto& w : split(a.only)) {
        const api::BenchWorkload wl = api::bench_workload_from_name(w);
        if (wl == api::BenchWorkload::TRAIN) {
            for (const auto& p : precisions)
                for (const auto& rc : recomputes)
                    jobs.push_back("train,-,0," + std::string(a.weights.empty() ? "-" : "f32") +
                                   "," + p + "," + rc);
            continue;
        }
        for (const auto& wt : weights) {
            const std::string tail = "," + wt + ",fp32,-";
            if (wl == api::BenchWorkload::PREFILL) {
                jobs.push_back("prefill,-,0" + tail);
                continue;
            }
            for (const auto& c : split(a.caches)) {
                api::cache_mode_from_name(c);  // validates
                jobs.push_back("decode," + c + ",1" + tail);
            }
            if (a.batch > 1) jobs.push_back("decode,kvg," + std::to_string(a.batch) + tail);
        }
    }
    require(!jobs.empty(), "bench: no workload to run (--only)");
    return jobs;
}

// The command line of the child that runs one job with the parent's settings.
std::vector<std::string> child_args(const BenchArgs& a, const std::string& job) {
    std::vector<std::string> args = {"pldr", "bench", "--one", job};
    if (!a.dir.empty()) args.push_back(a.dir);
    if (!a.config.empty()) args.insert(args.end(), {"--config", a.config});
    for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{
             {"--threads", std::to_string(a.threads)},
             {"--device", a.device},
             {"--limits", a.limits},
             {"--reps", std::to_string(a.reps)},
             {"--warmup", std::to_string(a.warmup)},
             {"--context", std::to_string(a.context)},
             {"--prompt-prefill", std::to_string(a.prompt_prefill)},
             {"--prompt-decode", std::to_string(a.prompt_decode)},
             {"--n-new", std::to_string(a.n_new)},
             {"--train-batch", std::to_string(a.train_batch)},
             {"--train-seq", std::to_string(a.train_seq)}})
        args.insert(args.end(), {k, v});
    if (a.min_time >= 0) {  // else the child's default
        char t[32];
        std::snprintf(t, sizeof t, "%.17g", a.min_time);
        args.insert(args.end(), {"--min-time", t});
    }
    return args;
}

int run_bench(const BenchArgs& a);

// The product commands of --only (bench_product.h: "product", "cmd-*") apart from the
// workloads, which run after them; false when --only names none.
bool run_product_commands(const BenchArgs& a) {
    BenchArgs rest = a;
    ProductBench p;
    p.only.clear();
    rest.only.clear();
    for (const auto& w : split(a.only)) {
        const bool all = w == "product";
        if (all || w.rfind("cmd-", 0) == 0)
            p.only += (p.only.empty() ? "" : ",") + (all ? "train,generate,serve" : w.substr(4));
        else
            rest.only += (rest.only.empty() ? "" : ",") + w;
    }
    if (p.only.empty()) return false;
    p.model_dir = a.dir;
    p.config = a.config;
    p.tokenizer = a.tokenizer;
    p.threads = a.threads;
    p.rounds = a.rounds;
    p.context = a.context;
    p.batch = a.batch;
    p.prompt = a.prompt_decode;
    p.n_new = a.n_new;
    p.train_batch = a.train_batch;
    p.train_seq = a.train_seq;
    json prod = run_product_bench(p);
    if (!rest.only.empty()) run_bench(rest);
    if (!a.json_path.empty() && rest.only.empty())
        api::write_file_atomic(a.json_path, prod.dump(2) + "\n");
    if (a.output == "json")
        std::printf("%s\n", prod.dump(2).c_str());
    else
        print_product_report(prod);
    return true;
}

int run_bench(const BenchArgs& a) {
    if (!a.probe.empty()) {  // a child: one limit, one JSON line
        std::printf("{\"probe\":%.17g}\n", api::measure_bench_limit(a.probe, a.threads, a.device));
        return 0;
    }
    require(a.dir.empty() != a.config.empty(), "bench: give a MODEL_DIR or --config S|M|110M");
    api::check_device(a.device);
    const bool on_gpu = a.device != "cpu";
    if (a.only.empty() && a.one.empty()) {  // the default: every workload the device runs
        BenchArgs d = a;
        d.only = "prefill,decode,train";
        return run_bench(d);
    }
    if (on_gpu && a.one.empty())  // what the CUDA backend does not run yet: one line, first
        for (const auto& w : split(a.only))
            if (w != "prefill" && w != "train" && w != "decode") api::check_model_device(a.device);
    if (!a.json_path.empty())  // the output rule, before the runs (docs/errors.md "Outputs")
        api::Inputs().dir(a.dir).check_file(a.json_path, "--json", a.force);
    if (!a.save_model.empty()) {
        require(!a.config.empty(), "--save-model writes the random model of --config");
        api::save_bench_model(a.config, a.save_model, a.context);
        std::printf("wrote the %s benchmark model to %s\n", a.config.c_str(), a.save_model.c_str());
        return 0;
    }
    require(a.threads >= 1 && a.threads <= 1024, "--threads ", a.threads, " is outside [1, 1024]");
    require(a.batch >= 1 && a.batch <= 1024, "--batch ", a.batch, " is outside [1, 1024]");
    if (a.one.empty() && run_product_commands(a)) return 0;
    api::BenchOptions base = options_of(a);

    // A job: "WORKLOAD,CACHE,BATCH,WEIGHTS,PRECISION,RECOMPUTE" ("-" where unused or as loaded).
    auto options_of_job = [&](const std::string& job) {
        const auto parts = split(job);
        require(parts.size() == 6, "bench: --one WORKLOAD,CACHE,BATCH,WEIGHTS,PRECISION,RECOMPUTE");
        api::BenchOptions o = base;
        o.workload = api::bench_workload_from_name(parts[0]);
        o.prompt = o.workload == api::BenchWorkload::PREFILL ? a.prompt_prefill : a.prompt_decode;
        if (o.workload == api::BenchWorkload::DECODE) {
            o.cache = api::cache_mode_from_name(parts[1]);
            o.batch = std::stoll(parts[2]);
        }
        o.weights = parts[3] == "-" ? "" : parts[3];
        o.precision = parts[4];
        if (parts[5] != "-") o.recompute = parts[5];
        return o;
    };
    // One workload in this process, its JSON.
    auto run_here = [&](const std::string& job) {
        api::BenchOptions o = options_of_job(job);
        // --limits adjacent: the workload's limit measured before the first timed repetition,
        // after the last, and between two wherever a second has passed since the last
        // measurement (so that short repetitions still run back to back), each time in a process
        // of its own. A probe's "before" is the repetition it preceded.
        json probes = json::array();
        if (a.limits == "adjacent") {
            std::vector<std::string> kinds = {"read"};
            if (o.workload != api::BenchWorkload::DECODE) {
                kinds = {"sgemm"};
                if (o.precision == "bf16" || o.weights == "bf16") kinds.push_back("bf16");
            }
            o.between_reps = [&probes, kinds, t = a.threads, dv = a.device, last = 0.0](
                                 int i, int reps) mutable {
                if (i > 0 && i < reps && now_s() - last < 1.0) return;
                json p = probe_limits(kinds, t, dv);
                p["before"] = i;
                probes.push_back(p);
                last = now_s();
            };
        }
        o.pair_batch1 = o.workload == api::BenchWorkload::DECODE && o.batch > 1;
        const api::BenchResult r = api::bench(o);
        json j = to_json(r, o);
        if (!probes.empty()) j["probes"] = probes;
        return j;
    };
    if (!a.one.empty()) {  // the child: one workload, one JSON line
        std::printf("{\"bench_result\":%s}\n", run_here(a.one).dump().c_str());
        return 0;
    }

    const std::vector<std::string> jobs = bench_jobs(a);
    const api::BenchLimits lim = api::measure_bench_limits(a.threads, a.device);
    const double likwid = a.check_bandwidth ? likwid_read_gbs(a.threads) : -1;
    require(!a.check_bandwidth || likwid > 0,
            "--check-bandwidth: likwid-bench did not run (install Debian's likwid)");

    json results = json::array();
    for (const auto& job : jobs) {
        json r;
        if (a.no_isolate) {
            r = run_here(job);
        } else {
            r = run_child(child_args(a, job));
        }
        add_limit_fractions(r, lim);
        results.push_back(r);
    }
    add_ratios(results);

    json out;
    out["limits"] = {{"threads", lim.threads},
                     {"read_gbs", lim.read_gbs},
                     {"sgemm_gflops", lim.sgemm_gflops},
                     {"sgemm_kernels", lim.sgemm_kernels},
                     {"bf16_gflops", lim.bf16_gflops},
                     {"bf16_backend", lim.bf16_backend},
                     {"device", lim.device}};
    if (lim.device != "cpu") out["limits"]["tf32_gflops"] = lim.tf32_gflops;
    if (likwid > 0) out["limits"]["likwid_load_avx_gbs"] = likwid;
    out["results"] = results;
    out["pldr_version"] = api::version();
    if (!a.json_path.empty()) api::write_file_atomic(a.json_path, out.dump(2) + "\n");
    if (a.output == "json") {
        std::printf("%s\n", out.dump(2).c_str());
        return 0;
    }
    print_report(out, a.limits == "adjacent");
    return 0;
}

}  // namespace

void add_bench(CLI::App& app) {
    auto a = std::make_shared<BenchArgs>();
    auto* cmd = app.add_subcommand(
        "bench", "prefill, decode and training speed as fractions of this machine's limits");
    cmd->add_option("MODEL_DIR", a->dir, "model directory (or --config)");
    cmd->add_option("--config", a->config, "benchmark shape with random weights")
        ->check(CLI::IsMember({"S", "M", "110M"}));
    cmd->add_option("--weights", a->weights,
                    "linear weights of prefill and decode: f32, or packed as bf16 or q8 (q8_0) "
                    "before the run, or a list (f32,bf16,q8: each, with ratios to f32); default: "
                    "as loaded (a converted directory stays packed)");
    cmd->add_option("--precision", a->precision,
                    "training precision: fp32, bf16 (mixed: bf16 products, fp32 master weights), "
                    "or fp32,bf16 (both, with the ratio)")
        ->capture_default_str();
    cmd->add_option("--recompute", a->recompute,
                    "training: what the backward recomputes: none, selective, full (activation "
                    "checkpointing: least memory), or a list (none,selective,full: each, with "
                    "the ratio to selective)")
        ->capture_default_str();
    cmd->add_option("--save-model", a->save_model,
                    "with --config: write its random model to DIR (a model directory) and exit; "
                    "pldr bench DIR then measures it loaded from the file")
        ->check(output_path());
    cmd->add_option("--only", a->only,
                    "workloads: prefill,decode,train (the default, on either device); and the "
                    "commands end to end on the CPU, each whole with its peak RSS: cmd-train, "
                    "cmd-generate, cmd-serve, or product (all three)");
    cmd->add_option("--tokenizer", a->tokenizer,
                    "cmd-serve: the tokenizer (its vocabulary the model's) when the model "
                    "directory has none");
    cmd->add_option("--rounds", a->rounds, "rounds of each product command (median, min-max)")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();
    cmd->add_option("--caches", a->caches, "decode cache modes at batch 1")->capture_default_str();
    cmd->add_option("--batch", a->batch, "decode batch (kvg) besides batch 1; 1 = none")
        ->capture_default_str();
    cmd->add_option("--device", a->device, "where the model runs: cpu, or cuda[:N] (docs/gpu.md)")
        ->capture_default_str();
    cmd->add_option("--threads", a->threads, "threads (OpenMP and OpenBLAS)")
        ->capture_default_str();
    cmd->add_option("--reps", a->reps, "timed repetitions (0 = per workload)")
        ->check(CLI::Range(0, 100000))
        ->capture_default_str();
    cmd->add_option("--min-time", a->min_time,
                    "prefill and decode: repeat until S seconds have passed (negative = 2 with "
                    "the default --reps, else 0)")
        ->check(CLI::Range(-1.0, 3600.0))
        ->capture_default_str();
    cmd->add_option("--warmup", a->warmup, "untimed repetitions first")
        ->check(CLI::Range(0, 1000))
        ->capture_default_str();
    cmd->add_option("--context", a->context, "session capacity (clamped to the model's)")
        ->capture_default_str();
    cmd->add_option("--prompt-prefill", a->prompt_prefill, "prefill prompt tokens")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
        ->capture_default_str();
    cmd->add_option("--prompt-decode", a->prompt_decode, "decode prompt tokens")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
        ->capture_default_str();
    cmd->add_option("--n-new", a->n_new, "decode: new tokens per sequence")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
        ->capture_default_str();
    cmd->add_option("--train-batch", a->train_batch, "training sequences per step")
        ->check(CLI::Range(int64_t(1), int64_t(4096)))
        ->capture_default_str();
    cmd->add_option("--train-seq", a->train_seq, "training tokens per sequence")
        ->check(CLI::Range(int64_t(2), int64_t(1) << 20))
        ->capture_default_str();
    cmd->add_option("--output", a->output, "md or json")
        ->check(CLI::IsMember({"md", "json"}))
        ->capture_default_str();
    cmd->add_option("--json", a->json_path, "also write the JSON report to FILE (atomically)")
        ->check(output_path());
    add_force(cmd, &a->force);
    cmd->add_flag("--no-isolate", a->no_isolate,
                  "run every workload in this process (peak RSS is then cumulative)");
    cmd->add_flag("--check-bandwidth", a->check_bandwidth,
                  "also measure the read bandwidth with likwid-bench (load_avx)");
    cmd->add_option("--limits", a->limits,
                    "where each workload's limit is measured: adjacent (around its repetitions, "
                    "for a machine whose speed drifts; bench/README.md) or start (once, at the "
                    "start of the run)")
        ->check(CLI::IsMember({"adjacent", "start"}))
        ->capture_default_str();
    cmd->add_option("--one", a->one, "internal: run one workload, print one JSON line")->group("");
    cmd->add_option("--probe", a->probe, "internal: measure one limit, print one JSON line")
        ->group("");  // measure_bench_limit names the known limits
    cmd->callback([a]() { return run_bench(*a); });
}

}  // namespace pldr::cli
