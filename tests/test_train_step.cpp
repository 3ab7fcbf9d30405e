// The training step as a library call: refusal of non-finite steps (parameters, moments and the
// step count untouched), validation of DAG coefficients and of the schedule, and gradient
// accumulation (two micro-batches = one batch of both, for equal token counts).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "core/alloc.h"
#include "core/rng.h"
#include "model/init.h"
#include "train/step.h"

namespace {

pldr::Config tiny(bool learned) {
    pldr::Config c;
    c.num_layers = 2;
    c.num_heads = 2;
    c.head_dim = 4;
    c.hidden_size = 8;
    c.intermediate_size = 21;
    c.vocab_size = 23;
    c.max_position = 16;
    c.A_dff = 6;
    c.num_reslayerA = 2;
    c.num_denseA = 2;
    c.g_type = learned ? pldr::GType::LEARNED : pldr::GType::IDENTITY;
    return c;
}

std::vector<int64_t> tokens(int64_t B, int64_t S1, uint64_t seed) {
    pldr::Rng r(seed);
    std::vector<int64_t> t(static_cast<size_t>(B * S1));
    for (auto& x : t) x = 1 + int64_t(r.below(22));
    return t;
}

pldr::TrainConfig train_cfg() {
    pldr::TrainConfig tc;
    tc.schedule = {1e-3, 2, 10, 0.1};
    return tc;
}

// The gradient buffer: zeroed by handing its pages back, whatever was written where.
TEST(TrainStep, ZeroPagesReadZeroAfterZero) {
    // Below and above kReturnBytes (memset, and pages handed back); not whole numbers of pages.
    for (const size_t n : {(size_t(3) << 20) + 5, pldr::kReturnBytes / sizeof(float) + 5}) {
        SCOPED_TRACE(n);
        pldr::ZeroPages<float> z(n);
        ASSERT_EQ(z.size(), n);
        EXPECT_EQ(z[0], 0.0f);
        EXPECT_EQ(z[n - 1], 0.0f);
        for (size_t i = 0; i < n; i += 777) z[i] = float(i % 13) + 1.0f;
        z[n - 1] = -2.0f;
        EXPECT_EQ(z[777], float(777 % 13) + 1.0f);
        z.zero();
        size_t nonzero = 0;
        for (float x : z) nonzero += x != 0.0f;
        EXPECT_EQ(nonzero, 0u);
        z[n / 2] = 3.0f;  // writable again
        pldr::ZeroPages<float> moved = std::move(z);
        EXPECT_EQ(z.size(), 0u);
        EXPECT_EQ(z.data(), nullptr);
        EXPECT_EQ(moved[n / 2], 3.0f);
    }
    pldr::ZeroPages<float> empty(0);
    empty.zero();
    EXPECT_EQ(empty.begin(), empty.end());
}

TEST(TrainStep, NonFiniteLossIsRefusedAndNothingChanges) {
    pldr::Model<float> m(tiny(true));
    pldr::init_weights(m, 1);
    pldr::Trainer<float> tr(m, train_cfg());
    auto t = tokens(2, 9, 3);
    tr.step({t.data(), 2, 9});
    const auto params = m.params;
    const auto copy = [](const pldr::ZeroPages<float>& z) {
        return std::vector<float>(z.begin(), z.end());
    };
    const std::vector<float> mom = copy(tr.optimizer().m), vel = copy(tr.optimizer().v);
    // An inf weight in the head makes the logits, hence the loss, non-finite.
    m.w.head_w[0] = INFINITY;
    auto poisoned = m.params;
    try {
        tr.step({t.data(), 2, 9});
        FAIL() << "a non-finite step was accepted";
    } catch (const pldr::Error& e) {
        EXPECT_NE(std::string(e.what()).find("step refused"), std::string::npos) << e.what();
    }
    EXPECT_EQ(m.params, poisoned);  // untouched (bit for bit, the inf included)
    EXPECT_EQ(copy(tr.optimizer().m), mom);
    EXPECT_EQ(copy(tr.optimizer().v), vel);
    EXPECT_EQ(tr.steps_done(), 1);
    EXPECT_NE(params, poisoned);
}

TEST(TrainStep, NanWeightIsRefused) {
    pldr::Model<double> m(tiny(false));
    pldr::init_weights(m, 2);
    pldr::Trainer<double> tr(m, train_cfg());
    auto t = tokens(1, 9, 4);
    m.w.layers[0].ffn.w1[0] = NAN;  // a NaN weight: NaN activations, loss and gradients
    const auto before = m.params;
    EXPECT_THROW(tr.step({t.data(), 1, 9}), pldr::Error);
    for (size_t i = 0; i < before.size(); ++i)
        ASSERT_TRUE(m.params[i] == before[i] || (std::isnan(m.params[i]) && std::isnan(before[i])));
    EXPECT_EQ(tr.steps_done(), 0);
}

TEST(TrainStep, ValidatesConfig) {
    pldr::Model<float> m(tiny(true));
    auto tc = train_cfg();
    tc.dag = {-0.1, 0, 0};
    try {
        pldr::Trainer<float> tr(m, tc);
        FAIL();
    } catch (const pldr::Error& e) {
        EXPECT_NE(std::string(e.what()).find("DAG coefficients must be >= 0"), std::string::npos);
    }
    tc = train_cfg();
    tc.schedule = {1e-3, 20, 10, 0.1};
    EXPECT_THROW(pldr::Trainer<float>(m, tc), pldr::Error);
}

TEST(TrainStep, AccumulationEqualsTheCombinedBatch) {
    // Two micro-batches of one sequence each (no pad: equal token counts) give the same gradient
    // step as one batch of both sequences.
    auto t = tokens(2, 9, 5);
    pldr::Model<double> a(tiny(true));
    pldr::init_weights(a, 3);
    pldr::Model<double> b = a;
    const std::vector<double> init = a.params;
    pldr::TrainConfig tc = train_cfg();
    tc.clip = pldr::ClipMode::NONE;
    pldr::Trainer<double> ta(a, tc), tb(b, tc);
    for (int k = 0; k < 3; ++k) {
        ta.step({t.data(), 2, 9});
        tb.step(std::vector<pldr::TokenBatch>{{t.data(), 1, 9}, {t.data() + 9, 1, 9}});
    }
    double md = 0;
    for (size_t i = 0; i < a.params.size(); ++i)
        md = std::max(md, std::abs(a.params[i] - b.params[i]));
    EXPECT_LT(md, 1e-12);
    EXPECT_NE(a.params, init);  // the steps did move the parameters
}

}  // namespace

namespace {

// TrainConfig::recompute changes what the forward keeps, not the maths: no, selective and full
// recomputation take the same steps, bit for bit (float32 and bf16 mixed precision, DAG on,
// padded tokens, accumulation).
TEST(TrainStep, RecomputationTakesTheSameStepsBitForBit) {
    for (int k = 0; k < 3; ++k) {
        const bool learned = k != 1;
        pldr::Model<float> base(tiny(learned));
        pldr::init_weights(base, 7);
        pldr::TrainConfig tc = train_cfg();
        tc.dag = {0.01, 0.02, 0.03};
        if (k == 2) tc.precision = pldr::Precision::BF16;  // fp32 where bf16 is unavailable
        std::vector<pldr::Model<float>> models(3, base);
        std::vector<std::unique_ptr<pldr::Trainer<float>>> trainers;
        for (int r = 0; r < 3; ++r) {
            tc.recompute = r == 0   ? pldr::Recompute::NONE
                           : r == 1 ? pldr::Recompute::SELECTIVE
                                    : pldr::Recompute::FULL;
            trainers.push_back(std::make_unique<pldr::Trainer<float>>(models[size_t(r)], tc));
        }
        for (int s = 0; s < 3; ++s) {
            auto t1 = tokens(2, 9, 10 + uint64_t(s)), t2 = tokens(3, 9, 20 + uint64_t(s));
            t1[4] = base.cfg.pad_token_id;
            const std::vector<pldr::TokenBatch> micro = {{t1.data(), 2, 9}, {t2.data(), 3, 9}};
            const pldr::StepResult r0 = trainers[0]->step(micro);
            for (int r = 1; r < 3; ++r) {
                const pldr::StepResult rr = trainers[size_t(r)]->step(micro);
                EXPECT_EQ(r0.loss.value, rr.loss.value) << k << " " << r << " " << s;
                EXPECT_EQ(r0.grad_norm, rr.grad_norm) << k << " " << r << " " << s;
            }
        }
        for (int r = 1; r < 3; ++r) {
            ASSERT_EQ(models[0].params.size(), models[size_t(r)].params.size());
            EXPECT_EQ(0, std::memcmp(models[0].params.data(), models[size_t(r)].params.data(),
                                     models[0].params.size() * 4))
                << k << " " << r;
        }
        const std::vector<int64_t> ev = tokens(2, 9, 99);
        const double e0 = trainers[0]->evaluate({ev.data(), 2, 9}).value;
        EXPECT_GT(e0, 0);
        for (int r = 1; r < 3; ++r)
            EXPECT_EQ(trainers[size_t(r)]->evaluate({ev.data(), 2, 9}).value, e0);
    }
    EXPECT_EQ(pldr::parse_recompute("none"), pldr::Recompute::NONE);
    EXPECT_EQ(pldr::parse_recompute("full"), pldr::Recompute::FULL);
    EXPECT_EQ(pldr::parse_recompute("selective"), pldr::Recompute::SELECTIVE);
    EXPECT_THROW(pldr::parse_recompute("some"), pldr::Error);
}

}  // namespace

namespace {

// Three steps of two micro-batches (a pad token inside the first or the second) on both
// trainers: the same results, bit for bit.
void expect_same_steps(pldr::Trainer<double>& ta, pldr::Trainer<double>& tb, uint64_t seed,
                       bool pad_first) {
    for (int s = 0; s < 3; ++s) {
        auto t1 = tokens(2, 9, seed + uint64_t(s)), t2 = tokens(1, 9, seed + 10 + uint64_t(s));
        (pad_first ? t1[3] : t2[5]) = ta.model().cfg.pad_token_id;
        const std::vector<pldr::TokenBatch> micro = {{t1.data(), 2, 9}, {t2.data(), 1, 9}};
        const pldr::StepResult ra = ta.step(micro), rb = tb.step(micro);
        EXPECT_EQ(ra.loss.value, rb.loss.value) << s;
        EXPECT_EQ(ra.grad_norm, rb.grad_norm) << s;
        EXPECT_EQ(ra.clipped, rb.clipped) << s;
        EXPECT_EQ(ra.lr, rb.lr) << s;
        EXPECT_EQ(ra.step, rb.step) << s;
    }
}

// A StepBackend with its own copy of the model, as a device holds one: the CPU's loss on the
// copy, which only parameters_changed brings up to date.
class CopyBackend final : public pldr::StepBackend<double> {
  public:
    explicit CopyBackend(const pldr::Model<double>& m) : host_(m), copy_(m) {}
    pldr::LossResult loss_and_grads(const pldr::TokenBatch& b, const pldr::DagCoeffs& dag,
                                    double* grads, double grad_scale,
                                    double ce_denominator) override {
        ++(grads ? with_grads : loss_only);
        pldr::Activations<double> acts;
        return pldr::loss_and_grads(copy_, b.tokens, b.B, b.S1, dag, acts, grads, grad_scale,
                                    ce_denominator);
    }
    void parameters_changed() override {
        ++refreshed;
        std::copy(host_.params.begin(), host_.params.end(), copy_.params.begin());
    }
    std::string name() const override { return "copy"; }
    int with_grads = 0, loss_only = 0, refreshed = 0;

  private:
    const pldr::Model<double>& host_;
    pldr::Model<double> copy_;
};

// The Trainer over a backend (train/step.h StepBackend, the seam of --device cuda) takes the
// CPU's steps bit for bit: each micro-batch's loss and gradient from the backend, the clipping,
// AdamW and the step count the Trainer's, the backend told after every update; validation
// through the backend without a gradient; bf16 refused in one line.
TEST(TrainStep, AStepBackendTakesTheSameStepsAndSeesEveryUpdate) {
    pldr::Model<double> a(tiny(true));
    pldr::init_weights(a, 11);
    pldr::Model<double> b = a;
    pldr::TrainConfig tc = train_cfg();
    tc.dag = {0.01, 0.02, 0.03};
    tc.clip_value = 0.05;  // some elements clipped
    auto backend = std::make_shared<CopyBackend>(b);
    pldr::Trainer<double> ta(a, tc), tb(b, tc, {}, backend);
    expect_same_steps(ta, tb, 30, true);
    EXPECT_EQ(a.params, b.params);
    EXPECT_EQ(backend->with_grads, 6);
    EXPECT_EQ(backend->refreshed, 3);
    const std::vector<int64_t> ev = tokens(2, 9, 77);
    EXPECT_EQ(ta.evaluate({ev.data(), 2, 9}).value, tb.evaluate({ev.data(), 2, 9}).value);
    EXPECT_EQ(backend->loss_only, 1);

    pldr::Model<float> f(tiny(true));
    pldr::init_weights(f, 11);
    struct NoBackend final : pldr::StepBackend<float> {
        pldr::LossResult loss_and_grads(const pldr::TokenBatch&, const pldr::DagCoeffs&, float*,
                                        double, double) override {
            return {};
        }
        void parameters_changed() override {}
        std::string name() const override { return "cuda:0"; }
    };
    tc.precision = pldr::Precision::BF16;
    try {
        pldr::Trainer<float> tf(f, tc, {}, std::make_shared<NoBackend>());
        ADD_FAILURE() << "bf16 on a backend was not refused";
    } catch (const pldr::Error& e) {
        EXPECT_NE(std::string(e.what()).find("--device cuda:0: --precision bf16 does not run"),
                  std::string::npos)
            << e.what();
    }
}

}  // namespace

namespace {

// A resident StepBackend (train/step.h) on the CPU: its own copy of the parameters, the
// gradient and the AdamW moments, the CPU's kernels on them, the parameters written back into
// the host model when the Trainer asks (download_params), as the CUDA backend does on the device.
class ResidentBackend final : public pldr::StepBackend<double> {
  public:
    explicit ResidentBackend(pldr::Model<double>& m)
        : host_(m), copy_(m), g_(m.params.size(), 0.0), mom_(m.num_params()) {}
    pldr::LossResult loss_and_grads(const pldr::TokenBatch& b, const pldr::DagCoeffs& dag,
                                    double* grads, double scale, double den) override {
        pldr::Activations<double> acts;
        return pldr::loss_and_grads(copy_, b.tokens, b.B, b.S1, dag, acts, grads, scale, den);
    }
    void parameters_changed() override { ADD_FAILURE() << "a resident backend updates itself"; }
    std::string name() const override { return "resident"; }
    bool resident() const override { return true; }
    void zero_grads() override { std::fill(g_.begin(), g_.end(), 0.0); }
    pldr::LossResult accumulate(const pldr::TokenBatch& b, const pldr::DagCoeffs& dag, double scale,
                                double den) override {
        ++accumulated;
        return loss_and_grads(b, dag, g_.data(), scale, den);
    }
    pldr::GradPass grad_pass(double limit) override {
        return pldr::grad_pass(g_.data(), n(), limit);
    }
    bool grads_finite() override { return pldr::all_finite(g_.data(), n()); }
    void download_grads(double* h) override { std::copy(g_.begin(), g_.end(), h); }
    void clip_by_value(double limit) override { pldr::clip_by_value(g_.data(), n(), limit); }
    void scale_to_norm(double max_norm, double norm) override {
        pldr::scale_to_norm(g_.data(), n(), max_norm, norm);
    }
    void adamw(int64_t t, double lr, const pldr::AdamWConfig& cfg) override {
        pldr::adamw_update(copy_.params.data(), g_.data(), mom_.m.data(), mom_.v.data(), n(), t, lr,
                           cfg);
        stale_ = true;
    }
    void download_params() override {
        if (stale_) std::copy(copy_.params.begin(), copy_.params.end(), host_.params.begin());
        stale_ = false;
    }
    void set_moments(const pldr::AdamWState<double>& s) override {
        std::copy(s.m.begin(), s.m.end(), mom_.m.begin());
        std::copy(s.v.begin(), s.v.end(), mom_.v.begin());
    }
    void get_moments(pldr::AdamWState<double>& s) override {
        std::copy(mom_.m.begin(), mom_.m.end(), s.m.begin());
        std::copy(mom_.v.begin(), mom_.v.end(), s.v.begin());
    }
    int accumulated = 0;

  private:
    int64_t n() const { return int64_t(g_.size()); }
    pldr::Model<double>& host_;
    pldr::Model<double> copy_;
    std::vector<double> g_;
    pldr::AdamWState<double> mom_;
    bool stale_ = false;
};

// A resident backend takes the CPU Trainer's steps bit for bit, clipping by value and by norm:
// the same parameters, step results and moments (full_optimizer brings them back), and a
// resumed state (set_optimizer) continues as the CPU's does; a non-finite gradient is refused
// naming its parameter, nothing changed.
TEST(TrainStep, AResidentStepBackendTakesTheSameSteps) {
    for (const pldr::ClipMode clip : {pldr::ClipMode::VALUE, pldr::ClipMode::NORM}) {
        SCOPED_TRACE(clip == pldr::ClipMode::VALUE ? "value" : "norm");
        pldr::Model<double> a(tiny(true));
        pldr::init_weights(a, 13);
        pldr::Model<double> b = a;
        pldr::TrainConfig tc = train_cfg();
        tc.dag = {0.01, 0.0, 0.02};
        tc.clip = clip;
        tc.clip_value = 0.05;
        tc.clip_norm = 0.5;
        auto backend = std::make_shared<ResidentBackend>(b);
        pldr::Trainer<double> ta(a, tc), tb(b, tc, {}, backend);
        pldr::AdamWState<double> resume(a.num_params());  // a nonzero state to start from
        for (int64_t i = 0; i < resume.size(); ++i) {
            resume.m[size_t(i)] = 1e-4 * double(i % 7);
            resume.v[size_t(i)] = 1e-6 * double(i % 5);
        }
        resume.step = 4;
        pldr::AdamWState<double> copy(a.num_params());
        std::copy(resume.m.begin(), resume.m.end(), copy.m.begin());
        std::copy(resume.v.begin(), resume.v.end(), copy.v.begin());
        copy.step = 4;
        ta.set_optimizer(std::move(resume));
        tb.set_optimizer(std::move(copy));
        expect_same_steps(ta, tb, 50, false);
        // the parameters stay in the backend until the Trainer syncs them (model() does)
        EXPECT_FALSE(std::equal(a.params.begin(), a.params.end(), b.params.begin()));
        tb.sync_params();
        EXPECT_EQ(a.params, b.params);
        EXPECT_EQ(backend->accumulated, 6);
        pldr::AdamWState<double> sa, sb;
        const pldr::AdamWState<double>& fa = ta.full_optimizer(sa);
        const pldr::AdamWState<double>& fb = tb.full_optimizer(sb);
        EXPECT_EQ(fa.step, fb.step);
        EXPECT_TRUE(std::equal(fa.m.begin(), fa.m.end(), fb.m.begin()));
        EXPECT_TRUE(std::equal(fa.v.begin(), fa.v.end(), fb.v.begin()));
    }
    // A NaN weight: the gradient is not finite, the step refused, the parameters unchanged.
    pldr::Model<double> m(tiny(true));
    pldr::init_weights(m, 5);
    m.w.layers[1].wo[3] = std::nan("");
    const std::vector<double> before(m.params.begin(), m.params.end());
    pldr::TrainConfig tc = train_cfg();
    pldr::Trainer<double> t(m, tc, {}, std::make_shared<ResidentBackend>(m));
    const auto tok = tokens(1, 9, 3);
    try {
        t.step({tok.data(), 1, 9});
        ADD_FAILURE() << "a NaN weight was not refused";
    } catch (const pldr::Error& e) {
        EXPECT_NE(std::string(e.what()).find("step refused"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(std::equal(before.begin(), before.end(), m.params.begin(),
                           [](double x, double y) { return x == y || (x != x && y != y); }));
    EXPECT_EQ(t.steps_done(), 0);
}

}  // namespace
