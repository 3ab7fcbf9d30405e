// bf16 products and mixed-precision training (issue 15, core/gemm_bf16.h): the rounding, the
// oneDNN product against float64 maths of the rounded operands, autocast in the linear layers
// (forward and backward), the weight cache of a scope, the run-time fallback, the bf16 prefill
// over packed weights, and mixed-precision training (close to fp32, learning, exact resume,
// refused for float64 and for a changed precision on resume).
//
// The tests of the bf16 product itself need a CPU with AVX512-BF16 or AMX-BF16 and skip
// elsewhere (and under PLDR_FORCE_FP32=1), saying why; the rounding, the fallback and the
// training checks run everywhere.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "cli_util.h"
#include "core/blas.h"
#include "core/gemm_bf16.h"
#include "core/rng.h"
#include "model/init.h"
#include "ops/linear.h"
#include "ops/qlinear.h"
#include "train/checkpoint.h"
#include "train/data_loader.h"
#include "train/step.h"
#include "train/trainer_loop.h"

using namespace pldr;

namespace {

#define REQUIRE_BF16()                                                                 \
    if (!bf16::available())                                                            \
    GTEST_SKIP() << "no bf16 products on this machine (" << bf16::unavailable_reason() \
                 << "); the float32 fallback is tested instead"

float rounded(float x) {
    return qlinear::bf16_value(qlinear::bf16_round(x));
}

std::vector<float> random_vec(size_t n, uint64_t seed, double scale = 1.0) {
    Rng r(seed);
    std::vector<float> v(n);
    for (auto& x : v) x = float(r.normal() * scale);
    return v;
}

// Restores the run-time choice when a test that forced the fallback ends (or fails).
struct ForcedFallback {
    ForcedFallback() { bf16::force_fallback(true); }
    ~ForcedFallback() { bf16::force_fallback(false); }
};

// op(X)[r][c] of a row-major matrix stored with leading dimension ld.
float at(const float* X, bool t, int64_t ld, int64_t r, int64_t c) {
    return t ? X[c * ld + r] : X[r * ld + c];
}

struct Ref {
    std::vector<double> c, mag;  // the product in float64, and Σ|terms| per element
};

// alpha·op(A)·op(B) + beta·C0 in float64, with A and B rounded to bf16 first when `round`.
Ref reference(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
              int64_t lda, const float* B, int64_t ldb, float beta, const float* C0, int64_t ldc,
              bool round) {
    Ref r;
    r.c.assign(size_t(M * N), 0);
    r.mag.assign(size_t(M * N), 0);
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            double s = 0, g = 0;
            for (int64_t k = 0; k < K; ++k) {
                double a = at(A, ta, lda, m, k), b = at(B, tb, ldb, k, n);
                if (round) a = rounded(float(a)), b = rounded(float(b));
                s += a * b;
                g += std::abs(a * b);
            }
            const double c0 = beta != 0 ? double(C0[m * ldc + n]) : 0.0;
            r.c[size_t(m * N + n)] = double(alpha) * s + double(beta) * c0;
            r.mag[size_t(m * N + n)] = std::abs(double(alpha)) * g + std::abs(double(beta) * c0);
        }
    return r;
}

// The float32-accumulation error bound of one element: (K + 4) units of 2⁻²⁴ of Σ|terms|.
double bound(int64_t K, double mag) {
    return double(K + 4) * 0x1p-24 * mag + 1e-30;
}

}  // namespace

TEST(Bf16Round, ToNearestEvenOnEveryClassOfValue) {
    // Against the packer's scalar rounding (ops/qlinear.h) on random bit patterns (normals,
    // subnormals, infinities, NaNs) and on the hand-checked cases.
    Rng r(11);
    std::vector<float> x(100000);
    for (auto& v : x) v = std::bit_cast<float>(uint32_t(r.next()));
    const uint32_t special[] = {0x3F808000u,  // 1 + 2⁻⁸: a tie, rounds to the even 0x3F80
                                0x3F818000u,  // 1 + 3·2⁻⁸: a tie, rounds up to the even 0x3F82
                                0x3F808001u,  // just above the tie: up
                                0x7F7FFFFFu,  // the largest float: overflows to +inf
                                0xFF7FFFFFu,  // and to −inf
                                0x7F800000u, 0xFF800000u,
                                0x7FC00000u, 0x7F800001u /* signalling NaN */,
                                0x00000001u, 0x80000000u};
    for (uint32_t s : special) x.push_back(std::bit_cast<float>(s));
    std::vector<uint16_t> out(x.size());
    bf16::round_to_bf16(x.data(), int64_t(x.size()), out.data());
    for (size_t i = 0; i < x.size(); ++i)
        ASSERT_EQ(out[i], qlinear::bf16_round(x[i])) << "bits " << std::bit_cast<uint32_t>(x[i]);
    const size_t k = x.size() - std::size(special);
    EXPECT_EQ(out[k + 0], 0x3F80u);
    EXPECT_EQ(out[k + 1], 0x3F82u);
    EXPECT_EQ(out[k + 2], 0x3F81u);
    EXPECT_EQ(out[k + 3], 0x7F80u);
    EXPECT_EQ(out[k + 4], 0xFF80u);
    EXPECT_TRUE(std::isnan(qlinear::bf16_value(out[k + 8])));  // a NaN stays a NaN
}

TEST(Bf16Gemm, EqualsFloat64MathsOfTheRoundedOperands) {
    REQUIRE_BF16();
    struct Shape {
        int64_t M, N, K;
    };
    const Shape shapes[] = {{1, 1, 1}, {37, 53, 129}, {5, 300, 64}, {160, 96, 768}};
    const float ab[][2] = {{1.0f, 0.0f}, {0.5f, 1.0f}, {2.0f, -0.75f}};
    int cases = 0;
    for (const Shape& s : shapes)
        for (int t = 0; t < 4; ++t)
            for (const auto& p : ab) {
                const bool ta = t & 1, tb = t & 2;
                const int64_t lda = (ta ? s.M : s.K) + 3, ldb = (tb ? s.K : s.N) + 1, ldc = s.N + 2;
                const auto A = random_vec(size_t((ta ? s.K : s.M) * lda), 1 + uint64_t(cases));
                const auto B = random_vec(size_t((tb ? s.N : s.K) * ldb), 100 + uint64_t(cases));
                const auto C0 = random_vec(size_t(s.M * ldc), 200 + uint64_t(cases));
                std::vector<float> C = C0;
                bf16::gemm_f32(ta, tb, s.M, s.N, s.K, p[0], A.data(), lda, false, B.data(), ldb,
                               false, p[1], C.data(), ldc);
                const Ref rr = reference(ta, tb, s.M, s.N, s.K, p[0], A.data(), lda, B.data(), ldb,
                                         p[1], C0.data(), ldc, true);
                const Ref rf = reference(ta, tb, s.M, s.N, s.K, p[0], A.data(), lda, B.data(), ldb,
                                         p[1], C0.data(), ldc, false);
                double worst = 0, moved = 0;
                for (int64_t m = 0; m < s.M; ++m) {
                    for (int64_t n = 0; n < s.N; ++n) {
                        const size_t i = size_t(m * s.N + n);
                        const double e = std::abs(double(C[size_t(m * ldc + n)]) - rr.c[i]);
                        worst = std::max(worst, e / bound(s.K, rr.mag[i]));
                        moved =
                            std::max(moved, std::abs(rf.c[i] - rr.c[i]) / bound(s.K, rr.mag[i]));
                    }
                    for (int64_t n = s.N; n < ldc; ++n)  // the padding of C is not written
                        ASSERT_EQ(C[size_t(m * ldc + n)], C0[size_t(m * ldc + n)]);
                }
                EXPECT_LE(worst, 1.0) << "M N K " << s.M << " " << s.N << " " << s.K << " ta " << ta
                                      << " tb " << tb << " alpha " << p[0];
                // The rounding is visible: the unrounded product lies outside the bound (so a
                // product that skipped the rounding would fail above).
                if (s.K > 1) {
                    EXPECT_GT(moved, 4.0);
                }
                ++cases;
            }
    EXPECT_EQ(cases, 48);
}

TEST(Bf16Autocast, LinearForwardAndBackwardInsideTheScopeOnly) {
    const int64_t N = 24, I = 40, O = 33;
    const auto x = random_vec(size_t(N * I), 1), W = random_vec(size_t(O * I), 2, 0.2),
               b = random_vec(size_t(O), 3), dy = random_vec(size_t(N * O), 4),
               din0 = random_vec(size_t(N * I), 5), dW0 = random_vec(size_t(O * I), 6);
    auto fwd = [&] {
        std::vector<float> y(size_t(N * O));
        linear_forward(y.data(), x.data(), W.data(), b.data(), N, I, O);
        return y;
    };
    auto bwd = [&] {
        std::vector<float> din = din0, dW = dW0, db(size_t(O), 1.0f);
        linear_backward(din.data(), dW.data(), db.data(), dy.data(), x.data(), W.data(), N, I, O);
        return std::vector<std::vector<float>>{din, dW, db};
    };
    const auto y32 = fwd();
    const auto g32 = bwd();
    {
        const Bf16Autocast off(Precision::FP32);  // an fp32 scope changes nothing
        EXPECT_EQ(fwd(), y32);
        EXPECT_EQ(bwd(), g32);
    }
    {
        const ForcedFallback forced;  // no bf16 products: a bf16 scope is the fp32 path
        const Bf16Autocast cast(Precision::BF16);
        EXPECT_FALSE(bf16::autocast_active());
        EXPECT_EQ(fwd(), y32);
        EXPECT_EQ(bwd(), g32);
    }
    if (!bf16::available()) GTEST_SKIP() << bf16::unavailable_reason();
    std::vector<float> y16;
    std::vector<std::vector<float>> g16;
    {
        const Bf16Autocast cast(Precision::BF16);
        EXPECT_TRUE(bf16::autocast_active());
        y16 = fwd();
        g16 = bwd();
        {
            const Bf16Autocast off(Precision::FP32);  // float32 inside (the metric learner)
            EXPECT_FALSE(bf16::autocast_active());
            EXPECT_EQ(fwd(), y32);
            EXPECT_EQ(bwd(), g32);
        }
        EXPECT_TRUE(bf16::autocast_active());
        EXPECT_EQ(fwd(), y16);
    }
    EXPECT_FALSE(bf16::autocast_active());
    EXPECT_EQ(fwd(), y32);  // outside the scope again: float32
    // y = x·Wᵀ + b over the rounded x and W (b added in float32).
    const Ref ry =
        reference(false, true, N, O, I, 1.0f, x.data(), I, W.data(), I, 0.0f, nullptr, 0, true);
    // din += dy·W, dW += dyᵀ·x over rounded operands; db exact.
    const Ref rdin = reference(false, false, N, I, O, 1.0f, dy.data(), O, W.data(), I, 1.0f,
                               din0.data(), I, true);
    const Ref rdW =
        reference(true, false, O, I, N, 1.0f, dy.data(), O, x.data(), I, 1.0f, dW0.data(), I, true);
    auto check = [](const std::vector<float>& got, const Ref& r, int64_t K, const float* add,
                    const char* what) {
        double worst = 0;
        for (size_t i = 0; i < got.size(); ++i) {
            const double ref = r.c[i] + (add ? double(add[i % 33]) : 0.0);
            const double mag = r.mag[i] + (add ? std::abs(double(add[i % 33])) : 0.0);
            worst = std::max(worst, std::abs(double(got[i]) - ref) / bound(K, mag));
        }
        EXPECT_LE(worst, 1.0) << what;
    };
    check(y16, ry, I, b.data(), "forward");
    check(g16[0], rdin, O, nullptr, "din");
    check(g16[1], rdW, N, nullptr, "dW");
    EXPECT_EQ(g16[2], g32[2]);  // the bias gradient is a float32 sum either way
    EXPECT_NE(y16, y32);
}

TEST(Bf16Autocast, AWeightIsRoundedOncePerScope) {
    REQUIRE_BF16();
    const int64_t N = 8, I = 32, O = 16;
    const auto x = random_vec(size_t(N * I), 7);
    auto W = random_vec(size_t(O * I), 8);
    std::vector<float> y1(size_t(N * O)), y2(y1.size()), y3(y1.size());
    {
        const Bf16Autocast cast(Precision::BF16);
        linear_forward<float>(y1.data(), x.data(), W.data(), nullptr, N, I, O);
    }
    for (auto& w : W) w = -w;  // the optimizer moved the weights between two steps
    {
        const Bf16Autocast cast(Precision::BF16);
        linear_forward<float>(y2.data(), x.data(), W.data(), nullptr, N, I, O);
        for (auto& w : W) w = 2 * w;  // within a scope the rounded copy is reused
        linear_forward<float>(y3.data(), x.data(), W.data(), nullptr, N, I, O);
    }
    for (size_t i = 0; i < y1.size(); ++i) {
        EXPECT_EQ(y2[i], -y1[i]) << "a new scope must round the moved weights";
        EXPECT_EQ(y3[i], y2[i]);
    }
}

TEST(Bf16Prefill, PackedBf16WeightsMultiplyInBf16) {
    // Above the streaming kernels' row count the bf16 model's linear layers run one bf16 product
    // over the stored weights (inputs rounded); with the fallback, the float32 GEMM over the
    // widened weights.
    const int64_t N = 3 * qlinear::kMaxRows, I = 96, O = 40;
    const auto x = random_vec(size_t(N * I), 9), Wf = random_vec(size_t(O * I), 10, 0.1),
               b = random_vec(size_t(O), 11);
    std::vector<uint16_t> wb(Wf.size());
    std::vector<float> Wr(Wf.size());
    for (size_t i = 0; i < Wf.size(); ++i) {
        wb[i] = qlinear::bf16_round(Wf[i]);
        Wr[i] = qlinear::bf16_value(wb[i]);
    }
    LinearWeight<float> W;
    W.format = WeightFormat::BF16;
    W.bf16 = wb.data();
    std::vector<float> y(size_t(N * O)), yd(y.size());
    linear_forward(yd.data(), x.data(), Wr.data(), b.data(), N, I, O);  // dense, widened weights
    {
        const ForcedFallback forced;
        linear_forward(y.data(), x.data(), W, b.data(), N, I, O);
        EXPECT_EQ(y, yd);
    }
    if (!bf16::available()) GTEST_SKIP() << bf16::unavailable_reason();
    linear_forward(y.data(), x.data(), W, b.data(), N, I, O);
    const Ref r =
        reference(false, true, N, O, I, 1.0f, x.data(), I, Wr.data(), I, 0.0f, nullptr, 0, true);
    double worst = 0;
    for (size_t i = 0; i < y.size(); ++i) {
        const double bi = b[i % size_t(O)];
        worst = std::max(
            worst, std::abs(double(y[i]) - (r.c[i] + bi)) / bound(I, r.mag[i] + std::abs(bi)));
    }
    EXPECT_LE(worst, 1.0);
    EXPECT_NE(y, yd);  // the inputs were rounded
}

namespace {

Config small_learned() {
    Config c;
    c.num_layers = 2;
    c.num_heads = 2;
    c.head_dim = 8;
    c.hidden_size = 16;
    c.intermediate_size = 40;
    c.vocab_size = 30;
    c.max_position = 24;
    c.A_dff = 8;
    c.num_reslayerA = 2;
    c.num_denseA = 2;
    c.g_type = GType::LEARNED;
    return c;
}

}  // namespace

TEST(Bf16Training, MixedPrecisionStepsTrackFloat32AndLearn) {
    // A cyclic sequence the model can learn; the same init, data and schedule in fp32 and bf16.
    const int64_t B = 4, S1 = 17;
    std::vector<int64_t> t(size_t(B * S1));
    for (size_t i = 0; i < t.size(); ++i) t[i] = 4 + int64_t((i * 7) % 13);
    Model<float> a(small_learned());
    init_weights(a, 5);
    Model<float> b = a;
    TrainConfig tc;
    tc.schedule = {3e-3, 3, 60, 0.1};
    TrainConfig tb = tc;
    tb.precision = Precision::BF16;
    Trainer<float> fa(a, tc), fb(b, tb);
    std::vector<double> la, lb;
    for (int k = 0; k < 60; ++k) {
        la.push_back(fa.step({t.data(), B, S1}).loss.value);
        lb.push_back(fb.step({t.data(), B, S1}).loss.value);
    }
    // The first loss is a forward from the same weights: bf16 products move it by about the
    // rounding of the activations (2⁻⁹ relative), not more.
    EXPECT_LT(std::abs(la[0] - lb[0]), 0.01 * la[0]);
    if (bf16::available())
        EXPECT_NE(la[0], lb[0]) << "bf16 was available but the products ran in float32";
    else
        EXPECT_EQ(la, lb) << "without bf16 the mixed-precision run is the float32 run";
    // Both learn the sequence, and end close together.
    EXPECT_LT(la.back(), 0.5 * la[0]);
    EXPECT_LT(lb.back(), 0.5 * lb[0]);
    EXPECT_LT(std::abs(la.back() - lb.back()), 0.1 * la.back() + 0.02);
    // Validation (evaluate) uses the same precision as the steps.
    const double va = fa.evaluate({t.data(), B, S1}).value,
                 vb = fb.evaluate({t.data(), B, S1}).value;
    EXPECT_LT(std::abs(va - vb), 0.1 * va + 0.02);
}

TEST(Bf16Training, RefusedForFloat64) {
    Model<double> m(small_learned());
    init_weights(m, 1);
    TrainConfig tc;
    tc.schedule = {1e-3, 1, 10, 0.1};
    tc.precision = Precision::BF16;
    try {
        Trainer<double> t(m, tc);
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("float64"), std::string::npos) << e.what();
    }
    EXPECT_THROW(parse_precision("fp16"), Error);
    EXPECT_EQ(parse_precision("bf16"), Precision::BF16);
}

TEST(Bf16Training, ResumeIsBitIdenticalAndKeepsThePrecision) {
    const std::string data = cli_test::tmp_dir("bf16_resume_data");
    Rng rng(3);
    std::vector<int64_t> tr(size_t(9 * 12)), va(size_t(3 * 12));
    for (auto& v : tr) v = 1 + int64_t(rng.below(39));
    for (auto& v : va) v = 1 + int64_t(rng.below(39));
    write_shard(data + "/train.pldrtok", tr, 40, 12);
    write_shard(data + "/valid.pldrtok", va, 40, 12);
    const std::string root = cli_test::tmp_dir("bf16_resume_out");
    TrainOptions o;
    o.preset = "tiny";
    o.data_dir = data;
    o.out_dir = root + "/full";
    o.steps = 8;
    o.batch = 3;
    o.accum = 2;
    o.lr = 3e-3;
    o.warmup = 2;
    o.eval_every = 4;
    o.eval_batches = 1;
    o.save_every = 0;
    o.precision = "bf16";
    o.given = {"steps", "precision"};
    run_training(o);
    TrainOptions h = o;
    h.out_dir = root + "/half";
    h.stop_at = 3;
    run_training(h);
    TrainOptions r;  // the precision comes from the checkpoint
    r.data_dir = data;
    r.out_dir = h.out_dir;
    r.resume_dir = h.out_dir;
    run_training(r);
    for (const char* f : {"/model.safetensors", "/train_state.safetensors"})
        EXPECT_TRUE(cli_test::slurp(o.out_dir + f) == cli_test::slurp(h.out_dir + f)) << f;
    // The fp32 run of the same schedule ends elsewhere where bf16 products ran.
    TrainOptions p = o;
    p.out_dir = root + "/fp32";
    p.precision = "fp32";
    run_training(p);
    const bool same = cli_test::slurp(p.out_dir + "/model.safetensors") ==
                      cli_test::slurp(o.out_dir + "/model.safetensors");
    EXPECT_EQ(same, !bf16::available());
    // Resuming with another precision given explicitly is refused.
    TrainOptions x;
    x.data_dir = data;
    x.out_dir = root + "/x";
    x.resume_dir = o.out_dir;
    x.steps = 10;
    x.precision = "fp32";
    x.given = {"precision"};
    try {
        run_training(x);
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--precision fp32 differs"), std::string::npos)
            << e.what();
    }
}
