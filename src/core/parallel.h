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

#include <algorithm>
#include <atomic>
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

// f(i) for i in [0, n) over the team: each thread runs its equal contiguous range in order (one
// stream through memory, as schedule(static) gives), and a thread that has finished its own range
// takes what remains of the others' from their ends, one iteration at a time. For
// bandwidth-bound loops whose threads do not run at the same pace (a VM's vCPUs, a core shared
// with other work): no thread then waits for another for more than one iteration. Each i runs
// exactly once; which thread runs it may differ from run to run.
template <typename F>
inline void parallel_for_balanced(int64_t n, bool parallel, F&& f) {
    constexpr int kMaxThreads = 64;
    const int nt = std::min(omp_get_max_threads(), kMaxThreads);
    if (!team_for(n, parallel) || n >= (int64_t(1) << 31)) {
        parallel_for(n, parallel, f);
        return;
    }
    // Thread t's range [lo, hi) as lo | hi << 32: the owner takes lo, a thief takes hi − 1.
    struct alignas(64) Range {
        std::atomic<uint64_t> v;
    };
    Range range[kMaxThreads];
    for (int t = 0; t < nt; ++t)
        range[t].v.store(uint64_t(n * t / nt) | uint64_t(n * (t + 1) / nt) << 32);
    auto take = [&](int t, bool front, int64_t* i) {
        uint64_t r = range[t].v.load();
        for (;;) {
            const int64_t lo = int64_t(r & 0xffffffffu), hi = int64_t(r >> 32);
            if (lo >= hi) return false;
            const uint64_t next = front ? uint64_t(lo + 1) | uint64_t(hi) << 32
                                        : uint64_t(lo) | uint64_t(hi - 1) << 32;
            if (range[t].v.compare_exchange_weak(r, next)) {
                *i = front ? lo : hi - 1;
                return true;
            }
        }
    };
#pragma omp parallel num_threads(nt)
    {
        const int t = omp_get_thread_num();  // a team smaller than nt leaves ranges to steal
        int64_t i = 0;
        while (take(t, true, &i)) f(i);
        for (int k = 1; k < nt; ++k)
            while (take((t + k) % nt, false, &i)) f(i);
    }
}

// f(r0, r1) on each thread of the team for its contiguous share of n rows, thread t of T taking
// [n·t/T, n·(t+1)/T) (the split of core/onednn.h: matmul_panels): several row-wise steps in one
// region, each thread's rows staying in its own cache from one step to the next. f(0, n) on this
// thread when not `parallel` (or inside an active region). f must not throw.
template <typename F>
inline void parallel_rows(int64_t n, bool parallel, F&& f) {
    if (!team_for(n, parallel)) {
        f(int64_t(0), n);
        return;
    }
#pragma omp parallel num_threads(omp_get_max_threads())
    {
        const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
        const int64_t r0 = n * t / nt, r1 = n * (t + 1) / nt;
        if (r1 > r0) f(r0, r1);
    }
}

// f(i, j) for i in [0, n0), j in [0, n1), as one index space of n0·n1 iterations (collapse(2)),
// balanced as parallel_for_balanced: the loops over a batch's heads, whose threads finish their
// halves at different times in a training step (a VM's vCPUs), each iteration on its own.
template <typename F>
inline void parallel_for_2d(int64_t n0, int64_t n1, bool parallel, F&& f) {
    if (n1 <= 0) return;
    parallel_for_balanced(n0 * n1, parallel, [&](int64_t k) { f(k / n1, k % n1); });
}

}  // namespace pldr
