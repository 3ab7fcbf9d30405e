// The public API (include/pldr/): the C API's status codes, last-error strings and buffer
// protocol; the C++ API's sessions, batched decode, sampler, scoring alternatives and errors,
// each checked against the library's own full forward pass.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
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
    // A callback that stops at the last token still names itself; EOS would name EOS.
    calls = 0;
    const Generation last =
        m.generate("The state of the Union is", o, [&](const TokenInfo&, const std::string& text) {
            EXPECT_EQ(text, full.text.substr(0, text.size()));
            return ++calls < 12;
        });
    EXPECT_EQ(last.finish_reason, "callback");
    EXPECT_EQ(last.ids, full.ids);
    o.max_tokens = 1 << 20;
    EXPECT_THROW(m.generate("The state", o), pldr::Error);  // longer than the context
}

// Batched generation is the loop of generate with several prompts: stop strings end each
// sequence where its single run ends, with the same text and reason, while the others go on.
TEST(ApiCpp, GenerateBatchStopsEachSequenceLikeASingleRun) {
    using namespace pldr::api;
    const Model m = Model::load(kSotu);
    const Tokenizer& tok = m.tokenizer();
    GenerateOptions o;
    o.max_tokens = 12;
    o.sampling.greedy = true;
    o.stop_at_eos = false;
    const std::vector<std::vector<int64_t>> prompts{tok.encode_prompt("The state of the Union is"),
                                                    tok.encode_prompt("We")};
    const auto free_run = m.generate_batch(prompts, o);
    ASSERT_EQ(free_run.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
        EXPECT_EQ(free_run[i].finish_reason, "length");
        EXPECT_EQ(free_run[i].ids.size(), 12u);
        EXPECT_EQ(free_run[i].text, tok.continuation_text(prompts[i], free_run[i].ids));
    }
    // A stop string: the second word of prompt 0's continuation (absent from the text before it,
    // by construction of the cut checked below).
    std::istringstream words(free_run[0].text);
    std::string w1, w2;
    words >> w1 >> w2;
    ASSERT_FALSE(w2.empty()) << free_run[0].text;
    o.stop = {w2};
    const auto cut = m.generate_batch(prompts, o);
    const size_t at = free_run[0].text.find(w2);
    EXPECT_EQ(cut[0].finish_reason, "stop");
    EXPECT_EQ(cut[0].text, free_run[0].text.substr(0, at));
    EXPECT_LT(cut[0].ids.size(), 12u);
    for (size_t i = 0; i < 2; ++i) {
        const Generation one = m.generate_ids(prompts[i], o);
        EXPECT_EQ(cut[i].ids, one.ids) << i;
        EXPECT_EQ(cut[i].text, one.text) << i;
        EXPECT_EQ(cut[i].finish_reason, one.finish_reason) << i;
        // The ids stop at the first token whose text holds the stop string.
        const std::string before = tok.continuation_text(
            prompts[i], std::vector<int64_t>(one.ids.begin(), one.ids.end() - 1));
        if (one.finish_reason == "stop") {
            EXPECT_EQ(before.find(w2), std::string::npos) << i;
        }
    }
    EXPECT_EQ(cut[1].finish_reason,
              free_run[1].text.find(w2) == std::string::npos ? "length" : "stop");
    o.stop = {""};
    EXPECT_THROW(m.generate_batch(prompts, o), pldr::Error);
}

TEST(ApiCpp, TokenizerPiecesTokenTextAndContinuation) {
    using namespace pldr::api;
    const Model m = Model::load(kSotu);
    const Tokenizer& tok = m.tokenizer();
    const std::vector<int64_t> ids = tok.encode("The state of the Union is strong.");
    const TokenPieces p = tok.pieces(ids);
    ASSERT_EQ(p.text.size(), ids.size());
    std::string joined;
    for (size_t i = 0; i < ids.size(); ++i) {
        EXPECT_EQ(p.offset[i], int64_t(joined.size())) << i;
        // Each token's text in context is what it adds to the decoded prefix.
        EXPECT_EQ(joined + p.text[i],
                  tok.decode(std::vector<int64_t>(ids.begin(), ids.begin() + int64_t(i) + 1)));
        joined += p.text[i];
        // piece_text: the piece with the word marker as a space.
        const std::string piece = tok.piece(ids[i]);
        std::string want;
        size_t from = 0;
        for (size_t k; (k = piece.find("\xE2\x96\x81", from)) != std::string::npos; from = k + 3)
            want += piece.substr(from, k - from) + " ";
        want += piece.substr(from);
        EXPECT_EQ(tok.piece_text(ids[i]), want);
    }
    EXPECT_EQ(joined, tok.decode(ids));
    // Byte pieces (a character outside the vocabulary: four of them): token_text is the byte,
    // piece_text keeps "<0xF0>"; in context the first three add nothing (the decoded prefix
    // ends inside the character) and the last the whole character. EOS has no text.
    const std::string smile = "\xF0\x9F\x99\x82";  // U+1F642
    const std::vector<int64_t> b = tok.encode("a " + smile);
    ASSERT_GE(b.size(), 4u);
    const std::vector<int64_t> bytes(b.end() - 4, b.end());
    std::string joined_bytes;
    for (int64_t id : bytes) {
        EXPECT_EQ(tok.piece(id).compare(0, 3, "<0x"), 0) << tok.piece(id);
        EXPECT_EQ(tok.piece_text(id), tok.piece(id));
        joined_bytes += tok.token_text(id);
    }
    EXPECT_EQ(joined_bytes, smile);
    const TokenPieces bp = tok.pieces(b);
    const std::string before_smile = tok.decode(std::vector<int64_t>(b.begin(), b.end() - 4));
    for (size_t k = 0; k < 3; ++k) {
        EXPECT_EQ(bp.text[b.size() - 4 + k], "") << k;
        EXPECT_EQ(bp.offset[b.size() - 4 + k], int64_t(before_smile.size())) << k;
    }
    EXPECT_EQ(bp.text.back(), smile);
    EXPECT_EQ(bp.offset.back(), int64_t(before_smile.size()));
    EXPECT_EQ(tok.token_text(tok.eos_id()), "");
    // The continuation keeps the leading space that decode drops from a text's first piece.
    const std::vector<int64_t> head = tok.encode("The state");
    const std::vector<int64_t> rest(ids.begin() + int64_t(head.size()), ids.end());
    ASSERT_EQ(std::vector<int64_t>(ids.begin(), ids.begin() + int64_t(head.size())), head);
    EXPECT_EQ(tok.continuation_text(head, rest), " of the Union is strong.");
    EXPECT_EQ(tok.decode(rest), "of the Union is strong.");
}

// Session::score_prompt reads the prefill's own pass: token i's log-probability is the
// log-softmax of row i − 1 of a full forward over the whole prompt (block scoring of the same
// split runs over prompt[:-1], where A and G do not see the last token).
TEST(ApiCpp, ScorePromptReadsThePrefill) {
    using namespace pldr::api;
    const Model m = Model::load(kTiny, f64());
    const std::vector<int64_t> ids{5, 17, 3, 9, 42, 7};
    Session s(m);
    s.prefill(ids);
    const ScoreResult r = s.score_prompt(3);
    ASSERT_EQ(r.token_logprobs.size(), ids.size() - 1);
    ASSERT_EQ(r.top.size(), ids.size() - 1);
    EXPECT_EQ(r.context_ids, std::vector<int64_t>{5});
    const Tensor lg = m.forward(ids).logits();
    const int64_t V = m.info().vocab_size;
    double sum = 0;
    for (size_t i = 1; i < ids.size(); ++i) {
        double mx = -INFINITY, z = 0;
        for (int64_t v = 0; v < V; ++v) mx = std::max(mx, lg.at(int64_t(i - 1) * V + v));
        for (int64_t v = 0; v < V; ++v) z += std::exp(lg.at(int64_t(i - 1) * V + v) - mx);
        const double want = lg.at(int64_t(i - 1) * V + ids[i]) - mx - std::log(z);
        EXPECT_NEAR(r.token_logprobs[i - 1], want, 1e-12) << i;
        EXPECT_GE(r.top[i - 1][0].logprob, r.token_logprobs[i - 1] - 1e-12);
        sum += r.token_logprobs[i - 1];
    }
    EXPECT_NEAR(r.logprob, sum, 1e-12);
    // Learned G: the block pass over ids[:-1] gives other values (A and G without the last
    // token), so score_prompt did not run it.
    ScoreOptions so;
    so.top_logprobs = 3;
    const ScoreResult block = m.score_ids({5}, {17, 3, 9, 42, 7}, so);
    EXPECT_NE(block.token_logprobs, r.token_logprobs);
    s.decode(1);
    EXPECT_THROW(s.score_prompt(), pldr::Error);  // the last call is no longer the prefill
    Session lean(m);
    lean.keep_outputs(false);
    lean.prefill(ids);
    EXPECT_THROW(lean.score_prompt(), pldr::Error);
    EXPECT_THROW(lean.last_outputs(), pldr::Error);
}

// eps_G through the API: RMS(G_u − G_c) / RMS(G_u) from the G_LM of full forwards, the
// denominator the uncached (longer) sequence's operator, as pldr audit defines it.
TEST(ApiCpp, EpsGIsTheAuditsMeasure) {
    using namespace pldr::api;
    const Model m = Model::load(kTiny, f64());
    const std::vector<int64_t> ids{5, 17, 3, 9, 42, 7, 11};
    const int64_t P = 3, L = m.info().num_layers;
    const auto e = eps_g(m, ids, P);
    ASSERT_EQ(int64_t(e.size()), int64_t(ids.size()) - P);
    const ForwardResult c = m.forward(std::vector<int64_t>(ids.begin(), ids.begin() + P));
    for (int64_t t = 1; t <= int64_t(ids.size()) - P; ++t) {
        const ForwardResult u = m.forward(std::vector<int64_t>(ids.begin(), ids.begin() + P + t));
        ASSERT_EQ(int64_t(e[size_t(t - 1)].size()), L);
        for (int64_t l = 0; l < L; ++l) {
            const std::vector<double> gu = u.layer(l, "G_LM").to_vector();
            const std::vector<double> gc = c.layer(l, "G_LM").to_vector();
            double num = 0, den_u = 0, den_c = 0;
            for (size_t i = 0; i < gu.size(); ++i) {
                num += (gu[i] - gc[i]) * (gu[i] - gc[i]);
                den_u += gu[i] * gu[i];
                den_c += gc[i] * gc[i];
            }
            const double want = std::sqrt(num / den_u), other = std::sqrt(num / den_c);
            EXPECT_GT(want, 0.0);
            // The prefix's RMS would give another value: the test tells the two apart.
            EXPECT_GT(std::abs(want - other), 1e-9 * want) << t << " " << l;
            EXPECT_NEAR(e[size_t(t - 1)][size_t(l)], want, 1e-12 * want) << t << " " << l;
        }
    }
    EXPECT_TRUE(eps_g(m, ids, int64_t(ids.size())).empty());
    EXPECT_THROW(eps_g(m, ids, 0), pldr::Error);
    EXPECT_THROW(eps_g(m, {5, 1 << 20}, 1), pldr::Error);
}

}  // namespace
