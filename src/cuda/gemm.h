// Row-major matrix products on the GPU through cuBLASLt (src/cuda/gemm.cu), in the CPU's
// convention (core/blas.h): C[M,N] = alpha·op(A)[M,K]·op(B)[K,N] + beta·C + bias, op(X) = X or
// Xᵀ, every matrix row-major with its leading dimension (lda ≥ K, or ≥ M when A is transposed;
// ldb ≥ N, or ≥ K when B is transposed; ldc ≥ N), bias [N] added to every row (the linear layers'
// bias; null for none). With beta = 0, C is not read.
//   - float32: float32 arithmetic throughout (TF32 off unless set_tf32(true): parity with the CPU
//     first; TF32 rounds the operands to 10 mantissa bits);
//   - bf16: A and B bf16 (cuda::bf16), the products accumulated in float32, C, bias float32 (the
//     autocast products, core/gemm_bf16.h);
//   - float64: float64 throughout.
// A strided batch (GemmBatch, count > 1) runs `count` such products in one call, product i on
// A + i·stride_a, B + i·stride_b, C + i·stride_c (strides in elements, ≥ 0; 0 repeats an
// operand); no bias. The products of several heads at once: q's heads are D columns apart in
// its rows (stride D with ld d), each head's D×D block DD apart.
// A Gemm owns a cuBLASLt handle, a workspace (32 MiB by default) and its plans: for each shape
// (type, transposes, M, N, K, leading dimensions, bias, pointer alignment) the heuristic's first
// algorithm, found once and reused. One Gemm per thread (its plans are not locked); each call
// enqueues on the Gemm's stream and returns.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "cuda/kernels.h"

namespace pldr::cuda {

struct GemmBatch {
    int64_t count = 1;
    int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

class Gemm {
  public:
    explicit Gemm(Stream stream = nullptr, size_t workspace_bytes = size_t(32) << 20);
    ~Gemm();
    Gemm(const Gemm&) = delete;
    Gemm& operator=(const Gemm&) = delete;

    void set_tf32(bool on);
    bool tf32() const;
    Stream stream() const;
    // Plans found so far (one per distinct shape).
    size_t plans() const;

    void f32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
             int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
             const float* bias = nullptr, const GemmBatch& batch = {});
    void bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const cuda::bf16* A,
              int64_t lda, const cuda::bf16* B, int64_t ldb, float beta, float* C, int64_t ldc,
              const float* bias = nullptr, const GemmBatch& batch = {});
    void f64(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
             int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc,
             const double* bias = nullptr, const GemmBatch& batch = {});

    struct Impl;

  private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace pldr::cuda
