// Decoding on the GPU (cuda::DeviceSession, src/cuda_model/session.cu) against the CPU's Session
// (infer/session.h): for every case of the numeric case list and every cache mode (kvg, kv,
// none), a prompt's prefill and 6 decode steps in float64 give logits within 1e-12 of the CPU's
// at every step and the same greedy tokens; float32 within 1e-4 of the float64 CPU; and the
// CPU's one-line errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "cuda_model/session.h"
#include "gpu_util.h"
#include "infer/score.h"
#include "infer/session.h"
#include "numeric_cases.h"

namespace {

template <class T>
int64_t argmax(const std::vector<T>& v) {
    return int64_t(std::max_element(v.begin(), v.end()) - v.begin());
}

class CudaSession : public ::testing::TestWithParam<numeric::Case> {};

TEST_P(CudaSession, DecodingFollowsTheCpusSessionInEveryCacheMode) {
    PLDR_REQUIRE_GPU();
    const numeric::Case& k = GetParam();
    const numeric::Shape& s = k.shape;
    const pldr::Model<double> m = numeric::make_model(k, 51);
    const pldr::Model<float> m32 = numeric::cast_model<float>(m);
    pldr::cuda::DeviceModel<double> dm(m);
    pldr::cuda::DeviceModel<float> dm32(m32);
    auto prompt = numeric::make_tokens(s, 61);
    prompt.resize(size_t(std::min<int64_t>(s.S, 4)));
    const int steps = int(std::min<int64_t>(6, m.cfg.max_position - int64_t(prompt.size())));
    for (const pldr::CacheMode mode :
         {pldr::CacheMode::KVG, pldr::CacheMode::KV, pldr::CacheMode::NONE}) {
        SCOPED_TRACE(pldr::cache_mode_name(mode));
        pldr::Session<double> cpu(m, mode);
        pldr::cuda::DeviceSession<double> gpu(dm, mode);
        pldr::cuda::DeviceSession<float> gpu32(dm32, mode);
        EXPECT_TRUE(gpu::f64_close(gpu.prefill(prompt), cpu.prefill(prompt)));
        EXPECT_LE(gpu::rel_err(gpu32.prefill(prompt), cpu.logits()), 1e-4);
        for (int t = 0; t < steps; ++t) {
            SCOPED_TRACE("step " + std::to_string(t + 1));
            const int64_t next = argmax(cpu.logits());
            EXPECT_EQ(argmax(gpu.logits()), next);
            cpu.decode(next);
            EXPECT_TRUE(gpu::f64_close(gpu.decode(next), cpu.logits()));
            EXPECT_LE(gpu::rel_err(gpu32.decode(next), cpu.logits()), 1e-4);
        }
        EXPECT_EQ(gpu.length(), cpu.length());
    }
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaSession, ::testing::ValuesIn(numeric::cases()),
                         numeric::CaseName());

// Scoring with the passes on the device (infer/score.h DeviceScoring: the forward's logits and
// DeviceSession), as the API wires it for a model on a GPU: every mode's log-probabilities and
// the rolling log-likelihood (perplexity) within 1e-12 of the CPU's, float64.
TEST(CudaScoring, EveryModeAndTheRollingLikelihoodFollowTheCpus) {
    PLDR_REQUIRE_GPU();
    const numeric::Case& k = numeric::cases().front();
    const pldr::Model<double> m = numeric::make_model(k, 71);
    pldr::cuda::DeviceModel<double> dm(m);
    pldr::DeviceScoring<double> dev;
    dev.logits = [&](const int64_t* ids, int64_t S, std::vector<double>& out) {
        pldr::Activations<double> a;
        dm.forward(ids, 1, S, a);
        out.assign(a.logits.ptr(), a.logits.ptr() + a.logits.numel());
    };
    struct Dec final : pldr::DeviceDecoder<double> {
        Dec(pldr::cuda::DeviceModel<double>& d, pldr::CacheMode mode, int64_t n) : s(d, mode, n) {}
        const std::vector<double>& prefill(const std::vector<int64_t>& ids) override {
            return s.prefill(ids);
        }
        const std::vector<double>& decode(int64_t id) override { return s.decode(id); }
        const std::vector<double>& logits() const override { return s.logits(); }
        pldr::cuda::DeviceSession<double> s;
    };
    dev.decoders = [&](pldr::CacheMode mode,
                       int64_t n) -> std::unique_ptr<pldr::DeviceDecoder<double>> {
        return std::make_unique<Dec>(dm, mode, n);
    };
    auto t = numeric::make_tokens(k.shape, 81);
    const pldr::ScoreRequest req{{t[0], t[1]}, {t[3], t[4], t[1]}};
    for (const auto mode :
         {pldr::ScoreMode::BLOCK, pldr::ScoreMode::SEQUENTIAL, pldr::ScoreMode::CACHED}) {
        const pldr::ScoreResult a = pldr::score_request(m, req, mode, 2, &dev);
        const pldr::ScoreResult b = pldr::score_request(m, req, mode, 2);
        EXPECT_TRUE(gpu::f64_close(a.token_logprobs, b.token_logprobs));
        EXPECT_EQ(a.argmax_ids, b.argmax_ids);
    }
    t.resize(std::min<size_t>(t.size(), 12));
    for (auto& x : t) x = x == 0 ? 1 : x;
    const double ra = pldr::rolling_loglikelihood(m, t, 1, 4, &dev);
    const double rb = pldr::rolling_loglikelihood(m, t, 1, 4);
    EXPECT_TRUE(gpu::f64_close(std::vector<double>{ra}, std::vector<double>{rb}));
}

TEST(CudaSessionErrors, TheCpusOneLineErrors) {
    PLDR_REQUIRE_GPU();
    const pldr::Model<double> m = numeric::make_model(numeric::cases().front(), 5);
    pldr::cuda::DeviceModel<double> dm(m);
    pldr::cuda::DeviceSession<double> s(dm, pldr::CacheMode::KVG, 4);
    const auto msg = [](auto&& f) {
        try {
            f();
        } catch (const pldr::Error& e) {
            return std::string(e.what());
        }
        return std::string("<no error>");
    };
    EXPECT_EQ(msg([&] { s.decode(1); }), "decode before prefill");
    EXPECT_EQ(msg([&] { s.prefill({}); }), "empty prompt: a session needs at least one token");
    EXPECT_EQ(msg([&] {
                  s.prefill({1, 2, 3, 4, 5});
              }),
              "prompt of 5 tokens is longer than the context (4)");
    s.prefill({1, 2, 3});
    EXPECT_NE(msg([&] { s.decode(m.cfg.vocab_size); }).find("is outside the vocabulary"),
              std::string::npos);
    s.decode(1);
    EXPECT_EQ(msg([&] { s.decode(1); }), "the context is full (4 tokens)");
    EXPECT_NE(msg([&] {
                  pldr::cuda::DeviceSession<double> t(dm, pldr::CacheMode::KVG, 1 << 20);
              }).find("exceeds max_position_embeddings"),
              std::string::npos);
}

}  // namespace
