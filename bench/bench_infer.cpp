// Inference benchmarks (PERF-TARGETS.md workloads), float32, one config per process:
//   prefill — a 128-token prompt at batch 1 (tokens/s), against the SGEMM peak of this run;
//   decode  — 64 new tokens after a 32-token prompt at batch 1, per cache mode (kvg, kv, none),
//             against the read-bandwidth limit of this run (every non-embedding weight and the
//             head read once per token);
//   batch 8 — eight such generations at once through generate_batch, whose decode steps run
//             all eight sequences in one shared forward (decode_step: each weight read once per
//             step), aggregate tokens/s over the decode time as for batch 1 (the decode calls of
//             all eight over the time from the first step to the last token; prefills untimed).
// Not part of ctest.  OMP_NUM_THREADS=2 bench_infer --config S|M|110M [--reps N]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "configs.h"
#include "core/alloc.h"
#include "core/rng.h"
#include "infer/generate.h"
#include "limits.h"
#include "model/init.h"

namespace {

using namespace pldr;
using bench::now_s;

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

std::vector<int64_t> random_ids(int64_t n, int64_t V, uint64_t seed) {
    Rng r(seed);
    std::vector<int64_t> ids(static_cast<size_t>(n));
    for (auto& x : ids) x = 4 + int64_t(r.below(uint64_t(V - 4)));
    return ids;
}

}  // namespace

int main(int argc, char** argv) {
    pldr::tune_allocator();
    std::string name = "S";
    int reps = 3, threads = 2;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--config" && i + 1 < argc)
            name = argv[++i];
        else if (a == "--reps" && i + 1 < argc)
            reps = std::atoi(argv[++i]);
        else if (a == "--threads" && i + 1 < argc)
            threads = std::atoi(argv[++i]);
        else {
            std::fprintf(stderr, "usage: bench_infer --config S|M|110M [--reps N] [--threads N]\n");
            return 1;
        }
    }
    const bench::Shape* shape = nullptr;
    for (const auto& s : bench::kShapes)
        if (name == s.name) shape = &s;
    if (!shape) {
        std::fprintf(stderr, "unknown config %s\n", name.c_str());
        return 1;
    }
    bench::set_threads(threads);
    Config cfg = bench::make_config(*shape);
    Model<float> m(cfg);
    init_weights(m, 1);
    const int64_t V = cfg.vocab_size, d = cfg.hidden_size;
    const double weight_bytes = 4.0 * double(m.num_params() - V * d);  // all but the embedding

    // Prefill: 128 tokens, batch 1.
    std::vector<double> pre;
    const auto p128 = random_ids(128, V, 7);
    for (int r = 0; r < reps + 1; ++r) {
        Session<float> s(m, CacheMode::KVG, 128);
        const double t0 = now_s();
        s.prefill(p128);
        if (r) pre.push_back(now_s() - t0);  // first run warms up
    }
    const double prefill_tps = 128.0 / median(pre);

    // Decode: 64 new tokens after 32, per mode; batch 1 and batch 8.
    GenerateOptions o;
    o.max_new = 64;
    o.stop_at_eos = false;
    o.sampler.greedy = true;
    const auto p32 = random_ids(32, V, 8);
    struct Row {
        const char* mode;
        double tps1, tps8;
    };
    std::vector<Row> rows;
    for (CacheMode cm : {CacheMode::KVG, CacheMode::KV, CacheMode::NONE}) {
        o.cache = cm;
        std::vector<double> dec;
        for (int r = 0; r < (cm == CacheMode::NONE ? 1 : reps); ++r) {
            auto g = generate(m, p32, o);
            dec.push_back(double(g.decode_calls) / g.decode_seconds);
        }
        std::vector<std::vector<int64_t>> prompts;
        for (int b = 0; b < 8; ++b) prompts.push_back(random_ids(32, V, 100 + uint64_t(b)));
        double tps8 = 0;
        if (cm != CacheMode::NONE || shape->V <= 8192) {
            double calls = 0, seconds = 0;
            for (const GenResult& g : generate_batch(m, prompts, o)) {
                calls += double(g.decode_calls);
                seconds = std::max(seconds, g.decode_seconds);
            }
            tps8 = calls / seconds;
        }
        rows.push_back({cache_mode_name(cm), median(dec), tps8});
    }
    const double rss = bench::peak_rss_bytes();
    const double load = bench::load_avg1();
    const bench::Limits L = bench::measure_limits(threads, false, true);
    const double flops_tok = 2.0 * double(m.num_params() - V * d);  // matrix work per token
    const double prefill_limit = L.sgemm2 * 1e9 / flops_tok;
    const double decode_limit = L.bw2 * 1e9 / weight_bytes;
    std::printf(
        "| config | workload | tokens/s | limit in this run | fraction |\n|---|---|---|---|---|\n");
    std::printf("| %s | prefill (128, batch 1) | %.0f | %.0f (SGEMM %.0f GFLOP/s) | %.2f |\n",
                shape->name, prefill_tps, prefill_limit, L.sgemm2, prefill_tps / prefill_limit);
    for (const Row& r : rows) {
        std::printf("| %s | decode %s (batch 1) | %.1f | %.0f (read %.1f GB/s) | %.2f |\n",
                    shape->name, r.mode, r.tps1, decode_limit, L.bw2, r.tps1 / decode_limit);
        if (r.tps8 > 0)
            std::printf("| %s | decode %s (batch 8, aggregate) | %.1f | | |\n", shape->name, r.mode,
                        r.tps8);
    }
    std::printf("peak RSS %.0f MB, load average %.1f, %d threads\n", rss / 1e6, load, threads);
    std::printf(
        "{\"config\":\"%s\",\"prefill_tps\":%.1f,\"decode_kvg\":%.1f,\"decode_kv\":%.1f,"
        "\"decode_none\":%.1f,\"decode_kvg_b8\":%.1f,\"sgemm2\":%.1f,\"bw2\":%.2f,"
        "\"rss_mb\":%.0f,\"load\":%.2f}\n",
        shape->name, prefill_tps, rows[0].tps1, rows[1].tps1, rows[2].tps1, rows[0].tps8, L.sgemm2,
        L.bw2, rss / 1e6, load);
    return 0;
}
