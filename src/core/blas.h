// GEMM through OpenBLAS (cblas) and, for large float32 products, oneDNN; overloaded on float and
// double. Row-major throughout.
#pragma once
#include <cblas.h>
#include <omp.h>

#include <cstdint>
#include <string>

#include "core/parallel.h"

namespace pldr {

// The BLAS kernels in use, e.g. "OpenBLAS Haswell" (OpenBLAS picks them by CPU model, or as
// OPENBLAS_CORETYPE says): the SGEMM peak that benchmarks quote depends on them.
std::string blas_kernels();

// Products below this many multiply-adds run on one thread: OpenBLAS would otherwise wake its
// OpenMP team for a few microseconds of work, and on a busy machine a descheduled thread turns
// each such barrier into milliseconds (measured: S-config decode 19 → 1,150 tokens/s).
constexpr int64_t kBlasParallelWork = int64_t(1) << 22;

// Runs f with OpenBLAS limited to one thread when `work` is small (OpenBLAS's OpenMP build sizes
// its team from omp_get_max_threads()).
template <typename F>
inline void blas_call(int64_t work, F&& f) {
    if (work >= kBlasParallelWork || omp_in_parallel()) {
        f();
        return;
    }
    const int n = omp_get_max_threads();
    if (n > 1) omp_set_num_threads(1);
    f();
    if (n > 1) omp_set_num_threads(n);
}

// Which library runs the float32 products. AUTO: oneDNN's matmul (core/onednn.h) where it
// measured faster than OpenBLAS (sgemm_uses_onednn below), OpenBLAS elsewhere. OPENBLAS: every
// float32 product through OpenBLAS, as PLDR_SGEMM=openblas in the environment asks (benchmarks
// compare the two; tests of OpenBLAS's kernel sets use it). Double precision is always OpenBLAS.
enum class SgemmEngine : uint8_t { AUTO, OPENBLAS };
SgemmEngine sgemm_engine();
void set_sgemm_engine(SgemmEngine e);  // for the whole process

// Whether this core runs 512-bit FMAs at the rate of 256-bit ones (measured once, a fraction of a
// millisecond: full-width AVX-512 as on Zen 5 and Intel's two-FMA server cores, not the
// double-pumped AVX-512 of Zen 4); false without AVX-512.
bool full_width_avx512();
// Whether oneDNN's float32 kernels have the higher peak here: its AVX-512 kernels on a
// full-width core, where OpenBLAS may have picked AVX2 ones (it does on AMD cores it does not
// know).
bool onednn_outpaces_openblas();

// Whether a float32 product of this shape runs through oneDNN: AUTO, built with oneDNN, and
// - where onednn_outpaces_openblas(): every product of at least kBlasParallelWork multiply-adds
//   outside a parallel region, and inside one every product from 64 rows with N and K from 16;
// - elsewhere, outside an OpenMP parallel region: at least kBlasParallelWork multiply-adds, and
//   none of the products where OpenBLAS measured faster (the Zen 4 VM of 2026-12-03, each shape
//   alone and inside a training step): the LM head's backward over the vocabulary (K ≥ 8192, or a
//   transposed A of ≥ 8192 rows), and a transposed A with N ≥ 2·M (the weight gradient of the
//   FFN's output projection, 10–15 % slower in oneDNN);
// - inside one (a one-thread product of a per-head or per-block loop): M at least 256, N and K at
//   least 64, K below 8192 (blas.cpp: where oneDNN's one-thread kernels measured faster).
bool sgemm_uses_onednn(bool ta, int64_t M, int64_t N, int64_t K);

// oneDNN's float32 matmul reads an untransposed A in place where it is dense (lda == K), and
// packs it first where it is strided. At long K the packed one ran 35-45 % faster (AMD EPYC
// family 26, 2 threads, 2026-12-07: the 110M head's input gradient 256 × 896 × 32,000 at 228
// against 340 GFLOP/s, the M head's 1,024 × 256 × 8,192 at 228 against 333), at K = 896 it lost
// (327 against 225). A product of oneDNN's with a dense untransposed A and K from kPackedAK runs
// as two halves of K, each of which sees A strided; C takes the second half with beta = 1.
constexpr int64_t kPackedAK = 4096;

// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, row-major with leading dimensions.
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// C[M,N] = A[M,K]·op(B) + bias on every row (op(B) = Bᵀ for tb, B [K,N] else; bias: N floats, or
// null for none), a linear layer's forward, through oneDNN with the bias added in its kernel,
// where oneDNN takes the product (sgemm_uses_onednn). Returns false, with nothing written,
// elsewhere (the caller fills C with the bias rows and accumulates a gemm into it).
bool gemm_bias(bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
               const float* B, int64_t ldb, const float* bias, float* C, int64_t ldc);
inline void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
                 int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
    blas_call(M * N * K, [&] {
        cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
    });
}

// y[M] = alpha · A[M,N] · x[N] + beta · y (row-major A with leading dimension lda).
inline void gemv(int64_t M, int64_t N, float alpha, const float* A, int64_t lda, const float* x,
                 float beta, float* y) {
    blas_call(M * N * 8, [&] {  // bandwidth-bound: weigh it like a small product
        cblas_sgemv(CblasRowMajor, CblasNoTrans, int(M), int(N), alpha, A, int(lda), x, 1, beta, y,
                    1);
    });
}
inline void gemv(int64_t M, int64_t N, double alpha, const double* A, int64_t lda, const double* x,
                 double beta, double* y) {
    blas_call(M * N * 8, [&] {
        cblas_dgemv(CblasRowMajor, CblasNoTrans, int(M), int(N), alpha, A, int(lda), x, 1, beta, y,
                    1);
    });
}

}  // namespace pldr
