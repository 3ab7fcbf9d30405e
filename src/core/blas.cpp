// The BLAS kernel set in use (blas.h).
#include "core/blas.h"

namespace pldr {

std::string blas_kernels() {
    return std::string("OpenBLAS ") + openblas_get_corename();
}

}  // namespace pldr
