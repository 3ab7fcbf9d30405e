// The MPI process group (see dist.h). Every collective is the non-blocking MPI-3 form, waited on
// by polling MPI_Test against a deadline; past it, the rank prints which collective timed out
// and calls MPI_Abort, which stops every rank of the job.
#include <mpi.h>
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "dist/dist.h"

namespace pldr::dist {

namespace {

double g_timeout = [] {
    const char* e = std::getenv("PLDR_DIST_TIMEOUT");
    if (e && *e) {
        const double v = std::atof(e);
        if (v > 0) return v;
    }
    return 300.0;
}();

void finalize_at_exit() {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
}

World init() {
    World w;
    w.cores = int(std::max(1u, std::thread::hardware_concurrency()));
    cpu_set_t set;
    CPU_ZERO(&set);
    w.affinity = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : w.cores;
    const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") ||
                          std::getenv("PMI_SIZE") || std::getenv("PMI_RANK");
    if (!launched) {
        w.threads = omp_get_max_threads();
        return w;
    }
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        std::fprintf(stderr, "pldr: error: MPI_Init failed\n");
        std::exit(1);
    }
    std::atexit(finalize_at_exit);
    MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &w.size);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w.rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &w.local_rank);
    MPI_Comm_size(local, &w.local_size);
    MPI_Comm_free(&local);
    w.mpi = true;
    const char* omp = std::getenv("OMP_NUM_THREADS");
    if (omp && *omp) {
        w.threads = omp_get_max_threads();
    } else {
        // cores / ranks on this host, but no more than the cores this rank is bound to.
        w.threads = std::max(1, std::min(w.affinity, w.cores / std::max(1, w.local_size)));
        omp_set_num_threads(w.threads);
    }
    return w;
}

template <typename T>
MPI_Datatype mpi_type() {
    if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
    if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
}

// Waits for `req`, spinning briefly and then polling every 50 µs, until the deadline.
void wait(MPI_Request& req, const char* what) {
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    int done = 0;
    for (int64_t polls = 0;; ++polls) {
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (done) return;
        if (polls > 2000) std::this_thread::sleep_for(std::chrono::microseconds(50));
        if ((polls & 63) == 0 &&
            std::chrono::duration<double>(clock::now() - t0).count() > g_timeout)
            abort_all(cat(what, " did not complete within ", g_timeout,
                          " s (another rank failed, was killed or hangs; PLDR_DIST_TIMEOUT / "
                          "--dist-timeout sets the limit)"));
    }
}

int checked_int(int64_t n, const char* what) {
    if (n > INT_MAX) abort_all(cat(what, ": ", n, " elements per rank exceed MPI's int count"));
    return int(n);
}

// Counts and displacements of the shard layout of n elements.
void shard_layout(int64_t n, std::vector<int>& counts, std::vector<int>& displs, const char* what) {
    const int P = world().size;
    counts.resize(size_t(P));
    displs.resize(size_t(P));
    for (int r = 0; r < P; ++r) {
        displs[size_t(r)] = checked_int(shard_begin(n, r), what);
        counts[size_t(r)] = checked_int(shard_begin(n, r + 1) - shard_begin(n, r), what);
    }
}

}  // namespace

const World& world() {
    static const World w = init();
    return w;
}

bool built_with_mpi() {
    return true;
}

void set_timeout(double seconds) {
    PLDR_REQUIRE(seconds > 0, "the collective timeout must be > 0 seconds (got ", seconds, ")");
    g_timeout = seconds;
}

double timeout() {
    return g_timeout;
}

void abort_all(const std::string& msg) {
    const World& w = world();
    if (!w.mpi) throw Error(msg);
    std::fprintf(stderr, "pldr: error: rank %d of %d: %s\n", w.rank, w.size, msg.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);
}

void broadcast(void* data, int64_t bytes, int root, const char* what) {
    if (!world().mpi || world().size == 1 || bytes == 0) return;
    constexpr int64_t kPiece = int64_t(1) << 30;
    for (int64_t off = 0; off < bytes; off += kPiece) {
        MPI_Request req;
        MPI_Ibcast(static_cast<char*>(data) + off, int(std::min(kPiece, bytes - off)), MPI_BYTE,
                   root, MPI_COMM_WORLD, &req);
        wait(req, what);
    }
}

void broadcast(std::string& s, int root, const char* what) {
    if (!world().mpi || world().size == 1) return;
    int64_t n = int64_t(s.size());
    broadcast(&n, sizeof n, root, what);
    s.resize(size_t(n));
    broadcast(s.data(), n, root, what);
}

void barrier(const char* what) {
    if (!world().mpi || world().size == 1) return;
    MPI_Request req;
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    wait(req, what);
}

int64_t shard_begin(int64_t n, int r) {
    const int64_t P = world().size;
    if (r <= 0) return 0;
    if (r >= P) return n;
    return int64_t(r) * (n / P) + std::min<int64_t>(r, n % P);
}

template <typename T>
void reduce_scatter_sum(const T* in, T* out, int64_t n, const char* what) {
    if (!world().mpi || world().size == 1) {
        if (in != out) std::copy(in, in + n, out);
        return;
    }
    std::vector<int> counts, displs;
    shard_layout(n, counts, displs, what);
    MPI_Request req;
    MPI_Ireduce_scatter(in, out, counts.data(), mpi_type<T>(), MPI_SUM, MPI_COMM_WORLD, &req);
    wait(req, what);
}

template <typename T>
void allgather(const T* in, T* out, int64_t n, const char* what) {
    if (!world().mpi || world().size == 1) {
        if (in != out) std::copy(in, in + n, out);
        return;
    }
    std::vector<int> counts, displs;
    shard_layout(n, counts, displs, what);
    const int r = world().rank;
    const void* send = in == out + displs[size_t(r)] ? MPI_IN_PLACE : in;
    MPI_Request req;
    MPI_Iallgatherv(send, counts[size_t(r)], mpi_type<T>(), out, counts.data(), displs.data(),
                    mpi_type<T>(), MPI_COMM_WORLD, &req);
    wait(req, what);
}

template <typename T>
void gather_to_root(const T* in, T* out, int64_t n, const char* what) {
    if (!world().mpi || world().size == 1) {
        if (in != out) std::copy(in, in + n, out);
        return;
    }
    std::vector<int> counts, displs;
    shard_layout(n, counts, displs, what);
    const int r = world().rank;
    const void* send = r == 0 && in == out ? MPI_IN_PLACE : in;
    MPI_Request req;
    MPI_Igatherv(send, counts[size_t(r)], mpi_type<T>(), out, counts.data(), displs.data(),
                 mpi_type<T>(), 0, MPI_COMM_WORLD, &req);
    wait(req, what);
}

template <typename T>
void scatter_from_root(const T* in, T* out, int64_t n, const char* what) {
    if (!world().mpi || world().size == 1) {
        if (in != out) std::copy(in, in + n, out);
        return;
    }
    std::vector<int> counts, displs;
    shard_layout(n, counts, displs, what);
    const int r = world().rank;
    MPI_Request req;
    MPI_Iscatterv(in, counts.data(), displs.data(), mpi_type<T>(), out, counts[size_t(r)],
                  mpi_type<T>(), 0, MPI_COMM_WORLD, &req);
    wait(req, what);
}

void allgather_values(const double* in, double* out, int64_t k, const char* what) {
    if (!world().mpi || world().size == 1) {
        std::copy(in, in + k, out);
        return;
    }
    MPI_Request req;
    MPI_Iallgather(in, checked_int(k, what), MPI_DOUBLE, out, int(k), MPI_DOUBLE, MPI_COMM_WORLD,
                   &req);
    wait(req, what);
}

bool any(bool flag, const char* what) {
    if (!world().mpi || world().size == 1) return flag;
    int in = flag ? 1 : 0, out = 0;
    MPI_Request req;
    MPI_Iallreduce(&in, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &req);
    wait(req, what);
    return out != 0;
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
