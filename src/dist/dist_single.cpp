// The single-rank process group of a build without MPI (see dist.h).
#include <algorithm>
#include <cstdlib>
#include <thread>

#include <omp.h>

#include "core/error.h"
#include "dist/dist.h"

namespace pldr::dist {

namespace {
double g_timeout = 300;
}

const World& world() {
    static const World w = [] {
        World x;
        x.cores = int(std::max(1u, std::thread::hardware_concurrency()));
        x.threads = omp_get_max_threads();
        x.affinity = x.cores;
        return x;
    }();
    return w;
}

bool built_with_mpi() {
    return false;
}

void set_timeout(double seconds) {
    PLDR_REQUIRE(seconds > 0, "the collective timeout must be > 0 seconds (got ", seconds, ")");
    g_timeout = seconds;
}

double timeout() {
    return g_timeout;
}

void abort_all(const std::string& msg) {
    throw Error(msg);
}

void broadcast(void*, int64_t, int, const char*) {}
void broadcast(std::string&, int, const char*) {}
void barrier(const char*) {}

int64_t shard_begin(int64_t n, int r) {
    return r <= 0 ? 0 : n;
}

template <typename T>
void reduce_scatter_sum(const T* in, T* out, int64_t n, const char*) {
    if (in != out) std::copy(in, in + n, out);
}
template <typename T>
void allgather(const T* in, T* out, int64_t n, const char*) {
    if (in != out) std::copy(in, in + n, out);
}
template <typename T>
void gather_to_root(const T* in, T* out, int64_t n, const char*) {
    if (in != out) std::copy(in, in + n, out);
}
template <typename T>
void scatter_from_root(const T* in, T* out, int64_t n, const char*) {
    if (in != out) std::copy(in, in + n, out);
}

void allgather_values(const double* in, double* out, int64_t k, const char*) {
    std::copy(in, in + k, out);
}

bool any(bool flag, const char*) {
    return flag;
}

#define PLDR_DIST_INST(T)                                                    \
    template void reduce_scatter_sum<T>(const T*, T*, int64_t, const char*); \
    template void allgather<T>(const T*, T*, int64_t, const char*);          \
    template void gather_to_root<T>(const T*, T*, int64_t, const char*);     \
    template void scatter_from_root<T>(const T*, T*, int64_t, const char*);
PLDR_DIST_INST(float)
PLDR_DIST_INST(double)
#undef PLDR_DIST_INST

}  // namespace pldr::dist
