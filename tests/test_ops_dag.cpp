// Tests for the DAG regularizer (src/ops/dag.*): expm, the overflow-safe log-trace, exact and
// reference-mode values and gradients, and the golden loss.dag* values of every DAG fixture
// under PLDR_GOLDEN_DIR.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "golden_util.h"
#include "io/safetensors.h"
#include "ops/dag.h"
#include "ops/dag_detail.h"
#include "ops/qlinear.h"

namespace {

using pldr::DagMode;
using Mat = std::vector<double>;

Mat random_matrix(int64_t n, std::mt19937_64& rng, double lo, double hi) {
    std::uniform_real_distribution<double> u(lo, hi);
    Mat A(size_t(n * n));
    for (auto& a : A) a = u(rng);
    return A;
}

double norm1(const Mat& A, int64_t n) {
    double best = 0;
    for (int64_t j = 0; j < n; ++j) {
        double c = 0;
        for (int64_t i = 0; i < n; ++i) c += std::fabs(A[i * n + j]);
        best = std::max(best, c);
    }
    return best;
}

// max|a - b| / max|b|
template <typename U, typename V>
double rel_err(const std::vector<U>& a, const std::vector<V>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        num = std::max(num, std::fabs(double(a[i]) - double(b[i])));
        den = std::max(den, std::fabs(double(b[i])));
    }
    return num / den;
}

// Reference expm in long double: scale to ‖A‖ ≤ 1/8, 40-term Taylor, square back.
std::vector<long double> expm_ld(const Mat& A, int64_t n) {
    const double nrm = norm1(A, n);
    int k = 0;
    while (std::ldexp(nrm, -k) > 0.125) ++k;
    std::vector<long double> As(A.size()), E(A.size(), 0.0L), term(A.size()), tmp(A.size());
    for (size_t e = 0; e < A.size(); ++e) As[e] = std::ldexp((long double)A[e], -k);
    for (int64_t i = 0; i < n; ++i) E[i * n + i] = term[i * n + i] = 1.0L;
    auto mm = [n](const std::vector<long double>& X, const std::vector<long double>& Y,
                  std::vector<long double>& Z) {
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < n; ++j) {
                long double s = 0;
                for (int64_t l = 0; l < n; ++l) s += X[i * n + l] * Y[l * n + j];
                Z[i * n + j] = s;
            }
    };
    for (int t = 1; t <= 40; ++t) {
        mm(term, As, tmp);
        for (size_t e = 0; e < A.size(); ++e) term[e] = tmp[e] / t;
        for (size_t e = 0; e < A.size(); ++e) E[e] += term[e];
    }
    for (int p = 0; p < k; ++p) {
        mm(E, E, tmp);
        E = tmp;
    }
    return E;
}

template <typename T>
std::vector<T> run_expm(const Mat& A, int64_t n) {
    std::vector<T> a(A.begin(), A.end()), out(A.size());
    pldr::expm<T>(a.data(), n, out.data());
    return out;
}

// ---------------------------------------------------------------------------------------------
// expm

TEST(DagExpm, Diagonal) {
    for (double scale : {1e-9, 1e-3, 0.3, 2.0, 50.0}) {
        const int64_t n = 5;
        Mat A(n * n, 0.0), want(n * n, 0.0);
        const double d[5] = {1.0, -0.5, 0.25, -1.0, 0.75};
        for (int i = 0; i < n; ++i) {
            A[i * n + i] = scale * d[i];
            want[i * n + i] = std::exp(scale * d[i]);
        }
        EXPECT_LT(rel_err(run_expm<double>(A, n), want), 1e-14) << "scale " << scale;
        // float: 5 squarings at scale 50 amplify rounding ~2^5-fold.
        EXPECT_LT(rel_err(run_expm<float>(A, n), want), scale > 5 ? 1e-5 : 2e-6)
            << "scale " << scale;
    }
}

TEST(DagExpm, Nilpotent) {
    // Strictly upper triangular N (4×4): expm(N) = I + N + N²/2 + N³/6 exactly.
    for (double scale : {1e-6, 0.1, 1.0, 13.0}) {
        const int64_t n = 4;
        Mat N(n * n, 0.0);
        int c = 1;
        for (int i = 0; i < n; ++i)
            for (int j = i + 1; j < n; ++j) N[i * n + j] = scale * (0.5 + 0.25 * c++);
        std::vector<long double> want(n * n, 0.0L), P(n * n, 0.0L), tmp(n * n);
        for (int i = 0; i < n; ++i) want[i * n + i] = P[i * n + i] = 1.0L;
        for (int t = 1; t < 4; ++t) {
            for (int i = 0; i < n; ++i)
                for (int j = 0; j < n; ++j) {
                    long double s = 0;
                    for (int l = 0; l < n; ++l) s += P[i * n + l] * N[l * n + j];
                    tmp[i * n + j] = s / t;
                }
            P = tmp;
            for (int e = 0; e < n * n; ++e) want[e] += P[e];
        }
        EXPECT_LT(rel_err(run_expm<double>(N, n), want), 1e-14) << "scale " << scale;
        EXPECT_LT(rel_err(run_expm<float>(N, n), want), 2e-6) << "scale " << scale;
    }
}

TEST(DagExpm, RotationGenerator) {
    for (double t : {1e-5, 0.1, 1.0, 5.0, 50.0}) {
        const Mat A = {0.0, -t, t, 0.0};
        const Mat want = {std::cos(t), -std::sin(t), std::sin(t), std::cos(t)};
        // Squaring a rotation by 50 rad accumulates ~2^s rounding steps; allow for it.
        EXPECT_LT(rel_err(run_expm<double>(A, 2), want), 1e-13) << "t " << t;
        EXPECT_LT(rel_err(run_expm<float>(A, 2), want), 1e-5) << "t " << t;
    }
}

TEST(DagExpm, RandomVsLongDoubleTaylor) {
    std::mt19937_64 rng(42);
    // Norms hitting every degree branch of both precisions, and ones needing scaling.
    const double norms[] = {1e-17, 1e-9, 3e-6, 1e-4, 0.03, 0.2, 0.45, 0.9, 1.3, 2.5, 10.0, 50.0};
    for (int64_t n : {2, 5, 8, 16}) {
        for (double target : norms) {
            Mat A = random_matrix(n, rng, -1.0, 1.0);
            const double s = target / norm1(A, n);
            for (auto& a : A) a *= s;
            const auto want = expm_ld(A, n);
            const double tol_d = target > 5 ? 1e-12 : 1e-14;
            const double tol_f = target > 5 ? 2e-5 : 2e-6;
            EXPECT_LT(rel_err(run_expm<double>(A, n), want), tol_d)
                << "n " << n << " norm " << target;
            EXPECT_LT(rel_err(run_expm<float>(A, n), want), tol_f)
                << "n " << n << " norm " << target;
        }
    }
}

// Each polynomial branch against the truncated Taylor series of its degree (long double), at
// norms where every coefficient matters: inside expm the low degrees run only at norms where a
// wrong coefficient hides below the rounding (T4: ‖A‖ ≤ 3.4e-4 in double).
TEST(DagExpm, EachTaylorPolynomialBranch) {
    std::mt19937_64 rng(7);
    for (int degree : {1, 2, 4, 8})
        for (int64_t n : {3, 6})
            for (double target : {0.5, 1.0}) {
                Mat A = random_matrix(n, rng, -1.0, 1.0);
                const double s = target / norm1(A, n);
                for (auto& a : A) a *= s;
                std::vector<long double> want(size_t(n * n), 0.0L), term(size_t(n * n), 0.0L),
                    tmp(size_t(n * n));
                for (int64_t i = 0; i < n; ++i)
                    want[size_t(i * n + i)] = term[size_t(i * n + i)] = 1;
                for (int t = 1; t <= degree; ++t) {
                    for (int64_t i = 0; i < n; ++i)
                        for (int64_t j = 0; j < n; ++j) {
                            long double acc = 0;
                            for (int64_t l = 0; l < n; ++l)
                                acc += term[size_t(i * n + l)] * (long double)A[size_t(l * n + j)];
                            tmp[size_t(i * n + j)] = acc / t;
                        }
                    term = tmp;
                    for (size_t e = 0; e < want.size(); ++e) want[e] += term[e];
                }
                std::vector<double> out(A.size());
                pldr::expm_taylor_polynomial<double>(A.data(), n, degree, out.data());
                EXPECT_LT(rel_err(out, want), 1e-14)
                    << "degree " << degree << " n " << n << " norm " << target;
            }
}

TEST(DagExpm, SizeOne) {
    const double a = 0.7;
    double out;
    pldr::expm<double>(&a, 1, &out);
    EXPECT_DOUBLE_EQ(out, std::exp(0.7));
}

// ---------------------------------------------------------------------------------------------
// Exact log-trace

double direct_log_mean_trace(const Mat& M, int64_t n) {
    const auto E = run_expm<double>(M, n);
    double tr = 0;
    for (int64_t i = 0; i < n; ++i) tr += E[i * n + i];
    return std::log(tr / double(n));
}

TEST(DagExact, AgreesWithDirectLogTrace) {
    std::mt19937_64 rng(7);
    for (int64_t n : {3, 8, 16, 64}) {
        for (double hi : {0.01, 0.3, 1.0, 3.0}) {
            Mat X = random_matrix(n, rng, -hi, hi);
            Mat M(X.size());
            for (size_t e = 0; e < X.size(); ++e) M[e] = X[e] * X[e];
            const double want = direct_log_mean_trace(M, n);
            const double got = pldr::log_mean_trace_expm_nonneg(M.data(), n);
            EXPECT_NEAR(got, want, 1e-13 * std::max(1.0, std::fabs(want)) + 1e-15)
                << "n " << n << " hi " << hi;
            EXPECT_NEAR(pldr::dag_term(X.data(), n, DagMode::EXACT), std::fabs(want),
                        1e-13 * std::max(1.0, std::fabs(want)) + 1e-15);
        }
    }
}

TEST(DagExact, ClosedFormAllOnesOverflowsDouble) {
    // M = a·J: eigenvalues n·a (once) and 0, so tr expm(M) = e^{na} + n − 1.
    for (int64_t n : {8, 64}) {
        for (double na : {1e-12, 0.5, 30.0, 700.0, 1120.0, 41461.0}) {
            const double a = na / double(n);
            Mat X(n * n, std::sqrt(a)), M(n * n, a);
            // log((e^{na} + n − 1)/n) = log(expm1(na) + n) − log(n), evaluated stably.
            const double want = na > 50 ? na + std::log1p((n - 1) * std::exp(-na)) - std::log(n)
                                        : std::log1p(std::expm1(na) / double(n));
            const double got = pldr::log_mean_trace_expm_nonneg(M.data(), n);
            EXPECT_NEAR(got, want, 1e-13 * want) << "n " << n << " na " << na;
            EXPECT_TRUE(std::isfinite(pldr::dag_term(X.data(), n, DagMode::EXACT)));
        }
    }
}

TEST(DagExact, DiagonalLogSumExp) {
    const int64_t n = 6;
    const double d[6] = {0.0, 3.0, 800.0, 1119.5, 1120.0, 5.0};
    Mat M(n * n, 0.0);
    for (int i = 0; i < n; ++i) M[i * n + i] = d[i];
    double mx = 1120.0, s = 0;
    for (double v : d) s += std::exp(v - mx);
    const double want = mx + std::log(s) - std::log(double(n));
    EXPECT_NEAR(pldr::log_mean_trace_expm_nonneg(M.data(), n), want, 1e-13 * want);
}

TEST(DagExact, RandomOverflowVsShiftedExpm) {
    // A positive matrix whose trace is ~e^1120 (past double range). Compare with
    // s + log tr expm(M − sI) computed by the (torch-algorithm) double expm, s = max row sum
    // (≥ Perron root, and close to it for a positive matrix with similar row sums).
    std::mt19937_64 rng(11);
    for (int64_t n : {8, 16, 64}) {
        Mat X = random_matrix(n, rng, 0.5, 1.5);
        Mat M(X.size());
        double rs_max = 0, rs = 0;
        for (int64_t i = 0; i < n; ++i, rs = 0) {
            for (int64_t j = 0; j < n; ++j) rs += X[i * n + j] * X[i * n + j];
            rs_max = std::max(rs_max, rs);
        }
        const double c = 1120.0 / rs_max;  // scale so the Perron root is ~1100
        for (auto& x : X) x *= std::sqrt(c);
        for (size_t e = 0; e < X.size(); ++e) M[e] = X[e] * X[e];
        double s = 0;
        for (int64_t i = 0; i < n; ++i) {
            double r = 0;
            for (int64_t j = 0; j < n; ++j) r += M[i * n + j];
            s = std::max(s, r);
        }
        Mat Ms = M;
        for (int64_t i = 0; i < n; ++i) Ms[i * n + i] -= s;
        const double want = s + direct_log_mean_trace(Ms, n);
        const double got = pldr::log_mean_trace_expm_nonneg(M.data(), n);
        EXPECT_GT(got, 709.0);  // really beyond double range
        EXPECT_NEAR(got, want, 1e-11 * want) << "n " << n;
        // Unshifted direct evaluation overflows.
        EXPECT_FALSE(std::isfinite(direct_log_mean_trace(M, n)));
        EXPECT_NEAR(pldr::dag_term(X.data(), n, DagMode::EXACT), want, 1e-11 * want);
        // The float32 reference path gives inf (as the reference does).
        EXPECT_TRUE(std::isinf(pldr::dag_term(X.data(), n, DagMode::REFERENCE_F32)));
    }
}

TEST(DagExact, TinyEntriesKeepRelativeAccuracy) {
    // Entries ~1e-9: M ~1e-18, dag = log1p(tr(expm(M) − I)/n) ~ 1e-18; a naive log(tr/n)
    // would give exactly 0.
    std::mt19937_64 rng(3);
    for (int64_t n : {3, 8, 64}) {
        Mat X = random_matrix(n, rng, 0.5e-9, 2e-9);
        long double trM = 0, trM2 = 0;
        Mat M(X.size());
        for (size_t e = 0; e < X.size(); ++e) M[e] = X[e] * X[e];
        for (int64_t i = 0; i < n; ++i) {
            trM += M[i * n + i];
            for (int64_t j = 0; j < n; ++j) trM2 += (long double)M[i * n + j] * M[j * n + i];
        }
        const double want = double((trM + trM2 / 2) / n);  // higher terms ~1e-54
        EXPECT_NEAR(pldr::dag_term(X.data(), n, DagMode::EXACT), want, 1e-14 * want);
        EXPECT_GT(want, 0.0);
    }
    // Zero matrix and nilpotent M: value 0 and gradient 0 (sub-gradient of |·| at 0).
    const int64_t n = 4;
    Mat Z(n * n, 0.0), dZ(n * n, 0.0);
    EXPECT_EQ(pldr::dag_term(Z.data(), n, DagMode::EXACT, dZ.data()), 0.0);
    for (double g : dZ) EXPECT_EQ(g, 0.0);
    Mat U(n * n, 0.0), dU(n * n, 0.0);
    for (int i = 0; i < n; ++i)
        for (int j = i + 1; j < n; ++j) U[i * n + j] = 2.0 + i + j;
    EXPECT_EQ(pldr::dag_term(U.data(), n, DagMode::EXACT, dU.data()), 0.0);
    for (double g : dU) EXPECT_EQ(g, 0.0);
}

TEST(DagExact, NonFiniteInputGivesNaN) {
    const int64_t n = 3;
    Mat X(n * n, 0.5);
    X[4] = std::numeric_limits<double>::infinity();
    EXPECT_TRUE(std::isnan(pldr::dag_term(X.data(), n, DagMode::EXACT)));
}

// ---------------------------------------------------------------------------------------------
// Gradients

Mat fd_grad(const Mat& X0, int64_t n, DagMode mode, double step_rel) {
    double mx = 0;
    for (double x : X0) mx = std::max(mx, std::fabs(x));
    const double h = step_rel * mx;
    Mat X = X0, g(X0.size());
    for (size_t e = 0; e < X.size(); ++e) {
        X[e] = X0[e] + h;
        const double fp = pldr::dag_term(X.data(), n, mode);
        X[e] = X0[e] - h;
        const double fm = pldr::dag_term(X.data(), n, mode);
        X[e] = X0[e];
        g[e] = (fp - fm) / (2 * h);
    }
    return g;
}

Mat analytic_grad(const Mat& X, int64_t n, DagMode mode, double scale = 1.0) {
    Mat g(X.size(), 0.0);
    pldr::dag_term(X.data(), n, mode, g.data(), scale);
    return g;
}

// Test matrices: uniform positive (A_LM-like), signed (G_LM-like, entries up to ~3), all tiny
// (~1e-9, A_LM floor), a mix of ~1e-9 and ~3 entries, entries ~3, and a matrix whose trace
// exponential overflows double.
std::vector<Mat> grad_cases(int64_t n, std::mt19937_64& rng) {
    std::vector<Mat> cs;
    cs.push_back(random_matrix(n, rng, 0.0, 1.0));
    Mat g = random_matrix(n, rng, -3.0, 3.0);
    for (auto& x : g) x /= std::sqrt(double(n));  // keep tr expm within range for the ref
    cs.push_back(g);
    cs.push_back(random_matrix(n, rng, 1e-9, 3e-9));
    Mat mix = random_matrix(n, rng, 1e-9, 3e-9);
    std::uniform_int_distribution<int> coin(0, 3);
    for (auto& x : mix)
        if (coin(rng) == 0) x = 3.0 * (0.5 + x * 1e8);  // ~1.5..4.5
    cs.push_back(mix);
    cs.push_back(random_matrix(n, rng, 2.5, 3.5));  // entries ~3: tr expm ~ e^{9n}
    // Perron root ~1000: tr expm(X∘X) ~ e^1000, beyond double range.
    Mat huge = random_matrix(n, rng, 0.8, 1.2);
    for (auto& x : huge) x *= std::sqrt(1000.0 / double(n));
    cs.push_back(huge);
    return cs;
}

TEST(DagGrad, ExactMatchesFiniteDifferences) {
    std::mt19937_64 rng(5);
    double worst = 0;
    for (int64_t n : {3, 8, 16}) {
        int c = 0;
        for (const Mat& X : grad_cases(n, rng)) {
            const Mat fd = fd_grad(X, n, DagMode::EXACT, 1e-6);
            const Mat an = analytic_grad(X, n, DagMode::EXACT);
            const double r = rel_err(an, fd);
            worst = std::max(worst, r);
            EXPECT_LT(r, 1e-6) << "n " << n << " case " << c;
            ++c;
        }
    }
    std::printf("[dag] EXACT grad vs central differences: worst rel %.3g\n", worst);
}

TEST(DagGrad, AccumulatesAndScales) {
    std::mt19937_64 rng(9);
    const int64_t n = 8, count = 3;
    Mat Xs;
    for (int c = 0; c < count; ++c) {
        Mat X = random_matrix(n, rng, 0.0, 0.8);
        Xs.insert(Xs.end(), X.begin(), X.end());
    }
    for (DagMode mode : {DagMode::EXACT, DagMode::REFERENCE_F32}) {
        Mat dX(Xs.size(), 1.0);
        const double scale = 0.3;
        const double mean = pldr::dag_mean(Xs.data(), count, n, mode, dX.data(), scale);
        double sum = 0;
        for (int c = 0; c < count; ++c) {
            const Mat X(Xs.begin() + c * n * n, Xs.begin() + (c + 1) * n * n);
            sum += pldr::dag_term(X.data(), n, mode);
            const Mat g = analytic_grad(X, n, DagMode::EXACT, scale / count);
            Mat got(g.size());
            for (size_t e = 0; e < g.size(); ++e) got[e] = dX[c * n * n + e] - 1.0;
            EXPECT_LT(rel_err(got, g), mode == DagMode::EXACT ? 1e-14 : 2e-5);
        }
        EXPECT_NEAR(mean, sum / count, (mode == DagMode::EXACT ? 1e-15 : 1e-6) * mean);
    }
    // float storage in EXACT mode: same as double to float precision.
    Mat X = random_matrix(n, rng, 0.0, 0.8);
    std::vector<float> Xf(X.begin(), X.end()), dXf(X.size(), 0.0f);
    const double vf = pldr::dag_term<float>(Xf.data(), n, DagMode::EXACT, dXf.data());
    const Mat Xr(Xf.begin(), Xf.end());
    EXPECT_NEAR(vf, pldr::dag_term(Xr.data(), n, DagMode::EXACT), 1e-15);
    EXPECT_LT(rel_err(dXf, analytic_grad(Xr, n, DagMode::EXACT)), 1e-6);
}

// ---------------------------------------------------------------------------------------------
// REFERENCE_F32 vs EXACT

TEST(DagReference, AgreesWithExactOnModerateMatrices) {
    std::mt19937_64 rng(13);
    double worst_v = 0, worst_g = 0;
    for (int64_t n : {3, 8, 16, 64}) {
        for (int rep = 0; rep < 3; ++rep) {
            std::vector<Mat> cs;
            cs.push_back(random_matrix(n, rng, 0.0, 1.0));  // value ~ O(n·0.3): moderate
            Mat g = random_matrix(n, rng, -2.0, 2.0);
            for (auto& x : g) x /= std::sqrt(double(n));
            cs.push_back(g);
            for (const Mat& X0 : cs) {
                // Round X to float first so both modes see the same matrix.
                Mat X(X0.size());
                for (size_t e = 0; e < X.size(); ++e) X[e] = double(float(X0[e]));
                const double ve = pldr::dag_term(X.data(), n, DagMode::EXACT);
                const double vr = pldr::dag_term(X.data(), n, DagMode::REFERENCE_F32);
                // float32 tr/dk near 1 has an absolute rounding of ~1.2e-7 that log passes
                // through unchanged, so small dag values get an absolute floor.
                const double rv = std::fabs(vr - ve) / (ve + 0.25);
                worst_v = std::max(worst_v, rv);
                EXPECT_LT(rv, 1e-6) << "n " << n << " dag " << ve;
                const double rg = rel_err(analytic_grad(X, n, DagMode::REFERENCE_F32),
                                          analytic_grad(X, n, DagMode::EXACT));
                worst_g = std::max(worst_g, rg);
                EXPECT_LT(rg, 1e-5) << "n " << n;
            }
        }
    }
    std::printf(
        "[dag] REFERENCE_F32 vs EXACT: worst value |d|/(dag+0.25) %.3g, worst grad rel %.3g\n",
        worst_v, worst_g);
}

TEST(DagReference, GradientMatchesFiniteDifferenceOfReferenceValue) {
    // The REFERENCE_F32 value is float32, so the finite difference needs a large step; the
    // check is as tight as float noise allows.
    std::mt19937_64 rng(17);
    double worst = 0;
    for (int64_t n : {3, 8, 16}) {
        Mat X = random_matrix(n, rng, 0.2, 1.0);
        for (auto& x : X) x = double(float(x));
        const Mat fd = fd_grad(X, n, DagMode::REFERENCE_F32, 2e-3);
        const Mat an = analytic_grad(X, n, DagMode::REFERENCE_F32);
        const double r = rel_err(an, fd);
        worst = std::max(worst, r);
        EXPECT_LT(r, 5e-3) << "n " << n;
    }
    std::printf("[dag] REFERENCE_F32 grad vs FD of REFERENCE_F32 value: worst rel %.3g\n", worst);
}

TEST(DagReference, TinyAndSignConventions) {
    // All-tiny X: float32 trace rounds to exactly dk, log gives 0, sub-gradient 0 → zero grad.
    std::mt19937_64 rng(19);
    const int64_t n = 8;
    Mat X = random_matrix(n, rng, 1e-9, 2e-9);
    Mat g(X.size(), 0.0);
    EXPECT_EQ(pldr::dag_term(X.data(), n, DagMode::REFERENCE_F32, g.data()), 0.0);
    for (double v : g) EXPECT_EQ(v, 0.0);
}

// ---------------------------------------------------------------------------------------------
// Golden: loss.dagA / dagAp / dagG of every DAG fixture (mean over layer, batch, head).

// The register-tiled float32 product (AVX2 + FMA) is the plain loop's chain of fused
// multiply-adds per element, bit for bit, at every size the tiles split differently (4-row
// blocks and single rows, 16- and 8-column tiles, scalar columns); operands with signed zeros,
// a NaN and an infinity propagate the same way.
TEST(DagMatmul, TiledEqualsThePlainFmaLoopBitForBit) {
    if (!pldr::qlinear::cpu_has_avx2()) GTEST_SKIP() << "no AVX2 + FMA";
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    for (int64_t n : {1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 24, 31, 33, 64, 70}) {
        std::vector<float> A(size_t(n * n)), B(size_t(n * n)), want(size_t(n * n)),
            got(size_t(n * n), -7.0f);
        for (auto& a : A) a = u(rng);
        for (auto& b : B) b = u(rng) * 1e-3f;
        A[0] = -0.0f;
        if (n > 5) {
            B[size_t(n + 2)] = std::nanf("");
            A[size_t(3 * n + 1)] = INFINITY;
        }
        pldr::dag_detail::matmul_impl<true>(A.data(), B.data(), want.data(), n);
        ASSERT_TRUE(pldr::dag_detail::matmul_fma_tiled(A.data(), B.data(), got.data(), n));
        for (int64_t i = 0; i < n * n; ++i) {
            const float w = want[size_t(i)], g = got[size_t(i)];
            EXPECT_TRUE(std::memcmp(&w, &g, sizeof w) == 0 || (std::isnan(w) && std::isnan(g)))
                << "n " << n << " element " << i << ": " << g << " vs " << w;
        }
    }
}

TEST(DagGolden, DagLossValues) {
    GOLDEN_USE(golden::set().steps, "single-step");
    int sets = 0;
    for (const auto& fx : golden::set().steps) {
        if (!fx.dag()) continue;
        ++sets;
        const int64_t L = fx.side["config"]["num_layers"].get<int64_t>();
        for (const char* dtype : {"f64", "f32"}) {
            pldr::SafetensorsFile f(fx.path(dtype));
            const struct {
                const char* fam;
                const char* loss;
            } fams[] = {{"A_LM", "loss.dagA"}, {"Ap", "loss.dagAp"}, {"G_LM", "loss.dagG"}};
            for (const auto& fm : fams) {
                Mat X;
                int64_t n = 0;
                for (int64_t l = 0; l < L; ++l) {
                    const auto t = f.read<double>("fwd.layer" + std::to_string(l) + "." + fm.fam);
                    n = t.dim(-1);
                    X.insert(X.end(), t.data.begin(), t.data.end());
                }
                const int64_t count = int64_t(X.size()) / (n * n);
                const double want = f.read<double>(fm.loss)[0];
                const double ref = pldr::dag_mean(X.data(), count, n, DagMode::REFERENCE_F32);
                const double ex = pldr::dag_mean(X.data(), count, n, DagMode::EXACT);
                const double rr = std::fabs(ref - want) / want, re = std::fabs(ex - want) / want;
                std::printf(
                    "[dag golden %s] %-10s want %.9g  REFERENCE_F32 %.9g (rel %.2e)  "
                    "EXACT %.9g (rel %.2e)\n",
                    dtype, fm.loss, want, ref, rr, ex, re);
                EXPECT_LT(rr, 1e-6) << dtype << " " << fm.loss;
                EXPECT_LT(re, 1e-5) << dtype << " " << fm.loss;
            }
        }
    }
    // A set without a DAG fixture (config.kind "dag") has nothing for this test.
    if (sets == 0) GTEST_SKIP() << "the golden set " << golden::dir() << " has no DAG fixture";
}

}  // namespace
