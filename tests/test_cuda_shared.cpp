// The arithmetic the CUDA kernels share with the CPU (PLDR_HD functions, core/hd.h), run here on
// the CPU the way the kernels assemble it, against the CPU ops, bit for bit. This is what a
// machine without a GPU can check of the backend: the kernels' summation orders and element
// formulas. (tests/gpu/ checks the kernels themselves on a GPU.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

#include "core/gemm_bf16.h"
#include "core/rng.h"
#include "cuda/kernels.h"
#include "numeric_cases.h"
#include "ops/layernorm.h"
#include "ops/layernorm_order.h"
#include "ops/plga_elementwise.h"
#include "ops/plga_variants.h"
#include "ops/rope.h"
#include "ops/rope_rotate.h"
#include "train/adamw.h"
#include "train/adamw_element.h"
#include "train/clip.h"
#include "train/clip_order.h"

namespace {

// A count as a size (a function, not a cast: `std::vector<T> v(size_t(n))` declares a function).
inline size_t sz(int64_t n) {
    return static_cast<size_t>(n);
}

template <typename T>
std::vector<T> randn(size_t n, uint64_t seed, double scale = 1.0, double shift = 0.0) {
    pldr::Rng r(seed);
    std::vector<T> v(n);
    for (auto& x : v) x = T(shift + scale * r.normal());
    return v;
}

template <typename T>
bool same_bits(T a, T b) {
    return std::memcmp(&a, &b, sizeof a) == 0;
}

template <typename T>
void expect_bits(const std::vector<T>& got, const std::vector<T>& want, const char* what) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
        ASSERT_TRUE(same_bits(got[i], want[i]))
            << what << "[" << i << "]: " << got[i] << " vs " << want[i];
}

// The row widths of the numeric cases' LayerNorms (the model's hidden size and the metric
// learner's head dimension), and the widths around the lane groups of 16.
std::vector<int64_t> ln_widths() {
    std::set<int64_t> w = {1, 5, 15, 16, 17, 31, 32, 33, 100, 896};
    for (const numeric::Case& c : numeric::cases()) {
        w.insert(c.shape.H * c.shape.dk);
        w.insert(c.shape.dk);
    }
    return {w.begin(), w.end()};
}

// One row's sum as the GPU kernel computes it: 16 lanes, the tree, then the tail.
template <typename T, typename F>
T kernel_row_sum(const F& f, int64_t C) {
    T acc[pldr::kLnLanes];
    for (int k = 0; k < pldr::kLnLanes; ++k) acc[k] = pldr::ln_lane_sum<T>(f, C, k);
    return pldr::ln_lane_tree(acc) + pldr::ln_tail_sum<T>(f, C);
}

template <typename T>
void check_layernorm(int64_t N, int64_t C, bool bias, uint64_t seed) {
    SCOPED_TRACE(::testing::Message() << "N " << N << " C " << C << " bias " << bias);
    const double eps = 1e-5;
    const auto x = randn<T>(sz(N * C), seed, 1.5, 0.3);
    const auto g = randn<T>(sz(C), seed + 1, 0.2, 1.0);
    const auto b = randn<T>(sz(C), seed + 2, 0.1);
    const auto dy = randn<T>(sz(N * C), seed + 3);
    const auto dx0 = randn<T>(sz(N * C), seed + 4, 0.01);  // the backward accumulates
    const auto dg0 = randn<T>(sz(C), seed + 5, 0.01);
    std::vector<T> out(x.size()), mean(sz(N)), rstd(sz(N));
    pldr::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), g.data(),
                            bias ? b.data() : nullptr, N, C, eps);
    std::vector<T> dx = dx0, dg = dg0, db(sz(C), T(0));
    pldr::layernorm_backward(dx.data(), dg.data(), db.data(), dy.data(), x.data(), mean.data(),
                             rstd.data(), g.data(), N, C);
    // The kernel's assembly.
    std::vector<T> kout(x.size()), kmean(sz(N)), krstd(sz(N));
    std::vector<T> kdx = dx0, kdg = dg0, kdb(sz(C), T(0));
    for (int64_t n = 0; n < N; ++n) {
        const T* xr = x.data() + n * C;
        const T m = kernel_row_sum<T>(pldr::LnTermX<T>{xr}, C) / T(C);
        const T v = kernel_row_sum<T>(pldr::LnTermSqDev<T>{xr, m}, C) / T(C);
        const T r = pldr::ln_rstd(v, eps);
        for (int64_t c = 0; c < C; ++c)
            kout[sz(n * C + c)] = pldr::ln_out(xr[c], m, r, g[sz(c)], bias ? b.data() : nullptr, c);
        kmean[sz(n)] = m;
        krstd[sz(n)] = r;
        const T* d = dy.data() + n * C;
        const T s1 = kernel_row_sum<T>(pldr::LnTermDyG<T>{d, g.data()}, C) / T(C);
        const T s2 = kernel_row_sum<T>(pldr::LnTermDyGXhat<T>{d, xr, g.data(), m, r}, C) / T(C);
        for (int64_t c = 0; c < C; ++c)
            kdx[sz(n * C + c)] += pldr::ln_dx(d[c], g[sz(c)], xr[c], m, r, s1, s2);
    }
    for (int64_t c = 0; c < C; ++c)  // the parameters' pass: one column, the rows in order
        for (int64_t n = 0; n < N; ++n) {
            const T d = dy[sz(n * C + c)];
            kdg[sz(c)] += pldr::ln_dg(d, x[sz(n * C + c)], kmean[sz(n)], krstd[sz(n)]);
            kdb[sz(c)] += d;
        }
    expect_bits(kout, out, "out");
    expect_bits(kmean, mean, "mean");
    expect_bits(krstd, rstd, "rstd");
    expect_bits(kdx, dx, "dx");
    expect_bits(kdg, dg, "dg");
    expect_bits(kdb, db, "db");
}

TEST(CudaShared, LayerNormInTheKernelsOrderHasTheCpuBits) {
    uint64_t seed = 11;
    for (const int64_t C : ln_widths())
        for (const int64_t N : {int64_t(1), int64_t(3)})
            for (const bool bias : {true, false}) {
                check_layernorm<float>(N, C, bias, seed++);
                check_layernorm<double>(N, C, bias, seed++);
            }
}

// A test of the test: a kernel that summed the row in one running sum (the obvious GPU-free
// order) would not have the CPU's bits, so the check above can fail.
TEST(CudaShared, LayerNormPlainRunningSumDiffers) {
    int differ = 0;
    for (uint64_t seed = 1; seed <= 20; ++seed) {
        const auto x = randn<float>(896, seed, 1.5, 0.3);
        float plain = 0;
        for (float v : x) plain += v;
        differ += !same_bits(plain, kernel_row_sum<float>(pldr::LnTermX<float>{x.data()}, 896));
    }
    EXPECT_GT(differ, 10);
}

TEST(CudaShared, RopePairsAreTheCpuKernelsWithinOneRounding) {
    const int64_t N = 5, H = 3, D = 8, half = D / 2;
    pldr::RopeTable t;
    t.build(16, D, 10000.0, pldr::RopeTableKind::TORCH);
    const std::vector<int64_t> pos = {0, 3, 7, 15, 1};
    for (const bool interleaved : {true, false})
        for (const bool round : {true, false}) {
            SCOPED_TRACE(::testing::Message()
                         << "interleaved " << interleaved << " round " << round);
            const auto x = randn<double>(sz(N * H * D), 5 + interleaved + 2 * round);
            std::vector<double> cpu = x, kern = x, cpu_b = x, kern_b = x;
            pldr::rope_forward(cpu.data(), pos.data(), N, H, D, t, interleaved, round);
            pldr::rope_backward(cpu_b.data(), pos.data(), N, H, D, t, interleaved, round);
            // The GPU kernel's indexing: one thread per (token, head, pair m).
            for (int64_t i = 0; i < N * H * half; ++i) {
                const int64_t m = i % half, nh = i / half, n = nh / H;
                const int64_t i0 = interleaved ? 2 * m : m, i1 = interleaved ? 2 * m + 1 : m + half;
                const double c = t.cos[sz(pos[sz(n)] * half + m)];
                const double s = t.sin[sz(pos[sz(n)] * half + m)];
                pldr::rope_rotate_pair(kern[sz(nh * D + i0)], kern[sz(nh * D + i1)], c, s,
                                       interleaved, round);
                pldr::rope_unrotate_pair(kern_b[sz(nh * D + i0)], kern_b[sz(nh * D + i1)], c, s,
                                         round);
            }
            // Not bit for bit: GCC 12 contracts rope.cpp's x0·c − x1·s pairs into fused
            // multiply-adds on AVX-512 (its complex-multiplication pattern ignores
            // -ffp-contract=off; objdump shows vfmaddsub there), so the CPU's bits depend on the
            // machine. Each output is two products and a sum: one rounding apart at most, 2 ulp
            // of the terms' magnitude.
            double mag = 0;  // |x0·c| + |x1·s| ≤ 2·max|x|
            for (const double v : x) mag = std::max(mag, 2 * std::fabs(v));
            for (size_t i = 0; i < x.size(); ++i) {
                ASSERT_LE(std::fabs(kern[i] - cpu[i]), 0x1p-51 * mag) << "forward " << i;
                ASSERT_LE(std::fabs(kern_b[i] - cpu_b[i]), 0x1p-51 * mag) << "backward " << i;
            }
            // Token 1 (position 3) is rotated: the check can fail.
            EXPECT_GT(std::fabs(kern[sz(H * D + 1)] - x[sz(H * D + 1)]), 1e-3);
        }
}

template <typename T>
void check_adamw(int64_t n, int64_t t, double lr, uint64_t seed) {
    pldr::AdamWConfig cfg;
    auto p = randn<T>(sz(n), seed), m = randn<T>(sz(n), seed + 1, 0.1);
    auto v = randn<T>(sz(n), seed + 2, 0.01);
    for (auto& x : v) x = x * x;
    const auto g = randn<T>(sz(n), seed + 3, 0.5);
    auto p2 = p, m2 = m, v2 = v;
    pldr::adamw_update(p.data(), g.data(), m.data(), v.data(), n, t, lr, cfg);  // vector path
    const pldr::AdamWScalars<T> k = pldr::adamw_scalars<T>(t, lr, cfg);
    for (int64_t i = 0; i < n; ++i)
        pldr::adamw_element(p2[sz(i)], g[sz(i)], m2[sz(i)], v2[sz(i)], k);
    expect_bits(p2, p, "p");
    expect_bits(m2, m, "m");
    expect_bits(v2, v, "v");
}

TEST(CudaShared, AdamWElementHasTheBitsOfTheVectorPath) {
    for (const int64_t n : {int64_t(1), int64_t(37), int64_t(1000), int64_t(70001)})
        for (const int64_t t : {int64_t(1), int64_t(2), int64_t(1000)})
            for (const double lr : {0.0, 3e-4, 0.1}) {
                SCOPED_TRACE(::testing::Message() << "n " << n << " t " << t << " lr " << lr);
                check_adamw<float>(n, t, lr, uint64_t(n + t));
                check_adamw<double>(n, t, lr, uint64_t(n + t + 7));
            }
    EXPECT_THROW(pldr::adamw_scalars<float>(0, 1e-3, pldr::AdamWConfig{}), pldr::Error);
    EXPECT_THROW(pldr::adamw_scalars<float>(1, -1.0, pldr::AdamWConfig{}), pldr::Error);
}

template <typename T>
void check_grad_sum(int64_t n, uint64_t seed) {
    SCOPED_TRACE(::testing::Message() << "n " << n);
    auto g = randn<T>(sz(n), seed, 3.0);
    const T limit = T(2.5);
    if (n > 3) g[2] = T(2.5), g[3] = T(-2.5);  // ±limit: not over
    // The kernels' order: (block, lane) sums, each block's lanes in order, the blocks in order.
    const int64_t blocks = (n + pldr::kGradSumBlock - 1) / pldr::kGradSumBlock;
    double total = 0.0;
    int64_t over = 0;
    for (int64_t b = 0; b < blocks; ++b) {
        const int64_t i0 = b * pldr::kGradSumBlock;
        const int64_t len = std::min(pldr::kGradSumBlock, n - i0);
        double lanes[pldr::kGradSumLanes];
        for (int k = 0; k < pldr::kGradSumLanes; ++k)
            lanes[k] = pldr::grad_lane_sum_sq(g.data() + i0, len, k);
        double s = 0.0;
        for (const double l : lanes) s += l;
        total += s;
        for (int64_t i = 0; i < len; ++i) over += pldr::grad_over(g[sz(i0 + i)], limit);
    }
    const pldr::GradPass cpu = pldr::grad_pass(g.data(), n, limit);
    EXPECT_TRUE(same_bits(total, cpu.sum_sq)) << total << " vs " << cpu.sum_sq;
    EXPECT_TRUE(same_bits(total, pldr::sum_of_squares(g.data(), n)));
    EXPECT_EQ(over, cpu.over);
    // clip_by_value, element by element.
    std::vector<T> c = g, k = g;
    const int64_t count = pldr::clip_by_value(c.data(), n, limit);
    for (auto& x : k) x = pldr::clip_value_element(x, limit, -limit);
    expect_bits(k, c, "clip_by_value");
    EXPECT_EQ(count, over);
}

TEST(CudaShared, GradientSumOfSquaresInTheKernelsOrderHasTheCpuBits) {
    for (const int64_t n :
         {int64_t(1), int64_t(15), int64_t(16), int64_t(17), int64_t(1000), pldr::kGradSumBlock,
          pldr::kGradSumBlock + 1, 3 * pldr::kGradSumBlock + 5, int64_t(200003)}) {
        check_grad_sum<float>(n, uint64_t(n));
        check_grad_sum<double>(n, uint64_t(n) + 1);
    }
    // NaN, ±inf: the count as the CPU's, NaN kept by the clip.
    std::vector<float> g = {std::nanf(""), INFINITY, -INFINITY, 0.5f, -3.0f};
    EXPECT_EQ(pldr::grad_over(g[0], 1.0f), 0);
    EXPECT_EQ(pldr::grad_over(g[1], 1.0f) + pldr::grad_over(g[2], 1.0f), 2);
    EXPECT_TRUE(std::isnan(pldr::clip_value_element(g[0], 1.0f, -1.0f)));
    EXPECT_EQ(pldr::clip_value_element(g[2], 1.0f, -1.0f), -1.0f);
    EXPECT_EQ(pldr::clip_value_element(g[3], 1.0f, -1.0f), 0.5f);
}

// Every registered variant's CPU kernel (the registry's function pointers) against the shared
// element functions the GPU runs, on both sides of 0, near the floor, and large.
TEST(CudaShared, PlgaVariantsAreTheSharedElementFunctions) {
    auto z = randn<double>(4096, 3, 4.0);
    z[0] = 0.0, z[1] = -0.0, z[2] = 40.0, z[3] = -40.0, z[4] = 1e-6;
    std::vector<float> zf(z.begin(), z.end());
    for (const pldr::PositiveMap* pm : pldr::positive_maps()) {
        SCOPED_TRACE(pm->name);
        const std::string name = pm->name;
        auto value = [&](double x) {
            return name == "iswiglu" ? pldr::iswiglu_value(x) : pldr::softplus_value(x);
        };
        auto slope_d = [&](double x) {
            return name == "iswiglu" ? pldr::iswiglu_slope(x) : pldr::softplus_slope(x);
        };
        auto slope_f = [&](float x) {
            return name == "iswiglu" ? pldr::iswiglu_slope(x) : pldr::softplus_slope(x);
        };
        ASSERT_TRUE(name == "iswiglu" || name == "softplus")
            << "a new positive map: add its element functions (ops/plga_elementwise.h), its "
               "case in src/cuda/plga.cu and here";
        std::vector<double> a(z.size()), ka(z.size());
        pm->forward(z.data(), a.data(), int64_t(z.size()));
        for (size_t i = 0; i < z.size(); ++i) ka[i] = value(z[i]);
        expect_bits(ka, a, "forward");
        std::vector<double> dz = randn<double>(z.size(), 4), kdz = dz;
        pm->backward_f64(dz.data(), z.data(), a.data(), int64_t(z.size()));
        for (size_t i = 0; i < z.size(); ++i) kdz[i] = kdz[i] * slope_d(z[i]);
        expect_bits(kdz, dz, "backward f64");
        std::vector<float> af(a.begin(), a.end());
        std::vector<float> dzf = randn<float>(z.size(), 5), kdzf = dzf;
        pm->backward_f32(dzf.data(), zf.data(), af.data(), int64_t(z.size()));
        for (size_t i = 0; i < z.size(); ++i) kdzf[i] = kdzf[i] * slope_f(zf[i]);
        expect_bits(kdzf, dzf, "backward f32");
    }
    auto alm = randn<double>(4096, 6, 1.0);
    for (auto& x : alm) x = std::fabs(x) + 1e-9;
    const auto P = randn<double>(4096, 7, 0.6);
    for (const pldr::Coupling* cp : pldr::couplings()) {
        SCOPED_TRACE(cp->name);
        ASSERT_EQ(std::string(cp->name), "power")
            << "a new coupling: add its element functions (ops/plga_elementwise.h), its case in "
               "src/cuda/plga.cu and here";
        std::vector<double> ap(alm.size()), kap(alm.size());
        cp->forward(alm.data(), P.data(), ap.data(), int64_t(alm.size()));
        for (size_t i = 0; i < alm.size(); ++i) kap[i] = pldr::power_value(alm[i], P[i]);
        expect_bits(kap, ap, "forward");
        const auto dap = randn<double>(alm.size(), 8);
        std::vector<double> dalm(alm.size()), dp = randn<double>(alm.size(), 9, 0.1);
        std::vector<double> kdalm(alm.size()), kdp = dp;
        cp->backward_f64(dalm.data(), dp.data(), dap.data(), alm.data(), ap.data(), P.data(),
                         int64_t(alm.size()));
        for (size_t i = 0; i < alm.size(); ++i) {
            kdalm[i] = pldr::power_grad_alm(dap[i], alm[i], P[i]);
            kdp[i] += pldr::power_grad_p(dap[i], alm[i], ap[i]);
        }
        expect_bits(kdalm, dalm, "backward dA_LM");
        expect_bits(kdp, dp, "backward dP");
    }
}

// bf16 storage: the kernels widen by the type's conversion, which must be the CPU's (the upper
// 16 bits of a float32), and the CPU's rounding must give the bits back.
TEST(CudaShared, Bf16WideningIsExactAndRoundTrips) {
    const auto x = randn<float>(1000, 12, 10.0);
    std::vector<uint16_t> bits(x.size());
    pldr::bf16::round_to_bf16(x.data(), int64_t(x.size()), bits.data());
    std::vector<float> wide(x.size());
    for (size_t i = 0; i < x.size(); ++i) wide[i] = float(pldr::cuda::bf16{bits[i]});
    std::vector<uint16_t> again(x.size());
    pldr::bf16::round_to_bf16(wide.data(), int64_t(x.size()), again.data());
    EXPECT_EQ(again, bits);
    for (size_t i = 0; i < x.size(); ++i) {
        uint32_t u;
        std::memcpy(&u, &wide[i], 4);
        ASSERT_EQ(u, uint32_t(bits[i]) << 16);
        ASSERT_LE(std::fabs(wide[i] - x[i]), std::ldexp(std::fabs(x[i]), -8));
    }
    EXPECT_EQ(float(pldr::cuda::bf16{0x3f80}), 1.0f);
    EXPECT_EQ(float(pldr::cuda::bf16{0xc000}), -2.0f);
}

}  // namespace
