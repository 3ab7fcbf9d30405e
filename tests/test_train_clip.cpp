// Gradient clipping and the step's read of the gradients (src/train/clip.h): clip by value
// and by global norm as torch does them, the block-ordered sum of squares, grad_pass and
// all_finite.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "train/clip.h"

namespace {

TEST(Clip, ByValueCountsBeforeClamping) {
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> g = {0.5f, 1.0f, -1.0f, 1.0000001f, -3.0f,
                            2.0f, inf,  -inf,  0.0f,       std::nanf("")};
    EXPECT_EQ(pldr::clip_by_value(g.data(), int64_t(g.size()), 1.0f), 5);
    const std::vector<float> want = {0.5f, 1.0f, -1.0f, 1.0f, -1.0f, 1.0f, 1.0f, -1.0f, 0.0f};
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(g[i], want[i]) << i;
    EXPECT_TRUE(std::isnan(g[9]));
    // Clipping again changes nothing.
    EXPECT_EQ(pldr::clip_by_value(g.data(), int64_t(g.size()), 1.0f), 0);
    std::vector<double> d = {0.3, -0.31, 0.29};
    EXPECT_EQ(pldr::clip_by_value(d.data(), 3, 0.3), 1);
    EXPECT_EQ(d[1], -0.3);
    EXPECT_THROW(pldr::clip_by_value(d.data(), 3, -1.0), pldr::Error);
    EXPECT_THROW(pldr::clip_by_value(d.data(), 3, std::nan("")), pldr::Error);
    // A large buffer (parallel path) counts the same.
    std::vector<double> big(300001);
    for (size_t i = 0; i < big.size(); ++i) big[i] = 3.0 * std::sin(double(i));
    int64_t want_count = 0;
    for (double x : big) want_count += std::abs(x) > 1.0;
    EXPECT_EQ(pldr::clip_by_value(big.data(), int64_t(big.size()), 1.0), want_count);
    for (double x : big) EXPECT_LE(std::abs(x), 1.0);
}

TEST(Clip, ByGlobalNorm) {
    // norm = 5, factor = 1/(5 + 1e-6).
    std::vector<double> g = {3.0, 0.0, -4.0};
    EXPECT_EQ(pldr::clip_by_global_norm(g.data(), 3, 1.0), 5.0);
    const double c = 1.0 / (5.0 + 1e-6);
    EXPECT_EQ(g[0], 3.0 * c);
    EXPECT_EQ(g[1], 0.0);
    EXPECT_EQ(g[2], -4.0 * c);
    EXPECT_NEAR(std::hypot(g[0], g[2]), 1.0, 1e-6);
    // Float: factor rounded once to float.
    std::vector<float> f = {1.0f, 2.0f, 2.0f};  // norm 3
    EXPECT_EQ(pldr::clip_by_global_norm(f.data(), 3, 0.5), 3.0);
    const float cf = float(0.5 / (3.0 + 1e-6));
    EXPECT_EQ(f[0], 1.0f * cf);
    EXPECT_EQ(f[1], 2.0f * cf);
    // Under the limit: untouched, bit for bit (factor ≥ 1).
    std::vector<double> h = {0.1, -0.2, 0.3};
    const auto h0 = h;
    const double nh = pldr::clip_by_global_norm(h.data(), 3, 1.0);
    EXPECT_NEAR(nh, std::sqrt(0.14), 1e-16);
    EXPECT_EQ(h, h0);
    // Exactly at the limit: factor = 1/(1 + 1e-6) < 1, so it scales (as torch does).
    std::vector<double> e = {1.0};
    pldr::clip_by_global_norm(e.data(), 1, 1.0);
    EXPECT_LT(e[0], 1.0);
    // Non-finite gradients: the norm reports it and the buffer is left alone.
    std::vector<double> bad = {1.0, std::numeric_limits<double>::infinity()};
    EXPECT_TRUE(std::isinf(pldr::clip_by_global_norm(bad.data(), 2, 1.0)));
    EXPECT_EQ(bad[0], 1.0);
    EXPECT_THROW(pldr::clip_by_global_norm(h.data(), 3, 0.0), pldr::Error);
    EXPECT_THROW(pldr::clip_by_global_norm(h.data(), 3, std::nan("")), pldr::Error);
}

// The gradient norm's sum of squares: the blocks fix the summation order, so any thread count
// gives the same bits, and the value is the exact sum to double rounding.
TEST(Clip, SumOfSquaresIsTheSameOnAnyThreadCount) {
    std::vector<float> g(1000003);
    for (size_t i = 0; i < g.size(); ++i) g[i] = float(std::sin(double(i) * 0.37) * 1e-2);
    long double exact = 0;
    for (float x : g) exact += (long double)x * (long double)x;
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const double one = pldr::sum_of_squares(g.data(), int64_t(g.size()));
    omp_set_num_threads(2);
    const double two = pldr::sum_of_squares(g.data(), int64_t(g.size()));
    omp_set_num_threads(threads);
    EXPECT_EQ(one, two);
    EXPECT_NEAR(one, double(exact), 1e-12 * double(exact));  // ~31 blocks: a few ulps
    // A short buffer (up to 16 elements) is the plain sequential sum, bit for bit.
    const std::vector<double> h = {0.1, -0.2, 0.3};
    EXPECT_EQ(pldr::sum_of_squares(h.data(), 3), 0.1 * 0.1 + 0.2 * 0.2 + 0.3 * 0.3);
    EXPECT_EQ(pldr::sum_of_squares(h.data(), 0), 0.0);
    EXPECT_THROW(pldr::sum_of_squares(h.data(), -1), pldr::Error);
}

// The step's one read of the gradients: grad_pass gives sum_of_squares' bits and clip_by_value's
// count (NaN not counted, ±limit itself not clipped) on every thread count, blocks and tails
// included; a finite sum means finite elements, while a non-finite one can come from finite
// float64 elements (their squares overflow), which the step tells apart with all_finite.
TEST(Clip, GradPassIsTheNormAndTheClipCountInOneRead) {
    std::vector<float> g(200003);
    for (size_t i = 0; i < g.size(); ++i) g[i] = float(std::sin(double(i) * 0.91) * 1.3);
    g[17] = 1.0f;
    g[18] = -1.0f;
    g[70001] = std::nanf("");
    std::vector<float> finite = g;
    finite[70001] = 0.5f;
    const int threads = omp_get_max_threads();
    for (int t : {1, 2}) {
        omp_set_num_threads(t);
        const pldr::GradPass p = pldr::grad_pass(finite.data(), int64_t(finite.size()), 1.0f);
        EXPECT_EQ(p.sum_sq, pldr::sum_of_squares(finite.data(), int64_t(finite.size())));
        std::vector<float> c = finite;
        EXPECT_EQ(p.over, pldr::clip_by_value(c.data(), int64_t(c.size()), 1.0f));
        int64_t want = 0;
        for (float x : finite) want += std::fabs(x) > 1.0f;
        EXPECT_EQ(p.over, want);
        const pldr::GradPass q = pldr::grad_pass(g.data(), int64_t(g.size()), 1.0f);
        EXPECT_TRUE(std::isnan(q.sum_sq));
        EXPECT_EQ(q.over, want - (std::fabs(finite[70001]) > 1.0f));
        EXPECT_EQ(pldr::grad_pass(finite.data(), int64_t(finite.size()),
                                  std::numeric_limits<float>::infinity())
                      .over,
                  0);
    }
    omp_set_num_threads(threads);
    const std::vector<double> huge = {1e200, -3.0};
    const pldr::GradPass h = pldr::grad_pass(huge.data(), 2, 2.0);
    EXPECT_TRUE(std::isinf(h.sum_sq));
    EXPECT_EQ(h.over, 2);
    EXPECT_TRUE(pldr::all_finite(huge.data(), 2));
    EXPECT_THROW(pldr::grad_pass(huge.data(), 2, -1.0), pldr::Error);
}

TEST(Clip, AllFinite) {
    std::vector<float> g(100000, 0.5f);
    EXPECT_TRUE(pldr::all_finite(g.data(), int64_t(g.size())));
    g[77777] = std::numeric_limits<float>::infinity();
    EXPECT_FALSE(pldr::all_finite(g.data(), int64_t(g.size())));
    g[77777] = -std::numeric_limits<float>::infinity();
    EXPECT_FALSE(pldr::all_finite(g.data(), int64_t(g.size())));
    g[77777] = std::nanf("");
    EXPECT_FALSE(pldr::all_finite(g.data(), int64_t(g.size())));
    g[77777] = std::numeric_limits<float>::max();
    EXPECT_TRUE(pldr::all_finite(g.data(), int64_t(g.size())));
    std::vector<double> d = {1.0, -std::numeric_limits<double>::max(), 0.0};
    EXPECT_TRUE(pldr::all_finite(d.data(), 3));
    d[2] = std::nan("");
    EXPECT_FALSE(pldr::all_finite(d.data(), 3));
    EXPECT_TRUE(pldr::all_finite<double>(nullptr, 0));
}

}  // namespace
