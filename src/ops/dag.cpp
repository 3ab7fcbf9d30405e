// DAG regularizer (see dag.h, docs/dag.md): the per-instance value and gradient in either mode,
// and the mean over instances. The modes' kernels: ops/dag_exact.cpp (EXACT, float64) and
// ops/dag_torch.cpp (REFERENCE_F32, torch's float32 matrix exponential).
#include "ops/dag.h"

#include <vector>

#include "core/error.h"
#include "ops/dag_detail.h"

namespace pldr {

using namespace dag_detail;

template <typename T>
double dag_term(const T* X, int64_t n, DagMode mode, T* dX, double scale) {
    PLDR_REQUIRE(n >= 1, "dag_term: matrix size must be >= 1, got ", n);
    if (mode == DagMode::EXACT) return dag_exact_one(X, n, dX, scale);
    return double(dag_ref_one(X, n, dX, float(scale)));
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
        double sum = 0;
        for (int64_t c = 0; c < count; ++c) sum += vals[c];
        return sum / double(count);
    }
    const float seed = float(scale) / float(count);
#pragma omp parallel for schedule(dynamic, 1) if (count > 1)
    for (int64_t c = 0; c < count; ++c)
        vals[c] = double(dag_ref_one(X + c * nn, n, dX ? dX + c * nn : nullptr, seed));
    std::vector<float> fv(vals.begin(), vals.end());
    return double(torch_sum_f32(fv.data(), count, 1) / float(count));
}

template double dag_term<float>(const float*, int64_t, DagMode, float*, double);
template double dag_term<double>(const double*, int64_t, DagMode, double*, double);
template double dag_mean<float>(const float*, int64_t, int64_t, DagMode, float*, double);
template double dag_mean<double>(const double*, int64_t, int64_t, DagMode, double*, double);

}  // namespace pldr
