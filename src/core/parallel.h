// Loops over independent iterations, on the OpenMP team when they are worth it and inline on the
// calling thread when not.
//
// Why not `#pragma omp parallel for if (cond)`: a region whose if clause is false still builds
// and tears down a team of one in libgomp, 1.3 µs per region on a 2-vCPU EPYC VM (measured, a
// loop of 64 additions). A decode step of the M config entered 61 such regions per token (the
// softmax of each head, the LayerNorms, the SwiGLU gate): a tenth of the step. These helpers
// only enter a region when the condition holds.
//
// The iterations must be independent: the result may not depend on which thread runs which.
// Inside an active region they run inline on the calling thread (no nested team).
#pragma once
#include <omp.h>

#include <cstdint>

namespace pldr {

// Work (in multiply-adds) below which a loop over heads stays on one thread: forking an OpenMP
// team costs microseconds, and on a loaded machine its spinning threads cost far more.
constexpr int64_t kParallelWork = 1 << 18;

// Whether a loop of n iterations asked to run `parallel` gets a team: not for one iteration,
// one thread, or inside an active region.
inline bool team_for(int64_t n, bool parallel) {
    return parallel && n > 1 && !omp_in_parallel() && omp_get_max_threads() > 1;
}

// f(i) for i in [0, n): split in equal contiguous ranges over the team (schedule(static)) when
// `parallel`, else in order on this thread.
template <typename F>
inline void parallel_for(int64_t n, bool parallel, F&& f) {
    if (team_for(n, parallel)) {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) f(i);
    } else {
        for (int64_t i = 0; i < n; ++i) f(i);
    }
}

// f(i, j) for i in [0, n0), j in [0, n1), as one index space of n0·n1 iterations (collapse(2)).
template <typename F>
inline void parallel_for_2d(int64_t n0, int64_t n1, bool parallel, F&& f) {
    if (n1 <= 0) return;
    parallel_for(n0 * n1, parallel, [&](int64_t k) { f(k / n1, k % n1); });
}

// Dynamically scheduled (one iteration per grab): for iterations of uneven cost.
template <typename F>
inline void parallel_for_dynamic(int64_t n, bool parallel, F&& f) {
    if (team_for(n, parallel)) {
#pragma omp parallel for schedule(dynamic, 1)
        for (int64_t i = 0; i < n; ++i) f(i);
    } else {
        for (int64_t i = 0; i < n; ++i) f(i);
    }
}

}  // namespace pldr
