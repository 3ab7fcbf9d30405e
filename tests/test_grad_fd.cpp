// Finite-difference gradient checks in float64: every kernel of src/ops (forward and backward side
// by side) and the whole model through loss_and_grads (learned G, fixed G, DAG regularizer).
//
// Method: central differences (f(x+h) − f(x−h)) / (2h) with h = 1e-6·max(1, |x|) for the kernels,
// except where a test explains another step (the PLGA floor region); the whole-model checks use
// the fourth-order stencil at h = 3e-4·max(1, |x|) (see the comment above FdModel). A vector
// output is reduced to a scalar with a fixed random projection L = Σ r ⊙ out, so every output
// element matters. Per tensor the error is max|analytic − numeric| / max|numeric| (the measure of
// the golden tests), required ≤ 1e-6. Analytic gradient buffers are pre-filled with a constant
// that is subtracted afterwards, so a backward that overwrites instead of accumulating fails too.
//
// Sensitivity (checked by hand, not committed): in the A0 = qᵀq backward, dq += q·dA0 (the
// transpose term dropped) fails every learned-G model at 0.4–0.9 (wq, bq), and dq += 2·q·dA0
// (dA0 wrongly taken as symmetric) at 1.3–1.7; dZ = dA_LM·2·silu(Z) instead of
// silu(Z) + Z·silu'(Z) fails the PLGA bulk check at 9e-2 (the floor check alone would see only
// 3e-6: the two agree to first order near Z = 0, hence both regimes).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/blas.h"
#include "core/rng.h"
#include "model/init.h"
#include "model/model.h"
#include "numeric_cases.h"
#include "ops/dag.h"
#include "ops/ops.h"
#include "train/loss.h"

namespace {

using Vec = std::vector<double>;
constexpr double kTol = 1e-6;
constexpr double kPrefill = 0.375;  // analytic buffers start here (backwards accumulate)

// Runs the checks single-threaded: the kernels' OpenMP regions only add overhead at these sizes
// (and a lot of it on a loaded 2-core machine). Restores the previous setting.
struct SingleThread {
    int prev = omp_get_max_threads();
    SingleThread() { omp_set_num_threads(1); }
    ~SingleThread() { omp_set_num_threads(prev); }
};

Vec randn(int64_t n, pldr::Rng& r, double scale = 1.0, double shift = 0.0) {
    Vec v(static_cast<size_t>(n));
    for (auto& x : v) x = shift + scale * r.normal();
    return v;
}

double project(const Vec& r, const double* out) {
    double s = 0;
    for (size_t i = 0; i < r.size(); ++i) s += r[i] * out[i];
    return s;
}

// Central difference of f w.r.t. x (x is restored). The divisor is the step actually taken.
double central_diff(const std::function<double()>& f, double& x, double h) {
    const double x0 = x;
    const volatile double xp = x0 + h;
    const volatile double xm = x0 - h;
    x = xp;
    const double fp = f();
    x = xm;
    const double fm = f();
    x = x0;
    return (fp - fm) / (xp - xm);
}

// Fourth-order central difference (f(x−2h) − 8f(x−h) + 8f(x+h) − f(x+2h)) / 12h: truncation
// O(h⁴) allows a larger step, so the rounding noise of f (ε·|f|/h) is much smaller.
double central_diff4(const std::function<double()>& f, double& x, double h) {
    const double x0 = x;
    const volatile double xp = x0 + h;
    const double hh = xp - x0;  // the representable step
    double fs[4];
    const double off[4] = {-2, -1, 1, 2};
    for (int k = 0; k < 4; ++k) {
        x = x0 + off[k] * hh;
        fs[k] = f();
    }
    x = x0;
    return (fs[0] - 8 * fs[1] + 8 * fs[2] - fs[3]) / (12 * hh);
}

struct ErrStat {
    double err = 0;      // max|Δ| / max|numeric|
    double max_num = 0;  // max|numeric|
    double max_abs = 0;  // max|Δ|
};

// Compares the analytic gradient `grad` (with kPrefill already subtracted) of tensor `x` with
// central differences of f at the indices `idx` (all when empty).
ErrStat fd_check(const std::function<double()>& f, double* x, const double* grad, int64_t n,
                 double h_rel, const std::vector<int64_t>& idx = {}, int order = 2) {
    ErrStat s;
    auto one = [&](int64_t i) {
        const double h = h_rel * std::max(1.0, std::fabs(x[i]));
        const double num = order == 4 ? central_diff4(f, x[i], h) : central_diff(f, x[i], h);
        s.max_num = std::max(s.max_num, std::fabs(num));
        s.max_abs = std::max(s.max_abs, std::fabs(num - grad[i]));
    };
    if (idx.empty()) {
        for (int64_t i = 0; i < n; ++i) one(i);
    } else {
        for (int64_t i : idx) one(i);
    }
    // A tensor whose true gradient is exactly zero (e.g. an unused embedding row): the analytic
    // gradient must be (numerically) zero too.
    s.err = s.max_num > 0 ? s.max_abs / s.max_num : (s.max_abs > 1e-12 ? 1.0 : 0.0);
    return s;
}

// Named (value, analytic gradient) pair of a kernel test.
struct Slot {
    std::string name;
    Vec* x;
    Vec* g;          // analytic, prefilled with kPrefill before the backward
    double h = 0.0;  // relative step for this slot (0: the check's default)
};

Vec prefilled(size_t n) {
    return Vec(n, kPrefill);
}

// Runs the FD check over every slot; returns the worst error. `f` reads the slots' values.
double check_slots(const char* what, const std::function<double()>& f, std::vector<Slot> slots,
                   double h_rel = 1e-6) {
    double worst = 0;
    for (auto& s : slots) {
        Vec g = *s.g;
        for (auto& v : g) v -= kPrefill;
        const ErrStat e =
            fd_check(f, s.x->data(), g.data(), int64_t(s.x->size()), s.h > 0 ? s.h : h_rel);
        EXPECT_LE(e.err, kTol) << what << ": d" << s.name << " max|Δ| " << e.max_abs << " max|num| "
                               << e.max_num;
        EXPECT_GT(e.max_num, 0.0) << what << ": d" << s.name << " is identically zero";
        worst = std::max(worst, e.err);
    }
    std::printf("[fd] %-34s worst %.3e\n", what, worst);
    return worst;
}

// ---------------------------------------------------------------------------------------------
// Kernels

TEST(FdKernels, Linear) {
    SingleThread one_thread;
    const int64_t N = 5, I = 4, O = 3;
    for (bool bias : {true, false}) {
        pldr::Rng r(11 + bias);
        Vec x = randn(N * I, r), W = randn(O * I, r, 0.7), b = randn(O, r), R = randn(N * O, r);
        Vec out(static_cast<size_t>(N * O));
        auto f = [&] {
            pldr::linear_forward(out.data(), x.data(), W.data(), bias ? b.data() : nullptr, N, I,
                                 O);
            return project(R, out.data());
        };
        f();
        Vec dx = prefilled(x.size()), dW = prefilled(W.size()), db = prefilled(b.size());
        pldr::linear_backward(dx.data(), dW.data(), bias ? db.data() : nullptr, R.data(), x.data(),
                              W.data(), N, I, O);
        std::vector<Slot> s = {{"x", &x, &dx}, {"W", &W, &dW}};
        if (bias) s.push_back({"b", &b, &db});
        check_slots(bias ? "linear (bias)" : "linear (no bias)", f, s);
    }
}

TEST(FdKernels, LayerNorm) {
    SingleThread one_thread;
    const int64_t N = 4, C = 7;
    pldr::Rng r(21);
    Vec x = randn(N * C, r, 1.3, 0.4), g = randn(C, r, 0.3, 1.0), b = randn(C, r, 0.2);
    Vec R = randn(N * C, r), out(static_cast<size_t>(N * C)), mean(N), rstd(N);
    auto f = [&] {
        pldr::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(),
                                N, C, 1e-6);
        return project(R, out.data());
    };
    f();
    Vec dx = prefilled(x.size()), dg = prefilled(g.size()), db = prefilled(b.size());
    pldr::layernorm_backward(dx.data(), dg.data(), db.data(), R.data(), x.data(), mean.data(),
                             rstd.data(), g.data(), N, C);
    check_slots("layernorm", f, {{"x", &x, &dx}, {"gamma", &g, &dg}, {"beta", &b, &db}});
}

TEST(FdKernels, Glu) {
    SingleThread one_thread;
    const int64_t N = 5, I = 4, F = 6, O = 3;
    for (bool bias : {true, false}) {
        pldr::Rng r(31 + bias);
        Vec x = randn(N * I, r), w1 = randn(F * I, r, 0.6), b1 = randn(F, r, 0.3),
            w2 = randn(F * I, r, 0.6), b2 = randn(F, r, 0.3), w3 = randn(O * F, r, 0.5),
            b3 = randn(O, r, 0.3), R = randn(N * O, r);
        Vec out(static_cast<size_t>(N * O)), h1(static_cast<size_t>(N * F)),
            h2(static_cast<size_t>(N * F)), gated(static_cast<size_t>(N * F));
        auto params = [&] {
            return pldr::GluParams<double>{w1.data(), bias ? b1.data() : nullptr,
                                           w2.data(), bias ? b2.data() : nullptr,
                                           w3.data(), bias ? b3.data() : nullptr};
        };
        auto f = [&] {
            pldr::glu_forward(out.data(), h1.data(), h2.data(), gated.data(), x.data(), params(), N,
                              I, F, O);
            return project(R, out.data());
        };
        f();
        Vec dx = prefilled(x.size()), dw1 = prefilled(w1.size()), db1 = prefilled(b1.size()),
            dw2 = prefilled(w2.size()), db2 = prefilled(b2.size()), dw3 = prefilled(w3.size()),
            db3 = prefilled(b3.size()), scratch(static_cast<size_t>(2 * N * F));
        pldr::GluGrads<double> gg{dw1.data(), bias ? db1.data() : nullptr,
                                  dw2.data(), bias ? db2.data() : nullptr,
                                  dw3.data(), bias ? db3.data() : nullptr};
        pldr::glu_backward(dx.data(), gg, R.data(), x.data(), h1.data(), h2.data(), gated.data(),
                           params(), N, I, F, O, scratch.data());
        std::vector<Slot> s = {
            {"x", &x, &dx}, {"w1", &w1, &dw1}, {"w2", &w2, &dw2}, {"w3", &w3, &dw3}};
        if (bias) {
            s.push_back({"b1", &b1, &db1});
            s.push_back({"b2", &b2, &db2});
            s.push_back({"b3", &b3, &db3});
        }
        check_slots(bias ? "glu (biases)" : "glu (no biases)", f, s);
    }
}

TEST(FdKernels, Rope) {
    SingleThread one_thread;
    const int64_t N = 4, H = 2, D = 6;
    pldr::RopeTable t;
    t.build(32, D, 10000.0, pldr::RopeTableKind::TORCH);
    const std::vector<int64_t> pos = {0, 3, 17, 31};
    for (bool interleaved : {true, false}) {
        pldr::Rng r(41 + interleaved);
        Vec x = randn(N * H * D, r), R = randn(N * H * D, r), y(x.size());
        auto f = [&] {
            y = x;
            pldr::rope_forward(y.data(), pos.data(), N, H, D, t, interleaved, false);
            return project(R, y.data());
        };
        // The backward maps dy to dx in place (a transform, not an accumulation).
        Vec dx = R;
        pldr::rope_backward(dx.data(), pos.data(), N, H, D, t, interleaved, false);
        for (auto& v : dx) v += kPrefill;  // check_slots subtracts it
        check_slots(interleaved ? "rope (interleaved)" : "rope (halves)", f, {{"x", &x, &dx}});
        // The rotation is orthogonal: the backward is its transpose, not the rotation itself.
        Vec fwd = R;
        pldr::rope_forward(fwd.data(), pos.data(), N, H, D, t, interleaved, false);
        double diff = 0;
        for (size_t i = 0; i < fwd.size(); ++i)
            diff = std::max(diff, std::fabs(fwd[i] - (dx[i] - kPrefill)));
        EXPECT_GT(diff, 1e-3);
    }
}

TEST(FdKernels, Softmax) {
    SingleThread one_thread;
    const int64_t N = 3, C = 6;
    pldr::Rng r(51);
    Vec x = randn(N * C, r, 2.0), R = randn(N * C, r), y(x.size());
    auto f = [&] {
        pldr::softmax_forward(y.data(), x.data(), N, C);
        return project(R, y.data());
    };
    f();
    Vec dx = prefilled(x.size());
    pldr::softmax_backward(dx.data(), R.data(), y.data(), N, C);
    check_slots("softmax", f, {{"x", &x, &dx}});
}

TEST(FdKernels, CrossEntropyMasked) {
    SingleThread one_thread;
    const int64_t N = 7, V = 9, ignore = 0;
    pldr::Rng r(61);
    Vec logits = randn(N * V, r, 1.5);
    const std::vector<int64_t> tgt = {3, 0, 8, 1, 0, 5, 0};  // three ignored rows
    int64_t scored = 0;
    auto f = [&] {
        const double tot = pldr::cross_entropy_forward<double>(
            nullptr, &scored, nullptr, logits.data(), tgt.data(), N, V, ignore);
        return tot / double(scored);  // the masked mean, as the training loss
    };
    f();
    ASSERT_EQ(scored, 4);
    Vec dl = prefilled(logits.size());
    pldr::cross_entropy_backward(dl.data(), logits.data(), tgt.data(), N, V, ignore,
                                 1.0 / double(scored));
    check_slots("cross-entropy (masked mean)", f, {{"logits", &logits, &dl}});
    for (int64_t n = 0; n < N; ++n) {
        if (tgt[size_t(n)] != ignore) continue;
        for (int64_t v = 0; v < V; ++v) {
            EXPECT_EQ(dl[size_t(n * V + v)], kPrefill);
        }
    }
}

TEST(FdKernels, DagTermExact) {
    SingleThread one_thread;
    const int64_t n = 5, count = 3;
    pldr::Rng r(71);
    // Mixed signs and magnitudes, one instance strictly positive (like A_LM / A_P).
    Vec X = randn(count * n * n, r, 0.6);
    for (int64_t i = 0; i < n * n; ++i) X[size_t(i)] = std::fabs(X[size_t(i)]) + 1e-3;
    const double scale = 0.7;
    Vec d1 = prefilled(static_cast<size_t>(n * n));
    pldr::dag_term(X.data(), n, pldr::DagMode::EXACT, d1.data(), scale);
    Vec X0(X.begin(), X.begin() + n * n);
    auto f1v = [&] { return scale * pldr::dag_term(X0.data(), n, pldr::DagMode::EXACT); };
    check_slots("dag_term EXACT", f1v, {{"X", &X0, &d1}});
    auto fm = [&] { return scale * pldr::dag_mean(X.data(), count, n, pldr::DagMode::EXACT); };
    Vec dm = prefilled(X.size());
    pldr::dag_mean(X.data(), count, n, pldr::DagMode::EXACT, dm.data(), scale);
    check_slots("dag_mean EXACT", fm, {{"X", &X, &dm}});
}

TEST(FdKernels, DagTermExactLargeEntries) {
    SingleThread one_thread;
    // Regression: EXACT mode returned inf (and a NaN gradient) for finite X with one large
    // diagonal entry (e.g. A_P ~ 1e3 on the diagonal), because the renormalised squaring phase
    // let the scaled exponential shrink until it underflowed to 0. Here dag ≈ X₀₀² − log n.
    const int64_t n = 4;
    for (double big : {30.0, 1e3, 1e5}) {
        pldr::Rng r(73);
        Vec X = randn(n * n, r, 0.5);
        X[0] = big;
        const double v = pldr::dag_term(X.data(), n, pldr::DagMode::EXACT);
        ASSERT_TRUE(std::isfinite(v)) << big;
        EXPECT_NEAR(v, big * big - std::log(double(n)), 1e-9 * big * big + 0.05) << big;
        if (big > 1e4) continue;  // the FD check needs |dag|·ε/h ≪ 1e-6·|gradient|
        Vec dX = prefilled(X.size());
        pldr::dag_term(X.data(), n, pldr::DagMode::EXACT, dX.data(), 1.0);
        auto f = [&] { return pldr::dag_term(X.data(), n, pldr::DagMode::EXACT); };
        check_slots(big > 100 ? "dag_term EXACT, X00 = 1e3" : "dag_term EXACT, X00 = 30", f,
                    {{"X", &X, &dX}});
    }
}

// ---- the PLGA operator ----------------------------------------------------------------------

struct PlgaCase {
    int64_t D;
    Vec A, W, b, P, a, ba;
    Vec rG, rLM, rP;  // projections of G, A_LM, A_P
};

pldr::PlgaParams<const double> params_of(const PlgaCase& c) {
    return {c.W.data(), c.b.data(), c.P.data(), c.a.data(), c.ba.data()};
}

// L = Σ rG⊙G (+ Σ rLM⊙A_LM + Σ rP⊙A_P when `extra`), checked w.r.t. A, W, b, P, a, b_a.
double check_plga(const std::string& what, const pldr::PlgaOptions& o, PlgaCase& c, bool extra,
                  double h_rel) {
    const int64_t D = c.D, DD = D * D;
    Vec Z(static_cast<size_t>(DD)), LM(Z.size()), AP(Z.size()), G(Z.size());
    auto f = [&] {
        pldr::plga_g_forward(o, params_of(c), c.A.data(),
                             pldr::PlgaSaved<double>{Z.data(), LM.data(), AP.data(), G.data()});
        double L = project(c.rG, G.data());
        if (extra) L += project(c.rLM, LM.data()) + project(c.rP, AP.data());
        return L;
    };
    f();
    Vec dA = prefilled(Z.size()), dW = prefilled(Z.size()), db = prefilled(Z.size()),
        dP = prefilled(Z.size()), da = prefilled(Z.size()), dba = prefilled(Z.size()),
        scratch(static_cast<size_t>(2 * DD));
    pldr::plga_g_backward(
        o, params_of(c), c.A.data(),
        pldr::PlgaSaved<const double>{Z.data(), LM.data(), AP.data(), G.data()},
        pldr::PlgaOutGrads<double>{c.rG.data(), extra ? c.rLM.data() : nullptr,
                                   extra ? c.rP.data() : nullptr},
        dA.data(), pldr::PlgaParams<double>{dW.data(), db.data(), dP.data(), da.data(), dba.data()},
        scratch.data());
    // h_rel applies to A, W, b (they move Z). P, a, b_a leave Z alone: L is linear in a and b_a,
    // and varies with P on the scale 1/|log A_LM| ≥ 1/21, so they take a larger step whatever
    // the regime (with h = 1e-8 the rounding noise ε·|L|/h of L ~ 1e2 would be ~1e-4 of their
    // O(1) gradients).
    return check_slots(what.c_str(), f,
                       {{"A", &c.A, &dA},
                        {"W", &c.W, &dW},
                        {"b", &c.b, &db},
                        {"P", &c.P, &dP, 1e-5},
                        {"a", &c.a, &da, 1e-4},
                        {"b_a", &c.ba, &dba, 1e-4}},
                       h_rel);
}

// Z = W·A + b is set to `z` exactly (through b), so the test controls where the floor is hit.
PlgaCase plga_case(int64_t D, uint64_t seed, const Vec& z) {
    pldr::Rng r(seed);
    PlgaCase c;
    c.D = D;
    const int64_t DD = D * D;
    c.A = randn(DD, r);
    c.W = randn(DD, r, 0.4);
    c.a = randn(DD, r, 0.4);
    c.ba = randn(DD, r, 0.3);
    c.rG = randn(DD, r);
    c.rLM = randn(DD, r);
    c.rP = randn(DD, r);
    // P entries O(0.1–1), both signs (about a third negative), as in trained models.
    c.P.resize(static_cast<size_t>(DD));
    for (auto& p : c.P) p = (r.uniform() < 0.35 ? -1.0 : 1.0) * r.uniform(0.1, 1.0);
    Vec WA(static_cast<size_t>(DD));
    pldr::gemm(false, false, D, D, D, 1.0, c.W.data(), D, c.A.data(), D, 0.0, WA.data(), D);
    c.b.resize(static_cast<size_t>(DD));
    for (int64_t i = 0; i < DD; ++i) c.b[size_t(i)] = z[size_t(i)] - WA[size_t(i)];
    return c;
}

// Every registered variant (positive map × coupling) of the operator.
TEST(FdKernels, PlgaOperatorBulk) {
    SingleThread one_thread;
    // Every |Z| ≥ 0.15: A_LM is far above the 1e-9 floor, the standard step applies everywhere.
    const int64_t D = 5;
    pldr::Rng r(81);
    Vec z(static_cast<size_t>(D * D));
    for (auto& v : z) v = (r.uniform() < 0.5 ? -1.0 : 1.0) * r.uniform(0.15, 2.0);
    for (const pldr::PositiveMap* pm : pldr::positive_maps())
        for (const pldr::Coupling* cp : pldr::couplings())
            for (bool extra : {false, true}) {
                PlgaCase c = plga_case(D, 82, z);
                const std::string what = std::string("plga bulk ") + pm->name + "/" + cp->name +
                                         (extra ? " (+dA_LM, dA_P)" : "");
                check_plga(what, pldr::PlgaOptions{pm, cp, D}, c, extra, 1e-6);
            }
}

TEST(FdKernels, PlgaOperatorFloorRegion) {
    SingleThread one_thread;
    // A mix: some Z exactly 0 or within ~1e-4 of it (A_LM = Z²σ(Z) + 1e-9 at or near the floor),
    // the rest O(1); P of both signs, so A_P = A_LM^P spans (1e-9)^±1.
    //
    // Step: near Z = 0, A_LM ≈ 1e-9·(1 + (Z/s)²) with s = √(2e-9) ≈ 4.5e-5, so A_P varies on the
    // scale s in Z: the central-difference truncation error for A, W, b grows like (δ/s)², δ the
    // shift of Z (≈ |W|·h). Measured here: h = 1e-6 gives 2.3e-3 (dW), h = 1e-8 gives 2.3e-7 —
    // the 1e4 ratio of a pure h² truncation error, so the analytic gradient is right and 1e-6 is
    // simply too coarse a step in this region. The rounding noise ε·|L|/h stays ≪ 1e-6 of these
    // gradients (max ~1e8, they scale like A_P/s). So A, W, b are checked with h = 1e-8·max(1,|x|)
    // (P, a, b_a: see check_plga).
    const int64_t D = 5;
    Vec z = {0.0,   3e-6, -1e-5, 2.5e-5, -4e-5, 7e-5, -1.2e-4, 2e-4, 0.8, -0.6, 1.3,  -1.7, 0.4,
             -0.25, 2.1,  -0.9,  0.55,   1.1,   -2.4, 0.3,     -0.7, 1.6, -1.1, 0.65, -0.45};
    // The floor region of iSwiGLU (the default positive map) with the default coupling.
    const pldr::PlgaOptions o{&pldr::positive_map("iswiglu"), &pldr::coupling("power"), D};
    for (bool extra : {false, true}) {
        PlgaCase c = plga_case(D, 91, z);
        // Sanity: the floor is really hit, with a negative exponent on some floor entry.
        Vec Z(z.size()), LM(z.size()), AP(z.size()), G(z.size());
        pldr::plga_g_forward(o, params_of(c), c.A.data(),
                             pldr::PlgaSaved<double>{Z.data(), LM.data(), AP.data(), G.data()});
        int floor_neg = 0, floor_pos = 0;
        for (size_t i = 0; i < LM.size(); ++i) {
            if (LM[i] < 1e-8) (c.P[i] < 0 ? floor_neg : floor_pos)++;
        }
        ASSERT_GT(floor_neg, 0);
        ASSERT_GT(floor_pos, 0);
        check_plga(extra ? "plga floor (+dA_LM, dA_P)" : "plga floor", o, c, extra, 1e-8);
    }
}

// ---------------------------------------------------------------------------------------------
// Whole model through loss_and_grads
//
// The model sits at a well-conditioned point: Xavier init + 0.05·N(0,1) on every parameter, P
// entries ±U(0.1, 1) (about 30% negative), and the PLGA bias blst shifted by +1.5 so that every
// Z = W·A + b stays ≥ ~0.05 away from 0 (asserted). Without the shift, Z entries ~1e-3 with
// negative P give A_P ~ 1e3–1e4, scores |Ep| ~ 1e4 (saturated softmax: the metric learner's
// gradients drop to ~1e-6–1e-12, below the loss's rounding noise) and DAG values ~1e8 (the loss
// itself then carries absolute rounding errors ~1e-8); no finite-difference step can check
// 1e-6 there. The floor region itself is covered by FdKernels.PlgaOperatorFloorRegion.
//
// Step: the loss is a sum of many terms, its rounding noise is ~1e-15 absolute, which the plain
// central difference at h = 1e-6 turns into ~5e-10 absolute gradient noise — far above 1e-6 of
// the smallest per-tensor gradients here (max|g| ~5e-5 for some deep metric-learner weights;
// measured here: worst 1.7e-5 at h = 1e-6, and 1e-5–2e-4 at a saturated point). The 4th-order
// stencil (f(x−2h) − 8f(x−h) + 8f(x+h) − f(x+2h)) / 12h has truncation O(h⁴), so a much larger step
// is safe. Measured worst error over the learned-G shapes by step: h = 3e-5: 4.7e-7, 1e-4: 1.4e-7,
// 3e-4: 4.4e-8 (noise ∝ 1/h, on a tensor with max|g| 5.4e-5), 1e-3: 1.1e-7 (truncation, on wq).
// So h = 3e-4·max(1,|x|).

#ifdef NDEBUG
constexpr int64_t kSample = 40;  // entries per tensor (all when the tensor is not larger)
#else
constexpr int64_t kSample = 12;  // Debug / sanitizer builds: same checks, fewer entries
#endif

struct ModelReport {
    double worst = 0;
    std::string worst_name;
    int tensors = 0, entries = 0;
};

// The loss of a case: CE, plus the DAG regularizer when the case has it.
pldr::DagCoeffs dag_of(const numeric::Case& k) {
    return k.dag ? pldr::DagCoeffs{0.1, 0.2, 0.3} : pldr::DagCoeffs{};
}

ModelReport check_model(const numeric::Case& k, pldr::Model<double> m, uint64_t seed) {
    SingleThread one_thread;
    const numeric::Shape& mc = k.shape;
    const pldr::DagCoeffs dag = dag_of(k);
    const std::vector<int64_t> tok = numeric::make_tokens(mc, seed + 3);
    const int64_t S1 = mc.S + 1;
    pldr::Activations<double> acts;
    // A regular point: shift the PLGA bias b further, in steps of 0.5 (the smallest shift that
    // works keeps A_LM, and with it the DAG loss and the FD error, small), until every A_LM is
    // far above the floor. Wider heads spread W·A more, so make_model's +1.5 is not always
    // enough (dk = 24 needed it).
    auto min_a_lm = [&] {
        pldr::loss_and_grads<double>(m, tok.data(), mc.B, S1, dag, acts, nullptr);
        double lo = INFINITY;
        for (const auto& la : acts.layers)
            for (double x : la.A_LM.data) lo = std::min(lo, x);
        return lo;
    };
    const int64_t nb = m.cfg.num_heads * m.cfg.head_dim * m.cfg.head_dim;
    for (int tries = 0; m.cfg.learned_g() && tries < 24 && min_a_lm() <= 1e-4; ++tries)
        for (const auto& lw : m.w.layers)
            for (int64_t i = 0; i < nb; ++i) lw.b[i] += 0.5;
    Vec grads(m.params.size(), kPrefill);
    const pldr::LossResult res =
        pldr::loss_and_grads(m, tok.data(), mc.B, S1, dag, acts, grads.data());
    for (auto& g : grads) g -= kPrefill;
    EXPECT_TRUE(std::isfinite(res.value));
    EXPECT_EQ(res.scored, mc.B * mc.S - 2);  // the two pad targets are not scored
    if (dag.any()) {
        EXPECT_GT(res.dag_loss, 0.0);
    }
    if (m.cfg.learned_g()) {
        // Every A_LM far above the 1e-9 floor, whatever the positive map (for iSwiGLU this is
        // |Z| ≥ ~0.02, where A_LM ≥ ~2e-4).
        double min_alm = INFINITY;
        for (const auto& la : acts.layers)
            for (double x : la.A_LM.data) min_alm = std::min(min_alm, x);
        EXPECT_GT(min_alm, 1e-4) << k.name << ": the model is not at the intended regular point";
    }
    auto f = [&] {
        pldr::Activations<double> a;
        return pldr::loss_and_grads<double>(m, tok.data(), mc.B, S1, dag, a, nullptr).value;
    };
    EXPECT_EQ(f(), res.value);  // deterministic forward
    ModelReport rep;
    pldr::Rng pick(seed + 5);
    for (const auto& e : m.layout.entries) {
        std::vector<int64_t> idx;
        if (e.numel > kSample) {  // a random sample without repetition
            std::vector<int64_t> all(static_cast<size_t>(e.numel));
            for (int64_t i = 0; i < e.numel; ++i) all[size_t(i)] = i;
            for (int64_t i = 0; i < kSample; ++i)
                std::swap(all[size_t(i)],
                          all[size_t(i + int64_t(pick.below(uint64_t(e.numel - i))))]);
            idx.assign(all.begin(), all.begin() + kSample);
        }
        const ErrStat s =
            fd_check(f, m.params.data() + e.offset, grads.data() + e.offset, e.numel, 3e-4, idx, 4);
        EXPECT_LE(s.err, kTol) << k.name << ": " << e.name << " max|Δ| " << s.max_abs
                               << " max|num| " << s.max_num;
        ++rep.tensors;
        rep.entries += idx.empty() ? int(e.numel) : int(idx.size());
        if (s.err >= rep.worst) {
            rep.worst = s.err;
            rep.worst_name = e.name;
        }
    }
    std::printf("[fd] model %-50s loss %9.4f  %3d tensors %4d entries  worst %.2e (%s)\n",
                k.name.c_str(), res.value, rep.tensors, rep.entries, rep.worst,
                rep.worst_name.c_str());
    return rep;
}

// Every case of the list (tests/numeric_cases.h): variants × shapes × learned/fixed G × DAG.
class FdModel : public testing::TestWithParam<numeric::Case> {};

// The metric learner's rows in 3 blocks (as on 3 threads): the backward recomputes each unit's
// GLUs block by block, into the rows of the kept tensors.
TEST_P(FdModel, Gradients) {
    const numeric::Case& k = GetParam();
    const uint64_t seed = numeric::seed_of(k);
    const numeric::LearnerRowBlocks split(3);
    check_model(k, numeric::make_model(k, seed), seed);
}

INSTANTIATE_TEST_SUITE_P(Cases, FdModel, testing::ValuesIn(numeric::cases()), numeric::CaseName());

// Outside the list: halves RoPE and tied embeddings, on the first shape.
TEST(FdModelExtra, HalvesRopeTiedEmbeddings) {
    numeric::Case k;
    k.shape = numeric::shapes()[0];
    k.name = numeric::shape_name(k.shape) + " halves+tied";
    check_model(k, numeric::make_model(k, 110, true, true, true), 110);
}

// Not a finite-difference check: at the saturated point (no blst shift: some Z ~ 1e-3 with
// negative P, A_P up to ~1e4, DAG values up to ~1e8) the loss and every gradient must stay
// finite in pure float64 (EXACT DAG). Before the fix in ops/dag.cpp the EXACT log-trace
// underflowed to log(0) there: loss = inf on two of these three shapes.
TEST(FdModelExtra, DagFiniteAtSaturatedPoint) {
    SingleThread one_thread;
    uint64_t seed = 300;
    for (const numeric::Shape& mc : numeric::shapes()) {
        numeric::Case k;
        k.shape = mc;
        k.dag = true;
        const std::string name = numeric::shape_name(mc);
        pldr::Model<double> m = numeric::make_model(k, ++seed, /*regular=*/false);
        const std::vector<int64_t> tok = numeric::make_tokens(mc, seed + 3);
        pldr::Activations<double> acts;
        Vec grads(m.params.size(), 0.0);
        const pldr::LossResult res =
            pldr::loss_and_grads(m, tok.data(), mc.B, mc.S + 1, dag_of(k), acts, grads.data());
        EXPECT_TRUE(std::isfinite(res.value)) << name;
        EXPECT_GT(res.dagAp, 100.0) << name << ": not the saturated regime";
        int64_t bad = 0;
        for (double g : grads) bad += std::isfinite(g) ? 0 : 1;
        EXPECT_EQ(bad, 0) << name;
    }
}

}  // namespace
