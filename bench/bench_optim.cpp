// AdamW update throughput. Bytes per element: read p, g, m, v and write p, m, v (7 values).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "train/adamw.h"
#include "train/clip.h"

namespace {

template <class T>
void BM_AdamW(benchmark::State& state) {
    const int64_t n = state.range(0);
    std::vector<T> p(size_t(n), T(0.5)), g(size_t(n), T(0.01)), m(size_t(n), T(0)),
        v(size_t(n), T(0));
    const pldr::AdamWConfig cfg;
    int64_t t = 0;
    for (auto _ : state) {
        ++t;
        pldr::adamw_update(p.data(), g.data(), m.data(), v.data(), n, t, 1e-3, cfg);
        benchmark::DoNotOptimize(p.data());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(int64_t(state.iterations()) * n * 7 * int64_t(sizeof(T)));
    state.SetItemsProcessed(int64_t(state.iterations()) * n);
}

template <class T>
void BM_ClipByValue(benchmark::State& state) {
    const int64_t n = state.range(0);
    std::vector<T> g(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) g[size_t(i)] = T((i % 7) - 3) * T(0.4);
    for (auto _ : state) {
        benchmark::DoNotOptimize(pldr::clip_by_value(g.data(), n, T(1)));
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(int64_t(state.iterations()) * n * 2 * int64_t(sizeof(T)));
}

}  // namespace

BENCHMARK(BM_AdamW<float>)
    ->Arg(1000000)
    ->Arg(100000000)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_AdamW<double>)->Arg(1000000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ClipByValue<float>)->Arg(1000000)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
