// The training objective and its gradient on the GPU (cuda::DeviceModel::loss_and_grads,
// src/cuda_model/backward.cu) against the CPU's (train/loss.h loss_and_grads): for every case of
// the numeric case list, the LossResult (value, CE, accuracy, the DAG metrics and loss) and the
// gradient of every named parameter (model/layout.h), in float64 (≤ 1e-12 relative to the
// largest magnitude of that parameter's gradient) and float32 (the allowance of gpu_util.h: at
// most 4 times the CPU's own float32 error against the float64 CPU, plus 2^-20); then the
// accumulation, grad_scale, padding inside a batch, a tied head with halves RoPE, several head
// chunks, and the CPU's one-line errors for bad inputs.
#include <gtest/gtest.h>

#include <initializer_list>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/profile.h"
#include "cuda_model/forward.h"
#include "gpu_util.h"
#include "numeric_cases.h"
#include "train/loss.h"

namespace {

// A loss and its gradient, widened to double.
struct Grad {
    pldr::LossResult r;
    std::vector<double> g;
};

template <class T>
Grad cpu_grad(const pldr::Model<T>& m, const std::vector<int64_t>& tok, int64_t B, int64_t S1,
              const pldr::DagCoeffs& dag, double scale = 1.0) {
    pldr::Activations<T> acts;
    std::vector<T> g(size_t(m.num_params()), T(0));
    Grad out;
    out.r = pldr::loss_and_grads(m, tok.data(), B, S1, dag, acts, g.data(), scale);
    out.g.assign(g.begin(), g.end());
    return out;
}

template <class T>
Grad gpu_grad(pldr::cuda::DeviceModel<T>& dm, const std::vector<int64_t>& tok, int64_t B,
              int64_t S1, const pldr::DagCoeffs& dag, double scale = 1.0) {
    std::vector<T> g(size_t(dm.model().num_params()), T(0));
    Grad out;
    out.r = dm.loss_and_grads(tok.data(), B, S1, dag, g.data(), scale);
    out.g.assign(g.begin(), g.end());
    return out;
}

std::vector<double> slice(const std::vector<double>& v, const pldr::ParamEntry& e) {
    return std::vector<double>(v.begin() + e.offset, v.begin() + e.offset + e.numel);
}

// Every named parameter's gradient within 1e-12 of the CPU's (relative to its largest).
void expect_grads_f64(const pldr::Layout& layout, const Grad& got, const Grad& ref,
                      const std::string& what) {
    ASSERT_EQ(got.g.size(), ref.g.size());
    for (const pldr::ParamEntry& e : layout.entries)
        EXPECT_TRUE(gpu::f64_close(slice(got.g, e), slice(ref.g, e))) << what << ": " << e.name;
}

std::vector<std::tuple<const char*, double, double>> fields(const pldr::LossResult& a,
                                                            const pldr::LossResult& b) {
    return {{"value", a.value, b.value},          {"ce", a.ce, b.ce},
            {"accuracy", a.accuracy, b.accuracy}, {"dagA", a.dagA, b.dagA},
            {"dagAp", a.dagAp, b.dagAp},          {"dagG", a.dagG, b.dagG},
            {"dag_loss", a.dag_loss, b.dag_loss}};
}

void expect_result_f64(const pldr::LossResult& got, const pldr::LossResult& ref,
                       const std::string& what) {
    EXPECT_EQ(got.scored, ref.scored) << what;
    EXPECT_EQ(got.correct, ref.correct) << what;
    for (const auto& [name, a, b] : fields(got, ref))
        EXPECT_TRUE(gpu::f64_close(std::vector<double>{a}, std::vector<double>{b}))
            << what << ": " << name << " " << a << " vs " << b;
}

pldr::DagCoeffs dag_of(const numeric::Case& k) {
    return k.dag ? pldr::DagCoeffs{0.1, 0.2, 0.3} : pldr::DagCoeffs{};
}

// Each case's float64 model (numeric::make_model) and tokens [B, S+1].
class CudaBackward : public ::testing::TestWithParam<numeric::Case> {
  protected:
    void SetUp() override {
        PLDR_REQUIRE_GPU();
        const uint64_t seed = numeric::seed_of(GetParam());
        m = numeric::make_model(GetParam(), seed);
        tok = numeric::make_tokens(GetParam().shape, seed);
        B = GetParam().shape.B;
        S1 = GetParam().shape.S + 1;
        dag = dag_of(GetParam());
    }
    pldr::Model<double> m;
    std::vector<int64_t> tok;
    int64_t B = 0, S1 = 0;
    pldr::DagCoeffs dag;
};

TEST_P(CudaBackward, Float64EqualsTheCpu) {
    const Grad ref = cpu_grad(m, tok, B, S1, dag);
    pldr::cuda::DeviceModel<double> dm(m);
    const Grad got = gpu_grad(dm, tok, B, S1, dag);
    expect_result_f64(got.r, ref.r, "float64");
    expect_grads_f64(m.layout, got, ref, "float64");
}

TEST_P(CudaBackward, Float32WithinTheAllowance) {
    const auto m32 = numeric::cast_model<float>(m);
    const Grad ref = cpu_grad(m, tok, B, S1, dag), cpu32 = cpu_grad(m32, tok, B, S1, dag);
    pldr::cuda::DeviceModel<float> dm(m32);
    const Grad got = gpu_grad(dm, tok, B, S1, dag);
    EXPECT_EQ(got.r.scored, ref.r.scored);
    const auto got_f = fields(got.r, ref.r), cpu_f = fields(cpu32.r, ref.r);
    for (size_t i = 0; i < got_f.size(); ++i) {
        const auto& [name, g, r] = got_f[i];
        if (std::string(name) == "accuracy") continue;  // an arg-max: no rounding allowance
        EXPECT_TRUE(gpu::f32_close({float(g)}, {float(std::get<1>(cpu_f[i]))}, {r})) << name;
    }
    for (const pldr::ParamEntry& e : m.layout.entries)
        EXPECT_TRUE(gpu::f32_close(gpu::cast<float>(slice(got.g, e)),
                                   gpu::cast<float>(slice(cpu32.g, e)), slice(ref.g, e)))
            << e.name;
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaBackward, ::testing::ValuesIn(numeric::cases()),
                         numeric::CaseName());

// The first case with a learned G and the DAG regularizer (every term of the backward).
numeric::Case dag_case() {
    for (const numeric::Case& k : numeric::cases())
        if (k.g == pldr::GType::LEARNED && k.dag) return k;
    return numeric::cases().front();
}

// A second call adds the same gradient again; grad_scale scales it (the CE's and the DAG's), as
// on the CPU.
TEST(CudaBackwardCalls, AccumulatesAndScales) {
    PLDR_REQUIRE_GPU();
    const numeric::Case k = dag_case();
    const auto m = numeric::make_model(k, 3);
    const auto tok = numeric::make_tokens(k.shape, 3);
    const int64_t B = k.shape.B, S1 = k.shape.S + 1;
    const pldr::DagCoeffs dag = dag_of(k);
    pldr::cuda::DeviceModel<double> dm(m);
    std::vector<double> once(size_t(m.num_params()), 0.0), twice = once;
    dm.loss_and_grads(tok.data(), B, S1, dag, once.data());
    dm.loss_and_grads(tok.data(), B, S1, dag, twice.data());
    dm.loss_and_grads(tok.data(), B, S1, dag, twice.data());
    std::vector<double> doubled = once;
    for (double& x : doubled) x *= 2;
    expect_grads_f64(m.layout, Grad{{}, twice}, Grad{{}, doubled}, "twice");

    const Grad ref = cpu_grad(m, tok, B, S1, dag, 0.25);
    const Grad got = gpu_grad(dm, tok, B, S1, dag, 0.25);
    expect_result_f64(got.r, ref.r, "grad_scale 0.25");
    expect_grads_f64(m.layout, got, ref, "grad_scale 0.25");
    std::vector<double> quarter = once;
    for (double& x : quarter) x *= 0.25;
    expect_grads_f64(m.layout, got, Grad{{}, quarter}, "a quarter of once");
}

// Padding inside the batch: pad keys and targets in the middle of rows and at the end. (Not at
// position 0: a query that sees no unmasked key has a softmax of scores − 1e9, whose float64
// rounding near 1e9 (1.2e-7) no two orders of the products agree on.)
TEST(CudaBackwardCalls, PaddedBatch) {
    PLDR_REQUIRE_GPU();
    for (const numeric::Case& k : {dag_case(), numeric::cases().back()}) {
        const auto m = numeric::make_model(k, 5);
        const int64_t B = 3, S1 = 7, V = m.cfg.vocab_size;
        std::vector<int64_t> tok(size_t(B * S1));
        for (size_t i = 0; i < tok.size(); ++i) tok[i] = 1 + int64_t(i * 7 % size_t(V - 1));
        tok[1] = tok[2] = 0;                                    // row 0: two pads inside
        tok[size_t(S1 + 3)] = 0;                                // row 1: one pad inside
        tok[size_t(2 * S1 + 5)] = tok[size_t(2 * S1 + 6)] = 0;  // row 2: trailing pad
        const Grad ref = cpu_grad(m, tok, B, S1, dag_of(k));
        pldr::cuda::DeviceModel<double> dm(m);
        const Grad got = gpu_grad(dm, tok, B, S1, dag_of(k));
        expect_result_f64(got.r, ref.r, k.name);
        expect_grads_f64(m.layout, got, ref, k.name);
    }
}

// A tied head (head_w is the embedding: both gradients in one tensor) with halves RoPE, and the
// head over several chunks of rows.
TEST(CudaBackwardCalls, TiedHeadHalvesRopeAndHeadChunks) {
    PLDR_REQUIRE_GPU();
    const numeric::Case k = dag_case();
    const auto m = numeric::make_model(k, 7, true, /*halves=*/true, /*tied=*/true);
    const auto tok = numeric::make_tokens(k.shape, 7);
    const int64_t B = k.shape.B, S1 = k.shape.S + 1;
    const int64_t prev = pldr::loss_head_chunk_rows();
    for (int64_t rows : {int64_t(0), int64_t(3)}) {
        pldr::loss_head_chunk_rows() = rows;
        const Grad ref = cpu_grad(m, tok, B, S1, dag_of(k));
        pldr::cuda::DeviceModel<double> dm(m);
        const Grad got = gpu_grad(dm, tok, B, S1, dag_of(k));
        const std::string what = "head chunks of " + std::to_string(rows) + " rows";
        expect_result_f64(got.r, ref.r, what);
        expect_grads_f64(m.layout, got, ref, what);
    }
    pldr::loss_head_chunk_rows() = prev;
}

// Bad input: the CPU's one-line errors, before anything runs on the device.
TEST(CudaBackwardErrors, RefusesWhatTheCpuRefuses) {
    PLDR_REQUIRE_GPU();
    const numeric::Case k = numeric::cases().front();
    const auto m = numeric::make_model(k, 1);
    pldr::cuda::DeviceModel<double> dm(m);
    const int64_t V = m.cfg.vocab_size, P = m.num_params();
    auto message = [](auto&& f) -> std::string {
        try {
            f();
        } catch (const pldr::Error& e) {
            return e.what();
        }
        return "<no error>";
    };
    struct Bad {
        std::vector<int64_t> tok;
        int64_t B, S1;
        pldr::DagCoeffs dag;
    };
    const std::vector<Bad> bad = {
        {{1, V}, 1, 2, {}},   // target id ≥ V
        {{-1, 2}, 1, 2, {}},  // input id < 0
        {{1}, 1, 1, {}},      // one token
        {std::vector<int64_t>(size_t(m.cfg.max_position + 2), 1), 1, m.cfg.max_position + 2, {}},
        {{1, 2}, 0, 2, {}},            // no row
        {{1, 0, 0}, 1, 3, {}},         // no scored target
        {{1, 2}, 1, 2, {-0.1, 0, 0}},  // negative DAG
    };
    for (const Bad& b : bad) {
        std::vector<double> g_cpu(size_t(P), 0.0), g_gpu = g_cpu;
        pldr::Activations<double> acts;
        const std::string cpu = message(
            [&] { pldr::loss_and_grads(m, b.tok.data(), b.B, b.S1, b.dag, acts, g_cpu.data()); });
        const std::string gpu =
            message([&] { dm.loss_and_grads(b.tok.data(), b.B, b.S1, b.dag, g_gpu.data()); });
        EXPECT_NE(cpu, "<no error>");
        EXPECT_EQ(gpu, cpu);
        EXPECT_EQ(gpu.find('\n'), std::string::npos) << gpu;
        EXPECT_EQ(g_gpu, std::vector<double>(size_t(P), 0.0)) << gpu;
    }
}

}  // namespace

// PLDR_CUDA_PROFILE's phases (cuda/profile.h): with the profile on, a training pass times its
// phases, each layer's once per layer, nested as the code nests them (a phase's time at least
// its children's); the profile's values do not change (the same bits with and without it); off,
// nothing is recorded.
TEST(CudaProfile, ATrainingPassTimesItsPhasesNested) {
    PLDR_REQUIRE_GPU();
    const numeric::Case k = dag_case();
    const auto m = numeric::make_model(k, 5);
    const auto tok = numeric::make_tokens(k.shape, 5);
    const int64_t B = k.shape.B, S1 = k.shape.S + 1, L = m.cfg.num_layers;
    const pldr::DagCoeffs dag = dag_of(k);
    pldr::cuda::DeviceModel<double> dm(m);
    namespace cu = pldr::cuda;
    cu::profile_enable(false);
    cu::profile_take(true);  // (what PLDR_CUDA_PROFILE=1 recorded in the tests before)
    const Grad plain = gpu_grad(dm, tok, B, S1, dag, 1.0);
    EXPECT_TRUE(cu::profile_take(true).empty());
    cu::profile_enable(true);
    const Grad timed = gpu_grad(dm, tok, B, S1, dag, 1.0);
    const std::vector<cu::PhaseTime> t = cu::profile_take(true);
    cu::profile_enable(false);
    EXPECT_EQ(timed.g, plain.g);
    std::map<std::string, cu::PhaseTime> by;
    for (const cu::PhaseTime& p : t) by[p.name] = p;
    const struct {
        const char* name;
        int depth;
        int64_t calls;
    } want[] = {{"forward", 0, 1},
                {"fwd.qkv_rope", 1, L},
                {"fwd.metric_learner_operator", 1, L},
                {"fwd.attention", 1, L},
                {"fwd.out_ln_ffn_ln", 1, L},
                {"head_loss", 0, 1},
                {"dag_terms", 0, 1},
                {"backward", 0, 1},
                {"bwd.ln_ffn_ln", 1, L},
                {"bwd.out_attention", 1, L},
                {"bwd.operator", 2, L},
                {"bwd.metric_learner", 2, L},
                {"bwd.rope_qkv", 1, L}};
    for (const auto& w : want) {
        SCOPED_TRACE(w.name);
        ASSERT_TRUE(by.count(w.name));
        EXPECT_EQ(by[w.name].depth, w.depth);
        EXPECT_EQ(by[w.name].calls, w.calls);
        EXPECT_GT(by[w.name].ms, 0.0);
    }
    // (event timestamps resolve to about half a microsecond per phase)
    const auto sum = [&](std::initializer_list<const char*> names) {
        double s = 0;
        for (const char* n : names) s += by[n].ms;
        return s;
    };
    EXPECT_GE(
        by["forward"].ms + 1e-3 * double(4 * L),
        sum({"fwd.qkv_rope", "fwd.metric_learner_operator", "fwd.attention", "fwd.out_ln_ffn_ln"}));
    EXPECT_GE(by["backward"].ms + 1e-3 * double(3 * L),
              sum({"bwd.ln_ffn_ln", "bwd.out_attention", "bwd.rope_qkv"}));
    EXPECT_GE(by["bwd.out_attention"].ms + 1e-3 * double(2 * L),
              sum({"bwd.operator", "bwd.metric_learner"}));
    EXPECT_TRUE(cu::profile_take(true).empty());  // taken with reset: a new table
}
