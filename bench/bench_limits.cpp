// Machine limits (perf only, not a test): read bandwidth over a 1 GiB float buffer and the
// SGEMM/DGEMM peak (2048³ through pldr::gemm), each on 1 and 2 threads, best of several.
// Output: a markdown table and one JSON line. Usage: bench_limits [--reps N]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "perf/limits.h"

int main(int argc, char** argv) {
    int reps = 3;
    for (int i = 1; i < argc; ++i)
        if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    using namespace pldr::perf;
    const double load0 = load_avg1();
    // Best over `reps` full measurements (each is itself a best of several).
    LimitsTable best;
    for (int r = 0; r < reps; ++r) {
        LimitsTable L = measure_limits_table(2);
        best.bw1 = std::max(best.bw1, L.bw1);
        best.bw2 = std::max(best.bw2, L.bw2);
        best.sgemm1 = std::max(best.sgemm1, L.sgemm1);
        best.sgemm2 = std::max(best.sgemm2, L.sgemm2);
        best.dgemm1 = std::max(best.dgemm1, L.dgemm1);
        best.dgemm2 = std::max(best.dgemm2, L.dgemm2);
    }
    const double load1 = load_avg1();
    std::printf("| limit | 1 thread | 2 threads |\n|---|---|---|\n");
    std::printf("| read bandwidth (GB/s) | %.1f | %.1f |\n", best.bw1, best.bw2);
    std::printf("| SGEMM 2048³ (GFLOP/s) | %.1f | %.1f |\n", best.sgemm1, best.sgemm2);
    std::printf("| DGEMM 2048³ (GFLOP/s) | %.1f | %.1f |\n", best.dgemm1, best.dgemm2);
    std::printf("\nload average (1 min): %.2f before, %.2f after\n\n", load0, load1);
    std::printf(
        "{\"bench\":\"limits\",\"bw_gbs_1t\":%.2f,\"bw_gbs_2t\":%.2f,\"sgemm_gflops_1t\":%.1f,"
        "\"sgemm_gflops_2t\":%.1f,\"dgemm_gflops_1t\":%.1f,\"dgemm_gflops_2t\":%.1f,"
        "\"load_before\":%.2f,\"load_after\":%.2f}\n",
        best.bw1, best.bw2, best.sgemm1, best.sgemm2, best.dgemm1, best.dgemm2, load0, load1);
    return 0;
}
