// Training steps on the GPU (cuda::make_step_backend: the Trainer's resident StepBackend, pldr
// train --device cuda: the loss, the gradient, the clipping and AdamW on the device) against the
// CPU's Trainer: for every case of the numeric case list, 10 float64 steps (two micro-batches
// each, the DAG terms where the case has them, clipping by value, warmup then cosine) give every
// parameter within 1e-12 of the CPU's trajectory (relative to that parameter tensor's largest
// value), the same step results, the same AdamW moments and the same validation loss; and bf16
// mixed precision as close to float64 as the CPU's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cuda_model/forward.h"
#include "gpu_util.h"
#include "numeric_cases.h"
#include "train/step.h"

namespace {

class CudaTrain : public ::testing::TestWithParam<numeric::Case> {};

TEST_P(CudaTrain, TenFloat64StepsFollowTheCpusTrajectory) {
    PLDR_REQUIRE_GPU();
    const numeric::Case& k = GetParam();
    const numeric::Shape& s = k.shape;
    pldr::Model<double> cpu = numeric::make_model(k, 41);
    pldr::Model<double> dev = cpu;
    pldr::TrainConfig tc;
    tc.schedule = {1e-3, 3, 10, 0.1};
    tc.clip_value = 0.5;
    if (k.dag) tc.dag = {0.1, 0.2, 0.3};
    pldr::Trainer<double> tcpu(cpu, tc), tdev(dev, tc, {}, pldr::cuda::make_step_backend(dev, 0));
    for (int step = 0; step < 10; ++step) {
        SCOPED_TRACE("step " + std::to_string(step + 1));
        const auto t1 = numeric::make_tokens(s, 100 + uint64_t(step));
        const auto t2 = numeric::make_tokens(s, 200 + uint64_t(step));
        const std::vector<pldr::TokenBatch> micro = {{t1.data(), s.B, s.S + 1},
                                                     {t2.data(), s.B, s.S + 1}};
        const pldr::StepResult a = tcpu.step(micro), b = tdev.step(micro);
        EXPECT_TRUE(
            gpu::f64_close(std::vector<double>{b.loss.value}, std::vector<double>{a.loss.value}));
        EXPECT_TRUE(
            gpu::f64_close(std::vector<double>{b.grad_norm}, std::vector<double>{a.grad_norm}));
        EXPECT_EQ(a.step, b.step);
        EXPECT_EQ(a.lr, b.lr);
    }
    // The steps leave the parameters on the device: stale on the host until synced.
    EXPECT_FALSE(std::equal(dev.params.begin(), dev.params.end(), cpu.params.begin()));
    tdev.sync_params();
    for (const pldr::ParamEntry& e : cpu.layout.entries) {
        const std::vector<double> pa(cpu.params.begin() + e.offset,
                                     cpu.params.begin() + e.offset + e.numel);
        const std::vector<double> pb(dev.params.begin() + e.offset,
                                     dev.params.begin() + e.offset + e.numel);
        EXPECT_TRUE(gpu::f64_close(pb, pa)) << e.name;
    }
    // The moments, kept on the device, come back for a checkpoint.
    pldr::AdamWState<double> sa, sb;
    const pldr::AdamWState<double>& fa = tcpu.full_optimizer(sa);
    const pldr::AdamWState<double>& fb = tdev.full_optimizer(sb);
    EXPECT_EQ(fa.step, fb.step);
    EXPECT_TRUE(gpu::f64_close(std::vector<double>(fb.m.begin(), fb.m.end()),
                               std::vector<double>(fa.m.begin(), fa.m.end())));
    EXPECT_TRUE(gpu::f64_close(std::vector<double>(fb.v.begin(), fb.v.end()),
                               std::vector<double>(fa.v.begin(), fa.v.end())));
    // Validation through the backend: the loss alone, as the CPU's.
    const auto ev = numeric::make_tokens(s, 999);
    EXPECT_TRUE(
        gpu::f64_close(std::vector<double>{tdev.evaluate({ev.data(), s.B, s.S + 1}).value},
                       std::vector<double>{tcpu.evaluate({ev.data(), s.B, s.S + 1}).value}));
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaTrain, ::testing::ValuesIn(numeric::cases()),
                         numeric::CaseName());

// Mixed precision on the GPU (--precision bf16: the linear layers' products with bf16 operands
// and float32 accumulation, the metric learner, the operator and the attention in float32):
// three steps of a float32 model stay as close to the float64 trajectory as the CPU's bf16
// steps do (4 times their distance, plus 2^-20), or within 2^-6 where this CPU has no bf16
// products; and bf16 did run: the first loss is further from the float64 one than float32
// rounding goes.
TEST(CudaTrainBf16, ThreeStepsStayWithTheCpusMixedPrecision) {
    PLDR_REQUIRE_GPU();
    const numeric::Case& k = numeric::cases().front();
    const numeric::Shape& s = k.shape;
    pldr::Model<double> ref = numeric::make_model(k, 43);
    pldr::Model<float> cpu = numeric::cast_model<float>(ref);
    pldr::Model<float> dev = numeric::cast_model<float>(ref);
    pldr::TrainConfig tc;
    tc.schedule = {1e-3, 1, 10, 0.1};
    pldr::Trainer<double> t64(ref, tc);
    tc.precision = pldr::Precision::BF16;
    pldr::Trainer<float> tcpu(cpu, tc), tdev(dev, tc, {}, pldr::cuda::make_step_backend(dev, 0));
    for (int step = 0; step < 3; ++step) {
        const auto t = numeric::make_tokens(s, 300 + uint64_t(step));
        const pldr::TokenBatch b{t.data(), s.B, s.S + 1};
        const double l64 = t64.step(b).loss.value;
        tcpu.step(b);
        const double l16 = tdev.step(b).loss.value;
        if (step == 0) {
            EXPECT_GT(std::fabs(l16 - l64), 1e-6 * std::fabs(l64)) << "no bf16 products ran";
            EXPECT_LT(std::fabs(l16 - l64), 5e-2 * std::fabs(l64));
        }
    }
    const std::vector<double> p64(ref.params.begin(), ref.params.end());
    const std::vector<float> pc(cpu.params.begin(), cpu.params.end());
    const std::vector<float> pd(tdev.model().params.begin(), tdev.model().params.end());
    const double bound = pldr::bf16::available() ? 4 * gpu::rel_err(pc, p64) + std::ldexp(1.0, -20)
                                                 : std::ldexp(1.0, -6);
    EXPECT_LE(gpu::rel_err(pd, p64), bound);
}

}  // namespace
