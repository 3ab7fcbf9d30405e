// The forward pass on the GPU (src/cuda/forward.h) against the CPU's, every named tensor of the
// pass (model/named_outputs.h: q, k, v, A_ln, A, A_LM, A_P, G_LM, Ep, E, attn_out, out1,
// ffn_out, hidden per layer, and the logits): for every case of the numeric case list in float64
// (≤ 1e-12 relative) and float32 (the allowance of gpu_util.h: at most 4 times the CPU's own
// float32 error against the float64 pass, plus 2^-20), and through every golden fixture in
// float64 (≤ 1e-12 against the reference's tensors) and float32 (the golden allowances).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "cuda_model/forward.h"
#include "golden_checks.h"
#include "gpu_util.h"
#include "model/forward.h"
#include "model/named_outputs.h"
#include "numeric_cases.h"

namespace {

template <class T>
std::map<std::string, std::vector<double>> named(const pldr::Model<T>& m,
                                                 const pldr::Activations<T>& a) {
    std::map<std::string, std::vector<double>> r;
    for (const auto& nt : pldr::forward_tensors(m, a))
        r[nt.name] = std::vector<double>(nt.t.data.begin(), nt.t.data.end());
    return r;
}

template <class T>
std::map<std::string, std::vector<double>> cpu_pass(const pldr::Model<T>& m,
                                                    const std::vector<int64_t>& ids, int64_t B,
                                                    int64_t S) {
    pldr::Activations<T> a;
    pldr::forward(m, ids.data(), B, S, a);
    return named(m, a);
}

template <class T>
std::map<std::string, std::vector<double>> gpu_pass(const pldr::Model<T>& m,
                                                    const std::vector<int64_t>& ids, int64_t B,
                                                    int64_t S,
                                                    pldr::KeepActs keep = pldr::KeepActs::ALL) {
    pldr::cuda::DeviceModel<T> dm(m);
    pldr::Activations<T> a;
    dm.forward(ids.data(), B, S, a, keep);
    return named(m, a);
}

std::set<std::string> names(const std::map<std::string, std::vector<double>>& x) {
    std::set<std::string> s;
    for (const auto& [n, v] : x) s.insert(n);
    return s;
}

// The case's input ids [B,S] (numeric::make_tokens without the last target column).
std::vector<int64_t> inputs_of(const numeric::Shape& s, uint64_t seed) {
    const auto t = numeric::make_tokens(s, seed);
    std::vector<int64_t> ids;
    for (int64_t b = 0; b < s.B; ++b)
        for (int64_t i = 0; i < s.S; ++i) ids.push_back(t[size_t(b * (s.S + 1) + i)]);
    return ids;
}

// Each case's float64 model (numeric::make_model) and input ids.
class CudaForward : public ::testing::TestWithParam<numeric::Case> {
  protected:
    void SetUp() override {
        PLDR_REQUIRE_GPU();
        const uint64_t seed = numeric::seed_of(GetParam());
        m = numeric::make_model(GetParam(), seed);
        ids = inputs_of(GetParam().shape, seed);
    }
    template <class T>
    std::map<std::string, std::vector<double>> cpu(const pldr::Model<T>& mt) const {
        return cpu_pass(mt, ids, GetParam().shape.B, GetParam().shape.S);
    }
    template <class T>
    std::map<std::string, std::vector<double>> gpu(
        const pldr::Model<T>& mt, pldr::KeepActs keep = pldr::KeepActs::ALL) const {
        return gpu_pass(mt, ids, GetParam().shape.B, GetParam().shape.S, keep);
    }
    pldr::Model<double> m;
    std::vector<int64_t> ids;
};

TEST_P(CudaForward, Float64EqualsTheCpu) {
    const auto ref = cpu(m), got = gpu(m);
    ASSERT_EQ(names(got), names(ref));
    for (const auto& [n, r] : ref) EXPECT_TRUE(gpu::f64_close(got.at(n), r)) << n;
}

TEST_P(CudaForward, Float32WithinTheAllowance) {
    const auto m32 = numeric::cast_model<float>(m);
    const auto ref = cpu(m), cpu32 = cpu(m32), got = gpu(m32);
    ASSERT_EQ(names(got), names(cpu32));
    for (const auto& [n, r] : ref)
        EXPECT_TRUE(gpu::f32_close(gpu::cast<float>(got.at(n)), gpu::cast<float>(cpu32.at(n)), r))
            << n;
}

// An inference forward downloads the logits alone, the same values as the full one's.
TEST_P(CudaForward, InferenceKeepsTheLogitsOnly) {
    const auto all = gpu(m), inf = gpu(m, pldr::KeepActs::INFERENCE);
    ASSERT_EQ(names(inf), (std::set<std::string>{"fwd.logits", "fwd.mask"}));
    EXPECT_TRUE(gpu::bits_equal(inf.at("fwd.logits"), all.at("fwd.logits")));
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaForward, ::testing::ValuesIn(numeric::cases()),
                         numeric::CaseName());

// Bad input: the CPU's one-line errors, before anything runs on the device.
TEST(CudaForwardErrors, RefusesWhatTheCpuRefuses) {
    PLDR_REQUIRE_GPU();
    const numeric::Case k = numeric::cases().front();
    const auto m = numeric::make_model(k, 1);
    pldr::cuda::DeviceModel<double> dm(m);
    pldr::Activations<double> a;
    const std::vector<int64_t> bad = {1, m.cfg.vocab_size};
    EXPECT_THROW(dm.forward(bad.data(), 1, 2, a), pldr::Error);
    const std::vector<int64_t> neg = {-1};
    EXPECT_THROW(dm.forward(neg.data(), 1, 1, a), pldr::Error);
    const std::vector<int64_t> longer(size_t(m.cfg.max_position + 1), 1);
    EXPECT_THROW(dm.forward(longer.data(), 1, m.cfg.max_position + 1, a), pldr::Error);
    EXPECT_THROW(dm.forward(bad.data(), 0, 2, a), pldr::Error);
}

// The golden fixtures through the GPU: float64 ≤ 1e-12 against the reference's tensors, float32
// under the golden allowances of the CPU's float32 check.
TEST(CudaForwardGolden, AllFixturesFloat64) {
    PLDR_REQUIRE_GPU();
    GOLDEN_USE(golden::set().steps, "single-step");
    for (const auto& fx : golden::set().steps) {
        pldr::SafetensorsFile f(fx.path("f64"));
        const auto m = golden::model_of<double>(fx, f);
        const auto in = f.read_i64("fwd.input_ids");
        const auto& sh = f.at("fwd.input_ids").shape;
        golden::Quantities q;
        for (const auto& [n, v] : gpu_pass(m, in, sh[0], sh[1]))
            if (f.has(n)) q.push_back({n, v});
        EXPECT_EQ(int(q.size()), golden::forward_tensor_count(f)) << fx.name;
        golden::compare_f64(fx.name + ".f64 forward (cuda)", q, golden::refs_of(f), 1e-12)
            .expect_pass();
    }
}

TEST(CudaForwardGolden, AllFixturesFloat32) {
    PLDR_REQUIRE_GPU();
    GOLDEN_USE(golden::set().steps, "single-step");
    for (const auto& fx : golden::set().steps) {
        const golden::F32Check c(fx);
        const auto m = c.model();
        const auto in = c.f32.read_i64("fwd.input_ids");
        const auto& sh = c.f32.at("fwd.input_ids").shape;
        golden::Quantities q;
        for (const auto& [n, v] : gpu_pass(m, in, sh[0], sh[1]))
            if (c.f32.has(n)) q.push_back({n, v});
        EXPECT_EQ(int(q.size()), golden::forward_tensor_count(c.f32)) << fx.name;
        golden::compare_f32(fx.name + ".f32 forward (cuda)", q, golden::refs_of(c.f64), c.sigma_fwd,
                            golden::kFloorForward)
            .expect_pass();
    }
}

}  // namespace
