// GEMM through OpenBLAS (cblas), overloaded on float and double. Row-major throughout.
#pragma once
#include <cblas.h>

#include <cstdint>

namespace pldr {

// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, row-major with leading dimensions.
inline void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                 int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
}
inline void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
                 int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
}

// y[M] = alpha · A[M,N] · x[N] + beta · y (row-major A with leading dimension lda).
inline void gemv(int64_t M, int64_t N, float alpha, const float* A, int64_t lda, const float* x,
                 float beta, float* y) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, int(M), int(N), alpha, A, int(lda), x, 1, beta, y, 1);
}
inline void gemv(int64_t M, int64_t N, double alpha, const double* A, int64_t lda, const double* x,
                 double beta, double* y) {
    cblas_dgemv(CblasRowMajor, CblasNoTrans, int(M), int(N), alpha, A, int(lda), x, 1, beta, y, 1);
}

}  // namespace pldr

namespace pldr {
// Work (in multiply-adds) below which a loop over heads stays on one thread: forking an OpenMP
// team costs microseconds, and on a loaded machine its spinning threads cost far more.
constexpr int64_t kParallelWork = 1 << 18;
}  // namespace pldr
