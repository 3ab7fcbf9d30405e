// The BLAS kernel set in use and the float32 product's engine (blas.h).
#include "core/blas.h"

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

// Seconds for `iters` (> 0) rounds of twelve independent FMA chains on Bits-bit registers
// (twelve: two FMA pipes of four cycles' latency each stay busy), on zeros (no denormals). In
// assembly, so that no build type (a Debug build included) puts loads, stores or calls into the
// chains: what is timed is the FMA unit alone.
#define PLDR_FMA_ROUNDS(r)                                                                         \
    asm volatile(                                                                                  \
        ".irp i,0,1,2,3,4,5,6,7,8,9,10,11,12,13\n\t"                                               \
        "vxorps %%ymm\\i, %%ymm\\i, %%ymm\\i\n\t"                                                  \
        ".endr\n\t"                                                                                \
        "1:\n\t"                                                                                   \
        ".irp i,0,1,2,3,4,5,6,7,8,9,10,11\n\t"                                                     \
        "vfmadd231ps %%" r "12, %%" r "13, %%" r                                                   \
        "\\i\n\t"                                                                                  \
        ".endr\n\t"                                                                                \
        "dec %0\n\tjnz 1b\n\tvzeroupper"                                                           \
        : "+r"(iters)                                                                              \
        :                                                                                          \
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
          "xmm11", "xmm12", "xmm13", "cc")
template <int Bits>
double fma_chains_seconds(int64_t iters) {
    const auto t0 = std::chrono::steady_clock::now();
    if constexpr (Bits == 512)
        PLDR_FMA_ROUNDS("zmm");
    else
        PLDR_FMA_ROUNDS("ymm");
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
#undef PLDR_FMA_ROUNDS

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
            t256 = std::min(t256, fma_chains_seconds<256>(kIters));
            t512 = std::min(t512, fma_chains_seconds<512>(kIters));
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
    auto blas = [&](int64_t k0, int64_t k, float b) {
        blas_call(M * N * k, [&] {
            cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                        tb ? CblasTrans : CblasNoTrans, int(M), int(N), int(k), alpha,
                        A + (ta ? k0 * lda : k0), int(lda), B + (tb ? k0 : k0 * ldb), int(ldb), b,
                        C, int(ldc));
        });
    };
    if (M > 0 && N > 0 && K > 0 && sgemm_uses_onednn(ta, M, N, K)) {
        if (!ta && lda == K && K >= kPackedAK) {  // two halves of K, A strided in each (blas.h)
            const int64_t k1 = (K / 2 + 63) / 64 * 64;
            if (onednn::matmul(onednn::Type::F32, false, tb, M, N, k1, alpha, A, lda, B, ldb, beta,
                               C, ldc)) {
                const float* B2 = tb ? B + k1 : B + k1 * ldb;
                if (!onednn::matmul(onednn::Type::F32, false, tb, M, N, K - k1, alpha, A + k1, lda,
                                    B2, ldb, 1.0f, C, ldc))
                    blas(k1, K - k1, 1.0f);
                return;
            }
        } else if (onednn::matmul(onednn::Type::F32, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta,
                                  C, ldc)) {
            return;
        }
    }
    blas(0, K, beta);
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
