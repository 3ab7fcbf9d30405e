// Decoding on the GPU (cuda::DeviceSession, src/cuda_model/session.cu) against the CPU's Session
// (infer/session.h): for every case of the numeric case list and every cache mode (kvg, kv,
// none), a prompt's prefill and 6 decode steps in float64 give logits within 1e-12 of the CPU's
// at every step and the same greedy tokens; float32 within 1e-4 of the float64 CPU; several
// sessions stepping together (decode_batch) likewise, each against its own CPU session; the
// decode step's CUDA graph against the eager step, bit for bit; a preset G-cache in every mode;
// and the CPU's one-line errors.
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

// Several sessions stepping together (DeviceSession::decode_batch: the rows' products at once,
// one attention kernel for all): prompts of different lengths in kvg, kv, none and kvg again,
// every other one with a cache just long enough (the scores' stride is the largest capacity),
// each against a CPU session of its own (float64 1e-12, float32 1e-4 of the float64 CPU, the
// same greedy tokens).
TEST_P(CudaSession, ABatchedStepFollowsEachSequencesCpuSession) {
    PLDR_REQUIRE_GPU();
    const numeric::Case& k = GetParam();
    const numeric::Shape& s = k.shape;
    const pldr::Model<double> m = numeric::make_model(k, 52);
    const pldr::Model<float> m32 = numeric::cast_model<float>(m);
    pldr::cuda::DeviceModel<double> dm(m);
    pldr::cuda::DeviceModel<float> dm32(m32);
    const std::vector<pldr::CacheMode> modes = {pldr::CacheMode::KVG, pldr::CacheMode::KV,
                                                pldr::CacheMode::NONE, pldr::CacheMode::KVG};
    const size_t n = modes.size();
    std::vector<std::unique_ptr<pldr::Session<double>>> cpu;
    std::vector<std::unique_ptr<pldr::cuda::DeviceSession<double>>> gpu;
    std::vector<std::unique_ptr<pldr::cuda::DeviceSession<float>>> gpu32;
    std::vector<pldr::cuda::DeviceSession<double>*> g;
    std::vector<pldr::cuda::DeviceSession<float>*> g32;
    int64_t longest = 0;
    for (size_t i = 0; i < n; ++i) {
        auto prompt = numeric::make_tokens(s, 70 + uint64_t(i));
        prompt.resize(size_t(std::min<int64_t>(s.S, 1 + int64_t(i) % 4)));
        longest = std::max<int64_t>(longest, int64_t(prompt.size()));
        const int64_t cap =
            i % 2 ? std::min<int64_t>(m.cfg.max_position, int64_t(prompt.size()) + 5) : 0;
        cpu.push_back(std::make_unique<pldr::Session<double>>(m, modes[i], cap));
        gpu.push_back(std::make_unique<pldr::cuda::DeviceSession<double>>(dm, modes[i], cap));
        gpu32.push_back(std::make_unique<pldr::cuda::DeviceSession<float>>(dm32, modes[i], cap));
        g.push_back(gpu.back().get());
        g32.push_back(gpu32.back().get());
        cpu[i]->prefill(prompt);
        gpu[i]->prefill(prompt);
        gpu32[i]->prefill(prompt);
    }
    const int steps = int(std::min<int64_t>(5, m.cfg.max_position - longest));
    for (int t = 0; t < steps; ++t) {
        SCOPED_TRACE("step " + std::to_string(t + 1));
        std::vector<int64_t> next(n);
        for (size_t i = 0; i < n; ++i) {
            next[i] = argmax(cpu[i]->logits());
            EXPECT_EQ(argmax(gpu[i]->logits()), next[i]) << "sequence " << i;
            cpu[i]->decode(next[i]);
        }
        pldr::cuda::DeviceSession<double>::decode_batch(g, next);
        pldr::cuda::DeviceSession<float>::decode_batch(g32, next);
        for (size_t i = 0; i < n; ++i) {
            SCOPED_TRACE("sequence " + std::to_string(i) + " (" + pldr::cache_mode_name(modes[i]) +
                         ")");
            EXPECT_TRUE(gpu::f64_close(gpu[i]->logits(), cpu[i]->logits()));
            EXPECT_LE(gpu::rel_err(gpu32[i]->logits(), cpu[i]->logits()), 1e-4);
            EXPECT_EQ(gpu[i]->length(), cpu[i]->length());
        }
    }
}

// A head wider than a block of the decode attention kernel (D = 320 > 256 threads: each thread
// its own output columns over all the keys) decodes as the CPU's Session, kvg and kv together.
TEST(CudaSessionWide, AHeadWiderThanABlockDecodesAsTheCpus) {
    PLDR_REQUIRE_GPU();
    const numeric::Case k{"wide", {320, 2, 6, 11, 1, 1, 1, 1}};
    const pldr::Model<double> m = numeric::make_model(k, 54);
    pldr::cuda::DeviceModel<double> dm(m);
    pldr::Session<double> c1(m, pldr::CacheMode::KVG), c2(m, pldr::CacheMode::KV);
    pldr::cuda::DeviceSession<double> g1(dm, pldr::CacheMode::KVG), g2(dm, pldr::CacheMode::KV);
    EXPECT_TRUE(gpu::f64_close(g1.prefill({1, 2, 3}), c1.prefill({1, 2, 3})));
    EXPECT_TRUE(gpu::f64_close(g2.prefill({4}), c2.prefill({4})));
    for (int t = 0; t < 3; ++t) {
        const int64_t a = argmax(c1.logits()), b = argmax(c2.logits());
        c1.decode(a);
        c2.decode(b);
        pldr::cuda::DeviceSession<double>::decode_batch({&g1, &g2}, {a, b});
        EXPECT_TRUE(gpu::f64_close(g1.logits(), c1.logits())) << "step " << t;
        EXPECT_TRUE(gpu::f64_close(g2.logits(), c2.logits())) << "step " << t;
    }
}

// The G-cache a session keeps (g_cache(): the prefill's operator; in mode none its first pass's,
// after decode steps too) is the CPU Session's: A, A_LM, A_P and G per layer within 1e-12.
TEST_P(CudaSession, ItsGCacheIsTheCpus) {
    PLDR_REQUIRE_GPU();
    const numeric::Case& k = GetParam();
    const numeric::Shape& s = k.shape;
    const pldr::Model<double> m = numeric::make_model(k, 56);
    pldr::cuda::DeviceModel<double> dm(m);
    auto prompt = numeric::make_tokens(s, 97);
    prompt.resize(size_t(std::min<int64_t>(s.S, 4)));
    for (const pldr::CacheMode mode :
         {pldr::CacheMode::KVG, pldr::CacheMode::KV, pldr::CacheMode::NONE}) {
        SCOPED_TRACE(pldr::cache_mode_name(mode));
        pldr::Session<double> cpu(m, mode);
        pldr::cuda::DeviceSession<double> gpu(dm, mode);
        EXPECT_TRUE(gpu.g_cache().empty());
        cpu.prefill(prompt);
        gpu.prefill(prompt);
        cpu.decode(1);
        gpu.decode(1);
        const pldr::GCache<double> a = gpu.g_cache(), b = cpu.g_cache();
        ASSERT_EQ(a.size(), b.size());
        for (size_t l = 0; l < b.size(); ++l) {
            const auto same = [&](const pldr::Tensor<double>& x, const pldr::Tensor<double>& y,
                                  const char* what) {
                ASSERT_EQ(x.numel(), y.numel()) << what << " layer " << l;
                if (y.numel() == 0) return;
                EXPECT_TRUE(gpu::f64_close(std::vector<double>(x.ptr(), x.ptr() + x.numel()),
                                           std::vector<double>(y.ptr(), y.ptr() + y.numel())))
                    << what << " layer " << l;
            };
            same(a[l].A, b[l].A, "A");
            same(a[l].A_LM, b[l].A_LM, "A_LM");
            same(a[l].A_P, b[l].A_P, "A_P");
            same(a[l].G, b[l].G, "G");
        }
    }
}

// A preset G-cache (set_g_cache: the G-cache of another prompt's prefill on the CPU) runs every
// cache mode as the CPU's Session with the same preset: the prefill and 4 steps, float64 within
// 1e-12, the same greedy tokens; and its checks are the CPU's.
TEST_P(CudaSession, APresetGCacheRunsEveryModeAsTheCpus) {
    PLDR_REQUIRE_GPU();
    const numeric::Case& k = GetParam();
    const numeric::Shape& s = k.shape;
    const pldr::Model<double> m = numeric::make_model(k, 55);
    pldr::cuda::DeviceModel<double> dm(m);
    auto other = numeric::make_tokens(s, 95), prompt = numeric::make_tokens(s, 96);
    other.resize(size_t(std::min<int64_t>(s.S, 5)));
    prompt.resize(size_t(std::min<int64_t>(s.S, 3)));
    pldr::Session<double> source(m, pldr::CacheMode::KVG);
    source.prefill(other);
    const pldr::GCache<double> g = source.g_cache();
    for (const pldr::CacheMode mode :
         {pldr::CacheMode::KVG, pldr::CacheMode::KV, pldr::CacheMode::NONE}) {
        SCOPED_TRACE(pldr::cache_mode_name(mode));
        pldr::Session<double> cpu(m, mode);
        pldr::cuda::DeviceSession<double> gpu(dm, mode);
        cpu.set_g_cache(g);
        gpu.set_g_cache(g);
        EXPECT_TRUE(gpu::f64_close(gpu.prefill(prompt), cpu.prefill(prompt)));
        for (int t = 0; t < 4; ++t) {
            const int64_t next = argmax(cpu.logits());
            EXPECT_EQ(argmax(gpu.logits()), next);
            cpu.decode(next);
            EXPECT_TRUE(gpu::f64_close(gpu.decode(next), cpu.logits())) << "step " << t;
        }
        try {
            gpu.set_g_cache(g);
            ADD_FAILURE() << "a G-cache after the prefill";
        } catch (const pldr::Error& e) {
            EXPECT_EQ(std::string(e.what()), "set_g_cache must come before the prefill");
        }
    }
    pldr::cuda::DeviceSession<double> bad(dm, pldr::CacheMode::KVG);
    const pldr::GCache<double> short_g(g.begin(), g.end() - 1);
    try {
        bad.set_g_cache(short_g);
        ADD_FAILURE() << "a G-cache of too few layers";
    } catch (const pldr::Error& e) {
        EXPECT_NE(std::string(e.what()).find("layers but the model has"), std::string::npos);
    }
}

// The decode step as a CUDA graph (captured once per batch size, replayed with each step's
// tokens, positions and caches) gives the eager step's bits: batches of 3 and then 2 sessions
// (kvg, kv, kvg) of growing lengths, float32 and float64.
TEST_P(CudaSession, TheDecodeGraphGivesTheEagerStepsBits) {
    PLDR_REQUIRE_GPU();
    const numeric::Case& k = GetParam();
    const numeric::Shape& s = k.shape;
    const pldr::Model<double> m = numeric::make_model(k, 53);
    const pldr::Model<float> m32 = numeric::cast_model<float>(m);
    const int64_t steps = std::min<int64_t>(4, m.cfg.max_position - 3);
    const auto run = [&]<class T>(pldr::cuda::DeviceModel<T>& dm, bool graphs) {
        dm.set_decode_graphs(graphs);
        const std::vector<pldr::CacheMode> modes = {pldr::CacheMode::KVG, pldr::CacheMode::KV,
                                                    pldr::CacheMode::KVG};
        std::vector<std::unique_ptr<pldr::cuda::DeviceSession<T>>> own;
        std::vector<pldr::cuda::DeviceSession<T>*> ss;
        std::vector<std::vector<T>> seen;
        for (size_t i = 0; i < modes.size(); ++i) {
            auto prompt = numeric::make_tokens(s, 90 + uint64_t(i));
            prompt.resize(size_t(std::min<int64_t>(s.S, 1 + int64_t(i))));
            own.push_back(std::make_unique<pldr::cuda::DeviceSession<T>>(dm, modes[i]));
            ss.push_back(own.back().get());
            seen.push_back(ss.back()->prefill(prompt));
        }
        for (int64_t t = 0; t < steps; ++t) {
            if (t == 2) ss.pop_back();  // a smaller batch: another graph
            std::vector<int64_t> next;
            for (auto* x : ss) next.push_back(argmax(x->logits()));
            pldr::cuda::DeviceSession<T>::decode_batch(ss, next);
            for (auto* x : ss) seen.push_back(x->logits());
        }
        return seen;
    };
    pldr::cuda::DeviceModel<double> a(m), b(m);
    pldr::cuda::DeviceModel<float> a32(m32), b32(m32);
    EXPECT_EQ(run(a, true), run(b, false));
    EXPECT_EQ(run(a32, true), run(b32, false));
    if (steps >= 3) {
        EXPECT_EQ(a.decode_graphs_made(), 2);  // batches of 3 and 2
        EXPECT_EQ(b.decode_graphs_made(), 0);
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
    // decode_batch: every error before anything changes
    using DS = pldr::cuda::DeviceSession<double>;
    DS a(dm, pldr::CacheMode::KVG), b(dm, pldr::CacheMode::KV);
    a.prefill({1, 2});
    EXPECT_EQ(msg([&] { DS::decode_batch({&a, &b}, {1}); }), "decode_batch: 2 sessions but 1 ids");
    EXPECT_EQ(msg([&] { DS::decode_batch({&a, &b}, {1, 1}); }), "session 2: decode before prefill");
    EXPECT_EQ(msg([&] {
                  DS::decode_batch({&a, &a}, {1, 1});
              }),
              "session 2: the session is in the batch twice");
    pldr::cuda::DeviceModel<double> other(m);
    DS c(other, pldr::CacheMode::KVG);
    c.prefill({1});
    EXPECT_EQ(msg([&] {
                  DS::decode_batch({&a, &c}, {1, 1});
              }),
              "session 2: a batched decode step takes sessions of one model on one device");
    b.prefill({3});
    EXPECT_NE(msg([&] {
                  DS::decode_batch({&a, &b}, {1, m.cfg.vocab_size});
              }).find("session 2: token id"),
              std::string::npos);
    EXPECT_EQ(a.length(), 2);  // nothing changed
    EXPECT_EQ(b.length(), 1);
    DS::decode_batch({&a, &b}, {1, 2});
    EXPECT_EQ(a.length(), 3);
    EXPECT_EQ(b.length(), 2);
}

}  // namespace
