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
// RMS(x1 − x2) / RMS(x2) — eps_G's form (x1 = G_uncached(t), x2 = G_cached in the spec's
// order: RMS(Gu − Gc) / RMS(Gu)); 0 when the numerator is 0.
double rel_rms_diff(const double* x, const double* ref, int64_t n);
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
