// Internals shared by the DAG kernels (ops/dag_torch.cpp, ops/dag_exact.cpp, ops/dag.cpp): small
// dense helpers and the per-instance kernels of the two modes. Not for other users.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "ops/dag_expm.h"

namespace pldr {
namespace dag_detail {

// ------------------------------------------------------------------------------------------
// Small dense helpers (n ≤ 128 here; plain loops, i-k-j order so that each output element
// accumulates over k sequentially).

// C = A·B, all n×n row-major; C must not alias A or B. kFma: fused multiply-adds, as the
// reference's BLAS kernels and its AVX2-compiled elementwise kernels do (this brings the float32
// golden dag values to within 0–1 ulp).
template <bool kFma, typename S>
void matmul_impl(const S* A, const S* B, S* C, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        S* c = C + i * n;
        std::fill(c, c + n, S(0));
        for (int64_t k = 0; k < n; ++k) {
            const S a = A[i * n + k];
            const S* b = B + k * n;
            for (int64_t j = 0; j < n; ++j) c[j] = kFma ? std::fma(a, b[j], c[j]) : c[j] + a * b[j];
        }
    }
}
template <typename S>
void matmul(const S* A, const S* B, S* C, int64_t n) {
    matmul_impl<false>(A, B, C, n);
}
// matmul_impl<true> for float32 on a CPU with AVX2 and FMA (not under PLDR_KERNELS=scalar), in
// register tiles of 4 rows by 16 columns (ops/dag.cpp): every element is the same chain of fused
// multiply-adds over k from zero, so the same bits. Returns false where it does not apply.
bool matmul_fma_tiled(const float* A, const float* B, float* C, int64_t n);
template <typename S>
void matmul_fma(const S* A, const S* B, S* C, int64_t n) {
    if constexpr (std::is_same_v<S, float>)
        if (matmul_fma_tiled(A, B, C, n)) return;
    matmul_impl<true>(A, B, C, n);
}

// The CPU's executor of the per-instance algorithms (ops/dag_expm.h): one thread, the steps in
// order, kDagSlots scratch matrices of side `side` (the largest matrix of the instance).
template <typename S>
class HostEx {
  public:
    explicit HostEx(int64_t side) : nn_(side * side), buf_(size_t(kDagSlots) * size_t(nn_)) {}
    S* slot(int i) { return buf_.data() + size_t(i) * size_t(nn_); }
    void mm(const S* A, const S* B, S* C, int64_t n) { matmul_fma(A, B, C, n); }
    void mm_plain(const S* A, const S* B, S* C, int64_t n) { matmul(A, B, C, n); }
    template <class F>
    void each(int64_t count, F f) {
        for (int64_t e = 0; e < count; ++e) f(e);
    }
    S norm1(const S* A, int64_t n) {
        col_.assign(size_t(n), S(0));
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < n; ++j) col_[size_t(j)] += std::abs(A[i * n + j]);
        S best = col_[0];
        for (int64_t j = 1; j < n; ++j) {
            if (std::isnan(col_[size_t(j)])) return col_[size_t(j)];
            best = best < col_[size_t(j)] ? col_[size_t(j)] : best;
        }
        return best;
    }
    S max_entry(const S* A, int64_t count) {
        S m = 0;
        for (int64_t e = 0; e < count; ++e) m = m < A[e] ? A[e] : m;
        return m;
    }
    bool all_finite(const S* A, int64_t count) {
        for (int64_t e = 0; e < count; ++e)
            if (!std::isfinite(A[e])) return false;
        return true;
    }

  private:
    int64_t nn_;
    std::vector<S> buf_;
    std::vector<S> col_;
};

// EXACT mode, one instance (ops/dag_exact.cpp): |log tr expm(X∘X)/n| in double; accumulates
// scale·d/dX into dX when not null.
template <typename T>
double dag_exact_one(const T* X, int64_t n, T* dX, double scale);

// REFERENCE_F32 mode, one instance (ops/dag_torch.cpp): torch's float32 computation and its
// autograd backward seeded with `seed`.
template <typename T>
float dag_ref_one(const T* X, int64_t n, T* dX, float seed);

}  // namespace dag_detail
}  // namespace pldr
