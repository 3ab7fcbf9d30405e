// The DAG regularizer's EXACT mode (see dag.h) on the CPU: log(tr expm(M)/n) for nonnegative M
// in double, overflow-safe and accurate at both ends of the range, with the analytic gradient
// expm(M)ᵀ / tr expm(M): the shared algorithm of ops/dag_expm.h on one thread. docs/dag.md has
// the method.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "ops/dag.h"
#include "ops/dag_detail.h"

namespace pldr {

using namespace dag_detail;

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
    HostEx<double> ex(n);
    return log_mean_trace_expm_steps(ex, M, n, P);
}

namespace dag_detail {

template <typename T>
double dag_exact_one(const T* X, int64_t n, T* dX, double scale) {
    HostEx<double> ex(n);
    return dag_exact_instance(ex, X, n, dX, scale);
}

template double dag_exact_one<float>(const float*, int64_t, float*, double);
template double dag_exact_one<double>(const double*, int64_t, double*, double);

}  // namespace dag_detail

}  // namespace pldr
