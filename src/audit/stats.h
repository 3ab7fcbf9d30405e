// Small numerical helpers of the collapse audit (spec §8.1): RMS, the relative-fluctuation order
// parameter in its two forms, singular values by one-sided Jacobi in double, and the numerical
// rank at the audits' tolerance 64·eps_f32·s1.
#pragma once
#include <cstdint>
#include <vector>

namespace pldr::audit {

// sqrt(mean(x²)); 0 for an empty range.
double rms(const double* x, int64_t n);
double mean(const double* x, int64_t n);
// eps_G, its one definition (spec §8.1, docs/audit.md): RMS(G_u − G_c) / RMS(G_u), 0 when the
// numerator is 0. G_u is the uncached operator (G_LM of a forward over the whole sequence),
// G_c the cached one (G_LM of the prefix, which a KVG cache keeps frozen while the rest is
// decoded): the denominator is the RMS of the uncached operator. The audit (eps_g_steps), the
// token sequences of eps_g_after and through them the public API and `pldr serve` use it.
double eps_g(const double* g_uncached, const double* g_cached, int64_t n);
double max_abs_diff(const double* a, const double* b, int64_t n);

// The order parameter of two samples x1, x2 (spec §8.1, MF audit_h):
//   rms    = RMS(x1 − x2) / (½(RMS(x1) + RMS(x2)))
//   signed = RMS(x1 − x2) / (½(|mean x1| + |mean x2|))
// Each is 0 when the numerator is 0 (also when the denominator is 0 then).
struct OrderParam {
    double rms = 0, signed_ = 0;
};
OrderParam order_param(const double* x1, const double* x2, int64_t n);

// Singular values of the row-major m×n matrix M, descending (min(m,n) of them), by one-sided
// Jacobi rotations in double (converges to full relative accuracy for these sizes).
std::vector<double> singular_values(const double* M, int64_t m, int64_t n);

// Numerical rank: #{ s_i > tol } with tol = rel_tol · s1 (default 64·eps_f32, the audits'
// tolerance); 0 for the zero matrix.
constexpr double kRankTol = 64.0 * 1.1920928955078125e-07;
int64_t numerical_rank(const std::vector<double>& sv, double rel_tol = kRankTol);

// Quantiles of a sample (copies and sorts): min, median, max; zeros for an empty sample.
struct Summary {
    double min = 0, median = 0, max = 0;
    int64_t count = 0;
};
Summary summarize(std::vector<double> v);

}  // namespace pldr::audit
