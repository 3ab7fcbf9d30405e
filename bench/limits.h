// Machine limits measured by the benchmark program itself (perf only, never part of ctest):
// read bandwidth (a sum over a 1 GiB float buffer) and the SGEMM/DGEMM peak through pldr::gemm.
// Every bench reports its figures as fractions of these, measured in the same run
// (shared/spec/PERF-TARGETS.md: quote ratios, never absolute figures alone).
#pragma once
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "core/blas.h"

namespace pldr::bench {

inline double now_s() {
    using clk = std::chrono::steady_clock;
    return std::chrono::duration<double>(clk::now().time_since_epoch()).count();
}

// Threads for both our OpenMP loops and OpenBLAS (the OpenMP build shares the pool).
inline void set_threads(int n) {
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

// Peak resident set of this process so far, in bytes (Linux reports ru_maxrss in KiB).
inline double peak_rss_bytes() {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return double(ru.ru_maxrss) * 1024.0;
}

// Read bandwidth in GB/s (1e9 bytes/s): best of `reps` sums over `bytes` of floats on
// `threads` threads. The buffer is touched (written) once before timing.
inline double read_bandwidth_gbs(int threads, size_t bytes = size_t(1) << 30, int reps = 5) {
    const int64_t n = int64_t(bytes / sizeof(float));
    std::vector<float> buf(static_cast<size_t>(n));
#pragma omp parallel for num_threads(threads)
    for (int64_t i = 0; i < n; ++i) buf[size_t(i)] = float(i & 7);
    double best = 1e30;
    volatile float sink = 0;
    for (int r = 0; r < reps; ++r) {
        const double t0 = now_s();
        float total = 0;
#pragma omp parallel for num_threads(threads) reduction(+ : total)
        for (int64_t i = 0; i < n; i += 16) {
            float s = 0;  // 16 floats = one 64-byte line; the inner loop vectorises
            for (int64_t j = 0; j < 16; ++j) s += buf[size_t(i + j)];
            total += s;
        }
        best = std::min(best, now_s() - t0);
        sink = sink + total;
    }
    return double(bytes) / best / 1e9;
}

// GEMM peak in GFLOP/s: best of `reps` square products n×n×n (2n³ FLOPs) on `threads` threads.
template <typename T>
double gemm_gflops(int threads, int64_t n = 2048, int reps = 4) {
    std::vector<T> A(size_t(n * n)), B(size_t(n * n)), C(size_t(n * n));
    for (int64_t i = 0; i < n * n; ++i) {
        A[size_t(i)] = T((i % 13) - 6) * T(0.01);
        B[size_t(i)] = T((i % 7) - 3) * T(0.02);
    }
    set_threads(threads);
    pldr::gemm(false, false, n, n, n, T(1), A.data(), n, B.data(), n, T(0), C.data(), n);  // warm
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        const double t0 = now_s();
        pldr::gemm(false, false, n, n, n, T(1), A.data(), n, B.data(), n, T(0), C.data(), n);
        best = std::min(best, now_s() - t0);
    }
    return 2.0 * double(n) * double(n) * double(n) / best / 1e9;
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
    L.sgemm1 = gemm_gflops<float>(1);
    L.sgemm2 = gemm_gflops<float>(2);
    if (with_dgemm) {
        L.dgemm1 = gemm_gflops<double>(1);
        L.dgemm2 = gemm_gflops<double>(2);
    }
    set_threads(threads_after);
    return L;
}

// The system load average (1 min), to print beside every figure on a shared machine.
inline double load_avg1() {
    double la[3] = {0, 0, 0};
    if (getloadavg(la, 3) < 1) return -1;
    return la[0];
}

}  // namespace pldr::bench
