// DAG regularizer of PLDR-LLM v510_dag (spec §3.2): per instance, for X a dk×dk matrix,
//   dag(X) = | log( trace( expm(X∘X) ) / dk ) |       (∘ = elementwise product)
// with its gradient through the matrix exponential. See docs/dag.md for the method.
//
// Two modes:
//  * EXACT (double throughout): overflow-safe and accurate in relative terms at both ends of
//    the range (tr expm ≈ e^1120 and X entries ~1e-9, where dag ~ 1e-18). The gradient is the
//    analytic one, d log tr expm(M)/dM = expm(M)ᵀ / tr expm(M).
//  * REFERENCE_F32: mirrors the reference (PyTorch 1.13) computation in float32: X rounded to
//    float, torch's linalg_matrix_exp algorithm (Bader–Blanes–Casas polynomials of degree
//    1/2/4/8/12/18 chosen by 1-norm, scaling and squaring for the largest), float trace, then
//    abs(log(trace / dk)); the gradient follows torch autograd step by step in float32, including
//    the 2n×2n block-matrix exponential used for the matrix_exp backward. Overflow gives inf/NaN
//    like the reference; the caller decides what to do with it.
#pragma once
#include <cstdint>

namespace pldr {

enum class DagMode { EXACT, REFERENCE_F32 };

// X: [n,n] row-major. Returns dag(X) = |log(tr(expm(X∘X))/n)| (as double; in REFERENCE_F32 mode
// the value is the float32 result widened). If dX != nullptr, ACCUMULATES scale * d dag/dX into
// dX. In REFERENCE_F32 mode `scale` enters the float32 backward as its seed (float(scale)), the
// way torch's autograd receives a loss coefficient, and the float32 result is widened into dX.
// Sub-gradient of |·| at 0 is 0.
template <typename T>
double dag_term(const T* X, int64_t n, DagMode mode, T* dX = nullptr, double scale = 1.0);

// Batched helper: `count` instances of n×n matrices back to back (for the model: [L,B,H,n,n]).
// Returns the MEAN of dag over them; if dX != nullptr accumulates scale * d(mean)/dX.
// REFERENCE_F32: the mean is taken in float32 (sum, then divide by count) and the backward seed
// is float(scale) / float(count), as torch.mean's backward computes it.
template <typename T>
double dag_mean(const T* X, int64_t count, int64_t n, DagMode mode, T* dX = nullptr,
                double scale = 1.0);

// The mean that dag_mean returns, of `count` per-instance values (any backend's): in float32 and
// torch's order with REFERENCE_F32 (the values are float32 results), in double otherwise.
double dag_mean_of(const double* vals, int64_t count, DagMode mode);

// The matrix exponential (exposed for tests): out = expm(A), A [n,n] row-major, any real A.
// This is torch's linalg_matrix_exp algorithm in the given precision (float: float32 thresholds,
// double: float64 thresholds). `out` must not alias `A`.
template <typename T>
void expm(const T* A, int64_t n, T* out);

// For tests: the truncated Taylor polynomial of the given degree (1, 2, 4 or 8) as expm
// evaluates it (Bader–Blanes–Casas products), for any norm, without the norm-based choice.
template <typename T>
void expm_taylor_polynomial(const T* A, int64_t n, int degree, T* out);

// For an entrywise NONNEGATIVE M [n,n] (e.g. X∘X): returns log(tr(expm(M)) / n) in double,
// without overflow for any finite M and with full relative accuracy when the result is tiny
// (it is computed as s + log1p(h/n) with h = tr(expm(M − sI)) − n kept exactly positive).
// If P != nullptr it receives the gradient of log tr expm(M) w.r.t. M: P = expm(M)ᵀ / tr expm(M)
// (scale-free, so it never overflows either). Returns NaN (and a NaN P) for non-finite M.
double log_mean_trace_expm_nonneg(const double* M, int64_t n, double* P = nullptr);

}  // namespace pldr
