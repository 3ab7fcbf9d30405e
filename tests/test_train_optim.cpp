// Optimizer pieces: LR schedule, AdamW (bit-exact with torch's single-tensor path); clipping is
// in test_train_clip.cpp.
// Golden data: every fixture under PLDR_GOLDEN_DIR (tests/golden_util.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "golden_util.h"
#include "io/safetensors.h"
#include "train/adamw.h"
#include "train/clip.h"
#include "train/schedule.h"

namespace {

using pldr::AdamWConfig;
using pldr::AdamWState;
using pldr::LrSchedule;

// The warmup-cosine schedule a fixture's hyperparameters describe.
LrSchedule schedule_of(const nlohmann::json& hp) {
    return {hp.at("learning_rate").get<double>(), hp.at("warmup_steps").get<int64_t>(),
            hp.at("lr_total_steps").get<int64_t>(), hp.at("lr_alpha").get<double>()};
}

template <class T>
bool same_bits(T a, T b) {
    return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// Distance in units in the last place between two finite values of the same type.
template <class T>
int64_t ulp_distance(T a, T b) {
    using I = std::conditional_t<sizeof(T) == 8, int64_t, int32_t>;
    I ia, ib;
    std::memcpy(&ia, &a, sizeof(T));
    std::memcpy(&ib, &b, sizeof(T));
    // Map the sign-magnitude ordering onto a monotone integer line.
    const auto key = [](I x) -> int64_t {
        return x < 0 ? int64_t(std::numeric_limits<I>::min()) - int64_t(x) : int64_t(x);
    };
    const int64_t d = key(ia) - key(ib);
    return d < 0 ? -d : d;
}

// ---------------------------------------------------------------------------------------
// Schedule

const LrSchedule kTrajSchedule{3e-3, 5, 40, 0.1};    // trajectory runs t1, t2
const LrSchedule kGoldenSchedule{1e-3, 4, 20, 0.1};  // single-step fixtures a..e

// Every trajectory fixture's lr of every step, bit for bit, from its own hyperparameters.
TEST(LrSchedule, MatchesTrajectoryLrBitForBit) {
    GOLDEN_USE(golden::set().trajectories, "trajectory");
    int64_t checked = 0, expected = 0;
    for (const auto& t : golden::set().trajectories) {
        const auto& js = t.side;
        const auto& hp = js.at("hyperparams");
        const LrSchedule sched = schedule_of(hp);
        const int64_t steps = hp.at("num_steps").get<int64_t>();
        for (const char* dt : {"f64", "f32"}) {
            pldr::SafetensorsFile f(t.path(dt));
            ASSERT_EQ(f.at("traj.lr").dtype, pldr::DType::F64);
            const auto lr = f.read<double>("traj.lr");
            ASSERT_EQ(lr.numel(), steps);
            const auto& jlr = js.at("results").at(dt).at("lr");
            ASSERT_EQ(int64_t(jlr.size()), steps);
            for (int64_t k = 1; k <= steps; ++k) {
                const double mine = sched.lr(k - 1);  // step k uses s = k - 1
                EXPECT_TRUE(same_bits(mine, lr[k - 1]))
                    << t.name << " " << dt << " step " << k << ": " << mine << " vs " << lr[k - 1];
                EXPECT_TRUE(same_bits(mine, jlr[size_t(k - 1)].get<double>()));
                ++checked;
            }
            expected += steps;
            const auto& r = js.at("results").at(dt);
            const std::string key = "lr_after_" + std::to_string(steps) + "_scheduler_steps";
            if (r.contains(key)) {
                EXPECT_TRUE(same_bits(sched.lr(steps), r.at(key).get<double>()));
            }
        }
    }
    EXPECT_EQ(checked, expected);
    EXPECT_GT(checked, 0);
}

TEST(LrSchedule, KeyValues) {
    const LrSchedule& s = kTrajSchedule;
    EXPECT_EQ(s.lambda(0), 0.0);
    EXPECT_EQ(s.lr(0), 0.0);
    // Warmup uses (1/w)·s, not s/w: (1/5)·1·3e-3 = 6.000000000000001e-4.
    EXPECT_TRUE(same_bits(s.lr(1), 0.0006000000000000001));
    EXPECT_TRUE(same_bits(s.lr(3), 0.0018000000000000004));
    EXPECT_EQ(s.lambda(5), 1.0);  // the peak
    EXPECT_EQ(s.lr(5), 3e-3);
    EXPECT_TRUE(same_bits(s.lr(6), 0.002994565296893573));
    EXPECT_TRUE(same_bits(s.lr(39), 3.054347031064273e-4));  // step 40 (README)
    // The floor: λ(total) = α, and s is capped at total.
    EXPECT_EQ(s.lambda(40), 0.1);
    EXPECT_TRUE(same_bits(s.lr(40), 0.00030000000000000003));
    EXPECT_EQ(s.lr(41), s.lr(40));
    EXPECT_EQ(s.lr(1000000), s.lr(40));
    // Strictly rising through warmup, strictly falling through the cosine.
    for (int64_t k = 1; k <= 5; ++k) EXPECT_GT(s.lr(k), s.lr(k - 1)) << k;
    for (int64_t k = 6; k <= 40; ++k) EXPECT_LT(s.lr(k), s.lr(k - 1)) << k;
    for (int64_t k = 0; k <= 40; ++k) EXPECT_GE(s.lambda(k), k == 0 ? 0.0 : 0.1);
}

TEST(LrSchedule, GoldenFixtureLrs) {
    EXPECT_EQ(kGoldenSchedule.lr(0), 0.0);
    EXPECT_TRUE(same_bits(kGoldenSchedule.lr(1), 2.5e-4));
    EXPECT_TRUE(same_bits(kGoldenSchedule.lr(2), 5e-4));
    GOLDEN_USE(golden::set().steps, "single-step");
    for (const auto& fx : golden::set().steps) {
        const auto& js = fx.side;
        const auto& hp = js.at("hyperparams_train_step");
        const LrSchedule sched = schedule_of(hp);
        for (const char* dt : {"f64", "f32"}) {
            const auto& r = js.at("results").at(dt);
            const auto& used = r.at("adamw_lrs_used");
            ASSERT_EQ(used.size(), 2u);
            EXPECT_TRUE(same_bits(sched.lr(0), used[0].get<double>())) << fx.name;
            EXPECT_TRUE(same_bits(sched.lr(1), used[1].get<double>())) << fx.name;
            EXPECT_TRUE(
                same_bits(sched.lr(2), r.at("adamw_lr_after_2_scheduler_steps").get<double>()));
        }
    }
}

TEST(LrSchedule, EdgeCases) {
    // warmup = 0: no warmup phase, the cosine starts at s = 0 (λ(0) = 1), no division by zero.
    const LrSchedule w0{1e-3, 0, 10, 0.2};
    EXPECT_EQ(w0.lambda(0), 1.0);
    EXPECT_EQ(w0.lr(0), 1e-3);
    EXPECT_NEAR(w0.lambda(5), 0.2 + 0.8 * 0.5, 1e-15);
    EXPECT_NEAR(w0.lambda(10), 0.2, 1e-16);
    EXPECT_TRUE(std::isfinite(w0.lambda(3)));
    // warmup == total: linear rise to 1 and then flat; the cosine branch is never taken.
    const LrSchedule wt{2e-3, 8, 8, 0.1};
    EXPECT_EQ(wt.lambda(0), 0.0);
    EXPECT_EQ(wt.lambda(4), 0.5);
    EXPECT_EQ(wt.lambda(8), 1.0);
    EXPECT_EQ(wt.lambda(100), 1.0);
    EXPECT_EQ(wt.lr(100), 2e-3);
    // alpha = 1: constant after warmup; alpha = 0: decays to exactly 0.
    const LrSchedule a1{1e-3, 2, 10, 1.0};
    for (int64_t k = 2; k <= 12; ++k) EXPECT_EQ(a1.lambda(k), 1.0) << k;
    const LrSchedule a0{1e-3, 2, 10, 0.0};
    EXPECT_EQ(a0.lambda(10), 0.0);
    // total = 1.
    const LrSchedule t1{1.0, 0, 1, 0.5};
    EXPECT_EQ(t1.lambda(0), 1.0);
    EXPECT_EQ(t1.lambda(1), 0.5);
    const LrSchedule t1w{1.0, 1, 1, 0.5};
    EXPECT_EQ(t1w.lambda(0), 0.0);
    EXPECT_EQ(t1w.lambda(1), 1.0);
}

void expect_error(const LrSchedule& s, const std::string& needle) {
    try {
        s.validate();
        ADD_FAILURE() << "no error for " << needle;
    } catch (const pldr::Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(needle), std::string::npos) << msg;
        EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
    EXPECT_THROW(s.lr(0), pldr::Error);
}

TEST(LrSchedule, Validation) {
    EXPECT_NO_THROW(kTrajSchedule.validate());
    expect_error({1e-3, 30, 20, 0.1}, "warmup");
    expect_error({1e-3, 0, 0, 0.1}, "total");
    expect_error({1e-3, 0, -5, 0.1}, "total");
    expect_error({1e-3, -1, 20, 0.1}, "warmup");
    expect_error({1e-3, 4, 20, -0.1}, "alpha");
    expect_error({1e-3, 4, 20, 1.5}, "alpha");
    expect_error({1e-3, 4, 20, std::nan("")}, "alpha");
    expect_error({0.0, 4, 20, 0.1}, "lr_max");
    expect_error({-1e-3, 4, 20, 0.1}, "lr_max");
    expect_error({std::numeric_limits<double>::infinity(), 4, 20, 0.1}, "lr_max");
    expect_error({std::nan(""), 4, 20, 0.1}, "lr_max");
    EXPECT_THROW(kTrajSchedule.lr(-1), pldr::Error);
}

// ---------------------------------------------------------------------------------------
// AdamW against the golden fixtures

struct GoldenStats {
    int64_t elements = 0, differ = 0, max_ulp = 0, clipped = 0;
    double max_abs = 0;
};

template <class T>
GoldenStats run_golden(const golden::Fixture& fx, const char* dt, int64_t expected_clipped) {
    GoldenStats st;
    const std::string cfg = fx.name;
    pldr::SafetensorsFile f(fx.path(dt));
    const auto& hp = fx.side.at("hyperparams_train_step");
    AdamWConfig ac;  // betas (0.9, 0.95) and eps 1e-5 unless the fixture names them
    ac.weight_decay = hp.at("adamw_decay").get<double>();
    if (hp.contains("betas")) ac.beta1 = hp["betas"][0], ac.beta2 = hp["betas"][1];
    if (hp.contains("eps")) ac.eps = hp["eps"];
    const LrSchedule sched = schedule_of(hp);
    const double lr1 = sched.lr(0), lr2 = sched.lr(1);
    EXPECT_EQ(lr1, 0.0);
    // Flat buffers for the AdamWState path (the way the trainer holds parameters).
    std::vector<T> flat_p, flat_g, flat_want;
    for (const auto& info : f.tensors()) {
        if (info.name.rfind("param.", 0) != 0) continue;
        const std::string name = info.name.substr(6);
        const auto p0 = f.read<T>(info.name);
        auto g = f.read<T>("grad." + name);
        const auto want = f.read<T>("adamw.param_after_step2." + name);
        EXPECT_EQ(f.at(info.name).dtype, sizeof(T) == 8 ? pldr::DType::F64 : pldr::DType::F32);
        EXPECT_EQ(g.shape, p0.shape) << name;
        EXPECT_EQ(want.shape, p0.shape) << name;
        const int64_t n = p0.numel();
        st.clipped += pldr::clip_by_value(g.ptr(), n, T(1));
        for (int64_t i = 0; i < n; ++i) EXPECT_LE(std::abs(g[i]), T(1));

        auto p = p0;
        std::vector<T> m(size_t(n), T(0)), v(size_t(n), T(0));
        pldr::adamw_update(p.ptr(), g.ptr(), m.data(), v.data(), n, 1, lr1, ac);
        EXPECT_EQ(std::memcmp(p.ptr(), p0.ptr(), size_t(n) * sizeof(T)), 0)
            << name << ": the lr-0 step changed the parameters";
        pldr::adamw_update(p.ptr(), g.ptr(), m.data(), v.data(), n, 2, lr2, ac);
        for (int64_t i = 0; i < n; ++i) {
            ++st.elements;
            if (!same_bits(p[i], want[i])) {
                ++st.differ;
                st.max_ulp = std::max(st.max_ulp, ulp_distance(p[i], want[i]));
                st.max_abs = std::max(st.max_abs, double(std::abs(p[i] - want[i])));
            }
        }
        flat_p.insert(flat_p.end(), p0.data.begin(), p0.data.end());
        flat_g.insert(flat_g.end(), g.data.begin(), g.data.end());
        flat_want.insert(flat_want.end(), p.data.begin(), p.data.end());
    }
    EXPECT_EQ(st.clipped, expected_clipped) << cfg << " " << dt;

    // The same two steps through AdamWState over one flat buffer give the same bits.
    const int64_t n = int64_t(flat_p.size());
    const std::vector<T> flat_p0 = flat_p;
    AdamWState<T> state(n);
    pldr::adamw_step(state, flat_p.data(), flat_g.data(), n, lr1, ac);
    EXPECT_EQ(state.step, 1);
    EXPECT_EQ(std::memcmp(flat_p.data(), flat_p0.data(), size_t(n) * sizeof(T)), 0);
    pldr::adamw_step(state, flat_p.data(), flat_g.data(), n, lr2, ac);
    EXPECT_EQ(state.step, 2);
    EXPECT_EQ(std::memcmp(flat_p.data(), flat_want.data(), size_t(n) * sizeof(T)), 0);
    return st;
}

// Two AdamW steps of every single-step fixture, bit for bit in both dtypes.
TEST(AdamWGolden, TwoStepsMatchReference) {
    GOLDEN_USE(golden::set().steps, "single-step");
    for (const auto& fx : golden::set().steps) {
        const auto& js = fx.side;
        for (const char* dt : {"f64", "f32"}) {
            const auto& r = js.at("results").at(dt);
            EXPECT_TRUE(r.at("params_unchanged_after_step1_lr0").get<bool>());
            const int64_t want_clipped = r.at("grad_elements_clipped_by_value_1").get<int64_t>();
            const GoldenStats st = std::string(dt) == "f64"
                                       ? run_golden<double>(fx, dt, want_clipped)
                                       : run_golden<float>(fx, dt, want_clipped);
            std::cout << "[ adamw    ] " << fx.name << " " << dt << ": " << st.elements
                      << " elements, " << st.clipped << " clipped, " << st.differ << " differ (max "
                      << st.max_ulp << " ulp, max abs " << st.max_abs << ")\n";
            EXPECT_GT(st.elements, 0);
            EXPECT_EQ(st.differ, 0) << fx.name << " " << dt;  // bit-exact in both dtypes
            EXPECT_LE(st.max_abs, 1e-12);
        }
    }
}

// ---------------------------------------------------------------------------------------
// AdamW hand examples

// Long-double recomputation of k AdamW steps on one element with a constant gradient and the
// given lrs (bias correction counts every step, lr-0 ones included).
long double adamw_ref(long double p, long double g, const std::vector<double>& lrs,
                      const AdamWConfig& c, long double* m_out = nullptr,
                      long double* v_out = nullptr) {
    long double m = 0, v = 0;
    int t = 0;
    for (double lr : lrs) {
        ++t;
        p *= 1.0L - (long double)lr * c.weight_decay;
        m = c.beta1 * m + (1.0L - c.beta1) * g;
        v = c.beta2 * v + (1.0L - c.beta2) * g * g;
        const long double bc1 = 1.0L - std::pow((long double)c.beta1, (long double)t);
        const long double bc2 = 1.0L - std::pow((long double)c.beta2, (long double)t);
        p -= (long double)lr / bc1 * m / (std::sqrt(v) / std::sqrt(bc2) + c.eps);
    }
    if (m_out) *m_out = m;
    if (v_out) *v_out = v;
    return p;
}

template <class T>
void check_hand(T p0, T g, const std::vector<double>& lrs, double rel_tol) {
    const AdamWConfig c;
    AdamWState<T> st(1);
    T p = p0;
    for (double lr : lrs) pldr::adamw_step(st, &p, &g, 1, lr, c);
    EXPECT_EQ(st.step, int64_t(lrs.size()));
    long double m_ref, v_ref;
    const long double p_ref = adamw_ref(p0, g, lrs, c, &m_ref, &v_ref);
    const auto rel = [](long double a, long double b) {
        return double(std::fabs(a - b) / std::max(std::fabs(b), 1e-30L));
    };
    EXPECT_LE(rel(p, p_ref), rel_tol) << "p " << double(p) << " vs " << double(p_ref);
    EXPECT_LE(rel(st.m[0], m_ref), rel_tol) << "m";
    EXPECT_LE(rel(st.v[0], v_ref), rel_tol) << "v";
}

TEST(AdamW, HandExamplesAgainstLongDouble) {
    const std::vector<std::vector<double>> schedules = {
        {1e-3}, {0.0, 2.5e-4}, {0.0, 1e-2, 3e-2, 5e-3}, {0.0, 0.1, 0.2, 0.3, 0.4, 0.5}};
    for (const auto& lrs : schedules) {
        for (double p0 : {0.75, -1.5, 3.0}) {
            for (double g : {0.5, -0.25, 1.0, 1e-3}) {
                SCOPED_TRACE(::testing::Message()
                             << "p0=" << p0 << " g=" << g << " steps=" << lrs.size());
                check_hand<double>(p0, g, lrs, 1e-14);
                check_hand<float>(float(p0), float(g), lrs, 2e-6);
            }
        }
    }
}

TEST(AdamW, FirstStepMovesByAboutLr) {
    // At t = 1, m̂ = g and v̂ = g², so the Adam step is lr·g/(|g| + eps) ≈ lr·sign(g),
    // on top of the decoupled decay p·lr·wd.
    const AdamWConfig c;
    double p = 2.0, g = 0.3, m = 0, v = 0;
    pldr::adamw_update(&p, &g, &m, &v, 1, 1, 0.01, c);
    const double want = 2.0 * (1 - 0.01 * 0.1) - 0.01 * 0.3 / (0.3 + 1e-5);
    EXPECT_NEAR(p, want, 1e-15);
    EXPECT_NEAR(m, 0.1 * 0.3, 1e-17);
    EXPECT_NEAR(v, 0.05 * 0.09, 1e-17);
}

TEST(AdamW, WeightDecayAppliesToEveryElement) {
    // Zero gradients: m = v = 0, the Adam term is 0/(0 + eps) = 0, and every element is only
    // scaled by (1 − lr·wd), whatever it is (weights, biases, LayerNorm gains, ...).
    const AdamWConfig c;
    std::vector<double> p = {2.0, -1.0, 0.5, 1e-3, -7.25}, g(5, 0.0);
    const std::vector<double> p0 = p;
    AdamWState<double> st(5);
    pldr::adamw_step(st, p.data(), g.data(), 5, 0.5, c);
    for (size_t i = 0; i < p.size(); ++i) EXPECT_EQ(p[i], p0[i] * (1.0 - 0.5 * 0.1)) << i;
    EXPECT_EQ(p[0], 1.9);
    // Without weight decay, nothing moves.
    AdamWConfig c0;
    c0.weight_decay = 0;
    std::vector<float> q = {2.0f, -1.0f}, h(2, 0.0f);
    AdamWState<float> sf(2);
    pldr::adamw_step(sf, q.data(), h.data(), 2, 0.5, c0);
    EXPECT_EQ(q[0], 2.0f);
    EXPECT_EQ(q[1], -1.0f);
}

TEST(AdamW, LrZeroStepCountsForBiasCorrection) {
    // Constant g over two steps: m = 0.19·g and v = 0.0975·g². With t = 2 the bias correction
    // gives m̂ = g and v̂ = g² (a step of ≈ lr); an implementation that skipped or did not count
    // the lr-0 step would use t = 1: m̂ = 1.9·g, v̂ = 1.95·g², a step ≈ 1.36·lr.
    const AdamWConfig c;
    const double g = 0.4, lr = 1e-2;
    double p = 1.0, m = 0, v = 0;
    pldr::adamw_update(&p, &g, &m, &v, 1, 1, 0.0, c);
    EXPECT_EQ(p, 1.0);
    EXPECT_NEAR(m, 0.04, 1e-17);
    EXPECT_NEAR(v, 0.05 * 0.16, 1e-17);
    pldr::adamw_update(&p, &g, &m, &v, 1, 2, lr, c);
    EXPECT_NEAR(m, 0.19 * g, 1e-16);
    EXPECT_NEAR(v, 0.0975 * g * g, 1e-16);
    const double decayed = 1.0 * (1 - lr * 0.1);
    const double right = decayed - lr * g / (g + 1e-5);
    const double wrong = decayed - lr * (1.9 * g) / (std::sqrt(1.95) * g + 1e-5);
    EXPECT_NEAR(p, right, 1e-15);
    EXPECT_GT(std::abs(p - wrong), 3e-3);
}

TEST(AdamW, OperationOrderFloat) {
    // A float element where the fused and unfused moment updates differ; the expected values
    // follow the documented torch order with every scalar rounded once to float.
    const AdamWConfig c;
    const float g = 0.123456789f;
    float p = 0.987654321f, m = -0.0136f, v = 0.00731f;
    const float p0 = p, m0 = m, v0 = v;
    const int64_t t = 7;
    const double lr = 3e-3;
    pldr::adamw_update(&p, &g, &m, &v, 1, t, lr, c);
    const float m_want = std::fma(g, float(1.0 - 0.9), m0 * 0.9f);
    const float v_want = std::fma(float(1.0 - 0.95) * g, g, v0 * 0.95f);
    const float den = std::sqrt(v_want) / float(std::sqrt(1.0 - std::pow(0.95, 7.0))) + 1e-5f;
    const float p_want =
        p0 * float(1.0 - lr * 0.1) + (float(-(lr / (1.0 - std::pow(0.9, 7.0)))) * m_want) / den;
    EXPECT_TRUE(same_bits(m, m_want)) << m << " vs " << m_want;
    EXPECT_TRUE(same_bits(v, v_want)) << v << " vs " << v_want;
    EXPECT_TRUE(same_bits(p, p_want)) << p << " vs " << p_want;
}

TEST(AdamW, LargeBufferMatchesScalarPath) {
    // The parallel/vectorized path (n above the threading threshold) gives the same bits as
    // element-by-element updates.
    const int64_t n = 200003;
    std::vector<float> p(n), g(n), m(n), v(n);
    for (int64_t i = 0; i < n; ++i) {
        p[i] = std::sin(0.001f * float(i));
        g[i] = std::cos(0.0037f * float(i)) * 0.7f;
        m[i] = 0.01f * std::sin(0.02f * float(i));
        v[i] = 0.001f * (1.0f + std::cos(0.05f * float(i)));
    }
    auto p1 = p, m1 = m, v1 = v;
    const AdamWConfig c;
    pldr::adamw_update(p.data(), g.data(), m.data(), v.data(), n, 5, 2e-3, c);
    for (int64_t i = 0; i < n; ++i)
        pldr::adamw_update(&p1[i], &g[i], &m1[i], &v1[i], 1, 5, 2e-3, c);
    EXPECT_EQ(std::memcmp(p.data(), p1.data(), n * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(m.data(), m1.data(), n * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(v.data(), v1.data(), n * sizeof(float)), 0);
}

TEST(AdamW, Validation) {
    double p = 1, g = 1, m = 0, v = 0;
    const auto bad = [&](AdamWConfig c) {
        EXPECT_THROW(c.validate(), pldr::Error);
        EXPECT_THROW(pldr::adamw_update(&p, &g, &m, &v, 1, 1, 1e-3, c), pldr::Error);
    };
    bad({1.0, 0.95, 1e-5, 0.1});
    bad({-0.1, 0.95, 1e-5, 0.1});
    bad({0.9, 1.0, 1e-5, 0.1});
    bad({0.9, std::nan(""), 1e-5, 0.1});
    bad({0.9, 0.95, 0.0, 0.1});
    bad({0.9, 0.95, -1e-8, 0.1});
    bad({0.9, 0.95, 1e-5, -0.1});
    bad({0.9, 0.95, 1e-5, std::numeric_limits<double>::infinity()});
    EXPECT_NO_THROW(AdamWConfig({0.0, 0.0, 1e-8, 0.0}).validate());
    const AdamWConfig c;
    EXPECT_THROW(pldr::adamw_update(&p, &g, &m, &v, 1, 0, 1e-3, c), pldr::Error);
    EXPECT_THROW(pldr::adamw_update(&p, &g, &m, &v, 1, 1, -1e-3, c), pldr::Error);
    EXPECT_THROW(pldr::adamw_update(&p, &g, &m, &v, 1, 1, std::nan(""), c), pldr::Error);
    EXPECT_THROW(pldr::adamw_update(&p, &g, &m, &v, -1, 1, 1e-3, c), pldr::Error);
    AdamWState<double> st(3);
    std::vector<double> pp(2, 1.0), gg(2, 0.0);
    EXPECT_THROW(pldr::adamw_step(st, pp.data(), gg.data(), 2, 1e-3, c), pldr::Error);
    EXPECT_EQ(st.step, 0);  // a rejected step does not count
    EXPECT_EQ(p, 1.0);
}

}  // namespace
