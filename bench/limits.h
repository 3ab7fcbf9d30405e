// Machine limits measured by the benchmark program itself (perf only, never part of ctest):
// read bandwidth (a sum over a 1 GiB float buffer) and the SGEMM/DGEMM peak through pldr::gemm.
// Every bench reports its figures as fractions of these, measured in the same run
// (shared/spec/PERF-TARGETS.md: quote ratios, never absolute figures alone).
#pragma once
#include <cstddef>
#include <cstdint>

#include "perf/limits.h"

namespace pldr::bench {

// The measurements are the library's (src/perf/limits.h), the same that `pldr bench` quotes:
// this header only keeps the names and the 1-and-2-thread table the bench binaries print.
inline double now_s() {
    return perf::now_s();
}
inline void set_threads(int n) {
    perf::set_threads(n);
}
inline double peak_rss_bytes() {
    return perf::peak_rss_bytes();
}
inline double load_avg1() {
    return perf::load_avg1();
}
inline double read_bandwidth_gbs(int threads, size_t bytes = size_t(1) << 30, int reps = 5) {
    return perf::read_bandwidth_gbs(threads, bytes, reps);
}
template <typename T>
double gemm_gflops(int threads, int64_t n = 2048, int reps = 4) {
    return perf::gemm_gflops<T>(threads, n, reps);
}

struct Limits {
    double bw1 = 0, bw2 = 0;        // read bandwidth, GB/s, 1 and 2 threads
    double sgemm1 = 0, sgemm2 = 0;  // GFLOP/s
    double dgemm1 = 0, dgemm2 = 0;  // GFLOP/s
};

// Measures all limits; restores `threads_after` threads. with_dgemm = false skips DGEMM.
inline Limits measure_limits(int threads_after, bool with_dgemm = true, bool with_bw = true) {
    Limits L;
    if (with_bw) {
        L.bw1 = read_bandwidth_gbs(1);
        L.bw2 = read_bandwidth_gbs(2);
    }
    L.sgemm1 = perf::sgemm_peak_gflops(1);
    L.sgemm2 = perf::sgemm_peak_gflops(2);
    if (with_dgemm) {
        L.dgemm1 = gemm_gflops<double>(1);
        L.dgemm2 = gemm_gflops<double>(2);
    }
    set_threads(threads_after);
    return L;
}

}  // namespace pldr::bench
