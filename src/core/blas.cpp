// The BLAS kernel set in use and the float32 product's engine (blas.h).
#include "core/blas.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/onednn.h"

namespace pldr {

namespace {

SgemmEngine engine_from_env() {
    const char* e = std::getenv("PLDR_SGEMM");
    return e && std::strcmp(e, "openblas") == 0 ? SgemmEngine::OPENBLAS : SgemmEngine::AUTO;
}

std::atomic<SgemmEngine> g_engine{engine_from_env()};

// The LM head's backward products run over the vocabulary (K = V for the input gradient, M = V
// rows of a transposed A for the weight gradient): there OpenBLAS measured 10–15 % faster
// (blas.h).
constexpr int64_t kVocabDim = 8192;

// A one-thread product inside a parallel region (the metric learner's row blocks, the attention's
// heads) goes to oneDNN from kOnednnThreadRows rows with N and K from kOnednnThreadDim. Measured
// one thread at a time on the Zen 4 VM of 2026-12-04: at the 110M config's shapes (dk = 64,
// A_dff = 170: 448 × 170 × 64, 512 × 64 × 170, 256 × 64 × 256, …) oneDNN ran 5–20 % faster than
// OpenBLAS, forward and backward; at the M config's (dk = 32) it lost most shapes by 4–37 % (the
// TN products of the weight gradients and QᵀQ most). The attention's blocks of 64 query rows
// gained 5–10 % alone but nothing in a 110M step or prefill (alternated runs: the learner's rows
// alone 1.066 and 1.011, with the blocks too 1.030 and 1.013), and their many small primitives
// raised a 110M prefill's peak memory by 5–15 MB from run to run (494 MB stable without them).
constexpr int64_t kOnednnThreadRows = 256;
constexpr int64_t kOnednnThreadDim = 64;

// Where the core runs 512-bit FMAs at the rate of 256-bit ones, oneDNN's AVX-512 kernels have
// twice the peak of OpenBLAS's AVX2 ones (the kernel set OpenBLAS 0.3.21 picks on the AMD cores
// it does not know, Zen 5 among them). Measured on such a core (AMD EPYC, family 26, 2 threads,
// 2026-12-07): every product in oneDNN, those inside parallel regions from 64 rows with N and K
// from 16, ran a 110M training step 15-20 % faster and an M one 10-13 % (alternated rounds).
constexpr int64_t kWideThreadRows = 64;
constexpr int64_t kWideThreadDim = 16;

// Twelve independent FMA chains of 256-bit and of 512-bit vectors, `iters` rounds each: seconds.
// (Twelve: two FMA pipes of four cycles' latency each stay busy.)
constexpr int kChains = 12;
template <typename V>
double chains_seconds(V (*fma)(V, V, V), V (*set1)(float), float (*first)(V), int64_t iters) {
    V acc[kChains];
    for (int i = 0; i < kChains; ++i) acc[i] = set1(float(i));
    const V x = set1(0.999f), y = set1(0.001f);
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t k = 0; k < iters; ++k)
        for (int i = 0; i < kChains; ++i) acc[i] = fma(acc[i], x, y);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    float sum = 0;
    for (int i = 0; i < kChains; ++i) sum += first(acc[i]);
    volatile float sink = sum;
    (void)sink;
    return s;
}
__attribute__((target("avx2,fma"))) __m256 fma256(__m256 a, __m256 b, __m256 c) {
    return _mm256_fmadd_ps(a, b, c);
}
__attribute__((target("avx2,fma"))) __m256 set256(float v) {
    return _mm256_set1_ps(v);
}
__attribute__((target("avx2,fma"))) float first256(__m256 v) {
    return _mm256_cvtss_f32(v);
}
__attribute__((target("avx512f"))) __m512 fma512(__m512 a, __m512 b, __m512 c) {
    return _mm512_fmadd_ps(a, b, c);
}
__attribute__((target("avx512f"))) __m512 set512(float v) {
    return _mm512_set1_ps(v);
}
__attribute__((target("avx512f"))) float first512(__m512 v) {
    return _mm512_cvtss_f32(v);
}

}  // namespace

bool full_width_avx512() {
    static const bool full = [] {
        if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx2") ||
            !__builtin_cpu_supports("fma"))
            return false;
        // The best of 7 short runs of each (about 50 µs each on a 4 GHz core): a double-pumped
        // unit takes about twice as long for the 512-bit chains, a full-width one as long.
        constexpr int64_t kIters = 16384;
        double t256 = 1e30, t512 = 1e30;
        for (int r = 0; r < 7; ++r) {
            t256 = std::min(t256, chains_seconds<__m256>(fma256, set256, first256, kIters));
            t512 = std::min(t512, chains_seconds<__m512>(fma512, set512, first512, kIters));
        }
        return t512 < 1.5 * t256;
    }();
    return full;
}

SgemmEngine sgemm_engine() {
    return g_engine.load(std::memory_order_relaxed);
}

void set_sgemm_engine(SgemmEngine e) {
    g_engine.store(e, std::memory_order_relaxed);
}

bool onednn_outpaces_openblas() {
    static const bool wide =
        onednn::built() && onednn::isa().compare(0, 6, "avx512") == 0 && full_width_avx512();
    return wide;
}

bool sgemm_uses_onednn(bool ta, int64_t M, int64_t N, int64_t K) {
    if (sgemm_engine() != SgemmEngine::AUTO || !onednn::built()) return false;
    if (onednn_outpaces_openblas()) {
        if (omp_in_parallel()) return M >= kWideThreadRows && std::min(N, K) >= kWideThreadDim;
        return M * N * K >= kBlasParallelWork;
    }
    if (omp_in_parallel())
        return M >= kOnednnThreadRows && std::min(N, K) >= kOnednnThreadDim && K < kVocabDim;
    return M * N * K >= kBlasParallelWork && K < kVocabDim &&
           !(ta && (M >= kVocabDim || N >= 2 * M));
}

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    if (M > 0 && N > 0 && K > 0 && sgemm_uses_onednn(ta, M, N, K) &&
        onednn::matmul(onednn::Type::F32, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
        return;
    blas_call(M * N * K, [&] {
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
    });
}

bool gemm_bias(bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
               const float* B, int64_t ldb, const float* bias, float* C, int64_t ldc) {
    return M > 0 && N > 0 && K > 0 && sgemm_uses_onednn(false, M, N, K) &&
           onednn::matmul(onednn::Type::F32, false, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc,
                          bias);
}

std::string blas_kernels() {
    std::string s = std::string("OpenBLAS ") + openblas_get_corename();
    if (sgemm_engine() == SgemmEngine::AUTO && onednn::built()) {
        s += " + oneDNN " + onednn::isa();
        if (onednn_outpaces_openblas()) s += " first (full-width AVX-512)";
    }
    return s;
}

}  // namespace pldr
