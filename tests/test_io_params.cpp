// Expected checkpoint tensors (spec §9.1, §3.7, §5.5, §11.6) and checks against files.
#include <gtest/gtest.h>
#include <stdlib.h>
#include "error_util.h"

#include <filesystem>
#include <string>

#include "core/error.h"
#include "io/model_dir.h"
#include "io/param_names.h"

using namespace pldr;

namespace {

Config make(int64_t V, int64_t d, int64_t dff, int64_t L, int64_t H, int64_t dk, int64_t A_dff,
            int64_t R, int64_t N, GType g = GType::LEARNED) {
    Config c;
    c.vocab_size = V;
    c.hidden_size = d;
    c.intermediate_size = dff;
    c.num_layers = L;
    c.num_heads = H;
    c.head_dim = dk;
    c.A_dff = A_dff;
    c.num_reslayerA = R;
    c.num_denseA = N;
    c.g_type = g;
    return c;
}

Config a_tiny() {
    return make(50, 16, 42, 2, 2, 8, 12, 2, 2);
}

const ParamSpec* find(const std::vector<ParamSpec>& v, const std::string& n) {
    for (const auto& p : v)
        if (p.name == n) return &p;
    return nullptr;
}

}  // namespace

TEST(ParamNames, CountsOfKnownConfigs) {
    EXPECT_EQ(count_params(a_tiny()), 12154);
    EXPECT_EQ(count_params(make(211, 64, 170, 3, 4, 16, 24, 3, 2)), 214799);
    EXPECT_EQ(count_params(make(50, 16, 42, 2, 2, 8, 12, 2, 2, GType::EXTERNAL)), 8218);
    // Spec §5.5.
    EXPECT_EQ(count_params(make(32000, 896, 2389, 5, 14, 64, 170, 8, 2)), 109689362);
    EXPECT_EQ(count_params(make(32000, 896, 2389, 5, 14, 64, 180, 8, 2)), 109844562);
    EXPECT_EQ(count_params(make(32000, 896, 2389, 5, 14, 64, 170, 8, 2, GType::IDENTITY)),
              105606482);
    EXPECT_EQ(count_params(Config{}), 109689362);  // Config defaults are the released v51 shape
}

TEST(ParamNames, ReferenceOrderForTinyV510) {
    auto v = expected_params(a_tiny());
    ASSERT_EQ(v.size(),
              1u + 2 * 53 + 4);  // embedding, 2 layers of 53 tensors, LN, head (golden: 111)
    const std::string l0 = "decoder.dec_layers.0.";
    const std::vector<std::string> head = {"decoder.embedding.weight",
                                           l0 + "mha1.wq.weight",
                                           l0 + "mha1.wq.bias",
                                           l0 + "mha1.wk.weight",
                                           l0 + "mha1.wk.bias",
                                           l0 + "mha1.wv.weight",
                                           l0 + "mha1.wv.bias",
                                           l0 + "mha1.plgatt_layer.Wlst",
                                           l0 + "mha1.plgatt_layer.blst",
                                           l0 + "mha1.plgatt_layer.pwlst",
                                           l0 + "mha1.plgatt_layer.alst",
                                           l0 + "mha1.plgatt_layer.balst",
                                           l0 + "mha1.dense.weight",
                                           l0 + "mha1.dense.bias",
                                           l0 + "mha1.reslayerAs.0.denseAs.0.gluw1.weight",
                                           l0 + "mha1.reslayerAs.0.denseAs.0.gluw1.bias",
                                           l0 + "mha1.reslayerAs.0.denseAs.0.gluw2.weight",
                                           l0 + "mha1.reslayerAs.0.denseAs.0.gluw2.bias",
                                           l0 + "mha1.reslayerAs.0.denseAs.0.gluw3.weight",
                                           l0 + "mha1.reslayerAs.0.denseAs.0.gluw3.bias",
                                           l0 + "mha1.reslayerAs.0.denseAs.1.gluw1.weight"};
    for (size_t i = 0; i < head.size(); ++i) EXPECT_EQ(v[i].name, head[i]) << i;
    const std::vector<std::string> tail = {
        "decoder.dec_layers.1.mha1.reslayerAs.1.layernormA.weight",
        "decoder.dec_layers.1.mha1.reslayerAs.1.layernormA.bias",
        "decoder.dec_layers.1.mha1.layernorm1.weight",
        "decoder.dec_layers.1.mha1.layernorm1.bias",
        "decoder.dec_layers.1.ffn.gluw1.weight",
        "decoder.dec_layers.1.ffn.gluw1.bias",
        "decoder.dec_layers.1.ffn.gluw2.weight",
        "decoder.dec_layers.1.ffn.gluw2.bias",
        "decoder.dec_layers.1.ffn.gluw3.weight",
        "decoder.dec_layers.1.ffn.gluw3.bias",
        "decoder.dec_layers.1.layernorm1.weight",
        "decoder.dec_layers.1.layernorm1.bias",
        "decoder.dec_layers.1.layernorm2.weight",
        "decoder.dec_layers.1.layernorm2.bias",
        "decoder.layernorm1.weight",
        "decoder.layernorm1.bias",
        "final_layer.weight",
        "final_layer.bias"};
    for (size_t i = 0; i < tail.size(); ++i)
        EXPECT_EQ(v[v.size() - tail.size() + i].name, tail[i]) << i;
    // Shapes: [out, in] for linears.
    EXPECT_EQ(find(v, "decoder.embedding.weight")->shape, (Shape{50, 16}));
    EXPECT_EQ(find(v, l0 + "mha1.plgatt_layer.pwlst")->shape, (Shape{2, 8, 8}));
    EXPECT_EQ(find(v, l0 + "mha1.reslayerAs.1.denseAs.1.gluw1.weight")->shape, (Shape{12, 8}));
    EXPECT_EQ(find(v, l0 + "mha1.reslayerAs.1.denseAs.1.gluw3.weight")->shape, (Shape{8, 12}));
    EXPECT_EQ(find(v, l0 + "mha1.reslayerAs.1.denseAs.1.gluw3.bias")->shape, (Shape{8}));
    EXPECT_EQ(find(v, l0 + "mha1.layernorm1.bias")->shape, (Shape{8}));
    EXPECT_EQ(find(v, l0 + "ffn.gluw1.weight")->shape, (Shape{42, 16}));
    EXPECT_EQ(find(v, l0 + "ffn.gluw3.weight")->shape, (Shape{16, 42}));
    EXPECT_EQ(find(v, "final_layer.weight")->shape, (Shape{50, 16}));
    EXPECT_EQ(find(v, "final_layer.bias")->shape, (Shape{50}));
    for (const auto& p : v) EXPECT_FALSE(p.buffer) << p.name;
}

TEST(ParamNames, FixedGHasBuffersAndNoMetricLearner) {
    Config c = make(50, 16, 42, 2, 2, 8, 12, 2, 2, GType::RANDOM);
    auto v = expected_params(c);
    const ParamSpec* g = find(v, "decoder.past_G_values");
    const ParamSpec* s = find(v, "decoder.past_G_values_status");
    ASSERT_TRUE(g && s);
    EXPECT_TRUE(g->buffer);
    EXPECT_TRUE(s->buffer);
    EXPECT_EQ(g->shape, (Shape{2, 3, 1, 2, 8, 8}));
    EXPECT_EQ(s->shape, (Shape{2}));
    int buffers = 0;
    for (const auto& p : v) {
        buffers += p.buffer;
        EXPECT_EQ(p.name.find("plgatt_layer"), std::string::npos) << p.name;
        EXPECT_EQ(p.name.find("reslayerAs"), std::string::npos) << p.name;
        EXPECT_EQ(p.name.find("mha1.layernorm1"), std::string::npos) << p.name;
    }
    EXPECT_EQ(buffers, 2);
    EXPECT_EQ(v.size(), 1u + 2u + 2 * 18 + 4);
    EXPECT_TRUE(find(v, "decoder.dec_layers.1.mha1.dense.bias"));
}

TEST(ParamNames, BiasAndTieFlags) {
    Config c = a_tiny();
    const int64_t full = count_params(c);
    c.attention_bias = false;  // 4 biases of d per layer
    EXPECT_EQ(count_params(c), full - 2 * 4 * 16);
    EXPECT_FALSE(find(expected_params(c), "decoder.dec_layers.0.mha1.wq.bias"));
    EXPECT_TRUE(find(expected_params(c), "decoder.dec_layers.0.mha1.wq.weight"));
    EXPECT_TRUE(find(expected_params(c), "decoder.dec_layers.0.layernorm1.bias"));
    EXPECT_TRUE(find(expected_params(c), "decoder.dec_layers.0.mha1.plgatt_layer.blst"));
    c = a_tiny();
    c.glu_bias = false;  // FFN (42+42+16) and metric learner (12+12+8 per GLU, R*N=4) per layer
    EXPECT_EQ(count_params(c), full - 2 * (100 + 4 * 32));
    EXPECT_FALSE(find(expected_params(c), "decoder.dec_layers.0.ffn.gluw3.bias"));
    EXPECT_FALSE(
        find(expected_params(c), "decoder.dec_layers.0.mha1.reslayerAs.0.denseAs.0.gluw1.bias"));
    EXPECT_TRUE(find(expected_params(c), "decoder.dec_layers.0.mha1.reslayerAs.0.layernormA.bias"));
    c = a_tiny();
    c.final_bias = false;
    EXPECT_EQ(count_params(c), full - 50);
    c = a_tiny();
    c.tie_word_embeddings = true;
    EXPECT_EQ(count_params(c), full - 50 * 16);
    EXPECT_FALSE(find(expected_params(c), "final_layer.weight"));
    EXPECT_TRUE(find(expected_params(c), "final_layer.bias"));
}

TEST(ParamNames, IgnoredRopeBuffers) {
    EXPECT_TRUE(is_ignored_buffer("decoder.rotary_embedding.inv_freq"));
    EXPECT_TRUE(is_ignored_buffer("decoder.dec_layers.0.mha1.rotary_embedding.theta"));
    EXPECT_TRUE(is_ignored_buffer("decoder.dec_layers.3.mha1.rotary_embedding.cache"));
    EXPECT_FALSE(is_ignored_buffer("decoder.dec_layers.0.mha1.xrotary_embedding.cache"));
    EXPECT_FALSE(is_ignored_buffer("decoder.dec_layers.0.mha1.rotary_embedding.weight"));
    EXPECT_FALSE(is_ignored_buffer("final_layer.weight"));
}

TEST(ParamNames, ProblemsWithTensorLists) {
    Config c = a_tiny();
    std::vector<TensorInfo> ts;
    for (const auto& p : expected_params(c)) {
        TensorInfo t;
        t.name = p.name;
        t.shape = p.shape;
        ts.push_back(t);
    }
    EXPECT_TRUE(param_problems(c, ts, "w.safetensors").empty());

    auto bad = ts;
    bad[1].shape = {16, 8};      // decoder.dec_layers.0.mha1.wq.weight
    bad[2].dtype = DType::I64;   // ...wq.bias
    bad.erase(bad.begin() + 3);  // ...wk.weight
    TensorInfo extra;
    extra.name = "decoder.extra";
    extra.shape = {1};
    bad.push_back(extra);
    TensorInfo rope;
    rope.name = "decoder.dec_layers.0.mha1.rotary_embedding.cache";
    rope.shape = {64, 4, 2};
    bad.push_back(rope);
    auto probs = param_problems(c, bad, "w.safetensors");
    ASSERT_EQ(probs.size(), 4u);
    EXPECT_EQ(probs[0],
              "w.safetensors: tensor 'decoder.dec_layers.0.mha1.wq.weight' has shape [16,8] but "
              "config.json implies [16,16]");
    EXPECT_EQ(probs[1],
              "w.safetensors: tensor 'decoder.dec_layers.0.mha1.wq.bias' has dtype I64 but "
              "parameters are F32, F64, F16 or BF16");
    EXPECT_EQ(probs[2], "w.safetensors: missing tensor 'decoder.dec_layers.0.mha1.wk.weight'");
    EXPECT_EQ(probs[3],
              "w.safetensors: unexpected tensor 'decoder.extra' (not a parameter of this config; "
              "custom_G_type null)");

    // A learned-G checkpoint read with a fixed-G config: PLGA tensors are unexpected, the
    // buffers missing.
    Config g = c;
    g.g_type = GType::EXTERNAL;
    probs = param_problems(g, ts, "w.safetensors");
    EXPECT_EQ(probs[0], "w.safetensors: missing tensor 'decoder.past_G_values'");
    EXPECT_EQ(probs[1], "w.safetensors: missing tensor 'decoder.past_G_values_status'");
    EXPECT_EQ(probs.size(), 2u + 2 * (5 + 2 * (2 * 6 + 2) + 2));
    EXPECT_NE(probs.back().find("unexpected tensor"), std::string::npos);
}

TEST(ParamNames, CheckAgainstModelFiles) {
    std::string base = testing::TempDir();
    if (base.empty() || base.back() != '/') base += '/';
    std::string dir = base + "pldr_io_pn_XXXXXX";
    ASSERT_NE(::mkdtemp(dir.data()), nullptr);
    Config c = a_tiny();
    SafetensorsWriter w;
    for (const auto& p : expected_params(c))
        if (p.name != "final_layer.bias") w.add(p.name, Tensor<float>(p.shape, 0.5f));
    w.add("decoder.dec_layers.0.ffn.gluw2.weight", Tensor<float>({16, 42}));  // transposed
    w.add("decoder.rotary_embedding.inv_freq", Tensor<float>({4}));           // ignored
    save_model_dir(dir, c, w, /*check_params=*/false);
    ModelFiles mf(dir);
    auto probs = param_problems(mf);
    ASSERT_EQ(probs.size(), 2u);
    EXPECT_EQ(probs[0], dir +
                            "/model.safetensors: tensor 'decoder.dec_layers.0.ffn.gluw2.weight' "
                            "has shape [16,42] but config.json implies [42,16]");
    EXPECT_EQ(probs[1], dir + "/model.safetensors: missing tensor 'final_layer.bias'");
    EXPECT_EQ(error_of([&] { check_params_against_file(mf); }), probs[0] + " (and 1 more problem)");
    std::filesystem::remove_all(dir);
}
