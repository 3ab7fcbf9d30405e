// Inference sessions, generation and collapse: fixed-G caches are exact, seeds reproduce,
// batched = one at a time, G-cache files round-trip, collapse is a no-op on fixed-G models and
// its KL report matches an independent computation.
#include <gtest/gtest.h>

#include <cmath>

#include "cli_util.h"
#include "core/rng.h"
#include "infer/collapse.h"
#include "infer/generate.h"
#include "io/model_load.h"
#include "model/init.h"

namespace {

pldr::Config cfg(bool learned) {
    pldr::Config c;
    c.num_layers = 2;
    c.num_heads = 3;
    c.head_dim = 6;
    c.hidden_size = 18;
    c.intermediate_size = 48;
    c.vocab_size = 41;
    c.max_position = 48;
    c.A_dff = 12;
    c.num_reslayerA = 2;
    c.num_denseA = 2;
    c.g_type = learned ? pldr::GType::LEARNED : pldr::GType::EXTERNAL;
    return c;
}

template <typename T>
pldr::Model<T> random_model(bool learned, uint64_t seed) {
    pldr::Model<T> m(cfg(learned));
    pldr::init_weights(m, seed);
    pldr::Rng r(seed + 7);
    for (auto& p : m.params) p += T(0.02 * r.normal());
    for (auto& g : m.G_fixed) g = T(r.uniform());  // a random fixed G (like golden d)
    return m;
}

TEST(InferSession, FixedGCachedEqualsUncached) {
    auto m = random_model<double>(false, 11);
    // No pad in the prompt: the reference's decode steps attend to every cached key (mask None),
    // so a padded prompt makes cached and uncached differ by design (spec §1.9, §4.5).
    const std::vector<int64_t> prompt{5, 9, 1, 17, 3, 22, 8};
    for (auto mode : {pldr::CacheMode::KVG, pldr::CacheMode::KV}) {
        pldr::Session<double> c(m, mode), u(m, pldr::CacheMode::NONE);
        auto a = c.prefill(prompt);
        auto b = u.prefill(prompt);
        ASSERT_EQ(int64_t(a.size()), m.cfg.vocab_size);
        ASSERT_EQ(b.size(), a.size());
        double md = 0, mr = 0;
        for (int step = 0; step < 12; ++step) {
            for (size_t i = 0; i < a.size(); ++i) {
                md = std::max(md, std::abs(a[i] - b[i]));
                mr = std::max(mr, std::abs(b[i]));
            }
            const int64_t next = 1 + step * 3 % 40;
            a = c.decode(next);
            b = u.decode(next);
            ASSERT_EQ(b.size(), a.size());
        }
        EXPECT_GT(mr, 0.0);
        EXPECT_LE(md, 1e-12 * mr) << pldr::cache_mode_name(mode);
    }
}

TEST(InferSession, LearnedGCachedDiffersFromUncached) {
    // For a learned G the cached operator is the prompt's: the uncached logits differ.
    auto m = random_model<double>(true, 12);
    pldr::Session<double> c(m, pldr::CacheMode::KVG), u(m, pldr::CacheMode::NONE);
    c.prefill({4, 8, 15, 16});
    u.prefill({4, 8, 15, 16});
    auto a = c.decode(23);
    auto b = u.decode(23);
    ASSERT_EQ(int64_t(a.size()), m.cfg.vocab_size);
    ASSERT_EQ(b.size(), a.size());
    double md = 0;
    for (size_t i = 0; i < a.size(); ++i) md = std::max(md, std::abs(a[i] - b[i]));
    EXPECT_GT(md, 1e-6);
}

TEST(InferGenerate, SameSeedSameTokensAndBatchEqualsSingle) {
    auto m = random_model<float>(true, 13);
    pldr::GenerateOptions o;
    o.max_new = 12;
    o.stop_at_eos = false;
    o.sampler.temperature = 0.9;
    o.sampler.top_p = 0.95;
    o.sampler.seed = 42;
    const std::vector<std::vector<int64_t>> prompts{{1, 2, 3}, {7, 8, 9, 10, 11}, {30}};
    auto a = pldr::generate(m, prompts[1], o);
    auto b = pldr::generate(m, prompts[1], o);
    ASSERT_EQ(a.ids.size(), 12u);  // no EOS stop: every step runs
    EXPECT_EQ(a.ids, b.ids);
    o.sampler.seed = 43;
    auto c = pldr::generate(m, prompts[1], o);
    EXPECT_NE(a.ids, c.ids);
    o.sampler.seed = 42;
    auto batch = pldr::generate_batch(m, prompts, o);
    ASSERT_EQ(batch.size(), 3u);
    for (size_t i = 0; i < prompts.size(); ++i) {
        auto single = pldr::generate(m, prompts[i], o);
        ASSERT_EQ(single.steps.size(), 12u);
        EXPECT_EQ(batch[i].ids, single.ids) << i;
        ASSERT_EQ(batch[i].steps.size(), single.steps.size());
        for (size_t k = 0; k < single.steps.size(); ++k)
            EXPECT_EQ(batch[i].steps[k].logprob, single.steps[k].logprob);
    }
}

TEST(InferGCache, SaveLoadAndPresetRun) {
    auto m = random_model<double>(true, 14);
    const std::vector<int64_t> prompt{3, 14, 15, 9, 26};
    pldr::Session<double> s(m, pldr::CacheMode::KVG);
    s.prefill(prompt);
    const std::string path = cli_test::tmp_dir("gcache") + "/g.safetensors";
    pldr::save_g_cache(s.g_cache(), m.cfg, path);
    auto g = pldr::load_g_cache<double>(path, m.cfg);
    ASSERT_EQ(int64_t(s.g_cache().size()), m.cfg.num_layers);
    ASSERT_EQ(g.size(), s.g_cache().size());
    for (size_t l = 0; l < g.size(); ++l) {
        ASSERT_EQ(g[l].G.numel(), m.cfg.num_heads * m.cfg.head_dim * m.cfg.head_dim);
        EXPECT_EQ(g[l].G.data, s.g_cache()[l].G.data);
        EXPECT_EQ(g[l].A.data, s.g_cache()[l].A.data);
    }
    // A session preset with the prompt's own G-cache reproduces the kvg run exactly.
    pldr::GenerateOptions o;
    o.max_new = 6;
    o.stop_at_eos = false;
    o.sampler.greedy = true;
    auto plain = pldr::generate(m, prompt, o);
    auto preset = pldr::generate(m, prompt, o, &g);
    ASSERT_EQ(plain.steps.size(), 6u);
    ASSERT_EQ(preset.steps.size(), 6u);
    EXPECT_EQ(plain.ids, preset.ids);
    for (size_t k = 0; k < plain.steps.size(); ++k)
        EXPECT_EQ(plain.steps[k].logprob, preset.steps[k].logprob);
    // Wrong shapes are rejected.
    pldr::Config other = m.cfg;
    other.head_dim = 4;
    other.hidden_size = 12;
    EXPECT_THROW(pldr::load_g_cache<double>(path, other), pldr::Error);
}

TEST(InferCollapse, FixedGModelIsANoOp) {
    auto m = random_model<double>(false, 15);
    auto c = pldr::collapse_model(m, {});
    EXPECT_EQ(c.params, m.params);
    EXPECT_EQ(c.G_fixed, m.G_fixed);
}

TEST(InferCollapse, CollapsedModelUsesTheCacheAndKlMatchesIndependentComputation) {
    auto m = random_model<double>(true, 16);
    auto g = pldr::reference_g_cache(m);
    auto c = pldr::collapse_model(m, g);
    EXPECT_FALSE(c.cfg.learned_g());
    // The collapsed model = the full model running with the preset G-cache.
    pldr::GenerateOptions o;
    o.max_new = 5;
    o.stop_at_eos = false;
    o.sampler.greedy = true;
    auto a = pldr::generate(c, {5, 6, 7}, o);
    auto b = pldr::generate(m, {5, 6, 7}, o, &g);
    ASSERT_EQ(a.steps.size(), 5u);
    ASSERT_EQ(b.steps.size(), 5u);
    EXPECT_EQ(a.ids, b.ids);
    for (size_t k = 0; k < a.steps.size(); ++k)
        EXPECT_NEAR(a.steps[k].logprob, b.steps[k].logprob, 1e-12);
    // KL report vs a direct computation in long double over the same windows.
    std::vector<int64_t> text;
    pldr::Rng r(5);
    for (int i = 0; i < 70; ++i) text.push_back(1 + int64_t(r.below(40)));
    const int64_t W = 20;
    auto rep = pldr::compare_models(m, c, text, W);
    long double kl = 0, agree = 0;
    int64_t n = 0;
    pldr::Activations<double> xa, xb;
    const int64_t V = m.cfg.vocab_size;
    for (size_t st = 0; st + 1 < text.size(); st += W - 1) {
        const int64_t S = std::min<int64_t>(W, int64_t(text.size() - st));
        pldr::forward(m, text.data() + st, 1, S, xa);
        pldr::forward(c, text.data() + st, 1, S, xb);
        for (int64_t s = 0; s + 1 < S; ++s, ++n) {
            long double za = 0, zb = 0;
            for (int64_t v = 0; v < V; ++v) {
                za += std::exp((long double)xa.logits[s * V + v]);
                zb += std::exp((long double)xb.logits[s * V + v]);
            }
            int64_t ia = 0, ib = 0;
            for (int64_t v = 0; v < V; ++v) {
                long double pa = std::exp((long double)xa.logits[s * V + v]) / za;
                long double pb = std::exp((long double)xb.logits[s * V + v]) / zb;
                kl += pa * std::log(pa / pb);
                if (xa.logits[s * V + v] > xa.logits[s * V + ia]) ia = v;
                if (xb.logits[s * V + v] > xb.logits[s * V + ib]) ib = v;
            }
            agree += ia == ib;
        }
    }
    ASSERT_EQ(n, 69);  // windows of 20 overlapping by one token: every next token once
    ASSERT_EQ(rep.tokens, n);
    EXPECT_NEAR(rep.kl_mean, double(kl / n), 1e-12);
    EXPECT_NEAR(rep.top1_agree, double(agree / n), 1e-15);
    EXPECT_GT(rep.kl_mean, 0.0);  // a random model does not collapse
}

}  // namespace
