// Machine limits measured by the program itself, so every speed figure can be quoted as a
// fraction of what the same run could reach (shared/spec/PERF-TARGETS.md, bench/README.md):
//   read bandwidth — a STREAM-style multi-threaded read (sum) of a buffer far larger than the
//                    caches, best of several passes;
//   GEMM peak      — square n×n×n products through pldr::gemm (OpenBLAS), best of several;
//   bf16 GEMM peak — the same through the bf16 backend (core/gemm_bf16.h), where there is one.
// Also the small process facts printed beside every figure: peak RSS, load average, threads.
#pragma once
#include <cstddef>
#include <cstdint>

namespace pldr::perf {

double now_s();  // steady clock, seconds

// Threads for both our OpenMP loops and OpenBLAS (the OpenMP build shares one pool).
void set_threads(int n);

// Peak resident set of this process image so far, bytes (Linux VmHWM; ru_maxrss as fallback).
double peak_rss_bytes();

// The 1-minute load average (-1 when unavailable).
double load_avg1();

// Read bandwidth in GB/s (1e9 bytes/s): best of `reps` passes summing `bytes` of floats on
// `threads` threads, each thread over its own contiguous part, with independent vector
// accumulators so the loads, not the adds, set the pace. The buffer is written once before.
double read_bandwidth_gbs(int threads, size_t bytes = size_t(1) << 30, int reps = 5);

// GEMM peak in GFLOP/s (2n³ FLOPs per product), best of `reps`, on `threads` threads.
template <typename T>
double gemm_gflops(int threads, int64_t n = 2048, int reps = 4);
// The float32 peak: the better of gemm_gflops<float> through each engine pldr's float32 products
// run on (OpenBLAS, and oneDNN where it takes a product of this size: core/blas.h), so that a
// product is never compared with a limit slower than the best it could have had.
double sgemm_peak_gflops(int threads, int64_t n = 2048, int reps = 4);
// The same for bf16 operands with float32 accumulation (core/gemm_bf16.h); 0 where unavailable.
double bf16_gemm_gflops(int threads, int64_t n = 2048, int reps = 4);

struct Limits {
    int threads = 0;
    double read_gbs = 0;      // read bandwidth on `threads` threads
    double sgemm_gflops = 0;  // sgemm_peak_gflops: float32 2048³ on `threads` threads
    double dgemm_gflops = 0;  // DGEMM (0 when not measured)
    double bf16_gflops = 0;   // bf16 products (0 where the machine has none)
};

// Measures the limits on `threads` threads (and leaves the thread count at `threads`).
Limits measure_limits(int threads, bool with_dgemm = false);

// The limits on 1 and 2 threads side by side: the table the bench/ programs print (bench/
// README.md; their machine has 2 cores). with_bw = false skips the read bandwidth, with_dgemm =
// false DGEMM. Leaves the thread count at `threads_after`.
struct LimitsTable {
    double bw1 = 0, bw2 = 0;        // read bandwidth, GB/s, 1 and 2 threads
    double sgemm1 = 0, sgemm2 = 0;  // sgemm_peak_gflops, GFLOP/s
    double dgemm1 = 0, dgemm2 = 0;  // gemm_gflops<double>, GFLOP/s
};
LimitsTable measure_limits_table(int threads_after, bool with_dgemm = true, bool with_bw = true);

}  // namespace pldr::perf
