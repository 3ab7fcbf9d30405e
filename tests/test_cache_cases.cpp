// Cached against uncached inference, in every cache mode, for every case of
// tests/numeric_cases.h (float64):
//   - none: each step's logits equal the last row of a full forward over the whole sequence;
//   - kvg, kv: each step's logits equal the last row of the whole sequence recomputed in one
//     chunk (no KV-cache) with the cached session's operator: for a learned G, a fresh session
//     preset with the G-cache of the prefill (spec §4.1: decode steps reuse the prompt's A and
//     G) prefills the whole sequence; for a fixed G, a full forward.
// The prompt has no pad token (decode steps attend to every cached key, mask None, as the
// reference's), so a full causal forward and a decode step see the same keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "infer/session.h"
#include "numeric_cases.h"

namespace {

constexpr int kSteps = 5;
constexpr double kTol = 1e-12;  // relative to max|logits|: float64 rounding only

double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
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

INSTANTIATE_TEST_SUITE_P(Cases, CacheModel, testing::ValuesIn(inference_cases()),
                         numeric::CaseName());

}  // namespace
