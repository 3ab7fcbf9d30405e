// The OpenMP team size for one scope. ctest runs the suite with OMP_NUM_THREADS=1
// (tests/CMakeLists.txt), so a test of a loop that splits over the team asks for its threads.
#pragma once
#include <omp.h>

namespace pldr_test {

struct ScopedThreads {
    int before = omp_get_max_threads();
    explicit ScopedThreads(int n) { omp_set_num_threads(n); }
    ~ScopedThreads() { omp_set_num_threads(before); }
    ScopedThreads(const ScopedThreads&) = delete;
    ScopedThreads& operator=(const ScopedThreads&) = delete;
};

}  // namespace pldr_test
