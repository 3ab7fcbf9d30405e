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

}  // namespace
