// Inference's transposed copies of the layer weights (model/packed.h: keep_transposed_weights,
// ops/linear.h: LinearWeight::dense_t): which weights get one, that it is Wᵀ exactly, that a
// prompt's products read it, that the logits agree with the products over W, and that copies of
// the model, packing and training steps do not keep stale copies.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>
#include <vector>

#include "core/onednn.h"
#include "infer/session.h"
#include "model/init.h"
#include "model/model.h"
#include "train/step.h"

namespace {

TEST(InferTransposed, PromptProductsReadTheCopyAndStepsDropIt) {
    if (!pldr::onednn::built()) GTEST_SKIP() << "built without oneDNN: no copies are kept";
    pldr::Config c;
    c.num_layers = 1;
    c.num_heads = 8;
    c.head_dim = 32;
    c.hidden_size = 256;        // the projections [256, 256]
    c.intermediate_size = 600;  // w1, w2 [600, 256], w3 [256, 600]
    c.vocab_size = 50;
    c.max_position = 96;
    c.A_dff = 8;
    c.num_reslayerA = 1;
    c.num_denseA = 1;
    c.g_type = pldr::GType::LEARNED;
    pldr::Model<float> m(c);
    pldr::init_weights(m, 11);
    const pldr::Model<float> plain = m;  // a copy: no transposed weights
    ASSERT_FALSE(plain.transposed);
    // Layer weights of 4·256² + 3·600·256 floats (2.8 MB): within a budget of that, all of them
    // get a copy; a byte less, none.
    const int64_t all = int64_t(4 * 256 * 256 + 3 * 600 * 256) * 4;
    pldr::keep_transposed_weights(m, all - 1);
    EXPECT_FALSE(m.transposed);
    EXPECT_EQ(m.lw.layers[0].wq.dense_t, nullptr);
    pldr::keep_transposed_weights(m, all);
    ASSERT_TRUE(m.transposed);
    pldr::keep_transposed_weights(m);  // the default budget: kTransposeMaxBytes
    ASSERT_TRUE(m.transposed);
    const pldr::LayerLinears<float>& lw = m.lw.layers[0];
    const pldr::LayerView<float>& w = m.w.layers[0];
    const std::pair<const pldr::LinearWeight<float>*, std::array<int64_t, 2>> kept[] = {
        {&lw.wq, {256, 256}}, {&lw.wk, {256, 256}}, {&lw.wv, {256, 256}}, {&lw.wo, {256, 256}},
        {&lw.w1, {600, 256}}, {&lw.w2, {600, 256}}, {&lw.w3, {256, 600}}};
    const float* dense[] = {w.wq, w.wk, w.wv, w.wo, w.ffn.w1, w.ffn.w2, w.ffn.w3};
    for (size_t j = 0; j < 7; ++j) {
        const auto& [v, shape] = kept[j];
        ASSERT_NE(v->dense_t, nullptr) << j;
        const int64_t O = shape[0], I = shape[1];
        int64_t wrong = 0;
        for (int64_t o = 0; o < O; ++o)
            for (int64_t i = 0; i < I; ++i) wrong += v->dense_t[i * O + o] != dense[j][o * I + i];
        EXPECT_EQ(wrong, 0) << j;
    }
    EXPECT_EQ(m.lw.head.dense_t, nullptr);  // layers only
    EXPECT_EQ(m.transposed->bytes(), all);

    // A 96-token prompt: every product of the layer has ≥ 4M multiply-adds (oneDNN's).
    std::vector<int64_t> ids(96);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(1 + (i * 7) % 49);
    auto prefill = [&](const pldr::Model<float>& mm) {
        pldr::Session<float> s(mm, pldr::CacheMode::KVG, 96);
        return s.prefill(ids);
    };
    const std::vector<float> want = prefill(plain);
    const int64_t calls0 = pldr::onednn::f32_calls();
    const std::vector<float> got = prefill(m);
    EXPECT_GE(pldr::onednn::f32_calls() - calls0, 7);
    // Only the products' summation order differs (float32, K ≤ 600): ~1e-6 of the largest
    // logit; a wrong layout or a wrong weight moves the logits by its order.
    float top = 0, worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        top = std::max(top, std::abs(want[i]));
        worst = std::max(worst, std::abs(got[i] - want[i]));
    }
    EXPECT_LE(worst, 1e-4f * top);
    {  // the products read the copy: a changed copy changes the logits
        pldr::Model<float> probe = plain;
        pldr::keep_transposed_weights(probe);
        const_cast<float*>(probe.transposed->find("decoder.dec_layers.0.ffn.gluw1.weight"))[5] +=
            100.0f;
        const std::vector<float> moved = prefill(probe);
        float diff = 0;
        for (size_t i = 0; i < want.size(); ++i)
            diff = std::max(diff, std::abs(moved[i] - want[i]));
        EXPECT_GT(diff, 1e-2f * top);
    }

    // Copies start without them; packing and training steps drop them.
    const pldr::Model<float> copy = m;
    EXPECT_FALSE(copy.transposed);
    EXPECT_EQ(copy.lw.layers[0].wq.dense_t, nullptr);
    pldr::Model<float> packed = plain;
    pldr::keep_transposed_weights(packed);
    pldr::pack_model(packed, pldr::WeightFormat::BF16);
    EXPECT_FALSE(packed.transposed);
    pldr::TrainConfig tc;
    tc.schedule = {1e-2, 0, 10, 0.1};
    pldr::Trainer<float> tr(m, tc);
    std::vector<int64_t> batch(2 * 33);
    for (size_t i = 0; i < batch.size(); ++i) batch[i] = int64_t(1 + (i * 5) % 49);
    tr.step({batch.data(), 2, 33});
    EXPECT_FALSE(m.transposed);
    EXPECT_EQ(m.lw.layers[0].wq.dense_t, nullptr);
    int64_t changed = 0;
    for (int64_t i = 0; i < 256 * 256; ++i)
        changed += m.w.layers[0].wq[i] != plain.w.layers[0].wq[i];
    EXPECT_GT(changed, 256 * 256 / 2);  // the step moved the weights the copy was made of
    // ... so a prompt after the step sees the new weights: as a plain copy of them does.
    const std::vector<float> after = prefill(m), fresh = prefill(pldr::Model<float>(m));
    EXPECT_EQ(after, fresh);
}

}  // namespace
