// core/vmath.h: the vectorised SwiGLU passes give each element the same bits wherever it sits in
// the range they are handed (a prompt's rows split over the threads at any row, and one token's
// F elements in a decode step, see the same exp as the middle of a long range).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/vmath.h"

namespace {

std::vector<float> normal_values(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> g(0.0f, 3.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = g(rng);
    return v;
}

TEST(Vmath, SiluMulIsTheSameWhereverTheRangeIsCut) {
    const int64_t n = 3000;  // several of the passes' 512-element chunks, and a ragged end
    const std::vector<float> x = normal_values(n, 1), g = normal_values(n, 2),
                             dy = normal_values(n, 3);
    std::vector<float> whole(n), d1(n), d2(n);
    pldr::vmath::silu_mul(x.data(), g.data(), whole.data(), n);
    pldr::vmath::silu_mul_backward(dy.data(), x.data(), g.data(), d1.data(), d2.data(), n);
    // Cuts every 37 elements, most of them off a lane boundary: each element's bits as in the
    // whole pass (a tail of m % 16 elements through std::exp differed from the vector exp in the
    // last bit for a share of the inputs).
    for (int64_t cut = 1; cut < n; cut += 37) {
        std::vector<float> parts(n), p1(n), p2(n);
        for (auto [a, b] : {std::pair<int64_t, int64_t>{0, cut}, {cut, n}}) {
            pldr::vmath::silu_mul(x.data() + a, g.data() + a, parts.data() + a, b - a);
            pldr::vmath::silu_mul_backward(dy.data() + a, x.data() + a, g.data() + a, p1.data() + a,
                                           p2.data() + a, b - a);
        }
        EXPECT_EQ(std::memcmp(parts.data(), whole.data(), n * 4), 0) << "cut " << cut;
        EXPECT_EQ(std::memcmp(p1.data(), d1.data(), n * 4), 0) << "cut " << cut;
        EXPECT_EQ(std::memcmp(p2.data(), d2.data(), n * 4), 0) << "cut " << cut;
    }
    // And the values: silu(x)·g within a few float32 ulps of the float64 formula.
    for (int64_t i = 0; i < n; ++i) {
        const double want = double(x[i]) / (1.0 + std::exp(-double(x[i]))) * g[i];
        EXPECT_NEAR(whole[i], want, 4e-7 * std::abs(want) + 1e-30) << i;
    }
}

// The backward's outputs may be its inputs (glu_backward_in_place: dh1 = h1 and dh2 = h2; the
// other GLU backward: dh1 = dy): the bits of separate outputs. A loop that wrote dh2 before it
// read h2 would give dy·silu(h1)·silu'(h1)·… for dh1 where dh2 = h2.
TEST(Vmath, SiluMulBackwardInPlaceGivesTheBitsOfSeparateOutputs) {
    const int64_t n = 1500;
    const std::vector<float> x = normal_values(n, 4), g = normal_values(n, 5),
                             dy = normal_values(n, 6);
    std::vector<float> d1(n), d2(n);
    pldr::vmath::silu_mul_backward(dy.data(), x.data(), g.data(), d1.data(), d2.data(), n);
    std::vector<float> h1 = x, h2 = g;  // dh1 → h1, dh2 → h2
    pldr::vmath::silu_mul_backward(dy.data(), h1.data(), h2.data(), h1.data(), h2.data(), n);
    EXPECT_EQ(std::memcmp(h1.data(), d1.data(), n * 4), 0);
    EXPECT_EQ(std::memcmp(h2.data(), d2.data(), n * 4), 0);
    std::vector<float> dg = dy, o2(n);  // dh1 → dy
    pldr::vmath::silu_mul_backward(dg.data(), x.data(), g.data(), dg.data(), o2.data(), n);
    EXPECT_EQ(std::memcmp(dg.data(), d1.data(), n * 4), 0);
    EXPECT_EQ(std::memcmp(o2.data(), d2.data(), n * 4), 0);
    // And the values against float64: dh2 = dy·silu(x), dh1 = dy·g·silu'(x).
    for (int64_t i = 0; i < n; ++i) {
        const double s = 1.0 / (1.0 + std::exp(-double(x[i])));
        const double w2 = double(dy[i]) * double(x[i]) * s;
        const double w1 = double(dy[i]) * double(g[i]) * s * (1.0 + double(x[i]) * (1.0 - s));
        EXPECT_NEAR(d2[i], w2, 1e-6 * std::abs(w2) + 1e-30) << i;
        // 1 + x·(1 − s) cancels near x = −1.28: the bound scales with its terms, not its value
        const double scale =
            std::abs(double(dy[i]) * double(g[i]) * s) * (1.0 + std::abs(double(x[i])) * (1.0 - s));
        EXPECT_NEAR(d1[i], w1, 1e-6 * scale + 1e-30) << i;
    }
}

}  // namespace
