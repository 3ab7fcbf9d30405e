// Benchmarks in the public API (include/pldr/bench.hpp) over src/perf.
#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <vector>

#include "api/api_impl.h"
#include "core/blas.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/gemm_bf16.h"
#include "io/model_dir.h"
#include "io/model_load.h"
#include "model/init.h"
#include "perf/limits.h"
#include "perf/workloads.h"
#include "pldr/bench.hpp"
#include "train/shard.h"

namespace pldr::api {

BenchLimits measure_bench_limits(int threads, const std::string& device) {
    PLDR_REQUIRE(threads >= 1 && threads <= 1024, "threads ", threads, " is outside [1, 1024]");
    const DeviceSpec dev = ::pldr::parse_device(device);
    if (dev.kind == DeviceKind::CUDA) {
        BenchLimits out;
        out.threads = threads;
        out.device = dev.name();
        out.read_gbs = gpu::limit("read", dev);
        out.sgemm_gflops = gpu::limit("sgemm", dev);
        out.sgemm_kernels = gpu::limit_source(dev) + ", float32, TF32 off";
        out.bf16_gflops = gpu::limit("bf16", dev);
        out.bf16_backend = gpu::limit_source(dev);
        out.tf32_gflops = gpu::limit("tf32", dev);
        perf::set_threads(threads);
        return out;
    }
    const perf::Limits L = perf::measure_limits(threads);
    BenchLimits out;
    out.threads = threads;
    out.read_gbs = L.read_gbs;
    out.sgemm_gflops = L.sgemm_gflops;
    out.sgemm_kernels = blas_kernels();
    out.bf16_gflops = L.bf16_gflops;
    out.bf16_backend = bf16::backend_name();
    return out;
}

double measure_bench_limit(const std::string& which, int threads, const std::string& device) {
    PLDR_REQUIRE(threads >= 1 && threads <= 1024, "threads ", threads, " is outside [1, 1024]");
    const DeviceSpec dev = ::pldr::parse_device(device);
    double v = 0;
    if (dev.kind == DeviceKind::CUDA)
        v = gpu::limit(which, dev);
    else if (which == "read")
        v = perf::read_bandwidth_gbs(threads);
    else if (which == "sgemm")
        v = perf::sgemm_peak_gflops(threads);
    else if (which == "bf16")
        v = perf::bf16_gemm_gflops(threads);
    else
        throw Error(cat("unknown limit '", which, "' (read, sgemm or bf16)"));
    perf::set_threads(threads);
    return v;
}

BenchWorkload bench_workload_from_name(const std::string& s) {
    if (s == "prefill") return BenchWorkload::PREFILL;
    if (s == "decode") return BenchWorkload::DECODE;
    if (s == "train") return BenchWorkload::TRAIN;
    throw Error(cat("unknown benchmark workload '", s, "' (prefill, decode or train)"));
}

const char* name_of(BenchWorkload w) {
    switch (w) {
        case BenchWorkload::PREFILL:
            return "prefill";
        case BenchWorkload::DECODE:
            return "decode";
        case BenchWorkload::TRAIN:
            return "train";
    }
    return "?";
}

namespace {

BenchStats stats(const std::vector<double>& v) {
    const perf::Stats s = perf::stats_of(v);
    return BenchStats{s.median, s.min, s.max, s.mean, s.stddev, s.n};
}

// The model saved to a temporary directory and loaded from it, mapped; the directory is gone
// when this returns (the mapping keeps the file).
std::unique_ptr<::pldr::Model<float>> reload_mapped(std::unique_ptr<::pldr::Model<float>> m) {
    std::string dir = (std::filesystem::temp_directory_path() / "pldr-bench-model-XXXXXX").string();
    PLDR_REQUIRE(::mkdtemp(dir.data()) != nullptr,
                 "bench: cannot make a temporary directory: ", std::strerror(errno));
    struct Clean {
        std::string dir;
        ~Clean() {
            std::error_code ec;
            std::filesystem::remove_all(dir, ec);
        }
    } clean{dir};
    save_model(*m, dir, ::pldr::DType::F32);
    m.reset();  // before the mapping: never both resident
    return std::make_unique<::pldr::Model<float>>(load_model<float>(dir, true, true));
}

}  // namespace

void save_bench_model(const std::string& config, const std::string& dir, int64_t context) {
    PLDR_REQUIRE(context >= 2 && context <= (int64_t(1) << 20), "context ", context,
                 " is outside [2, 1048576]");
    require_output_dir(dir, {}, "the benchmark model's directory", {}, true);  // "", a file
    PLDR_REQUIRE(!is_model_dir(dir), dir,
                 " already holds a model; the benchmark model goes to a new or empty directory");
    ::pldr::Model<float> m(perf::bench_config(config, context));
    init_weights(m, 1234);  // bench()'s weights
    save_model(m, dir, ::pldr::DType::F32);
}

void write_bench_shards(const std::string& dir, int64_t vocab, int64_t ctx, int64_t train_chunks,
                        int64_t valid_chunks, uint64_t seed) {
    PLDR_REQUIRE(vocab > 4 && ctx >= 2 && train_chunks >= 1 && valid_chunks >= 0 &&
                     train_chunks <= (int64_t(1) << 24) && valid_chunks <= (int64_t(1) << 24),
                 "bench shards: vocab ", vocab, ", ctx ", ctx, ", chunks ", train_chunks, "/",
                 valid_chunks, " out of range");
    make_dirs(dir);
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int64_t> tok(4, vocab - 1);
    auto write = [&](const char* name, int64_t chunks) {
        std::vector<int64_t> ids(size_t(chunks * ctx));
        for (int64_t& t : ids) t = tok(rng);
        write_shard(dir + "/" + name, ids, vocab, ctx);
    };
    write("train.pldrtok", train_chunks);
    if (valid_chunks > 0) write("valid.pldrtok", valid_chunks);
}

BenchResult bench(const BenchOptions& o) {
    const DeviceSpec dev = ::pldr::parse_device(o.device);
    const bool on_gpu = dev.kind == DeviceKind::CUDA;
    PLDR_REQUIRE(o.threads >= 1 && o.threads <= 1024, "threads ", o.threads,
                 " is outside [1, 1024]");
    PLDR_REQUIRE(o.reps >= 0 && o.reps <= perf::kMaxReps, "reps ", o.reps, " is outside [0, ",
                 perf::kMaxReps, "]");
    PLDR_REQUIRE(o.min_time < 0 || (o.min_time <= 3600 && std::isfinite(o.min_time)), "min_time ",
                 o.min_time, " is outside [0, 3600] (negative: the default)");
    PLDR_REQUIRE(o.warmup >= 0 && o.warmup <= 100000, "warmup ", o.warmup,
                 " is outside [0, 100000]");
    PLDR_REQUIRE(o.context >= 2 && o.context <= (int64_t(1) << 20), "context ", o.context,
                 " is outside [2, 1048576]");
    perf::set_threads(o.threads);
    std::unique_ptr<::pldr::Model<float>> m;
    BenchResult r;
    if (!o.model_dir.empty()) {
        m = std::make_unique<::pldr::Model<float>>(load_model<float>(o.model_dir, true, true));
        r.model = o.model_dir;
    } else {
        m = std::make_unique<::pldr::Model<float>>(perf::bench_config(o.config, o.context));
        init_weights(*m, 1234);
        r.model = o.config;
        // Prefill and decode on the CPU run on the model as a user's process has it: loaded from
        // its file, the parameters a mapping of it (io/model_load.h), which decides what
        // inference keeps (keep_panel_weights below) and what is resident.
        if (o.workload != BenchWorkload::TRAIN && !on_gpu) m = reload_mapped(std::move(m));
    }
    if (o.weights == "bf16" || o.weights == "q8")
        pack_model(*m, o.weights == "bf16" ? WeightFormat::BF16 : WeightFormat::Q8_0);
    else if (o.weights == "f32")
        unpack_model(*m);
    else
        PLDR_REQUIRE(o.weights.empty(), "weights '", o.weights, "' is not f32, bf16 or q8");
    r.weights = m->packed ? weight_format_name(m->packed->format()) : "f32";
    PLDR_REQUIRE(!on_gpu || r.weights == "f32", "--device ", dev.name(),
                 ": the CUDA backend reads float32 weights (", r.weights, " given: --weights f32)");
    // Prefill and decode run on a model as Model::load gives it for inference.
    if (o.workload != BenchWorkload::TRAIN && !on_gpu) keep_panel_weights(*m);
    const Precision precision = parse_precision(o.precision);
    PLDR_REQUIRE(precision == Precision::FP32 || o.workload == BenchWorkload::TRAIN,
                 "precision bf16 applies to training (inference in bf16: weights bf16)");
    r.precision = precision_name(precision);
    const Recompute recompute = parse_recompute(o.recompute);
    r.recompute = recompute_name(recompute);
    r.bf16_products = (on_gpu || bf16::available()) &&  // (a GPU always has them)
                      (precision == Precision::BF16 || r.weights == "bf16");
    const int64_t ctx = std::min(o.context, m->cfg.max_position);
    r.workload = o.workload;
    r.threads = o.threads;
    r.device = dev.name();
    r.num_params = m->num_params();
    const int small = m->cfg.hidden_size < 256 ? 1 : 0;  // S-sized models: more reps
    const double floor_s = o.min_time >= 0 ? o.min_time : o.reps == 0 ? 2.0 : 0.0;
    r.load_before = perf::load_avg1();
    if (on_gpu) gpu::pool_peak_bytes(dev, true);  // the workload's own peak
    if (on_gpu) gpu::phase_times(dev, true);      // and its own phases
    switch (o.workload) {
        case BenchWorkload::PREFILL: {
            const int64_t P = o.prompt ? o.prompt : 128;
            if (on_gpu) {
                PLDR_REQUIRE(P <= ctx, "prefill of ", P, " tokens does not fit the context of ",
                             ctx);
                int64_t bytes = 0;
                r.tok_s_reps = gpu::run_prefill(*m, dev, P, o.reps ? o.reps : 10, o.warmup,
                                                o.between_reps, floor_s, &bytes);
                r.device_param_bytes = double(bytes);
            } else {
                r.tok_s_reps = perf::run_prefill(*m, P, ctx, o.reps ? o.reps : 10, o.warmup,
                                                 o.between_reps, floor_s);
            }
            r.flops_per_token = perf::forward_flops(m->cfg, 1, P, 1) / double(P);
            break;
        }
        case BenchWorkload::DECODE: {
            const int64_t P = o.prompt ? o.prompt : 32;
            const int reps = o.reps ? o.reps : (o.cache == CacheMode::NONE ? 1 : 5);
            const bool pair = o.pair_batch1 && o.batch > 1;
            if (on_gpu) {
                r.tok_s_reps = gpu::run_decode(*m, dev, internal(o.cache), o.batch, P, o.n_new, ctx,
                                               reps, o.warmup, o.between_reps, floor_s,
                                               pair ? &r.batch1_reps : nullptr);
            } else if (pair) {
                perf::PairedDecode p =
                    perf::run_decode_paired(*m, internal(o.cache), o.batch, P, o.n_new, ctx, reps,
                                            o.warmup, o.between_reps, floor_s);
                r.tok_s_reps = std::move(p.batched);
                r.batch1_reps = std::move(p.batch1);
            } else {
                r.tok_s_reps = perf::run_decode(*m, internal(o.cache), o.batch, P, o.n_new, ctx,
                                                reps, o.warmup, o.between_reps, floor_s);
            }
            if (pair) {  // each pair's ratio
                std::vector<double> x;
                for (size_t i = 0; i < r.tok_s_reps.size(); ++i)
                    x.push_back(r.tok_s_reps[i] / r.batch1_reps[i]);
                r.x_batch1 = stats(x);
            }
            r.bytes_per_token = perf::decode_bytes_per_token(*m);
            r.flops_per_token =
                2.0 * double(m->num_params() - m->cfg.vocab_size * m->cfg.hidden_size +
                             m->cfg.hidden_size);
            break;
        }
        case BenchWorkload::TRAIN: {
            // S steps take tens of milliseconds, M's under a second, 110M's seconds.
            const int reps = o.reps ? o.reps : (small ? 20 : m->cfg.hidden_size < 512 ? 8 : 3);
            double loss = 0;
            // On a GPU the whole step runs there (train/step.h, a resident StepBackend).
            std::shared_ptr<StepBackend<float>> backend;
            if (on_gpu) backend = gpu::step_backend(*m, dev);
            r.tok_s_reps =
                perf::run_train(*m, o.train_batch, std::min(o.train_seq, ctx), reps, o.warmup,
                                &loss, precision, recompute, o.between_reps, std::move(backend));
            r.flops_per_token =
                perf::train_step_flops(m->cfg, o.train_batch, std::min(o.train_seq, ctx)) /
                double(o.train_batch * std::min(o.train_seq, ctx));
            r.loss = loss;
            break;
        }
    }
    r.tok_s = stats(r.tok_s_reps);
    r.load_after = perf::load_avg1();
    if (on_gpu) r.device_peak_bytes = double(gpu::pool_peak_bytes(dev, false));
    if (on_gpu) r.device_phases = gpu::phase_times(dev, true);
    r.peak_rss_bytes = perf::peak_rss_bytes();
    return r;
}

}  // namespace pldr::api
