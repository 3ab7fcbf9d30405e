// The public API (include/pldr/): the C API's status codes, last-error strings and buffer
// protocol; the C++ API's sessions, batched decode, sampler, scoring alternatives and errors,
// each checked against the library's own full forward pass.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "pldr/pldr.h"
#include "pldr/pldr.hpp"

namespace {

const std::string kTiny = std::string(PLDR_SOURCE_DIR) + "/tests/golden/models/a_tiny_v510.f64";
const std::string kSotu = std::string(PLDR_SOURCE_DIR) + "/models/pldr-sotu-small";

pldr::api::LoadOptions f64() {
    pldr::api::LoadOptions o;
    o.dtype = pldr::api::DType::F64;
    return o;
}

TEST(ApiC, StatusCodesAndLastError) {
    pldr_model* m = reinterpret_cast<pldr_model*>(1);
    EXPECT_EQ(pldr_model_load(nullptr, "f32", &m), PLDR_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(m, reinterpret_cast<pldr_model*>(1));  // untouched: the check comes first
    EXPECT_STREQ(pldr_last_error(), "dir is NULL");
    EXPECT_EQ(pldr_model_load("/no/such/model", "f32", &m), PLDR_ERR_FAILED);
    EXPECT_EQ(m, nullptr);
    EXPECT_NE(std::string(pldr_last_error()).find("/no/such/model"), std::string::npos);
    EXPECT_EQ(pldr_model_load(kTiny.c_str(), "f16", &m), PLDR_ERR_FAILED);
    EXPECT_NE(std::string(pldr_last_error()).find("dtype must be f32 or f64"), std::string::npos);
    pldr_model_free(nullptr);
    pldr_session_free(nullptr);
}

TEST(ApiC, TokenizeBufferProtocolAndRoundTrip) {
    pldr_model* m = nullptr;
    ASSERT_EQ(pldr_model_load(kSotu.c_str(), nullptr, &m), PLDR_OK) << pldr_last_error();
    int64_t n = 0;
    int64_t ids[64];
    EXPECT_EQ(pldr_tokenize(m, "The state of the Union", ids, 1, &n), PLDR_ERR_BUFFER_TOO_SMALL);
    EXPECT_GT(n, 1);
    ASSERT_EQ(pldr_tokenize(m, "The state of the Union", ids, 64, &n), PLDR_OK);
    char* text = nullptr;
    ASSERT_EQ(pldr_detokenize(m, ids, n, &text), PLDR_OK);
    EXPECT_STREQ(text, "The state of the Union");
    pldr_string_free(text);
    const int64_t bad = 1 << 30;
    EXPECT_EQ(pldr_detokenize(m, &bad, 1, &text), PLDR_ERR_FAILED);
    pldr_model_info info;
    ASSERT_EQ(pldr_model_get_info(m, &info), PLDR_OK);
    EXPECT_EQ(info.has_tokenizer, 1);
    EXPECT_EQ(info.is_f64, 0);
    pldr_model_free(m);
}

TEST(ApiC, SessionLogitsEqualForwardAndGradients) {
    pldr_model* m = nullptr;
    ASSERT_EQ(pldr_model_load(kTiny.c_str(), "f64", &m), PLDR_OK) << pldr_last_error();
    pldr_model_info info;
    ASSERT_EQ(pldr_model_get_info(m, &info), PLDR_OK);
    const int64_t ids[5] = {5, 17, 3, 9, 42};
    const int64_t V = info.vocab_size;
    std::vector<double> fwd(static_cast<size_t>(5 * V));
    int64_t n = 0, shape[8];
    int nd = 0;
    ASSERT_EQ(pldr_forward_tensor(m, ids, 1, 5, "fwd.logits", fwd.data(), 5 * V, &n, shape, &nd),
              PLDR_OK);
    EXPECT_EQ(nd, 3);
    EXPECT_EQ(shape[2], V);
    EXPECT_EQ(pldr_forward_tensor(m, ids, 1, 5, "fwd.logits", fwd.data(), 3, &n, nullptr, nullptr),
              PLDR_ERR_BUFFER_TOO_SMALL);
    EXPECT_EQ(n, 5 * V);
    EXPECT_EQ(
        pldr_forward_tensor(m, ids, 1, 5, "fwd.nothing", fwd.data(), 5 * V, &n, nullptr, nullptr),
        PLDR_ERR_FAILED);
    pldr_session* s = nullptr;
    ASSERT_EQ(pldr_session_new(m, "none", &s), PLDR_OK);
    std::vector<double> lg(static_cast<size_t>(V));
    EXPECT_EQ(pldr_session_decode(s, 3, lg.data()), PLDR_ERR_FAILED);  // before prefill
    ASSERT_EQ(pldr_session_prefill(s, ids, 4, lg.data()), PLDR_OK);
    ASSERT_EQ(pldr_session_decode(s, ids[4], lg.data()), PLDR_OK);
    EXPECT_EQ(pldr_session_length(s), 5);
    // Without caches the session recomputes the whole sequence: the same logits.
    for (int64_t v = 0; v < V; ++v) EXPECT_NEAR(lg[size_t(v)], fwd[size_t(4 * V + v)], 1e-12);
    pldr_session_free(s);
    double loss = 0;
    std::vector<double> g(64 * 64);
    ASSERT_EQ(pldr_loss_and_grad(m, ids, 1, 5, &loss, "final_layer.bias", g.data(),
                                 int64_t(g.size()), &n),
              PLDR_OK)
        << pldr_last_error();
    EXPECT_EQ(n, V);
    const auto cpp =
        pldr::api::Model::load(kTiny, f64()).loss_and_grads(std::vector<int64_t>(ids, ids + 5));
    EXPECT_EQ(loss, cpp.loss.value);
    for (int64_t v = 0; v < V; ++v) EXPECT_EQ(g[size_t(v)], cpp.get("final_layer.bias").f64()[v]);
    pldr_model_free(m);
}

TEST(ApiCpp, DecodeBatchEqualsSingleDecodes) {
    using namespace pldr::api;
    const Model m = Model::load(kTiny, f64());
    Session a(m), b(m), c(m);
    a.prefill({1, 2, 3});
    b.prefill({4, 5});
    c.prefill({1, 2, 3});
    const auto out = decode_batch({&a, &b}, {7, 8});
    const Tensor one = c.decode(7);
    ASSERT_EQ(out.size(), 2u);
    // One shared step: equal to a single decode up to the rounding of a [2,d] matrix product
    // against a matrix-vector one (float64, measured below 1e-15; tests/test_infer.cpp).
    const std::vector<double> got = out[0].to_vector(), want = one.to_vector();
    ASSERT_EQ(got.size(), want.size());
    double worst = 0, scale = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        worst = std::max(worst, std::abs(got[i] - want[i]));
        scale = std::max(scale, std::abs(want[i]));
    }
    EXPECT_GT(scale, 0.0);
    EXPECT_LE(worst, 1e-12 * scale);
    EXPECT_EQ(a.logits().to_vector(), got);  // the session keeps the step's logits
    EXPECT_EQ(b.length(), 3);
    EXPECT_EQ(a.tokens(), (std::vector<int64_t>{1, 2, 3, 7}));
    // last_outputs() is each session's own step: E over its own 4 and 3 keys.
    EXPECT_EQ(a.last_outputs().layer(0, "E").shape.back(), 4);
    EXPECT_EQ(b.last_outputs().layer(0, "E").shape.back(), 3);
    EXPECT_THROW(decode_batch({&a, &a}, {1, 2}), pldr::Error);
    EXPECT_THROW(decode_batch({&a}, {1, 2}), pldr::Error);
    EXPECT_THROW(decode_batch({&a, &b}, {1, 1 << 20}), pldr::Error);
    Session unfilled(m);
    EXPECT_THROW(decode_batch({&a, &unfilled}, {1, 2}), pldr::Error);
    EXPECT_EQ(a.length(), 4);  // a failed call changes no session
    // Sessions of different models (and dtypes) in one call: one step per model.
    const Model m32 = Model::load(kTiny);
    Session d(m32), e(m32), d1(m32);
    d.prefill({1, 2, 3});
    e.prefill({4, 5});
    d1.prefill({1, 2, 3});
    const Tensor d_one = d1.decode(6);
    const auto mixed = decode_batch({&d, &a, &e, &b}, {6, 9, 7, 10});
    ASSERT_EQ(mixed.size(), 4u);
    EXPECT_EQ(d.tokens(), (std::vector<int64_t>{1, 2, 3, 6}));
    EXPECT_EQ(e.tokens(), (std::vector<int64_t>{4, 5, 7}));
    EXPECT_EQ(a.length(), 5);
    EXPECT_EQ(b.length(), 4);
    const std::vector<double> dg = mixed[0].to_vector(), dw = d_one.to_vector();
    ASSERT_EQ(dg.size(), dw.size());
    for (size_t i = 0; i < dw.size(); ++i)
        EXPECT_NEAR(dg[i], dw[i], 5e-6 * std::max(1.0, std::abs(dw[i])));
    EXPECT_THROW(a.decode(1 << 20), pldr::Error);  // outside the vocabulary
    // The G-cache after the prefill: one entry per layer, [H,D,D].
    const auto gc = a.g_cache();
    ASSERT_EQ(int64_t(gc.size()), m.info().num_layers);
    EXPECT_EQ(gc[0].G_LM.shape,
              (std::vector<int64_t>{m.info().num_heads, m.info().head_dim, m.info().head_dim}));
}

TEST(ApiCpp, SamplerAndScoreAlternatives) {
    using namespace pldr::api;
    const Model m = Model::load(kTiny, f64());
    Session s(m);
    const Tensor lg = s.prefill({5, 17, 3});
    SamplingOptions greedy;
    greedy.greedy = true;
    Sampler sm(greedy);
    const auto lp = Sampler::log_softmax(lg);
    const auto top = Sampler::top(lp, 3);
    ASSERT_EQ(top.size(), 3u);
    EXPECT_EQ(sm.sample(lg, {5, 17, 3}), top[0].id);
    EXPECT_GE(top[0].logprob, top[1].logprob);
    SamplingOptions bad;
    bad.temperature = -1;
    EXPECT_THROW(Sampler{bad}, pldr::Error);
    ScoreOptions so;
    so.top_logprobs = 2;
    for (ScoreMode mode : {ScoreMode::BLOCK, ScoreMode::SEQUENTIAL, ScoreMode::CACHED}) {
        so.mode = mode;
        const ScoreResult r = m.score_ids({5, 17, 3}, {9, 42, 7}, so);
        ASSERT_EQ(r.top.size(), 3u);
        for (size_t i = 0; i < 3; ++i) {
            EXPECT_LE(r.token_logprobs[i], r.top[i][0].logprob + 1e-12);
            if (r.top[i][0].id == r.continuation_ids[i]) {
                EXPECT_NEAR(r.token_logprobs[i], r.top[i][0].logprob, 1e-9) << name_of(mode);
            }
        }
    }
    EXPECT_THROW(m.score_ids({5}, {}, so), pldr::Error);
    EXPECT_THROW(m.tokenizer(), pldr::Error);  // this model has no tokenizer
}

TEST(ApiCpp, GenerateStopsAndCallbacks) {
    using namespace pldr::api;
    const Model m = Model::load(kSotu);
    GenerateOptions o;
    o.max_tokens = 12;
    o.sampling.greedy = true;
    o.stop_at_eos = false;
    const Generation full = m.generate("The state of the Union is", o);
    EXPECT_EQ(full.finish_reason, "length");
    EXPECT_EQ(full.ids.size(), 12u);
    std::string pieces;
    for (const auto& t : full.tokens) pieces += t.text;
    EXPECT_EQ(pieces, full.text);
    int calls = 0;
    const Generation cb =
        m.generate("The state of the Union is", o,
                   [&](const TokenInfo&, const std::string&) { return ++calls < 4; });
    EXPECT_EQ(calls, 4);
    EXPECT_EQ(cb.finish_reason, "callback");
    EXPECT_EQ(std::vector<int64_t>(full.ids.begin(), full.ids.begin() + 4), cb.ids);
    const auto batch = m.generate_batch({full.prompt_ids, full.prompt_ids}, o);
    ASSERT_EQ(batch.size(), 2u);
    EXPECT_EQ(batch[1].ids, full.ids);
    o.max_tokens = 1 << 20;
    EXPECT_THROW(m.generate("The state", o), pldr::Error);  // longer than the context
}

}  // namespace
