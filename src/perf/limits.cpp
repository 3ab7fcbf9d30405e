// Machine limits (see limits.h).
#include "perf/limits.h"

#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/blas.h"
#include "core/gemm_bf16.h"

namespace pldr::perf {

double now_s() {
    using clk = std::chrono::steady_clock;
    return std::chrono::duration<double>(clk::now().time_since_epoch()).count();
}

void set_threads(int n) {
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

double peak_rss_bytes() {
    // VmHWM: the high-water mark of this process image's resident set (it starts afresh at
    // exec, unlike ru_maxrss, which a child started by posix_spawn inherits from its parent).
    if (FILE* f = std::fopen("/proc/self/status", "r")) {
        char line[256];
        double kb = -1;
        while (std::fgets(line, sizeof line, f))
            if (std::strncmp(line, "VmHWM:", 6) == 0) kb = std::atof(line + 6);
        std::fclose(f);
        if (kb > 0) return kb * 1024.0;
    }
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return double(ru.ru_maxrss) * 1024.0;
}

double load_avg1() {
    double la[3] = {0, 0, 0};
    if (getloadavg(la, 3) < 1) return -1;
    return la[0];
}

namespace {

// Four independent 4-float accumulators: 64 bytes (one cache line) per iteration, no dependency
// chain between consecutive loads, so the loop runs at the memory's pace, not the adder's.
typedef float f4 __attribute__((vector_size(16)));

float sum_range(const float* p, int64_t n) {
    f4 a0 = {0, 0, 0, 0}, a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        f4 x0, x1, x2, x3;
        __builtin_memcpy(&x0, p + i, sizeof x0);
        __builtin_memcpy(&x1, p + i + 4, sizeof x1);
        __builtin_memcpy(&x2, p + i + 8, sizeof x2);
        __builtin_memcpy(&x3, p + i + 12, sizeof x3);
        a0 += x0;
        a1 += x1;
        a2 += x2;
        a3 += x3;
    }
    const f4 s = (a0 + a1) + (a2 + a3);
    float t = s[0] + s[1] + s[2] + s[3];
    for (; i < n; ++i) t += p[i];
    return t;
}

}  // namespace

double read_bandwidth_gbs(int threads, size_t bytes, int reps) {
    const int64_t n = int64_t(bytes / sizeof(float));
    std::vector<float> buf(static_cast<size_t>(n));
    // First touch by the threads that read it later (each its own contiguous part).
#pragma omp parallel num_threads(threads)
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        const int64_t lo = n * t / nt, hi = n * (t + 1) / nt;
        for (int64_t i = lo; i < hi; ++i) buf[size_t(i)] = float(i & 7);
    }
    double best = 1e30;
    volatile float sink = 0;
    for (int r = 0; r < reps; ++r) {
        float total = 0;
        const double t0 = now_s();
#pragma omp parallel num_threads(threads) reduction(+ : total)
        {
            const int t = omp_get_thread_num(), nt = omp_get_num_threads();
            const int64_t lo = n * t / nt, hi = n * (t + 1) / nt;
            total += sum_range(buf.data() + lo, hi - lo);
        }
        best = std::min(best, now_s() - t0);
        sink = sink + total;
    }
    return double(n) * sizeof(float) / best / 1e9;
}

template <typename T>
double gemm_gflops(int threads, int64_t n, int reps) {
    std::vector<T> A(size_t(n * n)), B(size_t(n * n)), C(size_t(n * n));
    for (int64_t i = 0; i < n * n; ++i) {
        A[size_t(i)] = T((i % 13) - 6) * T(0.01);
        B[size_t(i)] = T((i % 7) - 3) * T(0.02);
    }
    set_threads(threads);
    gemm(false, false, n, n, n, T(1), A.data(), n, B.data(), n, T(0), C.data(), n);  // warm-up
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        const double t0 = now_s();
        gemm(false, false, n, n, n, T(1), A.data(), n, B.data(), n, T(0), C.data(), n);
        best = std::min(best, now_s() - t0);
    }
    return 2.0 * double(n) * double(n) * double(n) / best / 1e9;
}

double bf16_gemm_gflops(int threads, int64_t n, int reps) {
    if (!bf16::available()) return 0;
    std::vector<uint16_t> A(size_t(n * n)), B(size_t(n * n));
    std::vector<float> C(size_t(n * n));
    for (int64_t i = 0; i < n * n; ++i) C[size_t(i)] = float((i % 13) - 6) * 0.01f;
    bf16::round_to_bf16(C.data(), n * n, A.data());
    for (int64_t i = 0; i < n * n; ++i) C[size_t(i)] = float((i % 7) - 3) * 0.02f;
    bf16::round_to_bf16(C.data(), n * n, B.data());
    set_threads(threads);
    bf16::gemm(false, false, n, n, n, 1.0f, A.data(), n, B.data(), n, 0.0f, C.data(), n);
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        const double t0 = now_s();
        bf16::gemm(false, false, n, n, n, 1.0f, A.data(), n, B.data(), n, 0.0f, C.data(), n);
        best = std::min(best, now_s() - t0);
    }
    return 2.0 * double(n) * double(n) * double(n) / best / 1e9;
}

template double gemm_gflops<float>(int, int64_t, int);
template double gemm_gflops<double>(int, int64_t, int);

double sgemm_peak_gflops(int threads, int64_t n, int reps) {
    double best = gemm_gflops<float>(threads, n, reps);
    if (sgemm_uses_onednn(false, n, n, n)) {  // that was oneDNN's: OpenBLAS's too
        set_sgemm_engine(SgemmEngine::OPENBLAS);
        best = std::max(best, gemm_gflops<float>(threads, n, reps));
        set_sgemm_engine(SgemmEngine::AUTO);
    }
    return best;
}

Limits measure_limits(int threads, bool with_dgemm) {
    Limits L;
    L.threads = threads;
    L.read_gbs = read_bandwidth_gbs(threads);
    L.sgemm_gflops = sgemm_peak_gflops(threads);
    L.bf16_gflops = bf16_gemm_gflops(threads);
    if (with_dgemm) L.dgemm_gflops = gemm_gflops<double>(threads);
    set_threads(threads);
    return L;
}

LimitsTable measure_limits_table(int threads_after, bool with_dgemm, bool with_bw) {
    LimitsTable L;
    if (with_bw) {
        L.bw1 = read_bandwidth_gbs(1);
        L.bw2 = read_bandwidth_gbs(2);
    }
    L.sgemm1 = sgemm_peak_gflops(1);
    L.sgemm2 = sgemm_peak_gflops(2);
    if (with_dgemm) {
        L.dgemm1 = gemm_gflops<double>(1);
        L.dgemm2 = gemm_gflops<double>(2);
    }
    set_threads(threads_after);
    return L;
}

}  // namespace pldr::perf
