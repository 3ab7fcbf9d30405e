// Training-step throughput (perf only, not a test): one full step (forward, masked CE, DAG
// metrics, backward, clip by value, AdamW) in float32 at batch 8 × 256 on the configs S, M and
// 110M of shared/spec/PERF-TARGETS.md, random init and random token ids. Reports tokens/s
// (8·256 / step time: median, min–max, mean ± stddev), the FLOPs per step, the fraction of the
// SGEMM peak measured in the same run, and the peak RSS of the process (measured before the
// limits, whose buffers would otherwise dominate it). Run one config per process so the RSS is
// per config:  OMP_NUM_THREADS=2 bench_train --config S|M|110M [--reps N] [--warmup N]
//              [--threads N] [--no-limits]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/alloc.h"
#include "model/init.h"
#include "model/model.h"
#include "perf/limits.h"
#include "perf/workloads.h"
#include "train/step.h"

using pldr::Config;

int main(int argc, char** argv) {
    pldr::tune_allocator();
    using namespace pldr::perf;
    std::string name = "S";
    int reps = -1, warmup = 1, threads = 2;
    bool limits = true;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--config" && i + 1 < argc)
            name = argv[++i];
        else if (a == "--reps" && i + 1 < argc)
            reps = std::atoi(argv[++i]);
        else if (a == "--warmup" && i + 1 < argc)
            warmup = std::atoi(argv[++i]);
        else if (a == "--threads" && i + 1 < argc)
            threads = std::atoi(argv[++i]);
        else if (a == "--no-limits")
            limits = false;
        else {
            std::fprintf(stderr,
                         "usage: bench_train --config S|M|110M [--reps N] [--warmup N] "
                         "[--threads N] [--no-limits]\n");
            return 2;
        }
    }
    const BenchShape* shape = nullptr;
    for (const BenchShape& s : bench_shapes())
        if (name == s.name) shape = &s;
    if (!shape) {
        std::fprintf(stderr, "unknown config %s (S, M or 110M)\n", name.c_str());
        return 2;
    }
    if (reps < 0) reps = name == "S" ? 20 : name == "M" ? 8 : 4;
    set_threads(threads);

    const int64_t B = 8, S = 256, S1 = S + 1;
    const Config cfg = bench_config(name, 256);
    pldr::Model<float> model(cfg);
    pldr::init_weights(model, 1234);
    std::mt19937_64 rng(42);
    std::uniform_int_distribution<int64_t> tok(4, cfg.vocab_size - 1);  // no pad/bos/eos ids
    std::vector<int64_t> tokens(size_t(B * S1));
    for (auto& t : tokens) t = tok(rng);
    pldr::TrainConfig tc;  // reference defaults: clip by value 1.0, AdamW, warmup schedule
    pldr::Trainer<float> trainer(model, tc);
    const pldr::TokenBatch batch{tokens.data(), B, S1};

    const double load0 = load_avg1();
    for (int i = 0; i < warmup; ++i) trainer.step(batch);
    std::vector<double> secs;
    double loss = 0;
    for (int i = 0; i < reps; ++i) {
        const double t0 = now_s();
        loss = trainer.step(batch).loss.value;
        secs.push_back(now_s() - t0);
    }
    const double rss = peak_rss_bytes();
    const double load1 = load_avg1();
    std::vector<double> tps;
    for (double s : secs) tps.push_back(double(B * S) / s);
    const Stats st = stats_of(secs), tp = stats_of(tps);
    const double flops = train_step_flops(cfg, B, S);  // matrix products only (workloads.h)
    const double gflops = flops / st.median / 1e9;

    LimitsTable lim;
    if (limits) lim = measure_limits_table(threads, /*with_dgemm=*/false, /*with_bw=*/false);
    const double peak = threads >= 2 ? lim.sgemm2 : lim.sgemm1;
    const double frac = peak > 0 ? gflops / peak : 0;
    // Tokens/s the SGEMM peak would allow at this FLOP count (the "machine limit" column).
    const double limit_tps = peak > 0 ? double(B * S) / (flops / (peak * 1e9)) : 0;

    std::printf(
        "| config | params | tok/s median | min–max | mean ± sd | step ms | GFLOP/step | "
        "GFLOP/s | SGEMM peak | frac peak | limit tok/s | peak RSS |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    std::printf(
        "| %s | %lld | %.0f | %.0f–%.0f | %.0f ± %.0f | %.1f | %.2f | %.1f | %.1f | %.3f | %.0f | "
        "%.0f MB |\n",
        name.c_str(), (long long)model.num_params(), tp.median, tp.min, tp.max, tp.mean, tp.stddev,
        st.median * 1e3, flops / 1e9, gflops, peak, frac, limit_tps, rss / 1e6);
    std::printf("\nthreads %d, reps %d (+%d warm-up), load average %.2f → %.2f, last loss %.4f\n\n",
                threads, reps, warmup, load0, load1, loss);
    std::printf(
        "{\"bench\":\"train\",\"config\":\"%s\",\"params\":%lld,\"batch\":%lld,\"seq\":%lld,"
        "\"threads\":%d,\"reps\":%d,\"tok_s_median\":%.1f,\"tok_s_min\":%.1f,\"tok_s_max\":%.1f,"
        "\"tok_s_mean\":%.1f,\"tok_s_stddev\":%.1f,\"step_ms_median\":%.2f,\"gflop_per_step\":%.3f,"
        "\"gflops\":%.2f,\"sgemm_peak_gflops\":%.1f,\"frac_sgemm_peak\":%.4f,"
        "\"limit_tok_s\":%.1f,\"peak_rss_mb\":%.1f,\"load_before\":%.2f,\"load_after\":%.2f}\n",
        name.c_str(), (long long)model.num_params(), (long long)B, (long long)S, threads, reps,
        tp.median, tp.min, tp.max, tp.mean, tp.stddev, st.median * 1e3, flops / 1e9, gflops, peak,
        frac, limit_tps, rss / 1e6, load0, load1);
    return 0;
}
