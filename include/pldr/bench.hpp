// Benchmarks of the pldr C++ API (`pldr bench`, bench/README.md): the machine's limits and one
// workload's speed, each measured by the calling process, so a program can quote its figures as
// fractions of what the same machine reaches in the same run.
//
//   pldr::api::BenchLimits lim = pldr::api::measure_bench_limits(2);
//   pldr::api::BenchOptions o;  o.config = "110M";  o.workload = pldr::api::BenchWorkload::DECODE;
//   pldr::api::BenchResult r = pldr::api::bench(o);
//   double frac = r.tok_s.median * r.bytes_per_token / (lim.read_gbs * 1e9);
//
// A result's peak_rss_bytes is the process's peak so far: run one workload per process to
// read it as that workload's (pldr bench does).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pldr/pldr.hpp"

namespace pldr::api {

struct BenchLimits {
    int threads = 0;
    // "cpu", or the CUDA device measured ("cuda:0"): then read_gbs is its memory's read
    // bandwidth, sgemm_gflops cuBLASLt's float32 product (TF32 off: what the float32 model
    // runs), bf16_gflops its bf16 product, tf32_gflops its TF32 one, each 8192³, best of 5.
    std::string device = "cpu";
    double tf32_gflops = 0;
    double read_gbs = 0;  // STREAM-style multi-threaded read of 1 GiB, best of 5, GB/s
    // float32 2048³ matrix product, best of 4 through each library pldr's float32 products run
    // on (OpenBLAS, and oneDNN where pldr hands it products of that size), the better of them
    double sgemm_gflops = 0;
    std::string sgemm_kernels;  // the kernels pldr's float32 products run on
    // bf16 2048³ matrix product (float32 accumulation) through oneDNN, best of 4; 0 where the
    // machine has no bf16 products (or PLDR_FORCE_FP32=1). bf16_backend says which it used.
    double bf16_gflops = 0;
    std::string bf16_backend;
};
// Measures the limits on `threads` threads (≥ 1) and leaves that thread count set; with a CUDA
// device ("cuda", "cuda:N"; check_device), that device's limits instead.
BenchLimits measure_bench_limits(int threads, const std::string& device = "cpu");
// One limit alone, measured as measure_bench_limits does: "read" (GB/s), "sgemm" or "bf16"
// (GFLOP/s; bf16 is 0 where the machine has none), and "tf32" on a CUDA device. Throws
// pldr::Error on another name.
double measure_bench_limit(const std::string& which, int threads,
                           const std::string& device = "cpu");

enum class BenchWorkload { PREFILL, DECODE, TRAIN };
BenchWorkload bench_workload_from_name(const std::string& s);  // "prefill" | "decode" | "train"
const char* name_of(BenchWorkload w);

struct BenchOptions {
    std::string model_dir;  // a model directory (its weights, float32), or else
    // A benchmark shape with random weights: "S" | "M" | "110M". Prefill and decode on the CPU
    // run on it saved to a temporary directory and loaded from there, mapped (as a user's model
    // is loaded: what inference keeps and what is resident follow from it).
    std::string config = "S";
    BenchWorkload workload = BenchWorkload::DECODE;
    int threads = 2;  // ≥ 1: OpenMP and OpenBLAS share them
    // "cpu", or "cuda[:N]" (check_device): there the prefill runs (the model's forward on the
    // GPU, the head over the last position; float32 weights), and the other workloads refuse
    // in one line until the backend runs them (docs/gpu.md).
    std::string device = "cpu";
    // Timed repetitions; 0 = the workload's default: prefill 10, decode 5 (no cache: 1), train
    // 20 / 8 / 3 for models of width under 256 / under 512 / larger.
    int reps = 0;
    // Prefill and decode: after those repetitions, more until this many seconds have passed
    // since the first (at most 100000 repetitions); negative = the default: 2 where reps is the
    // workload's default, else 0. A 128-token prefill of a small model takes milliseconds, and
    // the median of 10 of them measures one moment of a machine whose speed drifts.
    double min_time = -1;
    int warmup = 1;                            // untimed repetitions first
    int64_t context = 1024;                    // session capacity (clamped to the model's context)
    int64_t prompt = 0;                        // prompt tokens; 0 = 128 for prefill, 32 for decode
    int64_t n_new = 64;                        // decode: new tokens per sequence
    int64_t batch = 1;                         // decode: sequences stepped together
    CacheMode cache = CacheMode::KVG;          // decode
    int64_t train_batch = 8, train_seq = 256;  // train: sequences × tokens per step
    // The linear weights: "f32", or packed as "bf16" or "q8" (q8_0) before the run (a random
    // config, or a model directory's weights repacked); "" = as loaded (a directory written by
    // convert_model stays packed). Training needs f32.
    std::string weights;
    // train: "fp32", or "bf16" (mixed precision: bf16 products, float32 master weights).
    std::string precision = "fp32";
    // train: "none", "selective" or "full" (TrainOptions::recompute).
    std::string recompute = "selective";
    // Called as (i, reps) before each timed repetition i = 0, 1, … (i = 0: before the warm-up
    // ones) and as (n, n) after the last, the n-th, outside the timing; while min_time decides
    // when to stop, reps is std::numeric_limits<int>::max(). `pldr bench` measures the machine's
    // limit there, so that each repetition is compared with the limit measured next to it.
    std::function<void(int i, int reps)> between_reps;
    // decode with batch > 1: each timed repetition is a pair, batch 1 then `batch` (same cache
    // mode), and BenchResult::x_batch1 gives the pairs' ratios. On a machine whose speed drifts,
    // a ratio of two runs minutes apart measures the drift as much as the batching.
    bool pair_batch1 = false;
};

struct BenchStats {
    double median = 0, min = 0, max = 0, mean = 0, stddev = 0;
    int n = 0;
};

// The device time of one phase of the model's passes during a workload (pldr bench
// --device cuda with PLDR_CUDA_PROFILE=1; docs/gpu.md "Where the time goes").
struct BenchPhase {
    std::string name;  // "forward", "fwd.attention", "backward", "adamw", ...
    int depth = 0;     // nesting: a phase's time includes those below it of greater depth
    int64_t calls = 0;
    double ms = 0;  // summed over the calls (warm-up repetitions included)
};

struct BenchResult {
    std::string model;            // the config name or the model directory
    std::string weights = "f32";  // what the products read: "f32", "bf16" or "q8_0"
    // train: the precision asked for; "bf16" computes in float32 where bf16 is unavailable.
    std::string precision = "fp32";
    bool bf16_products = false;  // whether bf16 products ran (train bf16, prefill over bf16)
    std::string recompute = "selective";  // train: what the backward recomputed
    BenchWorkload workload = BenchWorkload::DECODE;
    int threads = 0;
    int64_t num_params = 0;
    BenchStats tok_s;  // tokens/s per timed repetition (decode: aggregate over the batch)
    std::vector<double> tok_s_reps;  // the same, each repetition in order
    // decode with pair_batch1: batch 1's tokens/s in each pair, and the ratios batch / batch 1
    std::vector<double> batch1_reps;
    BenchStats x_batch1;
    // Prefill and train: matrix-product FLOPs per token (bench/README.md); decode: 2 × the
    // weights one step reads (its compute bound).
    double flops_per_token = 0;
    // Decode: bytes of weights one sequence's step reads (batch 1), packed ones in their size.
    double bytes_per_token = 0;
    double peak_rss_bytes = 0;      // this process's peak resident set after the workload
    std::string device = "cpu";     // where it ran
    double device_param_bytes = 0;  // on a CUDA device: the parameters' device memory
    // On a CUDA device: the peak of pldr's device arrays during the workload (parameters,
    // activations, gradients, moments; cuBLASLt's 32 MiB workspace aside).
    double device_peak_bytes = 0;
    std::vector<BenchPhase> device_phases;   // with PLDR_CUDA_PROFILE=1, else empty
    double load_before = 0, load_after = 0;  // 1-minute load average around the timed part
    double loss = 0;                         // train: the last step's loss
};

// Runs one workload; throws pldr::Error on bad options (unknown config, batch or context out of
// range, unreadable model directory).
BenchResult bench(const BenchOptions& opt);

// Writes the random model of a benchmark shape ("S", "M" or "110M", the weights bench() uses)
// as a float32 model directory (config.json + model.safetensors), so that a run over it measures
// loading from a file as a user's model is loaded (mapped: LoadOptions::map_file). Refuses a
// directory that already holds a model.
void save_bench_model(const std::string& config, const std::string& dir, int64_t context = 1024);

// Token shards for the product benchmark's `pldr train` (pldr bench --only product):
// dir/train.pldrtok and dir/valid.pldrtok with `train_chunks` and `valid_chunks` chunks of `ctx`
// random ids in [4, vocab) (no pad, BOS or EOS), from `seed`. Time and memory do not depend on the
// ids.
void write_bench_shards(const std::string& dir, int64_t vocab, int64_t ctx, int64_t train_chunks,
                        int64_t valid_chunks, uint64_t seed = 1);

}  // namespace pldr::api
