// DAG regularizer (see dag.h, docs/dag.md): the per-instance value and gradient in either mode,
// and the mean over instances. The modes' kernels: ops/dag_exact.cpp (EXACT, float64) and
// ops/dag_torch.cpp (REFERENCE_F32, torch's float32 matrix exponential).
#include "ops/dag.h"

#include <cmath>
#include <vector>

#include "core/error.h"
#include "ops/dag_detail.h"
#include "ops/qlinear.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace pldr {

namespace dag_detail {

#if defined(__x86_64__) || defined(__i386__)
namespace {

#define PLDR_AVX2 __attribute__((target("avx2,fma")))

// C[i0 + r, j0 + 8v + lane] for r < R, v < V: R·V accumulators in registers over the whole k
// loop (the plain loop stored and reloaded its output row at every k: a store-to-load chain per
// element that held the DAG term at 1.5-2 % of a training step).
template <int R, int V>
PLDR_AVX2 void tile(const float* A, const float* B, float* C, int64_t n, int64_t i0, int64_t j0) {
    __m256 acc[R][V];
    for (int r = 0; r < R; ++r)
        for (int v = 0; v < V; ++v) acc[r][v] = _mm256_setzero_ps();
    for (int64_t k = 0; k < n; ++k) {
        __m256 b[V];
        for (int v = 0; v < V; ++v) b[v] = _mm256_loadu_ps(B + k * n + j0 + 8 * v);
        for (int r = 0; r < R; ++r) {
            const __m256 a = _mm256_broadcast_ss(A + (i0 + r) * n + k);
            for (int v = 0; v < V; ++v) acc[r][v] = _mm256_fmadd_ps(a, b[v], acc[r][v]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int v = 0; v < V; ++v) _mm256_storeu_ps(C + (i0 + r) * n + j0 + 8 * v, acc[r][v]);
}

template <int R>
PLDR_AVX2 void rows(const float* A, const float* B, float* C, int64_t n, int64_t i0) {
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) tile<R, 2>(A, B, C, n, i0, j);
    if (j + 8 <= n) {
        tile<R, 1>(A, B, C, n, i0, j);
        j += 8;
    }
    for (; j < n; ++j)
        for (int r = 0; r < R; ++r) {
            float c = 0.0f;
            for (int64_t k = 0; k < n; ++k) c = std::fma(A[(i0 + r) * n + k], B[k * n + j], c);
            C[(i0 + r) * n + j] = c;
        }
}

}  // namespace
#endif

bool matmul_fma_tiled(const float* A, const float* B, float* C, int64_t n) {
#if defined(__x86_64__) || defined(__i386__)
    if (qlinear::isa() == qlinear::Isa::SCALAR) return false;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) rows<4>(A, B, C, n, i);
    for (; i < n; ++i) rows<1>(A, B, C, n, i);
    return true;
#else
    (void)A, (void)B, (void)C, (void)n;
    return false;
#endif
}

}  // namespace dag_detail

using namespace dag_detail;

template <typename T>
double dag_term(const T* X, int64_t n, DagMode mode, T* dX, double scale) {
    PLDR_REQUIRE(n >= 1, "dag_term: matrix size must be >= 1, got ", n);
    if (mode == DagMode::EXACT) return dag_exact_one(X, n, dX, scale);
    return double(dag_ref_one(X, n, dX, float(scale)));
}

double dag_mean_of(const double* vals, int64_t count, DagMode mode) {
    PLDR_REQUIRE(count >= 1, "dag_mean_of: need count >= 1, got ", count);
    if (mode == DagMode::EXACT) {
        double sum = 0;
        for (int64_t c = 0; c < count; ++c) sum += vals[c];
        return sum / double(count);
    }
    std::vector<float> fv(vals, vals + count);
    return double(torch_sum_f32(fv.data(), count, 1) / float(count));
}

template <typename T>
double dag_mean(const T* X, int64_t count, int64_t n, DagMode mode, T* dX, double scale) {
    PLDR_REQUIRE(n >= 1 && count >= 1, "dag_mean: need count >= 1 and n >= 1, got count=", count,
                 " n=", n);
    const int64_t nn = n * n;
    std::vector<double> vals(static_cast<size_t>(count));
    if (mode == DagMode::EXACT) {
        const double g = scale / double(count);
#pragma omp parallel for schedule(dynamic, 1) if (count > 1)
        for (int64_t c = 0; c < count; ++c)
            vals[c] = dag_exact_one(X + c * nn, n, dX ? dX + c * nn : nullptr, g);
    } else {
        const float seed = float(scale) / float(count);
#pragma omp parallel for schedule(dynamic, 1) if (count > 1)
        for (int64_t c = 0; c < count; ++c)
            vals[c] = double(dag_ref_one(X + c * nn, n, dX ? dX + c * nn : nullptr, seed));
    }
    return dag_mean_of(vals.data(), count, mode);
}

template double dag_term<float>(const float*, int64_t, DagMode, float*, double);
template double dag_term<double>(const double*, int64_t, DagMode, double*, double);
template double dag_mean<float>(const float*, int64_t, int64_t, DagMode, float*, double);
template double dag_mean<double>(const double*, int64_t, int64_t, DagMode, double*, double);

}  // namespace pldr
