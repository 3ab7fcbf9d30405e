// Cached against uncached inference, in every cache mode, for every case of
// tests/numeric_cases.h (float64):
//   - none: each step's logits equal the last row of a full forward over the whole sequence;
//   - kvg, kv: each step's logits equal the last row of the whole sequence recomputed in one
//     chunk (no KV-cache) with the cached session's operator: for a learned G, a fresh session
//     preset with the G-cache of the prefill (spec §4.1: decode steps reuse the prompt's A and
//     G) prefills the whole sequence; for a fixed G, a full forward.
// The batched decode step (decode_step) against single decodes, over sessions of every mode at
// once: BatchedStepEqualsSingleDecodes.
// The prompt has no pad token (decode steps attend to every cached key, mask None, as the
// reference's), so a full causal forward and a decode step see the same keys.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>
#include <vector>

#include "infer/session.h"
#include "numeric_cases.h"

namespace {

constexpr int kSteps = 5;
constexpr double kTol = 1e-12;  // relative to max|logits|: float64 rounding only

template <typename A, typename B>
double max_rel_diff(const A& a, const B& b) {
    double d = 0, s = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        d = std::max(d, std::fabs(a[i] - b[i]));
        s = std::max(s, std::fabs(b[i]));
    }
    return s > 0 ? d / s : d;
}

// Logits of the last position of a full forward over ids.
std::vector<double> full_forward_last(const pldr::Model<double>& m,
                                      const std::vector<int64_t>& ids) {
    pldr::Activations<double> a;
    pldr::forward(m, ids.data(), 1, int64_t(ids.size()), a);
    const int64_t V = m.cfg.vocab_size, S = int64_t(ids.size());
    return std::vector<double>(a.logits.data.begin() + (S - 1) * V, a.logits.data.end());
}

// The DAG term changes the loss only, not inference: the cases without it.
std::vector<numeric::Case> inference_cases() {
    std::vector<numeric::Case> v;
    for (const numeric::Case& k : numeric::cases())
        if (!k.dag) v.push_back(k);
    return v;
}

class CacheModel : public testing::TestWithParam<numeric::Case> {};

TEST_P(CacheModel, EveryModeMatchesItsUncachedOracle) {
    const numeric::Case& k = GetParam();
    const uint64_t seed = numeric::seed_of(k);
    const pldr::Model<double> m = numeric::make_model(k, seed);
    std::vector<int64_t> prompt = numeric::make_tokens(k.shape, seed + 3);
    prompt.resize(size_t(k.shape.S));
    for (auto& t : prompt) t = t == 0 ? 1 : t;  // no pad (see above)
    std::vector<int64_t> next(kSteps);
    for (int i = 0; i < kSteps; ++i) next[size_t(i)] = 1 + (i * 7 + 3) % (k.shape.V - 1);
    ASSERT_LE(int64_t(prompt.size()) + kSteps, m.cfg.max_position);

    for (pldr::CacheMode mode :
         {pldr::CacheMode::KVG, pldr::CacheMode::KV, pldr::CacheMode::NONE}) {
        SCOPED_TRACE(pldr::cache_mode_name(mode));
        pldr::Session<double> s(m, mode);
        std::vector<int64_t> ids = prompt;
        std::vector<double> got = s.prefill(prompt);
        // The prefill is a full forward in every mode.
        EXPECT_LE(max_rel_diff(got, full_forward_last(m, ids)), kTol);
        const bool frozen = mode != pldr::CacheMode::NONE && m.cfg.learned_g();
        const pldr::GCache<double> g = s.g_cache();
        if (frozen) {
            ASSERT_EQ(int64_t(g.size()), m.cfg.num_layers);
        }
        auto oracle = [&] {
            if (!frozen) return full_forward_last(m, ids);
            pldr::Session<double> o(m, pldr::CacheMode::KVG);
            o.set_g_cache(g);
            return o.prefill(ids);  // one chunk: T_past = 0, every key of this call
        };
        double worst = 0;
        for (int i = 0; i < kSteps; ++i) {
            ids.push_back(next[size_t(i)]);
            got = s.decode(next[size_t(i)]);
            const std::vector<double> want = oracle();
            ASSERT_EQ(got.size(), want.size());
            worst = std::max(worst, max_rel_diff(got, want));
        }
        EXPECT_LE(worst, kTol) << k.name;
        if (mode == pldr::CacheMode::KVG && m.cfg.learned_g()) {
            // The oracle is not trivially the same computation: without the prompt's operator,
            // the uncached logits move (a learned G depends on the whole sequence).
            pldr::Session<double> u(m, pldr::CacheMode::NONE);
            u.prefill(prompt);
            std::vector<double> a;
            for (int i = 0; i < kSteps; ++i) a = u.decode(next[size_t(i)]);
            EXPECT_GT(max_rel_diff(a, got), 1e-9) << k.name;
        }
    }
}

// One batched decode step (decode_step) over sessions of every kind at once — kvg, kv and none,
// each with prompts of different lengths, and kvg and kv with a preset G-cache — equals each
// session decoding alone, step after step: the logits, the keys and values written to each
// cache, and each session's own slice of the activations (E over its own keys, its operator).
// Float64; the only difference is the rounding of [B,d] matrix products against matrix-vector
// ones (kTol).
TEST_P(CacheModel, BatchedStepEqualsSingleDecodes) {
    using pldr::CacheMode;
    const numeric::Case& k = GetParam();
    const uint64_t seed = numeric::seed_of(k);
    const pldr::Model<double> m = numeric::make_model(k, seed);
    const int64_t S = k.shape.S, V = k.shape.V;
    pldr::Rng r(seed + 11);
    auto tokens = [&](int64_t n) {
        std::vector<int64_t> t(static_cast<size_t>(n));
        for (auto& x : t) x = 1 + int64_t(r.below(uint64_t(V - 1)));  // no pad
        return t;
    };
    // A G-cache from another prompt, for the preset sessions.
    pldr::Session<double> other(m, CacheMode::KVG);
    other.prefill(tokens(S + 2));
    const pldr::GCache<double> preset = other.g_cache();
    struct Plan {
        CacheMode mode;
        int64_t len;
        bool preset;
    };
    const std::vector<Plan> plan = {
        {CacheMode::KVG, S, false},     {CacheMode::KV, S + 3, false}, {CacheMode::KVG, 1, false},
        {CacheMode::NONE, 2, false},    {CacheMode::KV, S + 1, true},  {CacheMode::KVG, 3, true},
        {CacheMode::KVG, S + 4, false}, {CacheMode::NONE, S, false},   {CacheMode::KV, 2, false}};
    // lean: the sessions without kept activations (two reused layer buffers, no learner
    // internals), which must give the same bits as `single`.
    // g_only: lean, and in mode kvg only G_LM kept in the G-cache (as pldr generate's
    // sessions); they step together too (decode_step), as in a generation.
    std::vector<std::unique_ptr<pldr::Session<double>>> batched, single, lean, g_only;
    std::vector<pldr::Session<double>*> ptrs, g_only_ptrs;
    for (const Plan& p : plan) {
        const std::vector<int64_t> prompt = tokens(p.len);
        for (auto* v : {&batched, &single, &lean, &g_only}) {
            v->push_back(std::make_unique<pldr::Session<double>>(m, p.mode));
            if (v == &lean || v == &g_only) v->back()->keep_activations(false);
            if (v == &g_only) v->back()->keep_g_only(true);
            if (p.preset) v->back()->set_g_cache(preset);
            v->back()->prefill(prompt);
        }
        ptrs.push_back(batched.back().get());
        g_only_ptrs.push_back(g_only.back().get());
        EXPECT_EQ(lean.back()->logits(), single.back()->logits());
        EXPECT_EQ(g_only.back()->logits(), single.back()->logits());
        for (int64_t l = 0; l < m.cfg.num_layers && p.mode == CacheMode::KVG; ++l) {
            const pldr::GCacheLayer<double>& want = single.back()->g_cache()[size_t(l)];
            const pldr::GCacheLayer<double>& got = g_only.back()->g_cache()[size_t(l)];
            EXPECT_EQ(lean.back()->g_cache()[size_t(l)].G.data, want.G.data);
            EXPECT_EQ(got.G.data, want.G.data);
            if (p.preset) {  // a preset cache stays whole
                EXPECT_EQ(got.A.data, want.A.data);
            } else {
                EXPECT_EQ(got.A.numel() + got.A_LM.numel() + got.A_P.numel(), 0) << l;
            }
        }
        for (int64_t l = 0; l < m.cfg.num_layers && p.mode == CacheMode::KV; ++l)
            EXPECT_EQ(g_only.back()->g_cache()[size_t(l)].A.data,  // kv recomputes G from A
                      single.back()->g_cache()[size_t(l)].A.data);
    }
    const int64_t L = m.cfg.num_layers;
    for (int step = 0; step < kSteps; ++step) {
        std::vector<int64_t> ids;
        for (size_t i = 0; i < plan.size(); ++i)
            ids.push_back(1 + int64_t(step * 5 + i * 3) % (V - 1));
        pldr::decode_step(ptrs, ids);
        pldr::decode_step(g_only_ptrs, ids, false);
        for (size_t i = 0; i < plan.size(); ++i) {
            SCOPED_TRACE(testing::Message()
                         << "sequence " << i << " (" << cache_mode_name(plan[i].mode)
                         << (plan[i].preset ? ", preset" : "") << ") step " << step);
            pldr::Session<double>& b = *batched[i];
            pldr::Session<double>& s = *single[i];
            const std::vector<double> want = s.decode(ids[i]);
            EXPECT_EQ(lean[i]->decode(ids[i]), want);
            ASSERT_EQ(b.tokens(), s.tokens());
            ASSERT_EQ(b.logits().size(), want.size());
            EXPECT_LE(max_rel_diff(b.logits(), want), kTol);
            EXPECT_EQ(g_only[i]->logits(), b.logits());  // the same batched step
            if (plan[i].mode == CacheMode::NONE) continue;
            for (int64_t l = 0; l < L; ++l) {
                EXPECT_LE(max_rel_diff(b.keys(l).data, s.keys(l).data), kTol) << "layer " << l;
                EXPECT_LE(max_rel_diff(b.values(l).data, s.values(l).data), kTol) << "layer " << l;
                const pldr::LayerActs<double>& bl = b.last().layers[size_t(l)];
                const pldr::LayerActs<double>& sl = s.last().layers[size_t(l)];
                ASSERT_EQ(bl.E.shape, sl.E.shape) << "layer " << l;
                EXPECT_LE(max_rel_diff(bl.E.data, sl.E.data), kTol) << "layer " << l;
                EXPECT_LE(max_rel_diff(bl.hidden.data, sl.hidden.data), kTol) << "layer " << l;
                // The operator is the same computation on the same input: bit for bit.
                EXPECT_EQ(bl.G.shape, sl.G.shape) << "layer " << l;
                EXPECT_EQ(bl.G.data, sl.G.data) << "layer " << l;
                if (m.cfg.learned_g()) {
                    EXPECT_EQ(bl.A.data, sl.A.data) << "layer " << l;
                    EXPECT_EQ(bl.A_LM.data, sl.A_LM.data) << "layer " << l;
                    EXPECT_EQ(bl.A_P.data, sl.A_P.data) << "layer " << l;
                }
            }
        }
    }
}

// A forward that keeps only what inference needs (KeepActs::INFERENCE: the metric learner runs in
// its reused per-thread workspace, metric_learner_output) gives the bits of the one that keeps
// everything: each layer's A and output, in float64 and float32, for the case's batch, then
// batch 1 and the batch again (a smaller and a larger use of the same workspace). Both with the
// learner's rows whole and split into blocks (model/metric_learner.h: one per thread): 3 blocks
// on this thread, and 2 on two threads. Split and whole agree to rounding.
template <typename T>
void expect_lean_forward_equal(const pldr::Model<double>& m64, const numeric::Case& k,
                               uint64_t seed) {
    const pldr::Model<T> m = numeric::cast_model<T>(m64);
    const std::vector<int64_t> tok = numeric::make_tokens(k.shape, seed + 5);
    const double tol = std::is_same_v<T, float> ? 1e-4 : 1e-12;
    for (const int64_t B : {k.shape.B, int64_t(1), k.shape.B}) {
        const int64_t S = k.shape.S;
        pldr::Activations<T> whole;
        pldr::forward_layers(m, tok.data(), B, S, whole, pldr::KeepActs::ALL);
        for (const int threads : {1, 2}) {
            const int before = omp_get_max_threads();
            omp_set_num_threads(threads);
            const numeric::LearnerRowBlocks split(threads == 1 ? 3 : 2);
            pldr::Activations<T> full, lean;
            pldr::forward_layers(m, tok.data(), B, S, full, pldr::KeepActs::ALL);
            pldr::forward_layers(m, tok.data(), B, S, lean, pldr::KeepActs::INFERENCE);
            omp_set_num_threads(before);
            for (int64_t l = 0; l < m.cfg.num_layers; ++l) {
                SCOPED_TRACE(testing::Message()
                             << "layer " << l << " B " << B << " threads " << threads);
                const auto &f = full.layers[size_t(l)], &g = lean.layers[size_t(l)];
                const auto& w = whole.layers[size_t(l)];
                if (m.cfg.learned_g()) {
                    ASSERT_EQ(g.A.shape, f.A.shape);
                    EXPECT_EQ(g.A.data, f.A.data);
                    EXPECT_TRUE(g.res.empty() && g.A0.numel() == 0);  // nothing else was kept
                    EXPECT_LE(max_rel_diff(std::vector<double>(f.A.data.begin(), f.A.data.end()),
                                           std::vector<double>(w.A.data.begin(), w.A.data.end())),
                              tol);
                    for (size_t r = 0; r < w.res.size(); ++r) {  // each unit's kept rows
                        auto as64 = [](const pldr::Tensor<T>& t) {
                            return std::vector<double>(t.data.begin(), t.data.end());
                        };
                        EXPECT_LE(max_rel_diff(as64(f.res[r].in), as64(w.res[r].in)), tol) << r;
                        EXPECT_LE(max_rel_diff(as64(f.res[r].sum), as64(w.res[r].sum)), tol) << r;
                        EXPECT_LE(max_rel_diff(as64(f.res[r].rstd), as64(w.res[r].rstd)), tol) << r;
                    }
                }
                EXPECT_EQ(g.hidden.data, f.hidden.data);
            }
        }
    }
}

TEST_P(CacheModel, LeanForwardKeepsTheBitsOfTheFullOne) {
    const numeric::Case& k = GetParam();
    const uint64_t seed = numeric::seed_of(k);
    const pldr::Model<double> m = numeric::make_model(k, seed);
    expect_lean_forward_equal<double>(m, k, seed);
    expect_lean_forward_equal<float>(m, k, seed);
}

INSTANTIATE_TEST_SUITE_P(Cases, CacheModel, testing::ValuesIn(inference_cases()),
                         numeric::CaseName());

}  // namespace
