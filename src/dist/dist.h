// The process group for data-parallel training (docs/distributed.md). A small interface over
// MPI: rank, size, broadcast, reduce-scatter, all-gather, small all-reduces and a barrier, every
// collective non-blocking underneath and waited on with a deadline, so that a rank that died or
// hangs makes the others stop with a clear message (MPI_Abort) instead of hanging.
//
// Two implementations: dist_mpi.cpp (CMake option PLDR_MPI, ON when OpenMPI is found) and
// dist_single.cpp (a trivial single rank). In the MPI build, MPI is initialised only when the
// process was started by a launcher (mpirun, srun: it sets OMPI_COMM_WORLD_SIZE, PMIX_RANK or
// PMI_SIZE); a plain run is a single rank and never touches MPI, exactly as the non-MPI build.
#pragma once
#include <cstdint>
#include <string>

namespace pldr::dist {

struct World {
    int rank = 0;        // this process
    int size = 1;        // processes in the job
    int local_rank = 0;  // among the processes on this host
    int local_size = 1;
    bool mpi = false;  // MPI initialised (started by a launcher)
    int threads = 0;   // OpenMP threads of this rank (set at init: OMP_NUM_THREADS if given, else
                       // max(1, cores / local_size), so the host's cores are not oversubscribed)
    int cores = 0;     // cores of this host (std::thread::hardware_concurrency)
    int affinity = 0;  // cores this process may run on (its CPU affinity mask; mpirun may bind)
};

// The job this process belongs to; initialises MPI on first call when launched by mpirun/srun
// (MPI_Finalize runs at exit). Cheap after the first call.
const World& world();
inline bool is_root() {
    return world().rank == 0;
}
// True when this binary was built with MPI support.
bool built_with_mpi();

// Deadline for every collective, in seconds (default 300, or PLDR_DIST_TIMEOUT from the
// environment). A collective not complete by then aborts the whole job with a message naming
// the collective and the rank.
void set_timeout(double seconds);
double timeout();

// Prints "pldr: error: rank R of N: <msg>" on stderr and stops every rank (MPI_Abort, exit
// code 1). In a single-rank run it throws pldr::Error(msg) instead.
[[noreturn]] void abort_all(const std::string& msg);

// Collectives; all ranks must call them in the same order. With size 1 they are copies or
// no-ops. `what` names the operation in a timeout message.
void broadcast(void* data, int64_t bytes, int root, const char* what);
void broadcast(std::string& s, int root, const char* what);  // any length
void barrier(const char* what);

// Element counts of the shards of a buffer of n elements: rank r owns
// [shard_begin(n, r), shard_begin(n, r + 1)); contiguous, sizes differ by at most 1.
int64_t shard_begin(int64_t n, int r);

// in: n elements on every rank; out: this rank's shard of the element-wise sum over ranks.
template <typename T>
void reduce_scatter_sum(const T* in, T* out, int64_t n, const char* what);
// in: this rank's shard (shard_begin layout); out: the n elements of every rank's shard.
// in may point into out at this rank's offset.
template <typename T>
void allgather(const T* in, T* out, int64_t n, const char* what);
// Gathers the shards of n elements to `out` on rank 0 (out is ignored elsewhere).
template <typename T>
void gather_to_root(const T* in, T* out, int64_t n, const char* what);
// Rank 0's n elements `in` scattered into this rank's shard `out`.
template <typename T>
void scatter_from_root(const T* in, T* out, int64_t n, const char* what);
// in: k values per rank; out: k·size values in rank order (every rank gets all).
void allgather_values(const double* in, double* out, int64_t k, const char* what);
// Logical OR over ranks.
bool any(bool flag, const char* what);

}  // namespace pldr::dist
