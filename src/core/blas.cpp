// The BLAS kernel set in use and the float32 product's engine (blas.h).
#include "core/blas.h"

#include <algorithm>
#include <atomic>
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

}  // namespace

SgemmEngine sgemm_engine() {
    return g_engine.load(std::memory_order_relaxed);
}

void set_sgemm_engine(SgemmEngine e) {
    g_engine.store(e, std::memory_order_relaxed);
}

bool sgemm_uses_onednn(bool ta, int64_t M, int64_t N, int64_t K) {
    if (sgemm_engine() != SgemmEngine::AUTO || !onednn::built()) return false;
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
    if (sgemm_engine() == SgemmEngine::AUTO && onednn::built()) s += " + oneDNN " + onednn::isa();
    return s;
}

}  // namespace pldr
