// The DAG regularizer's torch-faithful mode (REFERENCE_F32, see dag.h) and the public expm() on
// the CPU: the shared algorithms of ops/dag_expm.h (torch.linalg.matrix_exp, Bader–Blanes–Casas,
// in float32 with the reference's coefficients, and its autograd backward) on one thread.
// docs/dag.md has the method.
#include <cmath>

#include "core/error.h"
#include "ops/dag.h"
#include "ops/dag_detail.h"

namespace pldr {

using namespace dag_detail;

namespace dag_detail {

// torch: abs(log(einsum('ii', matrix_exp(X*X)) / dk)) in float32, and its autograd backward with
// the incoming gradient `seed` (float32).
float dag_ref_value(float y) {
    return std::fabs(std::log(y));
}

template <typename T>
float dag_ref_one(const T* X, int64_t n, T* dX, float seed) {
    HostEx<float> ex(dX ? 2 * n : n);
    return dag_ref_value(dag_ref_instance(ex, X, n, dX, seed));
}

template float dag_ref_one<float>(const float*, int64_t, float*, float);
template float dag_ref_one<double>(const double*, int64_t, double*, float);

}  // namespace dag_detail

template <typename T>
void expm(const T* A, int64_t n, T* out) {
    PLDR_REQUIRE(n >= 1, "expm: matrix size must be >= 1, got ", n);
    PLDR_REQUIRE(A != out, "expm: out must not alias A");
    HostEx<T> ex(n);
    bbc_expm(ex, A, n, out, T8Flavor::CORRECT);
}

template void expm<float>(const float*, int64_t, float*);
template void expm<double>(const double*, int64_t, double*);

template <typename T>
void expm_taylor_polynomial(const T* A, int64_t n, int degree, T* out) {
    PLDR_REQUIRE(n >= 1 && A != out, "expm_taylor_polynomial: bad arguments");
    HostEx<T> ex(n);
    switch (degree) {
        case 1:
            return bbc_T1(ex, A, n, out);
        case 2:
            return bbc_T2(ex, A, n, out);
        case 4:
            return bbc_T4(ex, A, n, out);
        case 8:
            return bbc_T8(ex, A, n, out, T8Flavor::CORRECT);
    }
    fail("expm_taylor_polynomial: degree must be 1, 2, 4 or 8 (got ", degree, ")");
}

template void expm_taylor_polynomial<float>(const float*, int64_t, int, float*);
template void expm_taylor_polynomial<double>(const double*, int64_t, int, double*);

}  // namespace pldr
