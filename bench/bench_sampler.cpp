// Sampling time per token for a 32000-token vocabulary: greedy, plain temperature sampling,
// top-k 40, top-p 0.9 and top-p 0.9 + top-k 40 (the usual decode settings), with logits
// shaped like an LM's (a few large, a long normal tail) and as flat noise (worst case for
// top-p, which then has to sort most of the vocabulary).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "infer/sampler.h"

namespace {

constexpr int64_t kVocab = 32000;

std::vector<float> make_logits(bool peaked) {
    pldr::Rng rng(1234);
    std::vector<float> l(static_cast<size_t>(kVocab));
    for (auto& x : l) x = static_cast<float>(peaked ? 2.0 * rng.normal() : 0.3 * rng.normal());
    if (peaked)
        for (int i = 0; i < 20; ++i) l[static_cast<size_t>(rng.below(kVocab))] += 8.0f + float(i);
    return l;
}

void run(benchmark::State& state, const pldr::SamplerConfig& cfg, bool peaked) {
    const auto logits = make_logits(peaked);
    std::vector<int64_t> history(256);
    for (size_t i = 0; i < history.size(); ++i) history[i] = static_cast<int64_t>(i * 97 % 32000);
    pldr::Sampler s(cfg);
    for (auto _ : state) {
        const int64_t id = s.sample(logits.data(), kVocab, history);
        benchmark::DoNotOptimize(id);
    }
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

void BM_Greedy(benchmark::State& state) {
    pldr::SamplerConfig cfg;
    cfg.greedy = true;
    run(state, cfg, true);
}
void BM_Temperature(benchmark::State& state) {
    pldr::SamplerConfig cfg;
    cfg.temperature = 0.8;
    run(state, cfg, true);
}
void BM_TopK40(benchmark::State& state) {
    pldr::SamplerConfig cfg;
    cfg.temperature = 0.8;
    cfg.top_k = 40;
    run(state, cfg, true);
}
void BM_TopP09(benchmark::State& state) {
    pldr::SamplerConfig cfg;
    cfg.temperature = 0.8;
    cfg.top_p = 0.9;
    run(state, cfg, state.range(0) != 0);
}
void BM_TopP09_TopK40(benchmark::State& state) {
    pldr::SamplerConfig cfg;
    cfg.temperature = 0.8;
    cfg.top_p = 0.9;
    cfg.top_k = 40;
    run(state, cfg, state.range(0) != 0);
}
void BM_TopP09_TopK40_Penalty(benchmark::State& state) {
    pldr::SamplerConfig cfg;
    cfg.temperature = 0.8;
    cfg.top_p = 0.9;
    cfg.top_k = 40;
    cfg.repetition_penalty = 1.1;
    run(state, cfg, true);
}

}  // namespace

BENCHMARK(BM_Greedy);
BENCHMARK(BM_Temperature);
BENCHMARK(BM_TopK40);
BENCHMARK(BM_TopP09)->ArgName("peaked")->Arg(1)->Arg(0);
BENCHMARK(BM_TopP09_TopK40)->ArgName("peaked")->Arg(1)->Arg(0);
BENCHMARK(BM_TopP09_TopK40_Penalty);

BENCHMARK_MAIN();
