// Token sampler: greedy, temperature, top-p (reference and HF rules), top-k, min-p,
// repetition penalty, the seeded draw, reporting helpers and config validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "infer/sampler.h"

namespace {

using pldr::Sampler;
using pldr::SamplerConfig;
using pldr::TopPMode;

constexpr double kInf = std::numeric_limits<double>::infinity();
const std::vector<int64_t> kNoHistory;

std::vector<double> log_of(const std::vector<double>& probs) {
    std::vector<double> l;
    for (const double p : probs) l.push_back(std::log(p));
    return l;
}

// Ids with nonzero probability in the sampler's final distribution.
std::set<int64_t> kept(const SamplerConfig& cfg, const std::vector<double>& logits,
                       const std::vector<int64_t>& history = {}) {
    Sampler s(cfg);
    const auto d = s.distribution(logits.data(), static_cast<int64_t>(logits.size()), history);
    std::set<int64_t> out;
    for (size_t i = 0; i < d.size(); ++i)
        if (d[i] > 0) out.insert(static_cast<int64_t>(i));
    return out;
}

std::vector<double> softmax(const std::vector<double>& x) {
    double m = -kInf;
    for (const double v : x) m = std::max(m, v);
    std::vector<double> p;
    double z = 0;
    for (const double v : x) {
        p.push_back(std::exp(v - m));
        z += p.back();
    }
    for (double& v : p) v /= z;
    return p;
}

std::string error_of(const SamplerConfig& cfg) {
    try {
        cfg.validate();
    } catch (const pldr::Error& e) {
        return e.what();
    }
    return "";
}

// ---------------------------------------------------------------------------------------------

TEST(SamplerGreedy, ArgmaxLowestIndexOnTies) {
    const std::vector<double> logits{1.0, 5.0, 3.0, 5.0, -2.0};
    SamplerConfig cfg;
    cfg.greedy = true;
    Sampler s(cfg);
    const auto before = s.rng().s;
    for (int i = 0; i < 5; ++i) EXPECT_EQ(s.sample(logits.data(), 5, kNoHistory), 1);
    EXPECT_EQ(s.rng().s, before) << "greedy must not consume randomness";

    const std::vector<float> lf{0.5f, -1.0f, 7.25f, 7.0f};
    EXPECT_EQ(s.sample(lf.data(), 4, kNoHistory), 2);

    // Temperature 0 means greedy, ignoring top-p and top-k.
    SamplerConfig t0;
    t0.temperature = 0.0;
    t0.top_p = 0.1;
    t0.top_k = 3;
    Sampler s0(t0);
    EXPECT_EQ(s0.sample(logits.data(), 5, kNoHistory), 1);
    const auto d = s0.distribution(logits.data(), 5, kNoHistory);
    EXPECT_EQ(d, (std::vector<double>{0, 1, 0, 0, 0}));

    // All-negative logits with -inf entries: argmax among the finite ones.
    const std::vector<double> neg{-kInf, -7.0, -3.0, -kInf, -3.0};
    EXPECT_EQ(s.sample(neg.data(), 5, kNoHistory), 2);
}

TEST(SamplerGreedy, TopK1UniqueMaxIsArgmaxTiesAreSampled) {
    SamplerConfig cfg;
    cfg.top_k = 1;
    cfg.seed = 7;
    Sampler s(cfg);
    const std::vector<double> uniq{0.1, 0.3, 2.0, 1.9};
    for (int i = 0; i < 200; ++i) EXPECT_EQ(s.sample(uniq.data(), 4, kNoHistory), 2);
    // Ties at the maximum are kept (the reference samples among them).
    const std::vector<double> tied{2.0, 5.0, 5.0, 1.0};
    std::set<int64_t> drawn;
    for (int i = 0; i < 200; ++i) drawn.insert(s.sample(tied.data(), 4, kNoHistory));
    EXPECT_EQ(drawn, (std::set<int64_t>{1, 2}));
}

TEST(SamplerTopP, ReferenceRuleHandExamples) {
    const std::vector<double> probs{0.5, 0.3, 0.15, 0.05};
    const auto logits = log_of(probs);
    // Check the cumsum the sampler sees (Z in index order, then cumsum of e/Z, sorted desc):
    // c = [0.5, 0.8, 0.95, 1] must land on the right side of 0.8 in double.
    {
        double z = 0;
        std::vector<double> e;
        for (const double l : logits) {
            e.push_back(std::exp(l - logits[0]));
            z += e.back();
        }
        const double c0 = e[0] / z, c1 = c0 + e[1] / z, c2 = c1 + e[2] / z;
        ASSERT_LE(c1, 0.8);
        ASSERT_GT(c2, 0.8);
        ASSERT_GT(c0, 0.4);
    }
    SamplerConfig cfg;
    cfg.top_p = 0.8;  // Σ[c ≤ 0.8] = 2 ⇒ n = 1 ⇒ threshold = second logit
    EXPECT_EQ(kept(cfg, logits), (std::set<int64_t>{0, 1}));
    cfg.top_p = 0.4;  // Σ[c ≤ 0.4] = 0 ⇒ n = max(−1, 0) = 0: only the top token
    EXPECT_EQ(kept(cfg, logits), (std::set<int64_t>{0}));
    cfg.top_p = 0.6;  // Σ[c ≤ 0.6] = 1 ⇒ n = 0: the crossing token (0.3) is NOT added
    EXPECT_EQ(kept(cfg, logits), (std::set<int64_t>{0}));
    cfg.top_p = 0.96;  // c ≤ 0.96 for 3 tokens ⇒ n = 2
    EXPECT_EQ(kept(cfg, logits), (std::set<int64_t>{0, 1, 2}));

    // Same on a permuted vocabulary (the rule works on the sorted order, not on indices).
    const std::vector<double> perm{logits[2], logits[0], logits[3], logits[1]};
    cfg.top_p = 0.8;
    EXPECT_EQ(kept(cfg, perm), (std::set<int64_t>{1, 3}));

    // The kept mass is renormalized: 0.5/0.8 and 0.3/0.8.
    Sampler s(cfg);
    const auto d = s.distribution(perm.data(), 4, kNoHistory);
    EXPECT_NEAR(d[1], 0.625, 1e-15);
    EXPECT_NEAR(d[3], 0.375, 1e-15);
    EXPECT_EQ(d[0], 0.0);
    EXPECT_EQ(d[2], 0.0);
}

TEST(SamplerTopP, HfRuleIncludesTheCrossingToken) {
    const auto logits = log_of({0.5, 0.3, 0.15, 0.05});
    SamplerConfig cfg;
    cfg.top_p_hf = true;
    cfg.top_p = 0.6;  // smallest prefix with mass ≥ 0.6 is {0, 1}
    EXPECT_EQ(kept(cfg, logits), (std::set<int64_t>{0, 1}));
    cfg.top_p = 0.4;
    EXPECT_EQ(kept(cfg, logits), (std::set<int64_t>{0}));
    cfg.top_p = 0.85;
    EXPECT_EQ(kept(cfg, logits), (std::set<int64_t>{0, 1, 2}));
    cfg.top_p = 0.99;
    EXPECT_EQ(kept(cfg, logits), (std::set<int64_t>{0, 1, 2, 3}));
}

TEST(SamplerTopP, ExactBoundaryMass) {
    // p set to exactly the cumsum c_1 the documented arithmetic gives (Z summed in index
    // order, then c += e/Z over the sorted tokens), so c hits p and the REFERENCE rule
    // (c ≤ p) and the HF rule (c < p before the crossing) are told apart.
    const auto logits = log_of({0.45, 0.3, 0.15, 0.1});
    double z = 0;
    std::vector<double> e;
    for (const double l : logits) {
        e.push_back(std::exp(l - logits[0]));
        z += e.back();
    }
    const double c0 = e[0] / z, c1 = c0 + e[1] / z, c2 = c1 + e[2] / z;
    SamplerConfig cfg;
    cfg.top_p = c1;  // Σ[c ≤ c1] = 2 ⇒ n = 1
    EXPECT_EQ(kept(cfg, logits), (std::set<int64_t>{0, 1}));
    cfg.top_p = std::nextafter(c1, 0.0);  // just below: n = 0
    EXPECT_EQ(kept(cfg, logits), (std::set<int64_t>{0}));
    cfg.top_p = c2;
    EXPECT_EQ(kept(cfg, logits), (std::set<int64_t>{0, 1, 2}));
    cfg.top_p_hf = true;
    cfg.top_p = c1;  // the prefix {0, 1} has mass exactly p: nothing more
    EXPECT_EQ(kept(cfg, logits), (std::set<int64_t>{0, 1}));
    cfg.top_p = std::nextafter(c1, 1.0);  // just above: the third token is needed
    EXPECT_EQ(kept(cfg, logits), (std::set<int64_t>{0, 1, 2}));
    cfg.top_p = c0;
    EXPECT_EQ(kept(cfg, logits), (std::set<int64_t>{0}));
}

TEST(SamplerTopP, TiesAtTheThresholdAreKept) {
    // sorted: 0.4, 0.15, 0.15, 0.15, 0.1, 0.05; c = 0.4, 0.55, 0.7, 0.85, 0.95, 1.
    const auto logits = log_of({0.15, 0.4, 0.15, 0.1, 0.15, 0.05});
    SamplerConfig cfg;
    cfg.top_p = 0.6;  // REFERENCE: n = 2 − 1 = 1 ⇒ threshold 0.15 ⇒ all three 0.15s kept
    EXPECT_EQ(kept(cfg, logits), (std::set<int64_t>{0, 1, 2, 4}));
    cfg.top_p_hf = true;
    cfg.top_p = 0.45;  // HF: crossing token is the first 0.15 ⇒ its ties kept too
    EXPECT_EQ(kept(cfg, logits), (std::set<int64_t>{0, 1, 2, 4}));
    cfg.top_p = 0.3;
    EXPECT_EQ(kept(cfg, logits), (std::set<int64_t>{1}));
}

// Brute-force reference for the top-p + top-k rules (full sort), against the sampler's
// incremental partial sort, on a large random vocabulary.
TEST(SamplerTopP, MatchesFullSortBruteForceOnLargeVocab) {
    // Peaked logits, and nearly flat ones (top-p then needs most of the vocabulary, which
    // takes the radix-sort path), with ties, signed zeros and a −inf.
    for (const double scale : {2.5, 0.05}) {
        pldr::Rng rng(123);
        const int64_t V = 5000;
        std::vector<double> logits(static_cast<size_t>(V));
        for (auto& x : logits) x = scale * rng.normal();
        for (int i = 0; i < 50; ++i) logits[static_cast<size_t>(rng.below(V))] = scale / 2;  // ties
        for (int i = 0; i < 20; ++i) logits[static_cast<size_t>(rng.below(V))] = i % 2 ? 0.0 : -0.0;
        logits[17] = -kInf;
        for (const TopPMode mode : {TopPMode::REFERENCE, TopPMode::HF}) {
            for (const double p : {0.05, 0.3, 0.9, 0.999, 1.0}) {
                for (const int64_t k :
                     {int64_t{0}, int64_t{3}, int64_t{40}, int64_t{1000}, int64_t{4500}}) {
                    SamplerConfig cfg;
                    cfg.top_p = p;
                    cfg.top_k = k;
                    cfg.top_p_hf = mode == TopPMode::HF;
                    // brute force
                    const double m = *std::max_element(logits.begin(), logits.end());
                    double z = 0;
                    for (const double x : logits) z += std::exp(x - m);
                    std::vector<double> sorted;
                    for (const double x : logits)
                        if (x != -kInf) sorted.push_back(x);
                    std::sort(sorted.begin(), sorted.end(), std::greater<>());
                    double c = 0;
                    int64_t cnt_le = 0, cnt_lt = 0;
                    for (const double x : sorted) {
                        c += std::exp(x - m) / z;
                        cnt_le += c <= p;
                        cnt_lt += c < p;
                    }
                    const int64_t F = static_cast<int64_t>(sorted.size());
                    const int64_t n = mode == TopPMode::REFERENCE
                                          ? std::max<int64_t>(cnt_le - 1, 0)
                                          : std::min<int64_t>(cnt_lt, F - 1);
                    double thr = p < 1 ? sorted[static_cast<size_t>(n)] : -kInf;  // p = 1: off
                    std::vector<double> after;
                    for (const double x : sorted)
                        if (x >= thr) after.push_back(x);
                    if (k > 0 && k <= static_cast<int64_t>(after.size()))
                        thr = std::max(thr, after[static_cast<size_t>(k - 1)]);
                    std::set<int64_t> want;
                    for (int64_t i = 0; i < V; ++i)
                        if (logits[static_cast<size_t>(i)] != -kInf &&
                            logits[static_cast<size_t>(i)] >= thr)
                            want.insert(i);
                    const auto got = kept(cfg, logits);
                    EXPECT_EQ(got, want)
                        << "p=" << p << " k=" << k << " mode=" << int(mode) << " scale=" << scale;
                    EXPECT_GT(got.size(), 0u);
                }
            }
        }
    }
}

TEST(SamplerTopK, TiesAreKeptAndOrderAfterTopP) {
    const std::vector<double> logits{3.0, 1.0, 1.0, 0.0};
    SamplerConfig cfg;
    cfg.top_k = 2;
    EXPECT_EQ(kept(cfg, logits), (std::set<int64_t>{0, 1, 2}));
    cfg.top_k = 1;
    EXPECT_EQ(kept(cfg, logits), (std::set<int64_t>{0}));
    cfg.top_k = 3;
    EXPECT_EQ(kept(cfg, logits), (std::set<int64_t>{0, 1, 2}));
    cfg.top_k = 4;
    EXPECT_EQ(kept(cfg, logits), (std::set<int64_t>{0, 1, 2, 3}));
    cfg.top_k = 100;
    EXPECT_EQ(kept(cfg, logits), (std::set<int64_t>{0, 1, 2, 3}));

    // top-p first, then top-k on what is left.
    const auto l2 = log_of({0.5, 0.3, 0.15, 0.05});
    SamplerConfig both;
    both.top_p = 0.96;  // keeps {0,1,2}
    both.top_k = 2;     // then {0,1}
    EXPECT_EQ(kept(both, l2), (std::set<int64_t>{0, 1}));
    both.top_p = 0.6;  // keeps {0}; top-k 3 cannot add anything back
    both.top_k = 3;
    EXPECT_EQ(kept(both, l2), (std::set<int64_t>{0}));

    // Probabilities renormalized over the survivors.
    SamplerConfig k2;
    k2.top_k = 2;
    Sampler s(k2);
    const auto d = s.distribution(logits.data(), 4, kNoHistory);
    const double e0 = std::exp(3.0), e1 = std::exp(1.0);
    EXPECT_NEAR(d[0], e0 / (e0 + 2 * e1), 1e-15);
    EXPECT_NEAR(d[1], e1 / (e0 + 2 * e1), 1e-15);
    EXPECT_EQ(d[3], 0.0);
}

TEST(SamplerMinP, DropsTokensBelowFractionOfMax) {
    const auto logits = log_of({0.5, 0.3, 0.15, 0.05});
    SamplerConfig cfg;
    cfg.min_p = 0.2;  // cut at 0.1: keeps 0.5, 0.3, 0.15
    EXPECT_EQ(kept(cfg, logits), (std::set<int64_t>{0, 1, 2}));
    cfg.min_p = 0.4;  // cut at 0.2: keeps 0.5, 0.3
    EXPECT_EQ(kept(cfg, logits), (std::set<int64_t>{0, 1}));
    cfg.min_p = 0.61;  // cut at 0.305
    EXPECT_EQ(kept(cfg, logits), (std::set<int64_t>{0}));
    cfg.min_p = 0.0;
    EXPECT_EQ(kept(cfg, logits), (std::set<int64_t>{0, 1, 2, 3}));
    // Relative to the temperature-scaled distribution: T = 0.5 squares the ratios
    // (0.6² = 0.36, 0.3² = 0.09, 0.1² = 0.01), so min-p 0.2 keeps only {0, 1}.
    cfg.min_p = 0.2;
    cfg.temperature = 0.5;
    EXPECT_EQ(kept(cfg, logits), (std::set<int64_t>{0, 1}));
}

TEST(SamplerRepeatPenalty, DividesPositiveMultipliesNegative) {
    SamplerConfig cfg;
    cfg.greedy = true;
    cfg.repetition_penalty = 2.0;
    // Positive logit seen: 2.0 / 2 = 1.0 < 1.5.
    {
        Sampler s(cfg);
        const std::vector<double> l{2.0, 1.5};
        EXPECT_EQ(s.sample(l.data(), 2, {0}), 1);
        EXPECT_EQ(s.sample(l.data(), 2, {}), 0);
    }
    // Negative logit seen: −1 · 2 = −2 < −1.5 (dividing would give −0.5 and keep id 0).
    {
        Sampler s(cfg);
        const std::vector<double> l{-1.0, -1.5};
        EXPECT_EQ(s.sample(l.data(), 2, {0}), 1);
    }
    // Exact distribution: each distinct id penalized once, whatever its count.
    SamplerConfig dc;
    dc.repetition_penalty = 2.0;
    Sampler s(dc);
    const std::vector<double> l{2.0, -1.0, 0.5, 3.0, 0.0};
    const auto d = s.distribution(l.data(), 5, {0, 1, 1, 1, 4});
    const auto want = softmax({1.0, -2.0, 0.5, 3.0, 0.0});
    for (size_t i = 0; i < 5; ++i) EXPECT_NEAR(d[i], want[i], 1e-15) << i;
    // Penalty < 1 boosts instead.
    SamplerConfig boost;
    boost.repetition_penalty = 0.5;
    Sampler sb(boost);
    const auto db = sb.distribution(l.data(), 5, {2});
    const auto wb = softmax({2.0, -1.0, 1.0, 3.0, 0.0});
    for (size_t i = 0; i < 5; ++i) EXPECT_NEAR(db[i], wb[i], 1e-15) << i;
}

TEST(SamplerRepeatPenalty, WindowLastN) {
    SamplerConfig cfg;
    cfg.repetition_penalty = 4.0;
    cfg.repeat_last_n = 2;
    const std::vector<double> l{4.0, 4.0, 4.0, 1.0};
    const std::vector<int64_t> hist{0, 1, 2, 2};  // window = {2, 2}: only id 2 penalized
    {
        Sampler s(cfg);
        const auto d = s.distribution(l.data(), 4, hist);
        const auto want = softmax({4.0, 4.0, 1.0, 1.0});
        for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(d[i], want[i], 1e-15) << i;
    }
    cfg.repeat_last_n = -1;  // all of the history
    {
        Sampler s(cfg);
        const auto d = s.distribution(l.data(), 4, hist);
        const auto want = softmax({1.0, 1.0, 1.0, 1.0});
        for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(d[i], want[i], 1e-15) << i;
    }
    cfg.repeat_last_n = 0;  // off
    {
        Sampler s(cfg);
        const auto d = s.distribution(l.data(), 4, hist);
        const auto want = softmax(l);
        for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(d[i], want[i], 1e-15) << i;
    }
    cfg.repeat_last_n = 64;
    Sampler s(cfg);
    EXPECT_THROW(s.distribution(l.data(), 4, {0, 9}), pldr::Error);  // id out of range
}

TEST(SamplerTemperature, ScalesLogits) {
    const std::vector<double> l{1.0, 2.0, -0.5, 0.25};
    for (const double T : {0.25, 0.7, 1.0, 1.5, 3.0}) {
        SamplerConfig cfg;
        cfg.temperature = T;
        Sampler s(cfg);
        const auto d = s.distribution(l.data(), 4, kNoHistory);
        std::vector<double> scaled;
        for (const double x : l) scaled.push_back(x / T);
        const auto want = softmax(scaled);
        for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(d[i], want[i], 1e-15) << "T=" << T;
    }
    // Temperature before top-p: at T = 0.25 the top token holds 0.94 of the mass, so
    // top-p 0.92 (reference rule) keeps only it; at T = 1 it keeps two tokens.
    SamplerConfig cfg;
    cfg.top_p = 0.92;
    const auto l2 = log_of({0.6, 0.3, 0.1});
    EXPECT_EQ(kept(cfg, l2), (std::set<int64_t>{0, 1}));
    cfg.temperature = 0.25;
    EXPECT_EQ(kept(cfg, l2), (std::set<int64_t>{0}));
}

TEST(SamplerDraw, EmpiricalDistributionMatchesSoftmax) {
    // T = 0.7, top-k 6 of 8 (two tokens masked), plus a -inf logit that must never appear.
    const std::vector<double> l{0.3, -1.2, 1.1, 0.9, -kInf, 0.0, -2.5, 0.6, -0.4};
    const int64_t V = static_cast<int64_t>(l.size());
    SamplerConfig cfg;
    cfg.temperature = 0.7;
    cfg.top_k = 6;
    cfg.seed = 2026;
    Sampler s(cfg);
    // expected: softmax of the top 6 finite logits at T = 0.7, computed independently
    const std::set<int64_t> top6{0, 2, 3, 5, 7, 8};
    std::vector<double> scaled;
    for (int64_t i = 0; i < V; ++i) scaled.push_back(top6.count(i) ? l[size_t(i)] / 0.7 : -kInf);
    const auto p = softmax(scaled);
    const int N = 20000;
    std::vector<int64_t> count(static_cast<size_t>(V), 0);
    for (int t = 0; t < N; ++t) ++count[static_cast<size_t>(s.sample(l.data(), V, kNoHistory))];
    double chi2 = 0;
    for (int64_t i = 0; i < V; ++i) {
        const auto c = static_cast<double>(count[static_cast<size_t>(i)]);
        if (!top6.count(i)) {
            EXPECT_EQ(c, 0) << "masked token " << i << " drawn";
            continue;
        }
        const double pi = p[static_cast<size_t>(i)];
        const double se = std::sqrt(N * pi * (1 - pi));
        EXPECT_LE(std::abs(c - N * pi), 3 * se) << "id " << i << " count " << c;
        chi2 += (c - N * pi) * (c - N * pi) / (N * pi);
    }
    EXPECT_LT(chi2, 20.52);  // χ²(5 dof) at the 0.999 quantile
    // The float path draws the same ids for the same (representable) logits and seed.
    std::vector<float> lf;
    for (const double x : l) lf.push_back(static_cast<float>(x));
    SamplerConfig cd = cfg;
    Sampler a(cd), b(cd);
    std::vector<double> ld;
    for (const float x : lf) ld.push_back(x);
    for (int t = 0; t < 500; ++t)
        EXPECT_EQ(a.sample(lf.data(), V, kNoHistory), b.sample(ld.data(), V, kNoHistory));
}

TEST(SamplerDraw, SeedDeterminismAndRngCheckpoint) {
    pldr::Rng g(5);
    std::vector<double> l(1000);
    for (auto& x : l) x = g.normal();
    SamplerConfig cfg;
    cfg.top_p = 0.95;
    cfg.temperature = 0.9;
    cfg.seed = 42;
    auto run = [&](uint64_t seed, int n) {
        SamplerConfig c = cfg;
        c.seed = seed;
        Sampler s(c);
        std::vector<int64_t> out;
        for (int i = 0; i < n; ++i) out.push_back(s.sample(l.data(), 1000, out));
        return out;
    };
    const auto a = run(42, 200), b = run(42, 200), c = run(43, 200);
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
    EXPECT_GT(std::set<int64_t>(a.begin(), a.end()).size(), 20u);  // actually random

    // Saving and restoring the Rng state resumes the exact sequence.
    Sampler s(cfg);
    for (int i = 0; i < 10; ++i) s.sample(l.data(), 1000, kNoHistory);
    const auto state = s.rng().s;
    std::vector<int64_t> first, second;
    for (int i = 0; i < 20; ++i) first.push_back(s.sample(l.data(), 1000, kNoHistory));
    s.rng().s = state;
    for (int i = 0; i < 20; ++i) second.push_back(s.sample(l.data(), 1000, kNoHistory));
    EXPECT_EQ(first, second);
}

TEST(SamplerReport, LogSoftmaxAndTopN) {
    const std::vector<float> l{1.0f, 3.0f, 3.0f, -std::numeric_limits<float>::infinity(), 0.5f};
    std::vector<double> lp;
    Sampler::log_softmax(l.data(), 5, lp);
    ASSERT_EQ(lp.size(), 5u);
    const double lz = std::log(std::exp(1.0) + 2 * std::exp(3.0) + std::exp(0.5));
    EXPECT_NEAR(lp[0], 1.0 - lz, 1e-14);
    EXPECT_NEAR(lp[1], 3.0 - lz, 1e-14);
    EXPECT_EQ(lp[3], -kInf);
    double sum = 0;
    for (const double x : lp) sum += std::exp(x);
    EXPECT_NEAR(sum, 1.0, 1e-15);

    const auto top = Sampler::top_n(lp, 3);
    ASSERT_EQ(top.size(), 3u);
    EXPECT_EQ(top[0].first, 1);  // tie with id 2: lower id first
    EXPECT_EQ(top[1].first, 2);
    EXPECT_EQ(top[2].first, 0);
    EXPECT_EQ(top[0].second, lp[1]);
    EXPECT_EQ(Sampler::top_n(lp, 50).size(), 5u);
    EXPECT_EQ(Sampler::top_n(lp, 50).back().first, 3);
    EXPECT_TRUE(Sampler::top_n(lp, 0).empty());

    // log_softmax ignores the sampler's transforms (it is static, on raw logits).
    const std::vector<double> nan{0.0, std::nan("")};
    EXPECT_THROW(Sampler::log_softmax(nan.data(), 2, lp), pldr::Error);
    // The first NaN or +inf is named.
    const std::vector<float> bad{0.0f, 1.0f, std::numeric_limits<float>::infinity(), std::nanf("")};
    try {
        Sampler::log_softmax(bad.data(), 4, lp);
        ADD_FAILURE() << "no error";
    } catch (const pldr::Error& e) {
        EXPECT_NE(std::string(e.what()).find("at id 2"), std::string::npos) << e.what();
    }
}

// The float32 path's log-softmax (vector exponentials, summed in lanes) equals the float64
// path's (std::exp, one running sum) over a vocabulary's worth of logits, within the rounding
// of the normaliser: each exp within 1 ulp and V additions, so |Δ log Z| ≤ (V + 1)·2⁻⁵².
TEST(SamplerReport, LogSoftmaxOfFloatLogitsEqualsTheFloat64PathWithinItsRounding) {
    for (const int64_t V :
         {int64_t(1), int64_t(7), int64_t(8), int64_t(512), int64_t(513), int64_t(32000)}) {
        pldr::Rng rng{uint64_t(V)};
        std::vector<float> l(static_cast<size_t>(V));
        for (auto& x : l) x = float(rng.normal() * 4.0);
        if (V > 7) l[5] = -std::numeric_limits<float>::infinity();
        const std::vector<double> d(l.begin(), l.end());
        std::vector<double> lp32, lp64;
        Sampler::log_softmax(l.data(), V, lp32);
        Sampler::log_softmax(d.data(), V, lp64);
        ASSERT_EQ(lp32.size(), size_t(V));
        const double bound = double(V + 1) * std::ldexp(1.0, -52) * 4;
        double sum = 0;
        for (int64_t i = 0; i < V; ++i) {
            if (std::isinf(lp64[size_t(i)])) {
                EXPECT_EQ(lp32[size_t(i)], lp64[size_t(i)]) << i;
                continue;
            }
            ASSERT_NEAR(lp32[size_t(i)], lp64[size_t(i)], bound) << "V " << V << " id " << i;
            sum += std::exp(lp32[size_t(i)]);
        }
        EXPECT_NEAR(sum, 1.0, 1e-12) << V;
    }
}

// top_n over many values with ties (one pass up to 64, a partial sort above) equals a stable
// sort descending: best first, ties by lower id.
TEST(SamplerReport, TopNEqualsAStableSortDescending) {
    pldr::Rng rng(11);
    std::vector<double> lp(5000);
    for (auto& x : lp) x = double(int(rng.uniform() * 40)) - 50.0;  // 40 values, many ties
    lp[17] = -kInf;
    lp[2500] = 0.5;  // the best one half way
    std::vector<int64_t> order(lp.size());
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return lp[size_t(a)] > lp[size_t(b)]; });
    for (const int64_t n : {1, 2, 5, 40, 64, 65, 300}) {
        const auto top = Sampler::top_n(lp, n);
        ASSERT_EQ(top.size(), size_t(n));
        for (int64_t j = 0; j < n; ++j) {
            EXPECT_EQ(top[size_t(j)].first, order[size_t(j)]) << "n " << n << " rank " << j;
            EXPECT_EQ(top[size_t(j)].second, lp[size_t(order[size_t(j)])]);
        }
    }
}

// The ranges come from the one declaration of the sampling options (pldr/options.h).
TEST(SamplerConfigValidation, EachInvalidValueNamesTheOption) {
    EXPECT_EQ(error_of(SamplerConfig{}), "");
    auto with = [](auto set) {
        SamplerConfig c;
        set(c);
        return error_of(c);
    };
    EXPECT_EQ(with([](SamplerConfig& c) { c.temperature = -1; }),
              "temperature must be in [0, inf) (got -1)");
    EXPECT_EQ(with([](SamplerConfig& c) { c.temperature = kInf; }),
              "temperature must be in [0, inf) (got inf)");
    EXPECT_NE(with([](SamplerConfig& c) { c.temperature = std::nan(""); }).find("temperature"),
              std::string::npos);
    EXPECT_EQ(with([](SamplerConfig& c) { c.top_p = 0; }), "top_p must be in (0, 1] (got 0)");
    EXPECT_EQ(with([](SamplerConfig& c) { c.top_p = 1.5; }), "top_p must be in (0, 1] (got 1.5)");
    EXPECT_EQ(with([](SamplerConfig& c) { c.top_k = -2; }), "top_k must be in [-1, inf) (got -2)");
    EXPECT_EQ(with([](SamplerConfig& c) { c.min_p = 1; }), "min_p must be in [0, 1) (got 1)");
    EXPECT_EQ(with([](SamplerConfig& c) { c.min_p = -0.1; }), "min_p must be in [0, 1) (got -0.1)");
    EXPECT_EQ(with([](SamplerConfig& c) { c.repetition_penalty = 0; }),
              "repetition_penalty must be in (0, inf) (got 0)");
    EXPECT_EQ(with([](SamplerConfig& c) { c.repetition_penalty = -2; }),
              "repetition_penalty must be in (0, inf) (got -2)");
    EXPECT_EQ(with([](SamplerConfig& c) { c.repetition_penalty = kInf; }),
              "repetition_penalty must be in (0, inf) (got inf)");
    EXPECT_EQ(with([](SamplerConfig& c) { c.repeat_last_n = -2; }),
              "repeat_last_n must be in [-1, inf) (got -2)");
    // Valid edge values.
    EXPECT_EQ(with([](SamplerConfig& c) {
                  c.temperature = 0;
                  c.top_p = 1;
                  c.top_k = -1;
                  c.min_p = 0;
                  c.repeat_last_n = -1;
              }),
              "");
    SamplerConfig bad;
    bad.top_p = 0;
    EXPECT_THROW(Sampler{bad}, pldr::Error);  // the constructor validates
}

// Presence and frequency penalties (OpenAI): the logit of each id drawn c > 0 times so far
// loses c · frequency + presence; the prompt's ids (the history) do not count.
TEST(SamplerPresenceFrequency, SubtractFromTheLogitsOfDrawnTokens) {
    const std::vector<double> logits{1.0, 2.5, 0.3, 2.0, -1.0};
    SamplerConfig c;
    c.presence_penalty = 0.5;
    c.frequency_penalty = 0.25;
    c.seed = 11;
    Sampler s(c);
    const std::vector<int64_t> prompt{0, 0, 4};  // never drawn: no penalty for them
    std::vector<int64_t> counts(5, 0);
    for (int k = 0; k < 6; ++k) ++counts[size_t(s.sample(logits.data(), 5, prompt))];
    std::vector<double> w(5);
    for (size_t i = 0; i < 5; ++i)
        w[i] = logits[i] - (counts[i] > 0 ? double(counts[i]) * 0.25 + 0.5 : 0.0);
    const double mx = *std::max_element(w.begin(), w.end());
    double z = 0;
    for (double x : w) z += std::exp(x - mx);
    const std::vector<double> d = s.distribution(logits.data(), 5, prompt);
    for (size_t i = 0; i < 5; ++i) EXPECT_NEAR(d[i], std::exp(w[i] - mx) / z, 1e-15) << i;
    // A greedy sampler turns away from a token once its penalty outweighs the margin.
    SamplerConfig g;
    g.greedy = true;
    g.frequency_penalty = 0.3;
    Sampler sg(g);
    EXPECT_EQ(sg.sample(logits.data(), 5, kNoHistory), 1);  // 2.5
    EXPECT_EQ(sg.sample(logits.data(), 5, kNoHistory), 1);  // 2.2 > 2.0
    EXPECT_EQ(sg.sample(logits.data(), 5, kNoHistory), 3);  // 1.9 < 2.0
    // Off by default: the same distribution as a sampler without them.
    Sampler off(SamplerConfig{}), off2(SamplerConfig{});
    for (int k = 0; k < 3; ++k) off.sample(logits.data(), 5, kNoHistory);
    EXPECT_EQ(off.distribution(logits.data(), 5, kNoHistory),
              off2.distribution(logits.data(), 5, kNoHistory));
    // Their declared range, OpenAI's.
    SamplerConfig bad;
    bad.presence_penalty = 2.5;
    EXPECT_EQ(error_of(bad), "presence_penalty must be in [-2, 2] (got 2.5)");
    bad = {};
    bad.frequency_penalty = -3;
    EXPECT_EQ(error_of(bad), "frequency_penalty must be in [-2, 2] (got -3)");
}

// top_k -1 (the vLLM spelling) and 0 both mean no top-k: the same distribution as without it.
TEST(SamplerTopK, MinusOneIsOff) {
    const std::vector<double> logits{0.1, 2.0, -1.0, 0.7, 1.5};
    SamplerConfig off, minus;
    minus.top_k = -1;
    Sampler a(off), b(minus);
    EXPECT_EQ(a.distribution(logits.data(), 5, kNoHistory),
              b.distribution(logits.data(), 5, kNoHistory));
    SamplerConfig two;
    two.top_k = 2;
    const auto d = Sampler(two).distribution(logits.data(), 5, kNoHistory);
    EXPECT_EQ(std::count_if(d.begin(), d.end(), [](double p) { return p > 0; }), 2);
}

TEST(SamplerErrors, NonFiniteLogits) {
    Sampler s(SamplerConfig{});
    const std::vector<double> nan{0.0, std::nan(""), 1.0};
    try {
        s.sample(nan.data(), 3, kNoHistory);
        FAIL() << "no error";
    } catch (const pldr::Error& e) {
        EXPECT_NE(std::string(e.what()).find("non-finite logits"), std::string::npos);
    }
    const std::vector<float> nanf{0.0f, 1.0f, std::nanf("")};
    EXPECT_THROW(s.sample(nanf.data(), 3, kNoHistory), pldr::Error);
    const std::vector<double> pinf{0.0, kInf};
    EXPECT_THROW(s.sample(pinf.data(), 2, kNoHistory), pldr::Error);
    const std::vector<double> ninf{-kInf, -kInf};
    EXPECT_THROW(s.sample(ninf.data(), 2, kNoHistory), pldr::Error);
    SamplerConfig g;
    g.greedy = true;
    Sampler sg(g);
    EXPECT_THROW(sg.sample(nan.data(), 3, kNoHistory), pldr::Error);
    EXPECT_THROW(sg.sample(ninf.data(), 2, kNoHistory), pldr::Error);
    EXPECT_THROW(s.sample(nan.data(), 0, kNoHistory), pldr::Error);  // empty vocabulary
    // A partial −inf mask is fine: the masked ids are never drawn.
    const std::vector<double> mask{-kInf, 0.0, -kInf, 0.0};
    for (int i = 0; i < 100; ++i) {
        const auto id = s.sample(mask.data(), 4, kNoHistory);
        EXPECT_TRUE(id == 1 || id == 3);
    }
}

}  // namespace
