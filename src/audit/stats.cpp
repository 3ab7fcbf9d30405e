// Numerical helpers of the collapse audit (see stats.h).
#include "audit/stats.h"

#include <algorithm>
#include <cmath>

namespace pldr::audit {

double rms(const double* x, int64_t n) {
    if (n <= 0) return 0;
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += x[i] * x[i];
    return std::sqrt(s / double(n));
}

double mean(const double* x, int64_t n) {
    if (n <= 0) return 0;
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += x[i];
    return s / double(n);
}

namespace {
double rms_diff(const double* a, const double* b, int64_t n) {
    if (n <= 0) return 0;
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += (a[i] - b[i]) * (a[i] - b[i]);
    return std::sqrt(s / double(n));
}
}  // namespace

double eps_g(const double* x, const double* ref, int64_t n) {  // x = G_u, ref = G_c
    const double num = rms_diff(x, ref, n);
    if (num == 0) return 0;
    return num / rms(x, n);
}

double max_abs_diff(const double* a, const double* b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, std::abs(a[i] - b[i]));
    return m;
}

OrderParam order_param(const double* x1, const double* x2, int64_t n) {
    OrderParam r;
    const double num = rms_diff(x1, x2, n);
    if (num == 0) return r;
    r.rms = num / (0.5 * (rms(x1, n) + rms(x2, n)));
    r.signed_ = num / (0.5 * (std::abs(mean(x1, n)) + std::abs(mean(x2, n))));
    return r;
}

std::vector<double> singular_values(const double* M, int64_t m, int64_t n) {
    // One-sided Jacobi on the columns of U = M (or Mᵀ when m < n, so that U is tall).
    const bool tr = m < n;
    const int64_t rows = tr ? n : m, cols = tr ? m : n;
    std::vector<double> U(static_cast<size_t>(rows * cols));
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j)
            U[size_t(j * rows + i)] = tr ? M[j * n + i] : M[i * n + j];  // column-major
    for (int sweep = 0; sweep < 60; ++sweep) {
        bool rotated = false;
        for (int64_t p = 0; p < cols - 1; ++p) {
            for (int64_t q = p + 1; q < cols; ++q) {
                double* up = &U[size_t(p * rows)];
                double* uq = &U[size_t(q * rows)];
                double a = 0, b = 0, c = 0;
                for (int64_t i = 0; i < rows; ++i) {
                    a += up[i] * up[i];
                    b += uq[i] * uq[i];
                    c += up[i] * uq[i];
                }
                if (c == 0 || std::abs(c) <= 1e-15 * std::sqrt(a * b)) continue;
                rotated = true;
                const double zeta = (b - a) / (2 * c);
                const double t =
                    std::copysign(1.0, zeta) / (std::abs(zeta) + std::sqrt(1 + zeta * zeta));
                const double cs = 1 / std::sqrt(1 + t * t), sn = cs * t;
                for (int64_t i = 0; i < rows; ++i) {
                    const double x = up[i], y = uq[i];
                    up[i] = cs * x - sn * y;
                    uq[i] = sn * x + cs * y;
                }
            }
        }
        if (!rotated) break;
    }
    std::vector<double> sv(static_cast<size_t>(cols));
    for (int64_t j = 0; j < cols; ++j) {
        double s = 0;
        for (int64_t i = 0; i < rows; ++i) s += U[size_t(j * rows + i)] * U[size_t(j * rows + i)];
        sv[size_t(j)] = std::sqrt(s);
    }
    std::sort(sv.begin(), sv.end(), std::greater<>());
    return sv;
}

int64_t numerical_rank(const std::vector<double>& sv, double rel_tol) {
    if (sv.empty() || sv[0] == 0) return 0;
    const double tol = rel_tol * sv[0];
    int64_t r = 0;
    for (double s : sv) r += s > tol;
    return r;
}

Summary summarize(std::vector<double> v) {
    Summary s;
    s.count = int64_t(v.size());
    if (v.empty()) return s;
    std::sort(v.begin(), v.end());
    s.min = v.front();
    s.max = v.back();
    const size_t n = v.size();
    s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    return s;
}

}  // namespace pldr::audit
