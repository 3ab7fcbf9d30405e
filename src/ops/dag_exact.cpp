// The DAG regularizer's EXACT mode (see dag.h): log(tr expm(M)/n) for nonnegative M in double,
// overflow-safe and accurate at both ends of the range, with the analytic gradient
// expm(M)ᵀ / tr expm(M). docs/dag.md has the method.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "ops/dag.h"
#include "ops/dag_detail.h"

namespace pldr {

using namespace dag_detail;

namespace {

// ------------------------------------------------------------------------------------------
// EXACT mode core: log(tr expm(M)/n) for nonnegative M, plus expm(M)ᵀ/tr expm(M).

constexpr double kTaylorTheta = 1.0;  // ‖A‖₁ bound after scaling; tail ≤ θ²¹/21!·e^θ ≈ 1e-19
constexpr int kTaylorBlocks = 5;  // at most degree 4·5 = 20, Paterson–Stockmeyer in A⁴
constexpr int kRenormExp = 400;   // keep stored entries below 2^400 between squarings

double max_entry(const double* A, int64_t nn) {
    double m = 0;
    for (int64_t e = 0; e < nn; ++e) m = std::max(m, A[e]);
    return m;
}

}  // namespace

double log_mean_trace_expm_nonneg(const double* M, int64_t n, double* P) {
    PLDR_CHECK(n >= 1);
    const int64_t nn = n * n;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for (int64_t e = 0; e < nn; ++e) {
        if (!std::isfinite(M[e])) {
            if (P) std::fill(P, P + nn, nan);
            return nan;
        }
        PLDR_REQUIRE(M[e] >= 0.0, "log_mean_trace_expm_nonneg: negative entry ", M[e], " at ", e);
    }
    // Shift by the smallest diagonal entry: M − sI stays nonnegative, so every term below is a
    // sum of nonnegative numbers (no cancellation), and log tr expm(M) = s + log tr expm(M − sI).
    double s = M[0];
    for (int64_t i = 1; i < n; ++i) s = std::min(s, M[i * n + i]);
    std::vector<double> A(M, M + nn);
    for (int64_t i = 0; i < n; ++i) A[i * n + i] -= s;  // exact zero on the minimizing entry
    for (int64_t i = 0; i < n; ++i) A[i * n + i] = std::max(A[i * n + i], 0.0);

    // Scale so that ‖A‖₁ ≤ θ (division by a power of two: exact).
    double norm = 0;
    for (int64_t j = 0; j < n; ++j) {
        double c = 0;
        for (int64_t i = 0; i < n; ++i) c += A[i * n + j];
        norm = std::max(norm, c);
    }
    int k = 0;
    if (norm > kTaylorTheta) {
        int e;
        std::frexp(norm / kTaylorTheta, &e);  // norm/θ < 2^e
        k = e;
        for (int64_t i = 0; i < nn; ++i) A[i] = std::ldexp(A[i], -k);
    }

    // Φ = expm(A) − I = Σ_{j=1..4b} A^j / j!, Paterson–Stockmeyer with blocks in A⁴:
    // Φ = B0 + A⁴(B1 + A⁴(B2 + A⁴(B3 + A⁴ B4))), B_i = Σ_{r=1..4} A^r / (4i + r)!.
    // The number of blocks b is the smallest whose relative truncation bound
    // ν^{4b}·e/(4b+1)! (ν = ‖A‖₁ ≤ 1; Φ ≥ A entrywise) is below 2^-56. Besides saving work for
    // small ν, this keeps the high powers of tiny matrices (entries ~1e-18) out of the
    // subnormal range, where arithmetic is very slow.
    const double nu = std::ldexp(norm, -k);
    int blocks = 1;
    for (double fact = 120.0; blocks < kTaylorBlocks; ++blocks) {
        if (std::pow(nu, 4.0 * blocks) * std::exp(1.0) / fact <= std::ldexp(1.0, -56)) break;
        for (int j = 4 * blocks + 2; j <= 4 * blocks + 5; ++j) fact *= j;
    }
    std::vector<double> pw(size_t(4 * nn));
    double* Pw[4] = {A.data(), pw.data() + nn, pw.data() + 2 * nn, pw.data() + 3 * nn};
    matmul(Pw[0], Pw[0], Pw[1], n);
    matmul(Pw[1], Pw[0], Pw[2], n);
    matmul(Pw[1], Pw[1], Pw[3], n);
    double inv_fact[4 * kTaylorBlocks + 1];
    inv_fact[0] = 1;
    for (int j = 1; j <= 4 * kTaylorBlocks; ++j) inv_fact[j] = inv_fact[j - 1] / j;
    std::vector<double> Phi(static_cast<size_t>(nn), 0.0), Bi(static_cast<size_t>(nn)),
        tmp(static_cast<size_t>(nn));
    for (int b = blocks - 1; b >= 0; --b) {
        std::fill(Bi.begin(), Bi.end(), 0.0);
        for (int r = 1; r <= 4; ++r) {
            const double c = inv_fact[4 * b + r];
            const double* Ar = Pw[r - 1];
            for (int64_t e = 0; e < nn; ++e) Bi[e] += c * Ar[e];
        }
        if (b == blocks - 1) {
            Phi = Bi;
        } else {
            matmul(Pw[3], Phi.data(), tmp.data(), n);
            for (int64_t e = 0; e < nn; ++e) Phi[e] = Bi[e] + tmp[e];
        }
    }

    // Undo the scaling: k squarings. While entries are moderate we keep Φ = E − I and square as
    // Φ ← Φ² + 2Φ (exact relative accuracy for tiny Φ). When entries grow large we switch to
    // E = I + Φ stored as 2^L · F, renormalising F by powers of two (no rounding) after each
    // squaring, so nothing overflows however large tr expm(M) is. The renormalisation must also
    // act when F shrinks: it leaves F's largest entry in [0.5, 1), and when F's spectral radius ρ
    // is below 1 (e.g. M dominated by one large diagonal entry), the following squarings shrank F
    // like ρ^(2^p) until it underflowed to 0, giving log(0), dag = |−inf| = inf and a NaN
    // gradient for a finite M.
    bool expm1_form = true;
    double L = 0;  // log2 of the scale of F (integer-valued)
    std::vector<double>& F = Phi;
    const double big = std::ldexp(1.0, kRenormExp);
    for (int p = 0; p < k; ++p) {
        if (expm1_form && max_entry(F.data(), nn) > big) {
            for (int64_t i = 0; i < n; ++i) F[i * n + i] += 1.0;
            expm1_form = false;
        }
        if (!expm1_form) {
            const double mx = max_entry(F.data(), nn);
            if (mx > big || (mx > 0 && mx < 1.0 / big)) {
                int e;
                std::frexp(mx, &e);
                for (int64_t i = 0; i < nn; ++i) F[i] = std::ldexp(F[i], -e);
                L += e;
            }
        }
        matmul(F.data(), F.data(), tmp.data(), n);
        if (expm1_form) {
            for (int64_t e = 0; e < nn; ++e) F[e] = tmp[e] + 2.0 * F[e];
        } else {
            std::copy(tmp.begin(), tmp.end(), F.begin());
            L *= 2;
        }
    }

    double result;
    const double dn = double(n);
    if (expm1_form) {
        double h = 0;
        for (int64_t i = 0; i < n; ++i) h += F[i * n + i];
        result = s + std::log1p(h / dn);
        if (P) {
            const double tr = dn + h;
            for (int64_t i = 0; i < n; ++i)
                for (int64_t j = 0; j < n; ++j)
                    P[i * n + j] = (F[j * n + i] + (i == j ? 1.0 : 0.0)) / tr;
        }
    } else {
        double tr = 0;
        for (int64_t i = 0; i < n; ++i) tr += F[i * n + i];
        result = s + (L * std::log(2.0) + (std::log(tr) - std::log(dn)));
        if (P) {
            for (int64_t i = 0; i < n; ++i)
                for (int64_t j = 0; j < n; ++j) P[i * n + j] = F[j * n + i] / tr;
        }
    }
    return result;
}

namespace dag_detail {

template <typename T>
double dag_exact_one(const T* X, int64_t n, T* dX, double scale) {
    const int64_t nn = n * n;
    std::vector<double> M(static_cast<size_t>(nn)), P;
    for (int64_t e = 0; e < nn; ++e) {
        const double x = double(X[e]);
        M[e] = x * x;
    }
    if (dX) P.resize(static_cast<size_t>(nn));
    const double v = log_mean_trace_expm_nonneg(M.data(), n, dX ? P.data() : nullptr);
    if (dX) {
        // d|v|/dX = sign(v) · 2·X ∘ (expm(M)ᵀ / tr expm(M)); sign(0) = 0.
        const double sg = v > 0 ? 1.0 : (v < 0 ? -1.0 : (std::isnan(v) ? v : 0.0));
        const double g = scale * sg * 2.0;
        for (int64_t e = 0; e < nn; ++e) dX[e] += T(g * double(X[e]) * P[e]);
    }
    return std::fabs(v);
}

template double dag_exact_one<float>(const float*, int64_t, float*, double);
template double dag_exact_one<double>(const double*, int64_t, double*, double);

}  // namespace dag_detail

}  // namespace pldr
