// Inference sessions, generation and collapse: fixed-G caches are exact, seeds reproduce,
// batched = one at a time, G-cache files round-trip, collapse is a no-op on fixed-G models and
// its KL report matches an independent computation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "cli_util.h"
#include "core/rng.h"
#include "infer/collapse.h"
#include "infer/generate.h"
#include "io/model_load.h"
#include "model/init.h"
#include "model/packed.h"
#include "ops/linear.h"

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

// Relative tolerances of batched against single logprobs (|a − b| ≤ tol · max(1, |b|)): a
// batched step computes the projections, the FFN and the head as [B,d]·Wᵀ matrix products where
// a single decode runs matrix-vector products, so only the summation order differs. Float64: the
// measured worst is 7e-16 (a few ulps), so 1e-12 leaves the margin of the cache harness
// (tests/test_cache_cases.cpp). Float32: the measured worst is 3e-7 (a few ulps of float32's
// 6e-8 through two layers and the log-softmax); 5e-6 allows for other BLAS kernels, while a
// wrong cache, position or operator moves logprobs by 1e-3 or more.
constexpr double kBatchTol64 = 1e-12;
constexpr double kBatchTol32 = 5e-6;

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
        // Batched steps round differently from single ones (kBatchTol32).
        for (size_t k = 0; k < single.steps.size(); ++k)
            EXPECT_NEAR(batch[i].steps[k].logprob, single.steps[k].logprob,
                        kBatchTol32 * std::max(1.0, std::abs(single.steps[k].logprob)));
    }
}

// ---- batched generation (generate_batch, decode_step) against one-at-a-time generation ----

template <typename T>
double batch_tol() {
    return sizeof(T) == 8 ? kBatchTol64 : kBatchTol32;
}

// Every batched result equals its one-at-a-time generation: the same ids, the same number of
// decode calls, and logprobs (of the chosen ids and of the top alternatives) within batch_tol.
template <typename T>
void expect_batch_equals_single(const pldr::Model<T>& m,
                                const std::vector<std::vector<int64_t>>& prompts,
                                const std::vector<pldr::GenerateOptions>& opts,
                                const pldr::GCache<T>* preset = nullptr) {
    const auto batch = pldr::generate_batch(m, prompts, opts, preset);
    ASSERT_EQ(batch.size(), prompts.size());
    const double tol = batch_tol<T>();
    for (size_t i = 0; i < prompts.size(); ++i) {
        SCOPED_TRACE(testing::Message() << "prompt " << i);
        const auto one = pldr::generate(m, prompts[i], opts[i], preset);
        EXPECT_EQ(batch[i].prompt_ids, prompts[i]);
        ASSERT_EQ(batch[i].ids, one.ids);
        ASSERT_EQ(batch[i].steps.size(), one.steps.size());
        EXPECT_EQ(batch[i].decode_calls, one.decode_calls);
        for (size_t k = 0; k < one.steps.size(); ++k) {
            const auto& a = batch[i].steps[k];
            const auto& b = one.steps[k];
            EXPECT_EQ(a.id, b.id);
            EXPECT_NEAR(a.logprob, b.logprob, tol * std::max(1.0, std::abs(b.logprob))) << k;
            ASSERT_EQ(a.top.size(), b.top.size());
            for (size_t j = 0; j < b.top.size(); ++j)
                EXPECT_NEAR(a.top[j].second, b.top[j].second,
                            tol * std::max(1.0, std::abs(b.top[j].second)));
        }
    }
}

// Prompts of different lengths (1 to 9 tokens), so the sequences attend over different numbers
// of keys and rotate at different positions in every step.
const std::vector<std::vector<int64_t>> kBatchPrompts{
    {1, 2, 3}, {7, 8, 9, 10, 11}, {30}, {5, 6, 7, 8, 9, 10, 11, 12, 13}, {22, 4}};

template <typename T>
void batch_equals_single_all_settings() {
    for (bool learned : {true, false})
        for (auto mode : {pldr::CacheMode::KVG, pldr::CacheMode::KV})
            for (bool greedy : {true, false}) {
                SCOPED_TRACE(testing::Message() << (learned ? "learned G" : "fixed G") << ", "
                                                << pldr::cache_mode_name(mode) << ", "
                                                << (greedy ? "greedy" : "sampled"));
                const auto m = random_model<T>(learned, 21);
                pldr::GenerateOptions o;
                o.max_new = 12;
                o.stop_at_eos = false;
                o.cache = mode;
                o.sampler.greedy = greedy;
                o.sampler.temperature = 0.9;
                o.sampler.top_p = 0.95;
                o.sampler.repetition_penalty = 1.1;
                o.sampler.seed = 42;
                const std::vector<pldr::GenerateOptions> opts(kBatchPrompts.size(), o);
                expect_batch_equals_single(m, kBatchPrompts, opts);
                // A preset G-cache (another prompt's operator) for every sequence.
                pldr::Session<T> s(m, pldr::CacheMode::KVG);
                s.prefill({3, 1, 4, 1, 5, 9, 2, 6});
                const pldr::GCache<T> g = s.g_cache();
                expect_batch_equals_single(m, kBatchPrompts, opts, &g);
            }
}

TEST(InferBatch, GenerateBatchEqualsSingleFloat64) {
    batch_equals_single_all_settings<double>();
}

TEST(InferBatch, GenerateBatchEqualsSingleFloat32) {
    batch_equals_single_all_settings<float>();
}

// With the float32 rows kernel (AVX2 and up, ops/dense_rows.cpp) every product of a decode step
// gives a row the same bits whatever the batch, and the attention of each sequence runs the same
// loops (query_row_attention): a batched step then equals single steps bit for bit, logits and
// all, in every cache mode and with learned or fixed G. (Without the kernel the BLAS products of
// a batch round differently: GenerateBatchEqualsSingleFloat32's tolerance.) The same with the
// weights in panels, as Model::load keeps them: every product of the step, the head's included,
// reads the panels in both.
TEST(InferBatch, BatchedFloat32StepsEqualSingleStepsBitForBit) {
    float probe_out = 0, probe_in = 1, probe_w = 1;
    if (!pldr::dense_rows_forward(&probe_out, &probe_in, &probe_w, nullptr, 1, 1, 1))
        GTEST_SKIP() << "no rows kernel on this CPU (or PLDR_KERNELS=scalar)";
    for (bool panels : {false, true})
        for (bool learned : {true, false})
            for (auto mode : {pldr::CacheMode::KVG, pldr::CacheMode::KV}) {
                if (panels && !pldr::panels_available()) continue;
                SCOPED_TRACE(testing::Message() << (panels ? "panels, " : "")
                                                << (learned ? "learned G, " : "fixed G, ")
                                                << pldr::cache_mode_name(mode));
                auto m = random_model<float>(learned, 31);
                if (panels) {
                    pldr::keep_panel_weights(m);
                    ASSERT_NE(m.lw.head.panels, nullptr);
                }
                std::vector<std::unique_ptr<pldr::Session<float>>> batch, single;
                for (const auto& p : kBatchPrompts) {
                    batch.push_back(std::make_unique<pldr::Session<float>>(m, mode));
                    single.push_back(std::make_unique<pldr::Session<float>>(m, mode));
                    batch.back()->prefill(p);
                    single.back()->prefill(p);
                }
                std::vector<pldr::Session<float>*> ptrs;
                for (auto& s : batch) ptrs.push_back(s.get());
                for (int step = 0; step < 6; ++step) {
                    std::vector<int64_t> ids;
                    for (size_t i = 0; i < batch.size(); ++i) {  // each its own next token
                        const auto& lg = single[i]->logits();
                        ids.push_back(int64_t(std::max_element(lg.begin(), lg.end()) - lg.begin() +
                                              int64_t(i) * 7) %
                                      m.cfg.vocab_size);
                    }
                    pldr::decode_step<float>(ptrs, ids, false);
                    for (size_t i = 0; i < batch.size(); ++i) {
                        single[i]->decode(ids[i]);
                        ASSERT_EQ(batch[i]->logits(), single[i]->logits())
                            << "sequence " << i << ", step " << step;
                    }
                }
            }
}

TEST(InferBatch, SequencesThatFinishEarlyLeaveTheStepAndTheRestStillMatch) {
    for (bool learned : {true, false}) {
        SCOPED_TRACE(learned ? "learned G" : "fixed G");
        auto m = random_model<double>(learned, 22);
        pldr::GenerateOptions o;
        o.max_new = 10;
        o.stop_at_eos = false;
        o.sampler.temperature = 0.8;
        o.sampler.seed = 7;
        // Different token limits, modes and seeds per prompt: sequences leave after 1, 3 and 6
        // tokens while the others go on.
        std::vector<pldr::GenerateOptions> opts(kBatchPrompts.size(), o);
        opts[0].max_new = 3;
        opts[1].cache = pldr::CacheMode::KV;
        opts[2].max_new = 1;
        opts[3].max_new = 6;
        opts[3].sampler.seed = 8;
        opts[4].cache = pldr::CacheMode::NONE;
        const auto free_run = pldr::generate_batch(m, kBatchPrompts, opts);
        EXPECT_EQ(free_run[0].ids.size(), 3u);
        EXPECT_EQ(free_run[1].ids.size(), 10u);
        EXPECT_EQ(free_run[2].ids.size(), 1u);
        EXPECT_EQ(free_run[2].decode_calls, 0);
        EXPECT_EQ(free_run[3].ids.size(), 6u);
        expect_batch_equals_single(m, kBatchPrompts, opts);
        // An EOS mid-way: the id that prompt 1 generates at step 4 (not earlier) becomes EOS;
        // prompt 1 then stops there, and any other prompt that meets it stops too.
        const auto& ids1 = free_run[1].ids;
        size_t k = 4;
        while (k < ids1.size() && std::find(ids1.begin(), ids1.begin() + int64_t(k), ids1[k]) !=
                                      ids1.begin() + int64_t(k))
            ++k;
        ASSERT_LT(k, ids1.size()) << "no fresh id to use as EOS";
        m.cfg.eos_token_id = ids1[k];
        for (auto& x : opts) x.stop_at_eos = true;
        const auto stopped = pldr::generate_batch(m, kBatchPrompts, opts);
        EXPECT_EQ(stopped[1].ids,
                  std::vector<int64_t>(ids1.begin(), ids1.begin() + int64_t(k) + 1));
        expect_batch_equals_single(m, kBatchPrompts, opts);
    }
}

// The callback of the one generation loop: called per token of each sequence with its index,
// in prompt order; returning false ends that sequence ("callback") while the others go on with
// the tokens of the free run; a sequence that its token limit ends at the same token reports
// "callback" too, EOS keeps "eos".
TEST(InferBatch, CallbackStopsOneSequenceAndTheOthersGoOn) {
    auto m = random_model<double>(true, 24);
    pldr::GenerateOptions o;
    o.max_new = 6;
    o.stop_at_eos = false;
    const auto free_run = pldr::generate_batch<double>(m, kBatchPrompts, o);
    std::vector<std::pair<size_t, size_t>> calls;  // (index, tokens so far)
    const auto cut = pldr::generate_batch<double>(
        m, kBatchPrompts, o, nullptr, nullptr, [&](size_t i, const pldr::GenResult& r) {
            calls.emplace_back(i, r.ids.size());
            return !(i == 1 && r.ids.size() == 2) && !(i == 3 && r.ids.size() == 6);
        });
    ASSERT_EQ(cut.size(), kBatchPrompts.size());
    for (size_t i = 0; i < cut.size(); ++i) {
        SCOPED_TRACE(testing::Message() << "prompt " << i);
        const size_t n = i == 1 ? 2 : 6;
        ASSERT_EQ(cut[i].ids.size(), n);
        EXPECT_EQ(cut[i].ids, std::vector<int64_t>(free_run[i].ids.begin(),
                                                   free_run[i].ids.begin() + int64_t(n)));
        EXPECT_EQ(cut[i].finish_reason, i == 1 || i == 3 ? "callback" : "length");
        EXPECT_EQ(cut[i].decode_calls, int64_t(n) - 1);
        EXPECT_TRUE(cut[i].text.empty());  // no tokenizer
    }
    // Every token of every sequence once, step by step in prompt order.
    std::vector<std::pair<size_t, size_t>> want;
    for (size_t k = 1; k <= 6; ++k)
        for (size_t i = 0; i < kBatchPrompts.size(); ++i)
            if (i != 1 || k <= 2) want.emplace_back(i, k);
    EXPECT_EQ(calls, want);
    // EOS wins over the callback at the same token; otherwise the callback names itself.
    const auto stop_now = [](size_t, const pldr::GenResult&) { return false; };
    o.stop_at_eos = true;
    m.cfg.eos_token_id = free_run[0].ids[0];
    auto one = pldr::generate<double>(m, kBatchPrompts[0], o, nullptr, nullptr, stop_now);
    EXPECT_EQ(one.ids, std::vector<int64_t>{free_run[0].ids[0]});
    EXPECT_EQ(one.finish_reason, "eos");
    m.cfg.eos_token_id = (free_run[0].ids[0] + 1) % m.cfg.vocab_size;
    one = pldr::generate<double>(m, kBatchPrompts[0], o, nullptr, nullptr, stop_now);
    EXPECT_EQ(one.ids, std::vector<int64_t>{free_run[0].ids[0]});
    EXPECT_EQ(one.finish_reason, "callback");
    // Stop strings need a tokenizer.
    o.stop = {"x"};
    EXPECT_THROW(pldr::generate(m, kBatchPrompts[0], o), pldr::Error);
}

TEST(InferBatch, DecodeStepRejectsBadInputsBeforeChangingAnySession) {
    auto m = random_model<double>(true, 23);
    auto m2 = random_model<double>(true, 23);  // equal weights, another model
    pldr::Session<double> a(m, pldr::CacheMode::KVG), b(m, pldr::CacheMode::KV),
        full(m, pldr::CacheMode::KVG, 3), fresh(m, pldr::CacheMode::KVG),
        c(m2, pldr::CacheMode::KVG);
    a.prefill({1, 2, 3});
    b.prefill({4, 5});
    full.prefill({6, 7, 8});
    c.prefill({1, 2});
    const std::vector<double> la = a.logits(), lb = b.logits();
    auto fails = [&](const std::vector<pldr::Session<double>*>& ss, const std::vector<int64_t>& ids,
                     const std::string& what) {
        try {
            pldr::decode_step(ss, ids);
            ADD_FAILURE() << "no error for " << what;
        } catch (const pldr::Error& e) {
            EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        }
        // Nothing moved.
        EXPECT_EQ(a.length(), 3);
        EXPECT_EQ(b.length(), 2);
        EXPECT_EQ(a.logits(), la);
        EXPECT_EQ(b.logits(), lb);
    };
    fails({&a, &b}, {1}, "2 sessions but 1 token ids");
    fails({&a, nullptr}, {1, 2}, "session 1 is null");
    fails({&a, &b, &a}, {1, 2, 3}, "session 2 is session 0 again");
    fails({&a, &c}, {1, 2}, "session 1 belongs to another model");
    fails({&a, &fresh}, {1, 2}, "session 1: decode before prefill");
    fails({&a, &full}, {1, 2}, "session 1: the context is full (3 tokens)");
    fails({&a, &b}, {1, 41}, "session 1: token id 41 is outside the vocabulary [0, 41)");
    fails({&b, &a}, {-1, 2}, "session 0: token id -1 is outside the vocabulary");
    // An empty step is a no-op; a valid one moves both.
    pldr::decode_step<double>({}, {});
    pldr::decode_step<double>({&a, &b}, {9, 10});
    EXPECT_EQ(a.tokens(), (std::vector<int64_t>{1, 2, 3, 9}));
    EXPECT_EQ(b.tokens(), (std::vector<int64_t>{4, 5, 10}));
}

TEST(InferBatch, WithoutActivationsLastIsEmptyAndLogitsAreTheSame) {
    auto m = random_model<double>(true, 24);
    pldr::Session<double> a(m, pldr::CacheMode::KVG), b(m, pldr::CacheMode::KV),
        a2(m, pldr::CacheMode::KVG), b2(m, pldr::CacheMode::KV);
    for (auto* s : {&a, &a2}) s->prefill({1, 2, 3});
    for (auto* s : {&b, &b2}) s->prefill({4, 5, 6, 7, 8});
    pldr::decode_step<double>({&a, &b}, {9, 10}, true);
    pldr::decode_step<double>({&a2, &b2}, {9, 10}, false);
    EXPECT_EQ(a.logits(), a2.logits());
    EXPECT_EQ(b.logits(), b2.logits());
    EXPECT_EQ(a.last().S, 1);
    ASSERT_EQ(int64_t(a.last().layers.size()), m.cfg.num_layers);
    EXPECT_EQ(a.last().layers[0].E.shape, (pldr::Shape{1, m.cfg.num_heads, 1, 4}));
    EXPECT_EQ(b.last().layers[0].E.shape, (pldr::Shape{1, m.cfg.num_heads, 1, 6}));
    EXPECT_EQ(a2.last().S, 0);
    EXPECT_TRUE(a2.last().layers.empty());
    // A later single decode fills it again.
    a2.decode(11);
    EXPECT_EQ(a2.last().layers[0].E.shape, (pldr::Shape{1, m.cfg.num_heads, 1, 5}));
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
