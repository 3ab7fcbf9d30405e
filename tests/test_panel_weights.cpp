// Inference's panels (ops/linear.h: panels; model/packed.h: keep_panel_weights): the layout
// exactly, the decode kernel's arithmetic exactly (one FMA chain per output, in input order, the
// same bits whatever the batch and the row's place in it), prompts' products over them through
// oneDNN against the products over W, which weights get them and when, that a mapped model's
// weight pages read the same after they are handed back, that both a prompt and a decode step
// read them, and that copies of the model, packing and training steps keep no stale panels.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/onednn.h"
#include "infer/session.h"
#include "io/model_load.h"
#include "model/init.h"
#include "model/metric_learner.h"
#include "model/model.h"
#include "model/plga_attention.h"
#include "ops/linear.h"
#include "threads_util.h"
#include "train/step.h"

namespace {

std::vector<float> random_values(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = u(rng);
    return v;
}

// The decode kernel's definition: output o of row n is fma(W[o][I-1], x[I-1], … fma(W[o][0],
// x[0], 0)) + b[o].
float chain(const float* w, const float* x, int64_t I, const float* b, int64_t o) {
    float s = 0.0f;
    for (int64_t i = 0; i < I; ++i) s = std::fma(w[i], x[i], s);
    return s + (b ? b[o] : 0.0f);
}

uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

TEST(PanelWeights, LayoutIsOneDnnsBlockedWeightsWithZerosPastTheEdges) {
    for (const auto& [O, I] : {std::pair<int64_t, int64_t>{1, 1}, {48, 16}, {100, 37}, {97, 300}}) {
        const std::vector<float> W = random_values(size_t(O * I), 3);
        std::vector<float> p(size_t(pldr::panel_floats(O, I)), -7.0f);
        pldr::to_panels(W.data(), O, I, p.data());
        const int64_t I16 = (I + 15) / 16 * 16;
        ASSERT_EQ(int64_t(p.size()), pldr::panel_count(O) * 48 * I16);
        int64_t wrong = 0;
        for (int64_t q = 0; q < pldr::panel_count(O); ++q)
            for (int64_t i = 0; i < I16; ++i)
                for (int64_t j = 0; j < 48; ++j) {
                    const int64_t o = q * 48 + j;
                    const float want = o < O && i < I ? W[size_t(o * I + i)] : 0.0f;
                    wrong += bits(p[size_t((q * I16 + i) * 48 + j)]) != bits(want);
                }
        EXPECT_EQ(wrong, 0) << O << "x" << I;
    }
}

TEST(PanelWeights, DecodeKernelIsOneChainPerOutputWhateverTheBatch) {
    if (!pldr::panels_available()) GTEST_SKIP() << "no products over panels on this CPU";
    // Ragged in both directions (O not a multiple of 48, I not one of 16), every batch size the
    // kernel takes, several jobs of the same rows in one call, with and without a bias.
    const int64_t I = 301;
    const int64_t Os[3] = {100, 48, 613};
    std::vector<std::vector<float>> W, P, B;
    for (int j = 0; j < 3; ++j) {
        W.push_back(random_values(size_t(Os[j] * I), 10 + j));
        P.emplace_back(size_t(pldr::panel_floats(Os[j], I)));
        pldr::to_panels(W[j].data(), Os[j], I, P[j].data());
        B.push_back(random_values(size_t(Os[j]), 20 + j));
    }
    const std::vector<float> x = random_values(size_t(pldr::kDenseRows * I), 5);
    for (int64_t N = 1; N <= pldr::kDenseRows; ++N) {
        std::vector<std::vector<float>> out(3);
        pldr::DenseRowsJob jobs[3];
        for (int j = 0; j < 3; ++j) {
            out[j].assign(size_t(N * Os[j]), std::nanf(""));
            jobs[j] = {out[j].data(), nullptr, j == 1 ? nullptr : B[j].data(),
                       Os[j],         nullptr, P[j].data()};
        }
        ASSERT_TRUE(pldr::dense_rows_forward(jobs, 3, x.data(), N, I));
        int64_t wrong = 0;
        for (int j = 0; j < 3; ++j)
            for (int64_t n = 0; n < N; ++n)
                for (int64_t o = 0; o < Os[j]; ++o) {
                    const float want = chain(W[j].data() + o * I, x.data() + n * I, I,
                                             j == 1 ? nullptr : B[j].data(), o);
                    wrong += bits(out[j][size_t(n * Os[j] + o)]) != bits(want);
                }
        EXPECT_EQ(wrong, 0) << "N = " << N;
    }
}

void prompt_product_over_panels_equals_float64(int64_t M) {
    SCOPED_TRACE("M = " + std::to_string(M));
    const int64_t O = 613, I = 301;
    const std::vector<float> W = random_values(size_t(O * I), 1),
                             x = random_values(size_t(M * I), 2), b = random_values(size_t(O), 3);
    std::vector<float> p(size_t(pldr::panel_floats(O, I)));
    pldr::to_panels(W.data(), O, I, p.data());
    for (const float* bias : {b.data(), static_cast<const float*>(nullptr)}) {
        std::vector<float> got(size_t(M * O), std::nanf(""));
        ASSERT_TRUE(
            pldr::onednn::matmul_panels(M, O, I, x.data(), I, p.data(), got.data(), O, bias));
        // Against float64 within the float32 product's bound, (I + 4)·2⁻²⁴·Σ|terms| (a wrong
        // panel, lane or bias is off by the order of a term).
        int64_t wrong = 0;
        for (int64_t n = 0; n < M; ++n)
            for (int64_t o = 0; o < O; ++o) {
                double s = bias ? bias[o] : 0.0, mag = bias ? std::abs(bias[o]) : 0.0;
                for (int64_t i = 0; i < I; ++i) {
                    const double t = double(W[size_t(o * I + i)]) * x[size_t(n * I + i)];
                    s += t;
                    mag += std::abs(t);
                }
                wrong += !(std::abs(got[size_t(n * O + o)] - s) <= (I + 4) * 0x1p-24 * mag);
            }
        EXPECT_EQ(wrong, 0);
    }
}

TEST(PanelWeights, PromptProductsOverPanelsEqualTheProductOverW) {
    if (!pldr::panels_available()) GTEST_SKIP() << "no products over panels on this CPU";
    // 40 rows: one product on the team; 131: rows split over the threads (a B of 738 KB), the
    // split ragged.
    for (const int64_t M : {40, 131}) prompt_product_over_panels_equals_float64(M);
}

pldr::Config small_config() {
    pldr::Config c;
    c.num_layers = 1;
    c.num_heads = 8;
    c.head_dim = 32;
    c.hidden_size = 256;        // the projections [256, 256]
    c.intermediate_size = 600;  // w1, w2 [600, 256], w3 [256, 600]
    c.vocab_size = 50;          // the head [50, 256]
    c.max_position = 96;
    c.A_dff = 8;
    c.num_reslayerA = 1;
    c.num_denseA = 1;
    c.g_type = pldr::GType::LEARNED;
    return c;
}

float max_abs(const std::vector<float>& v) {
    float m = 0;
    for (float f : v) m = std::max(m, std::abs(f));
    return m;
}
float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
    float m = 0;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
    return m;
}

TEST(PanelWeights, PromptsAndDecodeStepsReadThemAndStepsDropThem) {
    if (!pldr::panels_available()) GTEST_SKIP() << "no products over panels on this CPU";
    pldr::Model<float> m(small_config());
    pldr::init_weights(m, 11);
    const pldr::Model<float> plain = m;  // a copy: no panels
    ASSERT_FALSE(plain.panels);
    // The packable weights, 4·256² + 3·600·256 + 50·256 floats, in panels of 48 outputs (K a
    // multiple of 16 already, except w3's 600 → 608): within a budget of that, all of them get
    // panels; a byte less, none (the model owns its parameters).
    const int64_t all = 4 * (4 * 288 * 256 + 2 * 624 * 256 + 288 * 608 + 96 * 256);
    pldr::keep_panel_weights(m, all - 1);
    EXPECT_FALSE(m.panels);
    EXPECT_EQ(m.lw.layers[0].wq.panels, nullptr);
    pldr::keep_panel_weights(m, all);
    ASSERT_TRUE(m.panels);
    EXPECT_EQ(m.panels->bytes(), all);
    pldr::keep_panel_weights(m);  // the default budget: kPanelMaxBytes
    ASSERT_TRUE(m.panels);
    const pldr::LayerLinears<float>& lw = m.lw.layers[0];
    const pldr::LayerView<float>& w = m.w.layers[0];
    const std::pair<const pldr::LinearWeight<float>*, std::pair<int64_t, int64_t>> kept[] = {
        {&lw.wq, {256, 256}}, {&lw.wk, {256, 256}}, {&lw.wv, {256, 256}}, {&lw.wo, {256, 256}},
        {&lw.w1, {600, 256}}, {&lw.w2, {600, 256}}, {&lw.w3, {256, 600}}, {&m.lw.head, {50, 256}}};
    const float* dense[] = {w.wq, w.wk, w.wv, w.wo, w.ffn.w1, w.ffn.w2, w.ffn.w3, m.w.head_w};
    for (size_t j = 0; j < 8; ++j) {
        const auto& [v, shape] = kept[j];
        ASSERT_NE(v->panels, nullptr) << j;
        const auto [O, I] = shape;
        std::vector<float> want(size_t(pldr::panel_floats(O, I)));
        pldr::to_panels(dense[j], O, I, want.data());
        EXPECT_EQ(std::memcmp(v->panels, want.data(), want.size() * 4), 0) << j;
    }

    // A 96-token prompt, then decode steps.
    std::vector<int64_t> ids(96);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(1 + (i * 7) % 49);
    const std::vector<int64_t> prompt(ids.begin(), ids.begin() + 80);
    auto run = [&](const pldr::Model<float>& mm, std::vector<float>* decoded) {
        pldr::Session<float> s(mm, pldr::CacheMode::KVG, 96);
        std::vector<float> logits = s.prefill(prompt);
        if (decoded)
            for (size_t t = 80; t < 84; ++t) {
                const std::vector<float> l = s.decode(ids[t]);
                decoded->insert(decoded->end(), l.begin(), l.end());
            }
        return logits;
    };
    std::vector<float> want_dec, got_dec;
    const std::vector<float> want = run(plain, &want_dec);
    const int64_t calls0 = pldr::onednn::f32_calls();
    const std::vector<float> got = run(m, &got_dec);
    EXPECT_GE(pldr::onednn::f32_calls() - calls0, 7);  // the prompt's products over panels
    // Only the products' summation order differs (float32, K ≤ 600): ~1e-6 of the largest
    // logit; a wrong layout or a wrong weight moves the logits by its order.
    EXPECT_LE(max_diff(got, want), 1e-4f * max_abs(want));
    EXPECT_LE(max_diff(got_dec, want_dec), 1e-4f * max_abs(want_dec));
    {  // both read the panels: a changed panel changes the prompt's and a step's logits
        pldr::Model<float> probe = plain;
        pldr::keep_panel_weights(probe);
        const_cast<float*>(probe.panels->find("decoder.dec_layers.0.ffn.gluw1.weight"))[5] +=
            100.0f;
        std::vector<float> moved_dec;
        const std::vector<float> moved = run(probe, &moved_dec);
        EXPECT_GT(max_diff(moved, want), 1e-3f * max_abs(want));  // 10× the agreement bound
        pldr::Model<float> head = plain;
        pldr::keep_panel_weights(head);
        const std::string hn =
            head.cfg.tie_word_embeddings ? "decoder.embedding.weight" : "final_layer.weight";
        const_cast<float*>(head.panels->find(hn))[3] += 100.0f;
        std::vector<float> head_dec;
        run(head, &head_dec);
        EXPECT_GT(max_diff(head_dec, want_dec), 1e-3f * max_abs(want_dec));
    }

    // Copies start without them; packing and training steps drop them.
    const pldr::Model<float> copy = m;
    EXPECT_FALSE(copy.panels);
    EXPECT_EQ(copy.lw.layers[0].wq.panels, nullptr);
    pldr::Model<float> packed = plain;
    pldr::keep_panel_weights(packed);
    pldr::pack_model(packed, pldr::WeightFormat::BF16);
    EXPECT_FALSE(packed.panels);
    pldr::TrainConfig tc;
    tc.schedule = {1e-2, 0, 10, 0.1};
    pldr::Trainer<float> tr(m, tc);
    std::vector<int64_t> batch(2 * 33);
    for (size_t i = 0; i < batch.size(); ++i) batch[i] = int64_t(1 + (i * 5) % 49);
    tr.step({batch.data(), 2, 33});
    EXPECT_FALSE(m.panels);
    EXPECT_EQ(m.lw.layers[0].wq.panels, nullptr);
    int64_t changed = 0;
    for (int64_t i = 0; i < 256 * 256; ++i)
        changed += m.w.layers[0].wq[i] != plain.w.layers[0].wq[i];
    EXPECT_GT(changed, 256 * 256 / 2);  // the step moved the weights the panels were made of
    // ... so a prompt after the step sees the new weights: as a plain copy of them does.
    const std::vector<float> after = run(m, nullptr), fresh = run(pldr::Model<float>(m), nullptr);
    EXPECT_EQ(after, fresh);
}

TEST(PanelWeights, APromptInFewRegionsGivesTheBitsOfOneRegionPerStep) {
    if (!pldr::panels_available()) GTEST_SKIP() << "no products over panels on this CPU";
    pldr_test::ScopedThreads two(2);  // ctest runs one thread: the team must split the work
    pldr::Config c = small_config();
    c.num_layers = 2;
    c.A_dff = 16;  // the learner's 256 rows worth two blocks: one per thread, 4 heads each
    pldr::Model<float> plain(c);
    pldr::init_weights(plain, 13);
    pldr::Model<float> m = plain;
    pldr::keep_panel_weights(m);
    const pldr::LayerLinears<float>& lw = m.lw.layers[0];
    const int64_t d = c.hidden_size, F = c.intermediate_size;
    ASSERT_EQ(pldr::metric_learner_pair_blocks(c, c.num_heads), 2);
    // 79 rows: thread 0 takes 39, so its SwiGLU gate ends 39·600 = 23,400 elements in, 8 past a
    // multiple of 16 (a ragged end the vector exp must cover as the whole range does); 90 rows
    // split at 45. Every projection of the layer splits such a prompt's rows (the precondition
    // of the row-wise region); 16 rows are a decode kernel's, which does not. Without panels
    // only the heads run in one region.
    for (const int64_t P : {79, 90}) {
        SCOPED_TRACE("P = " + std::to_string(P));
        ASSERT_TRUE(pldr::linear_splits_rows(lw.wq, P, d, d));
        ASSERT_TRUE(pldr::linear_splits_rows(lw.w1, P, d, F));
        ASSERT_TRUE(pldr::linear_splits_rows(lw.w3, P, F, d));
        EXPECT_FALSE(pldr::linear_splits_rows(plain.lw.layers[0].wq, P, d, d));
        std::vector<int64_t> prompt(static_cast<size_t>(P));
        for (int64_t i = 0; i < P; ++i) prompt[size_t(i)] = 1 + (i * 11) % 49;
        // Keeping the activations (audits) the heads run one region per step; without (a plain
        // prompt) in one region.
        for (const pldr::Model<float>* model : {&m, &plain})
            for (const bool keep : {false, true}) {
                auto run = [&](bool few) {
                    pldr::prompt_in_few_regions() = few;
                    pldr::Session<float> s(*model, pldr::CacheMode::KVG, 96);
                    s.keep_activations(keep);
                    std::vector<float> logits = s.prefill(prompt);
                    const std::vector<float> next =
                        s.decode(7);  // reads the cache the prompt wrote
                    logits.insert(logits.end(), next.begin(), next.end());
                    pldr::prompt_in_few_regions() = true;
                    return logits;
                };
                const std::vector<float> steps = run(false), few = run(true);
                ASSERT_EQ(steps.size(), few.size());
                int64_t wrong = 0;
                for (size_t i = 0; i < steps.size(); ++i) wrong += bits(steps[i]) != bits(few[i]);
                EXPECT_EQ(wrong, 0) << (model == &m ? "panels" : "no panels") << ", keep " << keep;
                EXPECT_GT(max_abs(steps), 0.0f);
            }
    }
    EXPECT_FALSE(pldr::linear_splits_rows(lw.wq, pldr::kDenseRows, d, d));
    // The rule's edges: from 32 rows a thread (64 on two), and a weight of at most 1 MB.
    EXPECT_FALSE(pldr::linear_splits_rows(lw.wq, 63, d, d));
    EXPECT_TRUE(pldr::linear_splits_rows(lw.wq, 64, d, d));
    pldr::LinearWeight<float> big(m.w.layers[0].wq);
    big.panels = lw.wq.panels;  // only its shape is asked about below
    EXPECT_TRUE(pldr::linear_splits_rows(big, 64, 256, 1024));   // 1,048,576 bytes
    EXPECT_FALSE(pldr::linear_splits_rows(big, 64, 256, 1025));  // 1,049,600 bytes
}

TEST(PanelWeights, AMappedModelKeepsThemWhateverTheBudgetAndKeepsWhatWasWritten) {
    if (!pldr::panels_available()) GTEST_SKIP() << "no products over panels on this CPU";
    pldr::Model<float> src(small_config());
    pldr::init_weights(src, 12);
    const std::string dir =
        (std::filesystem::temp_directory_path() / ("pldr_panels_" + std::to_string(::getpid())))
            .string();
    std::filesystem::remove_all(dir);
    pldr::save_model(src, dir);
    pldr::Model<float> m = pldr::load_model<float>(dir, true, /*map_file=*/true);
    ASSERT_TRUE(m.params.is_mapped());
    // A write before the panels are built: that page is a private copy now, the only one of the
    // value, and must stay (a page in the middle of w1, whose neighbours are handed back).
    const pldr::ParamEntry* w1 = m.layout.find("decoder.dec_layers.0.ffn.gluw1.weight");
    ASSERT_NE(w1, nullptr);
    const int64_t at = w1->offset + w1->numel / 2;
    m.params[size_t(at)] += 1.0f;
    src.params[size_t(at)] += 1.0f;
    pldr::keep_panel_weights(m, 0);  // no budget: the mapped weights' pages are handed back
    ASSERT_TRUE(m.panels);
    // Every parameter reads as saved or written (the handed-back pages fault in from the file).
    EXPECT_TRUE(m.params == src.params);
    std::vector<float> want(size_t(pldr::panel_floats(600, 256)));
    pldr::to_panels(src.params.data() + w1->offset, 600, 256, want.data());
    EXPECT_EQ(std::memcmp(m.panels->find(w1->name), want.data(), want.size() * 4), 0);
    const pldr::Model<float> owned = pldr::load_model<float>(dir, true, /*map_file=*/false);
    ASSERT_FALSE(owned.params.is_mapped());
    pldr::Model<float> none = owned;
    pldr::keep_panel_weights(none, 0);
    EXPECT_FALSE(none.panels);  // owned: the budget holds
    std::filesystem::remove_all(dir);
}

}  // namespace
