// Matrix products through oneDNN's matmul primitive (Debian's libdnnl), shared by the bf16
// products (core/gemm_bf16.h) and the float32 ones that run faster there than in OpenBLAS
// (core/blas.h: oneDNN's brgemm kernels reach 190–220 GFLOP/s on the projections of a 128-token
// prefill where OpenBLAS gives 150–170, bench/README.md).
//
// One primitive per problem (shapes, strides, alpha, beta, element type, thread count), created
// on first use and cached. Each call brings its own scratchpad (a buffer per calling thread,
// grown to the largest problem it has run), so that two threads may run the same primitive at
// once: a server's sessions call from threads of their own.
#pragma once
#include <cstdint>
#include <string>

namespace pldr::onednn {

// The element type of A and B (C is float32).
enum class Type : uint8_t { F32, BF16 };

// Whether pldr was built with oneDNN.
bool built();

// oneDNN's effective instruction set, e.g. "avx512_core_amx", "avx512_core_bf16",
// "avx512_core", "avx2"; "" without oneDNN.
std::string isa();

// C[M,N] = alpha·op(A)[M,K]·op(B)[K,N] + beta·C, row-major with leading dimensions; A and B of
// `type` (float or bf16 bits), C float32. With `bias` (N floats; alpha = 1 and beta = 0 only)
// C = op(A)·op(B) + bias on every row, the bias added in the kernel. Runs on omp_get_max_threads()
// threads (one inside a parallel region). Returns false, having done nothing, where oneDNN has only
// its reference kernel for the problem (or pldr was built without oneDNN): the caller then runs its
// own. Requires M, N, K > 0.
bool matmul(Type type, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
            const void* A, int64_t lda, const void* B, int64_t ldb, float beta, float* C,
            int64_t ldc, const float* bias = nullptr);

// C[M,N] = A[M,K]·B[K,N] + bias (bias may be null), B in the panel layout of ops/linear.h
// (oneDNN's BA16a48b: blocks of 48 columns, each its K rows of 48 in order, K padded to a multiple
// of 16 and N to one of 48 with zeros), which oneDNN's kernels read as it lies: no copy of B per
// call. Float32, the thread count and the false return as matmul's. Outside a parallel region, a
// B of at most 1 MB and from 32 rows per thread, the rows are split evenly over the threads, each
// running its own one-thread product (onednn.cpp).
bool matmul_panels(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                   float* C, int64_t ldc, const float* bias);

// Whether matmul_panels(M, N, K, ...) called outside a parallel region splits its rows over the
// team: thread t of T runs rows [M·t/T, M·(t+1)/T) as a one-thread product. A caller that runs
// that same share of rows inside its own region (model/plga_layer.cpp: a prompt's row-wise steps)
// runs the same products, bit for bit.
bool panels_split_rows(int64_t M, int64_t N, int64_t K);

// Products run through matmul() with Type::F32 so far (tests: which engine a product took).
int64_t f32_calls();

}  // namespace pldr::onednn
