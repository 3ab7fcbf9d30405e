// float32 against float64, as llama.cpp's test-backend-ops compares a backend with a reference
// one: every kernel of src/ops (forward and backward; the PLGA operator in every registered
// variant) and the whole model of every case of tests/numeric_cases.h (logits, loss and every
// parameter gradient).
//
// Tolerance from the measured conditioning: the float64 computation is repeated with every input
// perturbed by a relative ε32·u (u uniform in [−1, 1], ε32 = 2⁻²⁴, the float32 rounding of the
// inputs), three times; δ = max|Δy| / max|y| is how much float32-sized input errors move the
// result. A float32 evaluation carries those input errors plus its own rounding, which grows with
// the length n of the reductions: it must agree with float64 within
//   err = max|y32 − y64| / max|y64| ≤ 8·(δ + ε32·√n).
// A float32 kernel that computes something else (a wrong formula, a lost term, a wrong variant)
// differs by O(1), far above this.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "model/forward.h"
#include "numeric_cases.h"
#include "ops/ops.h"
#include "ops/plga_variants.h"
#include "threads_util.h"
#include "train/loss.h"

namespace {

constexpr double kEps32 = 0x1.0p-24;
constexpr double kSafety = 8.0;
// The whole model: parameter perturbations do not see the rounding of intermediates that A_P
// amplifies (the same effect the golden float32 allowances measure, factor 20 there). Measured
// worst err / (δ + ε√n) over the case list: 11.9 (dk24_H3 G_random, wk.bias gradient).
constexpr double kModelSafety = 20.0;

using Vec = std::vector<double>;
using Inputs = std::vector<Vec>;

template <typename T>
std::vector<std::vector<T>> cast_all(const Inputs& in) {
    std::vector<std::vector<T>> out;
    for (const Vec& v : in) out.emplace_back(v.begin(), v.end());
    return out;
}

double max_abs(const Vec& v) {
    double m = 0;
    for (double x : v) m = std::max(m, std::fabs(x));
    return m;
}

double max_diff(const Vec& a, const Vec& b) {
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
}

// `op(T{}, inputs)` returns the outputs (one flat vector per output) computed in T.
template <typename Op>
void agree(const std::string& what, Op op, const Inputs& in, int64_t n_inner,
           const std::vector<std::string>& out_names) {
    const auto y64 = op(double{}, cast_all<double>(in));
    const auto y32f = op(float{}, cast_all<float>(in));
    ASSERT_EQ(y64.size(), out_names.size());
    std::vector<double> delta(y64.size(), 0.0);
    pldr::Rng r(1234);
    for (int trial = 0; trial < 3; ++trial) {
        Inputs p = in;
        for (Vec& v : p)
            for (double& x : v) x *= 1 + kEps32 * r.uniform(-1.0, 1.0);
        const auto yp = op(double{}, cast_all<double>(p));
        for (size_t k = 0; k < y64.size(); ++k) {
            const Vec a(y64[k].begin(), y64[k].end()), b(yp[k].begin(), yp[k].end());
            delta[k] = std::max(delta[k], max_diff(a, b) / std::max(max_abs(a), 1e-300));
        }
    }
    for (size_t k = 0; k < y64.size(); ++k) {
        const Vec a(y64[k].begin(), y64[k].end()), b(y32f[k].begin(), y32f[k].end());
        ASSERT_EQ(a.size(), b.size());
        const double scale = max_abs(a);
        ASSERT_GT(scale, 0.0) << what << " " << out_names[k];
        const double err = max_diff(a, b) / scale;
        const double tol = kSafety * (delta[k] + kEps32 * std::sqrt(double(n_inner)));
        EXPECT_LE(err, tol) << what << ": " << out_names[k] << " err " << err << " δ " << delta[k];
        std::printf("[f32] %-28s %-6s err %.2e  δ %.2e  tol %.2e\n", what.c_str(),
                    out_names[k].c_str(), err, delta[k], tol);
    }
}

Vec randn(int64_t n, pldr::Rng& r, double scale = 1.0, double shift = 0.0) {
    Vec v(static_cast<size_t>(n));
    for (auto& x : v) x = shift + scale * r.normal();
    return v;
}

template <typename T>
std::vector<T> zeros(int64_t n) {
    return std::vector<T>(static_cast<size_t>(n), T(0));
}

// ---- kernels -------------------------------------------------------------------------------

TEST(PrecisionOps, Linear) {
    const int64_t N = 6, I = 16, O = 5;
    pldr::Rng r(1);
    const Inputs in = {randn(N * I, r), randn(O * I, r, 0.5), randn(O, r), randn(N * O, r)};
    agree("linear",
          [&](auto t, const auto& x) {
              using T = decltype(t);
              auto y = zeros<T>(N * O), dx = zeros<T>(N * I), dW = zeros<T>(O * I),
                   db = zeros<T>(O);
              pldr::linear_forward(y.data(), x[0].data(), x[1].data(), x[2].data(), N, I, O);
              pldr::linear_backward(dx.data(), dW.data(), db.data(), x[3].data(), x[0].data(),
                                    x[1].data(), N, I, O);
              return std::vector<std::vector<T>>{y, dx, dW, db};
          },
          in, I, {"y", "dx", "dW", "db"});
}

TEST(PrecisionOps, LayerNorm) {
    const int64_t N = 5, C = 12;
    pldr::Rng r(2);
    const Inputs in = {randn(N * C, r, 1.3, 0.4), randn(C, r, 0.3, 1.0), randn(C, r, 0.2),
                       randn(N * C, r)};
    agree("layernorm",
          [&](auto t, const auto& x) {
              using T = decltype(t);
              auto y = zeros<T>(N * C), mean = zeros<T>(N), rstd = zeros<T>(N),
                   dx = zeros<T>(N * C), dg = zeros<T>(C), db = zeros<T>(C);
              pldr::layernorm_forward(y.data(), mean.data(), rstd.data(), x[0].data(), x[1].data(),
                                      x[2].data(), N, C, 1e-6);
              pldr::layernorm_backward(dx.data(), dg.data(), db.data(), x[3].data(), x[0].data(),
                                       mean.data(), rstd.data(), x[1].data(), N, C);
              return std::vector<std::vector<T>>{y, dx, dg, db};
          },
          in, C, {"y", "dx", "dgamma", "dbeta"});
}

TEST(PrecisionOps, Glu) {
    const int64_t N = 5, I = 8, F = 12, O = 6;
    pldr::Rng r(3);
    const Inputs in = {randn(N * I, r),      randn(F * I, r, 0.4), randn(F, r, 0.3),
                       randn(F * I, r, 0.4), randn(F, r, 0.3),     randn(O * F, r, 0.3),
                       randn(O, r, 0.3),     randn(N * O, r)};
    agree("glu",
          [&](auto t, const auto& x) {
              using T = decltype(t);
              auto y = zeros<T>(N * O), h1 = zeros<T>(N * F), h2 = zeros<T>(N * F),
                   gated = zeros<T>(N * F), dx = zeros<T>(N * I), dw1 = zeros<T>(F * I),
                   db1 = zeros<T>(F), dw2 = zeros<T>(F * I), db2 = zeros<T>(F),
                   dw3 = zeros<T>(O * F), db3 = zeros<T>(O), sc = zeros<T>(2 * N * F);
              const pldr::GluParams<T> p{x[1].data(), x[2].data(), x[3].data(),
                                         x[4].data(), x[5].data(), x[6].data()};
              pldr::glu_forward(y.data(), h1.data(), h2.data(), gated.data(), x[0].data(), p, N, I,
                                F, O);
              pldr::glu_backward(dx.data(),
                                 pldr::GluGrads<T>{dw1.data(), db1.data(), dw2.data(), db2.data(),
                                                   dw3.data(), db3.data()},
                                 x[7].data(), x[0].data(), h1.data(), h2.data(), gated.data(), p, N,
                                 I, F, O, sc.data());
              return std::vector<std::vector<T>>{y, dx, dw1, dw2, dw3};
          },
          in, F, {"y", "dx", "dw1", "dw2", "dw3"});
}

TEST(PrecisionOps, Rope) {
    const int64_t N = 4, H = 2, D = 8;
    const std::vector<int64_t> pos = {0, 3, 17, 31};
    pldr::RopeTable tab;
    tab.build(32, D, 10000.0, pldr::RopeTableKind::FLOAT64);
    for (bool interleaved : {true, false}) {
        pldr::Rng r(4);
        const Inputs in = {randn(N * H * D, r), randn(N * H * D, r)};
        agree(interleaved ? "rope (interleaved)" : "rope (halves)",
              [&](auto t, const auto& x) {
                  using T = decltype(t);
                  std::vector<T> y = x[0], dx = x[1];
                  pldr::rope_forward(y.data(), pos.data(), N, H, D, tab, interleaved, false);
                  pldr::rope_backward(dx.data(), pos.data(), N, H, D, tab, interleaved, false);
                  return std::vector<std::vector<T>>{y, dx};
              },
              in, 2, {"y", "dx"});
    }
}

// A prompt's or a batch's q and k rotate over the team, token by token (ops/rope.cpp): the bits
// of each token rotated alone, forward and backward, in both layouts and both precisions of the
// table; a position outside the table is refused before any token moves.
TEST(PrecisionOps, RopeOverTheTeamIsEachTokenRotatedAlone) {
    const pldr_test::ScopedThreads two(2);                 // (ctest runs the suite on one thread)
    const int64_t N = 1100, H = 8, D = 32, max_pos = 512;  // 281,600 elements: on the team
    pldr::Rng r(44);
    std::vector<int64_t> pos(static_cast<size_t>(N));
    for (auto& p : pos) p = int64_t(r.below(uint64_t(max_pos)));
    pos[0] = 0;
    pos[1] = max_pos - 1;  // the table's edges
    const Vec x0 = randn(N * H * D, r);
    for (auto kind : {pldr::RopeTableKind::TORCH, pldr::RopeTableKind::FLOAT64}) {
        pldr::RopeTable tab;
        tab.build(max_pos, D, 10000.0, kind);
        for (bool interleaved : {true, false}) {
            const std::vector<float> x(x0.begin(), x0.end());
            std::vector<float> y = x, dx = x, y1 = x, dx1 = x;
            pldr::rope_forward(y.data(), pos.data(), N, H, D, tab, interleaved, true);
            pldr::rope_backward(dx.data(), pos.data(), N, H, D, tab, interleaved, true);
            for (int64_t n = 0; n < N; ++n) {
                pldr::rope_forward(y1.data() + n * H * D, &pos[size_t(n)], 1, H, D, tab,
                                   interleaved, true);
                pldr::rope_backward(dx1.data() + n * H * D, &pos[size_t(n)], 1, H, D, tab,
                                    interleaved, true);
            }
            EXPECT_EQ(0, std::memcmp(y.data(), y1.data(), y.size() * sizeof(float)));
            EXPECT_EQ(0, std::memcmp(dx.data(), dx1.data(), dx.size() * sizeof(float)));
            EXPECT_NE(y, x);  // it rotated
            auto bad = pos;
            bad.back() = max_pos;  // one past the table
            std::vector<float> z = x;
            EXPECT_THROW(pldr::rope_forward(z.data(), bad.data(), N, H, D, tab, interleaved, true),
                         pldr::Error);
            EXPECT_THROW(pldr::rope_backward(z.data(), bad.data(), N, H, D, tab, interleaved, true),
                         pldr::Error);
            bad.back() = -1;
            EXPECT_THROW(pldr::rope_forward(z.data(), bad.data(), N, H, D, tab, interleaved, true),
                         pldr::Error);
            EXPECT_EQ(z, x);
        }
    }
}

TEST(PrecisionOps, Softmax) {
    const int64_t N = 4, C = 10;
    pldr::Rng r(5);
    const Inputs in = {randn(N * C, r, 2.0), randn(N * C, r)};
    agree("softmax",
          [&](auto t, const auto& x) {
              using T = decltype(t);
              auto y = zeros<T>(N * C), dx = zeros<T>(N * C);
              pldr::softmax_forward(y.data(), x[0].data(), N, C);
              pldr::softmax_backward(dx.data(), x[1].data(), y.data(), N, C);
              return std::vector<std::vector<T>>{y, dx};
          },
          in, C, {"y", "dx"});
}

TEST(PrecisionOps, CrossEntropy) {
    const int64_t N = 7, V = 11, ignore = 0;
    const std::vector<int64_t> tgt = {3, 0, 8, 1, 10, 5, 0};
    pldr::Rng r(6);
    const Inputs in = {randn(N * V, r, 1.5)};
    agree("cross-entropy",
          [&](auto t, const auto& x) {
              using T = decltype(t);
              auto rows = zeros<T>(N), dl = zeros<T>(N * V);
              int64_t scored = 0;
              const double tot = pldr::cross_entropy_forward(rows.data(), &scored, nullptr,
                                                             x[0].data(), tgt.data(), N, V, ignore);
              pldr::cross_entropy_backward(dl.data(), x[0].data(), tgt.data(), N, V, ignore,
                                           T(1) / T(scored));
              return std::vector<std::vector<T>>{{T(tot)}, rows, dl};
          },
          in, V, {"total", "rows", "dlogits"});
}

// The PLGA operator, every registered positive map × coupling, forward and backward.
TEST(PrecisionOps, PlgaOperatorEveryVariant) {
    const int64_t D = 6, DD = D * D;
    int variants = 0;
    for (const pldr::PositiveMap* pm : pldr::positive_maps())
        for (const pldr::Coupling* cp : pldr::couplings()) {
            pldr::Rng r(7);
            Inputs in = {randn(DD, r), randn(DD, r, 0.4), randn(DD, r, 0.3, 1.5),
                         Vec(DD),      randn(DD, r, 0.4), randn(DD, r, 0.3),
                         randn(DD, r)};
            for (auto& p : in[3]) p = (r.uniform() < 0.3 ? -1.0 : 1.0) * r.uniform(0.1, 1.0);
            const pldr::PlgaOptions o{pm, cp, D};
            agree(
                std::string("plga ") + pm->name + "/" + cp->name,
                [&](auto t, const auto& x) {
                    using T = decltype(t);
                    auto Z = zeros<T>(DD), LM = zeros<T>(DD), AP = zeros<T>(DD), G = zeros<T>(DD),
                         dA = zeros<T>(DD), dW = zeros<T>(DD), db = zeros<T>(DD), dP = zeros<T>(DD),
                         da = zeros<T>(DD), dba = zeros<T>(DD), sc = zeros<T>(2 * DD);
                    const pldr::PlgaParams<const T> p{x[1].data(), x[2].data(), x[3].data(),
                                                      x[4].data(), x[5].data()};
                    pldr::plga_g_forward(
                        o, p, x[0].data(),
                        pldr::PlgaSaved<T>{Z.data(), LM.data(), AP.data(), G.data()});
                    pldr::plga_g_backward(
                        o, p, x[0].data(),
                        pldr::PlgaSaved<const T>{Z.data(), LM.data(), AP.data(), G.data()},
                        pldr::PlgaOutGrads<T>{x[6].data()}, dA.data(),
                        pldr::PlgaParams<T>{dW.data(), db.data(), dP.data(), da.data(), dba.data()},
                        sc.data());
                    return std::vector<std::vector<T>>{LM, AP, G, dA, dW, dP, da};
                },
                in, D, {"A_LM", "A_P", "G", "dA", "dW", "dP", "da"});
            ++variants;
        }
    EXPECT_EQ(variants, int(pldr::positive_maps().size() * pldr::couplings().size()));
}

// ---- the whole model, every case --------------------------------------------------------------

// Logits, loss and the gradient of every parameter tensor, in T, from the parameters `params`
// (the model's own, or perturbed ones). Output 0: logits; 1: loss; 2…: one per layout entry.
template <typename T>
std::vector<Vec> model_outputs(const pldr::Model<double>& m, const std::vector<double>& params,
                               const std::vector<int64_t>& tok, const numeric::Case& k) {
    const pldr::Model<T> mt = numeric::cast_model<T>(m, params);
    const numeric::Shape& s = k.shape;
    const pldr::DagCoeffs dag = k.dag ? pldr::DagCoeffs{0.1, 0.2, 0.3} : pldr::DagCoeffs{};
    pldr::Activations<T> acts;
    std::vector<T> g(mt.params.size(), T(0));
    const pldr::LossResult res =
        pldr::loss_and_grads(mt, tok.data(), s.B, s.S + 1, dag, acts, g.data());
    std::vector<int64_t> in;  // tokens[:, :-1]: the training loss keeps no [B,S,V] logits
    for (int64_t b = 0; b < s.B; ++b)
        in.insert(in.end(), tok.begin() + b * (s.S + 1), tok.begin() + b * (s.S + 1) + s.S);
    pldr::forward(mt, in.data(), s.B, s.S, acts);
    std::vector<Vec> out;
    out.emplace_back(acts.logits.data.begin(), acts.logits.data.end());
    out.push_back({res.value});
    for (const auto& e : mt.layout.entries)
        out.emplace_back(g.begin() + e.offset, g.begin() + e.offset + e.numel);
    return out;
}

class PrecisionModel : public testing::TestWithParam<numeric::Case> {};

TEST_P(PrecisionModel, Float32AgreesWithFloat64) {
    const numeric::Case& k = GetParam();
    const uint64_t seed = numeric::seed_of(k);
    const pldr::Model<double> m = numeric::make_model(k, seed);
    const std::vector<int64_t> tok = numeric::make_tokens(k.shape, seed + 3);
    // The float32 model starts from the float32-rounded parameters; the float64 reference from
    // the same rounded values, so that the comparison measures the computation only.
    std::vector<double> p(m.params.begin(), m.params.end());
    for (double& x : p) x = double(float(x));
    const auto y64 = model_outputs<double>(m, p, tok, k);
    const auto y32 = model_outputs<float>(m, p, tok, k);
    std::vector<double> delta(y64.size(), 0.0);
    pldr::Rng r(seed + 11);
    for (int trial = 0; trial < 3; ++trial) {
        std::vector<double> q = p;
        for (double& x : q) x *= 1 + kEps32 * r.uniform(-1.0, 1.0);
        const auto yp = model_outputs<double>(m, q, tok, k);
        for (size_t i = 0; i < y64.size(); ++i)
            delta[i] =
                std::max(delta[i], max_diff(y64[i], yp[i]) / std::max(max_abs(y64[i]), 1e-300));
    }
    // Reductions: the widest is over the hidden size, the FFN width or the vocabulary.
    const pldr::Config& c = m.cfg;
    const double n_inner = double(std::max({c.hidden_size, c.intermediate_size, c.vocab_size}));
    double worst = 0;
    std::string worst_name;
    for (size_t i = 0; i < y64.size(); ++i) {
        const std::string name = i == 0 ? "logits" : i == 1 ? "loss" : m.layout.entries[i - 2].name;
        const double scale = max_abs(y64[i]);
        if (scale == 0) continue;  // e.g. the gradient of an unused embedding row block
        const double err = max_diff(y64[i], y32[i]) / scale;
        const double tol = kModelSafety * (delta[i] + kEps32 * std::sqrt(n_inner));
        EXPECT_LE(err, tol) << k.name << ": " << name << " err " << err << " δ " << delta[i];
        if (err / tol > worst) {
            worst = err / tol;
            worst_name = name;
        }
    }
    std::printf("[f32] model %-50s worst err/tol %.3f (%s)\n", k.name.c_str(), worst,
                worst_name.c_str());
}

INSTANTIATE_TEST_SUITE_P(Cases, PrecisionModel, testing::ValuesIn(numeric::cases()),
                         numeric::CaseName());

}  // namespace

// The float32 path evaluates the operator in double with the variants' vectorized forwards
// (SLEEF's ≤ 1-ulp exp and pow): within a few ulps of the float64 path's std:: forwards, over
// the floor region of iSwiGLU, large |Z|, and the exponents and A_LM magnitudes of trained
// models (a few ulps in double vanish in the rounding to float32).
// Causal attention rows (keys past Tp + i masked with −1e9, some padded keys too): the softmax
// that skips the masked columns gives the full rows' bits, forward and backward, in float32 and
// float64, with and without a past, at widths on and off the 16-column groups. A row whose masked
// part is not negligible (a masked score near the top) takes the full path and still agrees.
template <typename T>
void causal_softmax_case(int64_t S, int64_t Tp, uint64_t seed) {
    const int64_t Tk = Tp + S;
    pldr::Rng r(seed);
    std::vector<T> x(size_t(S * Tk)), dy(size_t(S * Tk));
    for (auto& v : x) v = T(r.normal() * 3.0);
    for (auto& v : dy) v = T(r.normal());
    x[size_t(Tk - 1)] = T(1e9 + 50);  // row 0: a masked score that survives the mask
    for (int64_t i = 0; i < S; ++i)
        for (int64_t j = 0; j < Tk; ++j)
            if (j > Tp + i || j % 7 == 3) x[size_t(i * Tk + j)] += T(-1e9);
    std::vector<T> full(x.size()), fast(x.size(), T(5)), dfull(x.size(), T(0.25)),
        dfast(x.size(), T(0.25));
    pldr::softmax_forward(full.data(), x.data(), S, Tk);
    pldr::softmax_forward(fast.data(), x.data(), S, Tk, Tp);
    pldr::softmax_backward(dfull.data(), dy.data(), full.data(), S, Tk);
    pldr::softmax_backward(dfast.data(), dy.data(), full.data(), S, Tk, Tp);
    for (size_t k = 0; k < x.size(); ++k) {
        ASSERT_EQ(0, std::memcmp(&full[k], &fast[k], sizeof(T)))
            << "S " << S << " Tp " << Tp << " element " << k << ": " << fast[k] << " vs "
            << full[k];
        ASSERT_EQ(0, std::memcmp(&dfull[k], &dfast[k], sizeof(T)))
            << "S " << S << " Tp " << Tp << " element " << k;
    }
    EXPECT_GT(full[size_t(Tk - 1)], T(0.5));  // the surviving masked score took the full path
}

TEST(PrecisionOps, CausalSoftmaxEqualsTheFullRowsBitForBit) {
    for (auto [S, Tp] : {std::pair<int64_t, int64_t>{1, 0},
                         {5, 0},
                         {40, 0},
                         {70, 0},
                         {33, 9},
                         {256, 0},
                         {17, 100}}) {
        causal_softmax_case<float>(S, Tp, uint64_t(S * 31 + Tp));
        causal_softmax_case<double>(S, Tp, uint64_t(S * 37 + Tp));
    }
}

TEST(Precision, VectorizedOperatorForwardsMatchTheScalarOnes) {
    const int64_t n = 4099;  // not a multiple of the lanes: the tails too
    std::vector<double> z(n), x(n), p(n), want(n), got(n);
    for (int64_t i = 0; i < n; ++i) {
        const double t = double(i) / double(n - 1);
        z[size_t(i)] = -60.0 + 120.0 * t;
        x[size_t(i)] = std::exp(-25.0 + 30.0 * std::fmod(t * 7.0, 1.0));  // 1e-11 … 150
        p[size_t(i)] = 0.05 + 3.0 * std::fmod(t * 13.0, 1.0);
    }
    auto max_ulps = [&] {
        double worst = 0;
        for (int64_t i = 0; i < n; ++i) {
            const double w = want[size_t(i)], g = got[size_t(i)];
            EXPECT_TRUE(std::isfinite(g)) << i;
            const double ulp = std::nextafter(std::abs(w), INFINITY) - std::abs(w);
            worst = std::max(worst, std::abs(g - w) / ulp);
        }
        return worst;
    };
    int vectorized = 0;
    for (const pldr::PositiveMap* pm : pldr::positive_maps()) {
        if (!pm->forward_f32_path) continue;
        ++vectorized;
        pm->forward(z.data(), want.data(), n);
        pm->forward_f32_path(z.data(), got.data(), n);
        EXPECT_LE(max_ulps(), 4.0) << pm->name;
    }
    for (const pldr::Coupling* cp : pldr::couplings()) {
        if (!cp->forward_f32_path) continue;
        ++vectorized;
        cp->forward(x.data(), p.data(), want.data(), n);
        cp->forward_f32_path(x.data(), p.data(), got.data(), n);
        EXPECT_LE(max_ulps(), 4.0) << cp->name;
    }
    EXPECT_GE(vectorized, 2);  // the defaults, iSwiGLU and the power law
}
