// Every CUDA kernel, forward and backward, against the CPU op, for every case of the numeric case
// list (tests/numeric_cases.h: the registered PLGA variants × the shapes × learned / fixed G ×
// DAG), in float64, float32 and bf16 storage (gpu_util.h: the allowances). The kernels that share
// the CPU's arithmetic and order (LayerNorm, RoPE, AdamW, clipping) must give its bits; the
// LayerNorm's dg and db the bits of the CPU's terms summed in the GPU's chunked order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <type_traits>

#include "core/rng.h"
#include "core/vmath.h"
#include "cuda/colsum_order.h"
#include "gpu_util.h"
#include "numeric_cases.h"
#include "ops/activation.h"
#include "ops/cross_entropy.h"
#include "ops/dag.h"
#include "ops/dag_expm.h"
#include "ops/glu.h"
#include "ops/layernorm.h"
#include "ops/layernorm_order.h"
#include "ops/plga_variants.h"
#include "ops/rope.h"
#include "train/adamw.h"
#include "train/clip.h"
#include "train/clip_order.h"

namespace {

using gpu::bf16;
using gpu::Buf;
namespace cu = pldr::cuda;

// A count as a size (a function, not a cast: `std::vector<T> v(size_t(n))` declares a function).
inline size_t sz(int64_t n) {
    return static_cast<size_t>(n);
}

template <class T>
std::vector<T> randn(size_t n, uint64_t seed, double scale = 1.0, double shift = 0.0) {
    pldr::Rng r(seed);
    std::vector<T> v(n);
    for (auto& x : v) x = T(shift + scale * r.normal());
    return v;
}
// Values exactly representable in bf16 (so that every precision sees the same inputs).
std::vector<double> randn_bf16(size_t n, uint64_t seed, double scale = 1.0, double shift = 0.0) {
    return gpu::cast<double>(gpu::widen(gpu::to_bf16(randn<float>(n, seed, scale, shift))));
}

class CudaKernels : public ::testing::TestWithParam<numeric::Case> {
  protected:
    void SetUp() override { PLDR_REQUIRE_GPU(); }
    const numeric::Shape& s() const { return GetParam().shape; }
    uint64_t seed() const { return numeric::seed_of(GetParam()); }
    int64_t rows() const { return s().B * s().S; }
    int64_t hidden() const { return s().H * s().dk; }
};

// ---- LayerNorm: the CPU's bits --------------------------------------------------------------

template <class T>
void layernorm_case(int64_t N, int64_t C, uint64_t seed) {
    const auto x = gpu::cast<T>(randn_bf16(sz(N * C), seed, 1.5, 0.3));
    const auto g = randn<T>(sz(C), seed + 1, 0.2, 1.0), b = randn<T>(sz(C), seed + 2, 0.1);
    const auto dy = gpu::cast<T>(randn_bf16(sz(N * C), seed + 3));
    const auto dx0 = gpu::cast<T>(randn_bf16(sz(N * C), seed + 4, 0.01));
    const auto dg0 = randn<T>(sz(C), seed + 5, 0.01);
    std::vector<T> out(x.size()), mean(sz(N)), rstd(sz(N)), dx = dx0, dg = dg0, db(sz(C), T(0));
    pldr::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(), N,
                            C, 1e-5);
    pldr::layernorm_backward(dx.data(), dg.data(), db.data(), dy.data(), x.data(), mean.data(),
                             rstd.data(), g.data(), N, C);
    // dg and db: the CPU's terms, summed in the GPU's order (cuda/colsum_order.h)
    dg = dg0;
    std::fill(db.begin(), db.end(), T(0));
    cu::column_sums_host(dg.data(), N, C, [&](int64_t n, int64_t c) {
        return pldr::ln_dg(dy[sz(n * C + c)], x[sz(n * C + c)], mean[sz(n)], rstd[sz(n)]);
    });
    cu::column_sums_host(db.data(), N, C, [&](int64_t n, int64_t c) { return dy[sz(n * C + c)]; });
    Buf<T> dX(x), dG(g), dB(b), dOut(x.size()), dMean(sz(N)), dRstd(sz(N)), dDy(dy), dDx(dx0),
        dDg(dg0), dDb(std::vector<T>(sz(C), T(0)));
    cu::layernorm_forward<T>(dOut.get(), dMean.get(), dRstd.get(), dX.get(), dG.get(), dB.get(), N,
                             C, 1e-5, nullptr);
    cu::layernorm_backward<T>(dDx.get(), dDg.get(), dDb.get(), dDy.get(), dX.get(), dMean.get(),
                              dRstd.get(), dG.get(), N, C, nullptr);
    EXPECT_TRUE(gpu::bits_equal(dOut.download(), out)) << "out";
    EXPECT_TRUE(gpu::bits_equal(dMean.download(), mean)) << "mean";
    EXPECT_TRUE(gpu::bits_equal(dRstd.download(), rstd)) << "rstd";
    EXPECT_TRUE(gpu::bits_equal(dDx.download(), dx)) << "dx";
    EXPECT_TRUE(gpu::bits_equal(dDg.download(), dg)) << "dg";
    EXPECT_TRUE(gpu::bits_equal(dDb.download(), db)) << "db";
}

// bf16 activations: the CPU's float32 on the widened inputs, rounded once.
void layernorm_bf16_case(int64_t N, int64_t C, uint64_t seed) {
    const auto xb = gpu::to_bf16(randn<float>(sz(N * C), seed, 1.5, 0.3));
    const auto dyb = gpu::to_bf16(randn<float>(sz(N * C), seed + 3));
    const auto dx0b = gpu::to_bf16(randn<float>(sz(N * C), seed + 4, 0.01));
    const auto g = randn<float>(sz(C), seed + 1, 0.2, 1.0), b = randn<float>(sz(C), seed + 2);
    const auto x = gpu::widen(xb), dy = gpu::widen(dyb);
    std::vector<float> out(x.size()), mean(sz(N)), rstd(sz(N)), dx = gpu::widen(dx0b),
                                                                dg(sz(C), 0.f);
    pldr::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(), N,
                            C, 1e-5);
    pldr::layernorm_backward(dx.data(), dg.data(), static_cast<float*>(nullptr), dy.data(),
                             x.data(), mean.data(), rstd.data(), g.data(), N, C);
    std::fill(dg.begin(), dg.end(), 0.f);  // in the GPU's order (cuda/colsum_order.h)
    cu::column_sums_host(dg.data(), N, C, [&](int64_t n, int64_t c) {
        return pldr::ln_dg(dy[sz(n * C + c)], x[sz(n * C + c)], mean[sz(n)], rstd[sz(n)]);
    });
    Buf<bf16> dX(xb), dOut(xb.size()), dDy(dyb), dDx(dx0b);
    Buf<float> dG(g), dB(b), dMean(sz(N)), dRstd(sz(N)), dDg(std::vector<float>(sz(C)));
    cu::layernorm_forward<bf16>(dOut.get(), dMean.get(), dRstd.get(), dX.get(), dG.get(), dB.get(),
                                N, C, 1e-5, nullptr);
    cu::layernorm_backward<bf16>(dDx.get(), dDg.get(), nullptr, dDy.get(), dX.get(), dMean.get(),
                                 dRstd.get(), dG.get(), N, C, nullptr);
    EXPECT_TRUE(gpu::bits_equal(dOut.download(), gpu::to_bf16(out))) << "bf16 out";
    EXPECT_TRUE(gpu::bits_equal(dMean.download(), mean)) << "bf16 mean";
    EXPECT_TRUE(gpu::bits_equal(dDx.download(), gpu::to_bf16(dx))) << "bf16 dx";
    EXPECT_TRUE(gpu::bits_equal(dDg.download(), dg)) << "bf16 dg";
}

TEST_P(CudaKernels, LayerNormHasTheCpuBits) {
    for (const int64_t C : {hidden(), s().dk}) {  // the decoder's and the metric learner's rows
        SCOPED_TRACE(::testing::Message() << "C " << C);
        layernorm_case<float>(rows(), C, seed());
        layernorm_case<double>(rows(), C, seed() + 10);
        layernorm_bf16_case(rows(), C, seed() + 20);
    }
}

// ---- the SwiGLU gate ---------------------------------------------------------------------------

TEST_P(CudaKernels, GluGateForwardAndBackward) {
    const int64_t F = 2 * hidden() - 3;  // numeric::config_of's intermediate size
    const size_t n = sz(rows() * F);
    const auto h1 = randn_bf16(n, seed(), 2.0), h2 = randn_bf16(n, seed() + 1);
    const auto dg = randn_bf16(n, seed() + 2);
    // float64 reference: the CPU's gate, and its backward's element step (ops/dense.cpp).
    std::vector<double> gated(n), dh1(n), dh2(n);
    pldr::glu_gate(gated.data(), h1.data(), h2.data(), int64_t(n));
    for (size_t i = 0; i < n; ++i) {
        dh2[i] = dg[i] * pldr::silu(h1[i]);
        dh1[i] = dg[i] * h2[i] * pldr::silu_grad(h1[i]);
    }
    auto run = [&](auto zero) {
        using T = decltype(zero);
        Buf<T> a(gpu::cast<T>(h1)), b(gpu::cast<T>(h2)), d(gpu::cast<T>(dg)), out(n), o2(n);
        cu::glu_gate<T>(out.get(), a.get(), b.get(), int64_t(n), nullptr);
        cu::glu_gate_backward<T>(d.get(), o2.get(), d.get(), a.get(), b.get(), int64_t(n),
                                 nullptr);  // dh1 in place of dgated, as the CPU
        return std::make_tuple(out.download(), d.download(), o2.download());
    };
    const auto [g64, d1_64, d2_64] = run(0.0);
    EXPECT_TRUE(gpu::f64_close(g64, gated));
    EXPECT_TRUE(gpu::f64_close(d1_64, dh1));
    EXPECT_TRUE(gpu::f64_close(d2_64, dh2));
    // float32: the CPU's float32 kernels (core/vmath.h) give the conditioning.
    const auto h1f = gpu::cast<float>(h1), h2f = gpu::cast<float>(h2), dgf = gpu::cast<float>(dg);
    std::vector<float> gf(n), d1f(n), d2f(n);
    pldr::glu_gate(gf.data(), h1f.data(), h2f.data(), int64_t(n));
    pldr::vmath::silu_mul_backward(dgf.data(), h1f.data(), h2f.data(), d1f.data(), d2f.data(),
                                   int64_t(n));
    const auto [g32, d1_32, d2_32] = run(0.0f);
    EXPECT_TRUE(gpu::f32_close(g32, gf, gated));
    EXPECT_TRUE(gpu::f32_close(d1_32, d1f, dh1));
    EXPECT_TRUE(gpu::f32_close(d2_32, d2f, dh2));
    {
        Buf<bf16> a(gpu::to_bf16(h1f)), b(gpu::to_bf16(h2f)), out(n);
        cu::glu_gate<bf16>(out.get(), a.get(), b.get(), int64_t(n), nullptr);
        EXPECT_TRUE(gpu::bf16_close(out.download(), gf, gated));
    }
    // A test of the test: the gate on swapped branches is far outside the allowance.
    std::vector<double> swapped(n);
    pldr::glu_gate(swapped.data(), h2.data(), h1.data(), int64_t(n));
    EXPECT_FALSE(gpu::f64_close(g64, swapped));
}

// ---- RoPE, both layouts
// --------------------------------------------------------------------------- Within 4 ulp, not bit
// for bit: GCC 12 contracts rope.cpp's pairs into fused multiply-adds on AVX-512 CPUs
// (tests/test_cuda_shared.cpp), the GPU never contracts (--fmad=false).

TEST_P(CudaKernels, RopeInBothLayouts) {
    const int64_t N = rows(), H = s().H, D = s().dk;
    const int64_t max_pos = numeric::config_of(GetParam()).max_position;
    pldr::RopeTable table;
    table.build(max_pos, D, 10000.0, pldr::RopeTableKind::TORCH);
    const cu::DeviceRopeTable dtable(table);
    std::vector<int64_t> pos(sz(N));
    for (int64_t n = 0; n < N; ++n) pos[sz(n)] = n % s().S + (n / s().S) * 3;  // rows differ
    cu::rope_check_positions(pos.data(), N, max_pos);
    Buf<int64_t> dpos(pos);
    Buf<int> bad(std::vector<int>{0});
    for (const bool interleaved : {true, false}) {
        SCOPED_TRACE(interleaved ? "interleaved" : "halves");
        const auto x = randn_bf16(sz(N * H * D), seed() + interleaved);
        for (const bool round : {false, true}) {
            std::vector<double> f = x, b = x;
            pldr::rope_forward(f.data(), pos.data(), N, H, D, table, interleaved, round);
            pldr::rope_backward(b.data(), pos.data(), N, H, D, table, interleaved, round);
            Buf<double> df(x), db(x);
            cu::rope_forward<double>(df.get(), dpos.get(), N, H, D, dtable, interleaved, round,
                                     bad.get(), nullptr);
            cu::rope_backward<double>(db.get(), dpos.get(), N, H, D, dtable, interleaved, round,
                                      bad.get(), nullptr);
            EXPECT_TRUE(gpu::f64_close(df.download(), f)) << "float64 forward, round " << round;
            EXPECT_TRUE(gpu::f64_close(db.download(), b)) << "float64 backward, round " << round;
        }
        const auto xf = gpu::cast<float>(x);
        std::vector<float> f = xf, b = xf;
        pldr::rope_forward(f.data(), pos.data(), N, H, D, table, interleaved, false);
        pldr::rope_backward(b.data(), pos.data(), N, H, D, table, interleaved, false);
        Buf<float> df(xf), db(xf);
        cu::rope_forward<float>(df.get(), dpos.get(), N, H, D, dtable, interleaved, false,
                                bad.get(), nullptr);
        cu::rope_backward<float>(db.get(), dpos.get(), N, H, D, dtable, interleaved, false,
                                 bad.get(), nullptr);
        EXPECT_TRUE(gpu::within(gpu::rel_err(df.download(), f), 0x1p-22, "float32 forward"));
        EXPECT_TRUE(gpu::within(gpu::rel_err(db.download(), b), 0x1p-22, "float32 backward"));
        Buf<bf16> hf(gpu::to_bf16(xf)), hb(gpu::to_bf16(xf));
        cu::rope_forward<bf16>(hf.get(), dpos.get(), N, H, D, dtable, interleaved, false, bad.get(),
                               nullptr);
        cu::rope_backward<bf16>(hb.get(), dpos.get(), N, H, D, dtable, interleaved, false,
                                bad.get(), nullptr);
        EXPECT_TRUE(
            gpu::within(gpu::rel_err(gpu::widen(hf.download()), f), 0x1p-8, "bf16 forward"));
        EXPECT_TRUE(
            gpu::within(gpu::rel_err(gpu::widen(hb.download()), b), 0x1p-8, "bf16 backward"));
    }
    EXPECT_EQ(bad.download()[0], 0);
    // A position past the table: NaN for that token, the flag set, nothing read out of bounds.
    std::vector<int64_t> pos2 = pos;
    pos2[0] = max_pos;
    EXPECT_THROW(cu::rope_check_positions(pos2.data(), N, max_pos), pldr::Error);
    Buf<int64_t> dpos2(pos2);
    Buf<double> dx(randn<double>(sz(N * H * D), 1));
    cu::rope_forward<double>(dx.get(), dpos2.get(), N, H, D, dtable, true, false, bad.get(),
                             nullptr);
    const auto r = dx.download();
    EXPECT_EQ(bad.download()[0], 1);
    for (int64_t i = 0; i < H * D; ++i) EXPECT_TRUE(std::isnan(r[sz(i)]));
    EXPECT_FALSE(std::isnan(r[sz(H * D)]));
}

// ---- the masked cross-entropy over a chunk of rows ------------------------------------------

TEST_P(CudaKernels, CrossEntropyRows) {
    const int64_t N = rows(), V = s().V;
    const auto tokens = numeric::make_tokens(s(), seed());  // pad 0 = ignore id, as the loss
    std::vector<int64_t> targets(sz(N));
    for (int64_t b = 0; b < s().B; ++b)
        for (int64_t i = 0; i < s().S; ++i)
            targets[sz(b * s().S + i)] = tokens[sz(b * (s().S + 1) + i + 1)];
    int64_t scored = 0;
    for (const int64_t t : targets) scored += t != 0;
    const auto logits = randn_bf16(sz(N * V), seed() + 1, 3.0);
    Buf<int64_t> dt(targets);
    auto cpu = [&](auto zero) {
        using T = decltype(zero);
        const auto x = gpu::cast<T>(logits);
        std::vector<T> d(x.size()), ce(sz(N));
        std::vector<char> hit(sz(N));
        pldr::cross_entropy_fused_rows(d.data(), ce.data(), hit.data(), x.data(), targets.data(), N,
                                       V, int64_t(0), T(1.0 / double(scored)));
        return std::make_tuple(d, ce, hit);
    };
    auto run = [&](auto zero, bool in_place) {
        using T = decltype(zero);
        using A = cu::Acc<T>;
        std::vector<T> x;
        if constexpr (std::is_same_v<T, bf16>)
            x = gpu::to_bf16(gpu::cast<float>(logits));
        else
            x = gpu::cast<T>(logits);
        Buf<T> dx(x), dd(x.size());
        Buf<A> ce(sz(N));
        Buf<char> hit(sz(N));
        cu::cross_entropy_fused_rows<T>(in_place ? dx.get() : dd.get(), ce.get(), hit.get(),
                                        dx.get(), dt.get(), N, V, 0, A(1.0 / double(scored)),
                                        nullptr);
        return std::make_tuple(in_place ? dx.download() : dd.download(), ce.download(),
                               hit.download());
    };
    const auto [d64, ce64, hit64] = cpu(0.0);
    const auto [d32, ce32, hit32] = cpu(0.0f);
    for (const bool in_place : {false, true}) {
        SCOPED_TRACE(in_place ? "in place" : "out of place");
        const auto [gd64, gce64, ghit64] = run(0.0, in_place);
        EXPECT_TRUE(gpu::f64_close(gd64, d64));
        EXPECT_TRUE(gpu::f64_close(gce64, ce64));
        EXPECT_EQ(ghit64, hit64);
        const auto [gd32, gce32, ghit32] = run(0.0f, in_place);
        EXPECT_TRUE(gpu::f32_close(gd32, d32, d64));
        EXPECT_TRUE(gpu::f32_close(gce32, ce32, ce64));
        EXPECT_EQ(ghit32, hit64);
        const auto [gdb, gceb, ghitb] = run(bf16{0}, in_place);
        EXPECT_TRUE(gpu::bf16_close(gdb, d32, d64));
        EXPECT_TRUE(gpu::f32_close(gceb, ce32, ce64));
        EXPECT_EQ(ghitb, hit64);
    }
}

// ---- AdamW and clipping: the CPU's bits --------------------------------------------------------

template <class T>
void optimizer_case(int64_t n, uint64_t seed) {
    pldr::AdamWConfig cfg;
    auto p = randn<T>(sz(n), seed), m = std::vector<T>(sz(n), T(0)), v = m;
    Buf<T> dp(p), dm(m), dv(v), dg(sz(n));
    for (int64_t t = 1; t <= 3; ++t) {  // three steps, the first at lr 0 (the reference's)
        const double lr = t == 1 ? 0.0 : 3e-3 * double(t);
        auto g = randn<T>(sz(n), seed + uint64_t(t), 2.0);
        g[0] = T(5), g[1] = T(-5), g[2] = T(1);  // over, under, at the limit
        dg.upload(g);
        const int64_t over = pldr::clip_by_value(g.data(), n, T(1));
        EXPECT_EQ(cu::clip_by_value<T>(dg.get(), n, T(1), nullptr), over);
        const pldr::GradPass cpu = pldr::grad_pass(g.data(), n, T(0.5));
        const pldr::GradPass gp = cu::grad_pass<T>(dg.get(), n, T(0.5), nullptr);
        EXPECT_TRUE(gpu::same_bits(gp.sum_sq, cpu.sum_sq)) << gp.sum_sq << " vs " << cpu.sum_sq;
        EXPECT_EQ(gp.over, cpu.over);
        const double norm = pldr::clip_by_global_norm(g.data(), n, 0.25);
        EXPECT_TRUE(gpu::same_bits(cu::clip_by_global_norm<T>(dg.get(), n, 0.25, nullptr), norm));
        EXPECT_TRUE(gpu::bits_equal(dg.download(), g)) << "clipped gradient, step " << t;
        EXPECT_TRUE(cu::all_finite<T>(dg.get(), n, nullptr));
        pldr::adamw_update(p.data(), g.data(), m.data(), v.data(), n, t, lr, cfg);
        cu::adamw_update<T>(dp.get(), dg.get(), dm.get(), dv.get(), n, t, lr, cfg, nullptr);
        EXPECT_TRUE(gpu::bits_equal(dp.download(), p)) << "p, step " << t;
        EXPECT_TRUE(gpu::bits_equal(dm.download(), m)) << "m, step " << t;
        EXPECT_TRUE(gpu::bits_equal(dv.download(), v)) << "v, step " << t;
    }
    auto g = randn<T>(sz(n), seed);
    g[sz(n / 2)] = std::numeric_limits<T>::quiet_NaN();
    dg.upload(g);
    EXPECT_FALSE(cu::all_finite<T>(dg.get(), n, nullptr));
    EXPECT_EQ(cu::clip_by_value<T>(dg.get(), n, T(100), nullptr), 0);  // NaN not counted
}

TEST_P(CudaKernels, AdamWAndClippingHaveTheCpuBits) {
    const pldr::Model<double> m = numeric::make_model(GetParam(), seed());
    const int64_t n = int64_t(m.params.size());  // the case's parameter count
    optimizer_case<float>(n, seed());
    optimizer_case<double>(n, seed() + 1);
    // Past one block of the sum of squares, with a ragged last block.
    if (GetParam().name == numeric::cases().front().name) {
        optimizer_case<float>(3 * pldr::kGradSumBlock + 77, 5);
        optimizer_case<double>(3 * pldr::kGradSumBlock + 77, 6);
    }
}

// ---- the PLGA operator's element-wise steps: the case's variants ------------------------------

TEST_P(CudaKernels, PlgaPositiveMapAndCoupling) {
    const numeric::Case& c = GetParam();
    if (c.g != pldr::GType::LEARNED) GTEST_SKIP() << "fixed G: no operator";
    const pldr::PositiveMap& pm = pldr::positive_map(c.positive_map);
    const pldr::Coupling& cp = pldr::coupling(c.coupling);
    const size_t n = sz(s().H * s().dk * s().dk);
    const auto Z = randn<double>(n, seed(), 1.0, 1.5);  // numeric::make_model's regular point
    pldr::Rng r(seed() + 1);
    std::vector<double> P(n);
    for (auto& p : P) p = (r.uniform() < 0.3 ? -1.0 : 1.0) * r.uniform(0.1, 1.0);
    const auto dAP = randn<double>(n, seed() + 2), dP0 = randn<double>(n, seed() + 3, 0.1);
    // float64: the registry's kernels.
    std::vector<double> alm(n), ap(n), dalm(n), dP = dP0;
    pm.forward(Z.data(), alm.data(), int64_t(n));
    cp.forward(alm.data(), P.data(), ap.data(), int64_t(n));
    cp.backward_f64(dalm.data(), dP.data(), dAP.data(), alm.data(), ap.data(), P.data(),
                    int64_t(n));
    std::vector<double> dZ = dalm;
    pm.backward_f64(dZ.data(), Z.data(), alm.data(), int64_t(n));
    {
        Buf<double> dz(Z), dalmb(n), dpb(P), dapb(n), ddap(dAP), ddalm(n), ddp(dP0);
        cu::positive_map_forward<double>(c.positive_map, dz.get(), dalmb.get(), int64_t(n),
                                         nullptr);
        cu::coupling_forward<double>(c.coupling, dalmb.get(), dpb.get(), dapb.get(), int64_t(n),
                                     nullptr);
        // The backward from the CPU's forward values (each step checked alone).
        Buf<double> calm(alm), cap(ap);
        cu::coupling_backward<double>(c.coupling, ddalm.get(), ddp.get(), ddap.get(), calm.get(),
                                      cap.get(), dpb.get(), int64_t(n), nullptr);
        EXPECT_TRUE(gpu::f64_close(dalmb.download(), alm)) << "A_LM";
        EXPECT_TRUE(gpu::f64_close(dapb.download(), ap)) << "A_P";
        const auto g_dalm = ddalm.download();
        EXPECT_TRUE(gpu::f64_close(g_dalm, dalm)) << "dA_LM";
        EXPECT_TRUE(gpu::f64_close(ddp.download(), dP)) << "dP";
        Buf<double> ddz(dalm);
        cu::positive_map_backward<double>(c.positive_map, ddz.get(), dz.get(), calm.get(),
                                          int64_t(n), nullptr);
        EXPECT_TRUE(gpu::f64_close(ddz.download(), dZ)) << "dZ";
    }
    // float32: the forwards in double rounded once (the CPU operator's float32 path), the
    // backwards in float32 against the CPU's float32 kernels.
    const auto Zf = gpu::cast<float>(Z), Pf = gpu::cast<float>(P);
    const auto almf = gpu::cast<float>(alm), apf = gpu::cast<float>(ap);
    {
        std::vector<double> alm_of_zf(n);
        pm.forward(gpu::cast<double>(Zf).data(), alm_of_zf.data(), int64_t(n));
        Buf<float> dz(Zf), out(n);
        cu::positive_map_forward<float>(c.positive_map, dz.get(), out.get(), int64_t(n), nullptr);
        EXPECT_TRUE(gpu::within(gpu::rel_err(out.download(), alm_of_zf), std::ldexp(1.0, -23),
                                "float32 A_LM"));
        const auto dAPf = gpu::cast<float>(dAP), dP0f = gpu::cast<float>(dP0);
        std::vector<float> dalmf(n), dPf = dP0f;
        cp.backward_f32(dalmf.data(), dPf.data(), dAPf.data(), almf.data(), apf.data(), Pf.data(),
                        int64_t(n));
        Buf<float> a(almf), p(apf), pp(Pf), dap(dAPf), gd(n), gp(dP0f);
        cu::coupling_backward<float>(c.coupling, gd.get(), gp.get(), dap.get(), a.get(), p.get(),
                                     pp.get(), int64_t(n), nullptr);
        EXPECT_TRUE(gpu::f32_close(gd.download(), dalmf, dalm)) << "float32 dA_LM";
        EXPECT_TRUE(gpu::f32_close(gp.download(), dPf, dP)) << "float32 dP";
    }
}

// The DAG terms per instance (cuda/dag.cu) against the CPU's (ops/dag.h dag_term), in both
// modes, with and without the gradient, from float64 and float32 X: instances whose 1-norms pick
// each of the reference's polynomials (T2 to T18 with squarings) and, in the exact mode, one whose
// trace overflows float32. Reference numerics: the CPU's steps in the same order, so its float32
// dag (from the kernel's y) and gradient to the bit, but for log2's rounding in the choice of the
// squarings (an allowance of 2^-20); the exact mode within 1e-12 (CUDA's exp, log and pow against
// glibc's).
TEST_P(CudaKernels, DagTermsPerInstanceAsTheCpus) {
    const numeric::Case& c = GetParam();
    if (c.g != pldr::GType::LEARNED) GTEST_SKIP() << "fixed G: no operator";
    const int64_t n = s().dk, nn = n * n;
    // X∘X's 1-norm about n·scale²: targets in the ranges of T1, T2, T4, T8, T12, T18 (with 4
    // squarings), and past float32's exponent range
    const std::vector<double> norms = {1e-9, 3e-4, 0.02, 0.3, 1.0, 30.0, 600.0};
    const int64_t count = int64_t(norms.size());
    std::vector<double> X(sz(count * nn));
    for (int64_t i = 0; i < count; ++i) {
        const double sc = std::sqrt(norms[size_t(i)] / double(n));
        const auto x = randn<double>(sz(nn), seed() + 10 + uint64_t(i), sc);
        std::copy(x.begin(), x.end(), X.begin() + i * nn);
    }
    const double scale = 0.37;
    for (const bool reference : {true, false})
        for (const bool grad : {false, true}) {
            const pldr::DagMode md =
                reference ? pldr::DagMode::REFERENCE_F32 : pldr::DagMode::EXACT;
            const std::string what = std::string(reference ? "reference" : "exact") +
                                     (grad ? ", gradient" : "") + ", n " + std::to_string(n);
            // the last instance overflows float32 in the reference's algorithm: exact mode only
            const int64_t k = reference ? count - 1 : count;
            const auto run = [&](auto zero_like) {
                using T = decltype(zero_like);
                const std::vector<T> Xt(X.begin(), X.begin() + k * nn);
                std::vector<double> want(sz(k));
                std::vector<T> dwant(sz(k * nn), T(0));
                for (int64_t i = 0; i < k; ++i)
                    want[size_t(i)] = pldr::dag_term(Xt.data() + i * nn, n, md,
                                                     grad ? dwant.data() + i * nn : nullptr, scale);
                Buf<T> xd(Xt), dxd(std::vector<T>(sz(k * nn), T(0)));
                Buf<double> vd(sz(k));
                cu::dag_instances<T>(xd.get(), k, n, reference, grad ? dxd.get() : nullptr,
                                     float(scale), scale, vd.get(), nullptr);
                std::vector<double> got = vd.download();
                if (reference)
                    for (double& v : got) v = double(pldr::dag_detail::dag_ref_value(float(v)));
                const double tol = reference ? std::ldexp(1.0, -20) : 1e-12;
                // (the exact mode's gradient rounds its float64 value to T once)
                const double gtol =
                    !reference && std::is_same_v<T, float> ? std::ldexp(1.0, -23) : tol;
                for (int64_t i = 0; i < k; ++i) {
                    SCOPED_TRACE(what + ", instance " + std::to_string(i));
                    const double w = want[size_t(i)];
                    ASSERT_TRUE(std::isfinite(w));
                    EXPECT_LE(std::fabs(got[size_t(i)] - w), tol * std::fabs(w) + 1e-300);
                    if (!grad) continue;
                    const auto dg = dxd.download();
                    const std::vector<T> a(dg.begin() + i * nn, dg.begin() + (i + 1) * nn),
                        b(dwant.begin() + i * nn, dwant.begin() + (i + 1) * nn);
                    EXPECT_TRUE(gpu::within(gpu::rel_err(a, b), gtol, "gradient"));
                }
            };
            run(double(0));
            run(float(0));
        }
}

// More instances than the grid has blocks (each block's scratch reused by the instances after
// its first), and the largest side the kernel takes (the reference's gradient then works on
// 256 × 256 blocks: one column sum per thread), with gradients accumulated onto values already
// there, in both modes, as the CPU's.
TEST(CudaDag, ManyInstancesAndTheLargestSideAsTheCpus) {
    PLDR_REQUIRE_GPU();
    int device = 0, sms = 1;
    gpu::check(cudaGetDevice(&device), "cudaGetDevice");
    gpu::check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "SMs");
    const struct { int64_t n, count; } shapes[] = {{3, 2 * int64_t(sms) + 5}, {cu::kDagMaxSide, 2}};
    for (const auto& sh : shapes)
        for (const bool reference : {true, false}) {
            const int64_t n = sh.n, nn = n * n, count = sh.count;
            const pldr::DagMode md =
                reference ? pldr::DagMode::REFERENCE_F32 : pldr::DagMode::EXACT;
            SCOPED_TRACE(std::string(reference ? "reference" : "exact") + ", n " +
                         std::to_string(n) + ", " + std::to_string(count) + " instances");
            // X∘X's 1-norm from about 0.01 to 3 across the instances
            std::vector<double> X(sz(count * nn));
            for (int64_t i = 0; i < count; ++i) {
                const double norm = 0.01 * std::pow(300.0, double(i) / double(count));
                const auto x =
                    randn<double>(sz(nn), 900 + uint64_t(i), std::sqrt(norm / double(n)));
                std::copy(x.begin(), x.end(), X.begin() + i * nn);
            }
            const auto d0 = randn<double>(sz(count * nn), 77, 0.01);
            const double scale = 0.61;
            std::vector<double> want(sz(count)), dwant = d0;
            for (int64_t i = 0; i < count; ++i)
                want[size_t(i)] =
                    pldr::dag_term(X.data() + i * nn, n, md, dwant.data() + i * nn, scale);
            Buf<double> xd(X), dxd(d0), vd(sz(count));
            cu::dag_instances<double>(xd.get(), count, n, reference, dxd.get(), float(scale), scale,
                                      vd.get(), nullptr);
            std::vector<double> got = vd.download();
            if (reference)
                for (double& v : got) v = double(pldr::dag_detail::dag_ref_value(float(v)));
            const double tol = reference ? std::ldexp(1.0, -20) : 1e-12;
            for (int64_t i = 0; i < count; ++i)
                EXPECT_LE(std::fabs(got[size_t(i)] - want[size_t(i)]),
                          tol * std::fabs(want[size_t(i)]) + 1e-300)
                    << "instance " << i;
            EXPECT_TRUE(gpu::within(gpu::rel_err(dxd.download(), dwant), tol, "gradients"));
        }
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaKernels, ::testing::ValuesIn(numeric::cases()),
                         numeric::CaseName());

}  // namespace
