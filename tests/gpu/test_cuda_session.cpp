// Decoding on the GPU (cuda::DeviceSession, src/cuda_model/session.cu) against the CPU's Session
// (infer/session.h): for every case of the numeric case list and every cache mode (kvg, kv,
// none), a prompt's prefill and 6 decode steps in float64 give logits within 1e-12 of the CPU's
// at every step and the same greedy tokens; float32 within 1e-4 of the float64 CPU; and the
// CPU's one-line errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cuda_model/session.h"
#include "gpu_util.h"
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
