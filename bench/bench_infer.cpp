// Inference benchmarks (PERF-TARGETS.md workloads), float32 compute, one config per process,
// per weight precision (--dtype f32 | bf16 | q8 | all; bf16 and q8 = the linear weights packed
// as bfloat16 or q8_0, model/packed.h):
//   prefill — a 128-token prompt at batch 1 (tokens/s), against the SGEMM peak of this run;
//   decode  — 64 new tokens after a 32-token prompt at batch 1, per cache mode (kvg, kv, none;
//             bf16 and q8: kvg only), against the read-bandwidth limit of this run: read
//             bandwidth ÷ the bytes a token reads (every non-embedding weight and the head once,
//             the packed ones in their packed size);
//   batch 8 — eight such generations at once (aggregate tokens/s, kvg).
// With several precisions the decode ratios to f32 of the same run are printed last.
// Not part of ctest.  OMP_NUM_THREADS=2 bench_infer --config S|M|110M [--dtype D] [--reps N]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/alloc.h"
#include "infer/generate.h"
#include "model/init.h"
#include "ops/qlinear.h"
#include "perf/limits.h"
#include "perf/workloads.h"

namespace {

using namespace pldr;
using perf::now_s;
using perf::random_ids;

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

struct Row {
    const char* mode;
    double tps1, tps8;
};

struct Result {
    std::string dtype;
    double weight_bytes = 0;  // read per decoded token
    double prefill_tps = 0;
    std::vector<Row> rows;  // kvg first
};

Result run(const Model<float>& m, const std::string& dtype, int reps, bool all_modes, bool batch8) {
    const Config& cfg = m.cfg;
    const int64_t V = cfg.vocab_size, d = cfg.hidden_size;
    Result res;
    res.dtype = dtype;
    // Every parameter but the embedding lookup, float32; the packed ones in their packed size.
    res.weight_bytes = 4.0 * double(m.num_params() - (cfg.tie_word_embeddings ? 0 : V * d));
    if (m.packed) res.weight_bytes += double(m.packed->bytes()) - 4.0 * double(m.packed->numel());

    std::vector<double> pre;
    const auto p128 = random_ids(128, V, 7);
    for (int r = 0; r < reps + 1; ++r) {
        Session<float> s(m, CacheMode::KVG, 128);
        const double t0 = now_s();
        s.prefill(p128);
        if (r) pre.push_back(now_s() - t0);  // first run warms up
    }
    res.prefill_tps = 128.0 / median(pre);

    GenerateOptions o;
    o.max_new = 64;
    o.stop_at_eos = false;
    o.sampler.greedy = true;
    const auto p32 = random_ids(32, V, 8);
    std::vector<CacheMode> modes{CacheMode::KVG};
    if (all_modes) modes = {CacheMode::KVG, CacheMode::KV, CacheMode::NONE};
    for (CacheMode cm : modes) {
        o.cache = cm;
        std::vector<double> dec;
        generate(m, p32, o);  // warm-up: pages, caches
        for (int r = 0; r < (cm == CacheMode::NONE ? 1 : reps); ++r) {
            auto g = generate(m, p32, o);
            dec.push_back(double(g.decode_calls) / g.decode_seconds);
        }
        double tps8 = 0;
        if (batch8 && (cm != CacheMode::NONE || cfg.vocab_size <= 8192)) {
            std::vector<std::vector<int64_t>> prompts;
            for (int b = 0; b < 8; ++b) prompts.push_back(random_ids(32, V, 100 + uint64_t(b)));
            const double t0 = now_s();
            generate_batch(m, prompts, o);
            tps8 = 8.0 * 64.0 / (now_s() - t0);
        }
        res.rows.push_back({cache_mode_name(cm), median(dec), tps8});
    }
    return res;
}

}  // namespace

int main(int argc, char** argv) {
    pldr::tune_allocator();
    std::string name = "S", dtype = "f32";
    int reps = 3, threads = 2;
    bool batch8 = true;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--config" && i + 1 < argc)
            name = argv[++i];
        else if (a == "--reps" && i + 1 < argc)
            reps = std::atoi(argv[++i]);
        else if (a == "--threads" && i + 1 < argc)
            threads = std::atoi(argv[++i]);
        else if (a == "--dtype" && i + 1 < argc)
            dtype = argv[++i];
        else if (a == "--no-batch")
            batch8 = false;
        else {
            std::fprintf(stderr,
                         "usage: bench_infer --config S|M|110M [--dtype f32|bf16|q8|all] "
                         "[--reps N] [--threads N] [--no-batch]\n");
            return 1;
        }
    }
    const perf::BenchShape* shape = nullptr;
    for (const auto& s : perf::bench_shapes())
        if (name == s.name) shape = &s;
    if (!shape) {
        std::fprintf(stderr, "unknown config %s\n", name.c_str());
        return 1;
    }
    std::vector<std::string> dtypes;
    if (dtype == "all")
        dtypes = {"f32", "bf16", "q8"};
    else if (dtype == "f32" || dtype == "bf16" || dtype == "q8")
        dtypes = {dtype};
    else {
        std::fprintf(stderr, "unknown --dtype %s (f32, bf16, q8 or all)\n", dtype.c_str());
        return 1;
    }
    perf::set_threads(threads);
    const Config cfg = perf::bench_config(name, 256);
    Model<float> base(cfg);
    init_weights(base, 1);
    const int64_t V = cfg.vocab_size, d = cfg.hidden_size;

    std::vector<Result> results;
    for (const std::string& dt : dtypes) {
        Model<float> m = base;
        if (dt == "bf16") pack_model(m, WeightFormat::BF16);
        if (dt == "q8") pack_model(m, WeightFormat::Q8_0);
        results.push_back(run(m, dt, reps, dt == "f32", batch8));
    }
    const double rss = perf::peak_rss_bytes();
    const double load = perf::load_avg1();
    const perf::LimitsTable L = perf::measure_limits_table(threads, false, true);
    const double flops_tok = 2.0 * double(base.num_params() - V * d);  // matrix work per token
    const double prefill_limit = L.sgemm2 * 1e9 / flops_tok;
    std::printf(
        "| config | weights | workload | tokens/s | limit in this run | fraction |\n"
        "|---|---|---|---|---|---|\n");
    for (const Result& r : results) {
        const double decode_limit = L.bw2 * 1e9 / r.weight_bytes;
        std::printf(
            "| %s | %s | prefill (128, batch 1) | %.0f | %.0f (SGEMM %.0f GFLOP/s) | %.2f |\n",
            shape->name, r.dtype.c_str(), r.prefill_tps, prefill_limit, L.sgemm2,
            r.prefill_tps / prefill_limit);
        for (const Row& w : r.rows) {
            std::printf(
                "| %s | %s | decode %s (batch 1) | %.1f | %.0f (read %.1f GB/s ÷ %.1f MB/token) "
                "| %.2f |\n",
                shape->name, r.dtype.c_str(), w.mode, w.tps1, decode_limit, L.bw2,
                r.weight_bytes / 1e6, w.tps1 / decode_limit);
            if (w.tps8 > 0)
                std::printf("| %s | %s | decode %s (batch 8, aggregate) | %.1f | | |\n",
                            shape->name, r.dtype.c_str(), w.mode, w.tps8);
        }
    }
    if (results.size() > 1 && results[0].dtype == "f32") {
        const Result& f = results[0];
        for (size_t i = 1; i < results.size(); ++i) {
            const Result& r = results[i];
            std::printf(
                "%s / f32 in this run: decode kvg %.2fx (bytes/token %.2fx fewer), batch-8 %.2fx, "
                "prefill %.2fx\n",
                r.dtype.c_str(), r.rows[0].tps1 / f.rows[0].tps1, f.weight_bytes / r.weight_bytes,
                f.rows[0].tps8 > 0 ? r.rows[0].tps8 / f.rows[0].tps8 : 0.0,
                r.prefill_tps / f.prefill_tps);
        }
    }
    std::printf("kernels %s; peak RSS %.0f MB, load average %.1f, %d threads\n",
                qlinear::isa_name(qlinear::isa()), rss / 1e6, load, threads);
    std::printf("{\"config\":\"%s\",\"bw2\":%.2f,\"sgemm2\":%.1f,\"rss_mb\":%.0f,\"load\":%.2f",
                shape->name, L.bw2, L.sgemm2, rss / 1e6, load);
    for (const Result& r : results) {
        std::printf(",\"%s\":{\"prefill_tps\":%.1f,\"bytes_per_token\":%.0f", r.dtype.c_str(),
                    r.prefill_tps, r.weight_bytes);
        for (const Row& w : r.rows) {
            std::printf(",\"decode_%s\":%.1f", w.mode, w.tps1);
            if (w.tps8 > 0) std::printf(",\"decode_%s_b8\":%.1f", w.mode, w.tps8);
        }
        std::printf("}");
    }
    std::printf("}\n");
    return 0;
}
