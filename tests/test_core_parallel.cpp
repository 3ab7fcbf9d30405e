// core/parallel.h: every iteration runs once; a loop below its threshold enters no OpenMP
// region (the reason the helpers exist: an `omp parallel for if (false)` still builds a team);
// inside an active region the loop runs inline. And the bias passes that split over the threads
// give the bits of the serial loop.
#include <gtest/gtest.h>
#include <omp.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "core/parallel.h"
#include "core/zero.h"
#include "ops/linear.h"
#include "threads_util.h"

namespace {

using pldr::parallel_for;
using pldr::parallel_for_2d;
using pldr::parallel_for_balanced;
using pldr::parallel_for_dynamic;

TEST(ParallelFor, BelowTheThresholdRunsInOrderWithoutARegion) {
    std::vector<int64_t> seen;
    std::vector<int> levels;
    parallel_for(7, false, [&](int64_t i) {
        seen.push_back(i);
        levels.push_back(omp_get_level());
    });
    EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6}));
    for (int l : levels) EXPECT_EQ(l, 0) << "a region was entered for a serial loop";
    parallel_for_dynamic(3, false, [&](int64_t) { EXPECT_EQ(omp_get_level(), 0); });
}

// ctest runs this binary with OMP_NUM_THREADS=1; these tests ask for 2 threads themselves.
struct TwoThreads : pldr_test::ScopedThreads {
    TwoThreads() : ScopedThreads(2) {}
};

TEST(ParallelFor, AboveTheThresholdEveryIterationOnce) {
    const TwoThreads two;
    const int64_t n = 1001;
    std::vector<int> count(static_cast<size_t>(n), 0);
    std::vector<int> level(static_cast<size_t>(n), -1);
    parallel_for(n, true, [&](int64_t i) {
        ++count[size_t(i)];
        level[size_t(i)] = omp_get_level();
    });
    for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(count[size_t(i)], 1) << i;
        EXPECT_EQ(level[size_t(i)], 1) << i;
    }
    std::vector<int> dyn(static_cast<size_t>(n), 0);
    parallel_for_dynamic(n, true, [&](int64_t i) { ++dyn[size_t(i)]; });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(dyn[size_t(i)], 1) << i;
}

// parallel_for_balanced: every iteration once; each thread starts at the front of its own half
// and goes up; a thread whose half is slow (here every iteration of thread 0's half sleeps) has
// the end of it taken by the other thread, from the back.
TEST(ParallelFor, BalancedRunsEveryIterationOnceAndTheFastThreadHelps) {
    const TwoThreads two;
    const int64_t n = 200;
    std::vector<int> count(static_cast<size_t>(n), 0), who(static_cast<size_t>(n), -1);
    std::vector<std::vector<int64_t>> order(2);
    parallel_for_balanced(n, true, [&](int64_t i) {
        const int t = omp_get_thread_num();
        ++count[size_t(i)];
        who[size_t(i)] = t;
        order[size_t(t)].push_back(i);
        if (i < n / 2) std::this_thread::sleep_for(std::chrono::microseconds(500));
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(count[size_t(i)], 1) << i;
    ASSERT_EQ(order[0].size() + order[1].size(), size_t(n));
    // Thread 1 ran its own half in order, then took from the end of thread 0's.
    ASSERT_GT(order[1].size(), size_t(n / 2 + 20));
    for (int64_t k = 0; k < n / 2; ++k) EXPECT_EQ(order[1][size_t(k)], n / 2 + k);
    for (size_t k = size_t(n / 2); k < order[1].size(); ++k)
        EXPECT_EQ(order[1][k], n / 2 - 1 - int64_t(k - size_t(n / 2)));
    for (size_t k = 0; k < order[0].size(); ++k) EXPECT_EQ(order[0][k], int64_t(k));
    // Without a team: in order on this thread.
    std::vector<int64_t> seq;
    parallel_for_balanced(5, false, [&](int64_t i) { seq.push_back(i); });
    EXPECT_EQ(seq, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(ParallelFor, TwoDimensionsVisitEveryPairOnce) {
    const TwoThreads two;
    for (bool par : {false, true}) {
        const int64_t n0 = 5, n1 = 7;
        std::vector<int> hit(static_cast<size_t>(n0 * n1), 0);
        parallel_for_2d(n0, n1, par, [&](int64_t i, int64_t j) {
            ASSERT_TRUE(i >= 0 && i < n0 && j >= 0 && j < n1);
            ++hit[size_t(i * n1 + j)];
        });
        for (int h : hit) EXPECT_EQ(h, 1) << "parallel " << par;
        int calls = 0;
        parallel_for_2d(n0, 0, par, [&](int64_t, int64_t) { ++calls; });
        EXPECT_EQ(calls, 0);
    }
}

// parallel_for_2d balances as parallel_for_balanced (the loops over a batch's heads): with every
// pair of thread 0's half slow, thread 1 runs its own half and part of thread 0's. A static split
// leaves it exactly its half.
TEST(ParallelFor, TwoDimensionsTheFastThreadHelps) {
    const TwoThreads two;
    const int64_t n0 = 10, n1 = 20, n = n0 * n1;
    std::vector<int> who(static_cast<size_t>(n), -1);
    parallel_for_2d(n0, n1, true, [&](int64_t i, int64_t j) {
        const int64_t k = i * n1 + j;
        who[size_t(k)] = omp_get_thread_num();
        if (k < n / 2) std::this_thread::sleep_for(std::chrono::microseconds(500));
    });
    int64_t by1 = 0;
    for (int t : who) {
        ASSERT_TRUE(t == 0 || t == 1);
        by1 += t == 1;
    }
    EXPECT_GT(by1, n / 2 + 20) << "the fast thread took none of the slow one's pairs";
}

// parallel_rows: thread t of T gets [n·t/T, n·(t+1)/T) (matmul_panels' split, which the callers
// rely on for the bits of their products), every row once; one range, inline, when not parallel.
TEST(ParallelFor, RowsSplitAsTheProductsDo) {
    pldr_test::ScopedThreads two(2);
    for (const int64_t n : {int64_t(1), int64_t(2), int64_t(79), int64_t(128)}) {
        std::vector<std::pair<int64_t, int64_t>> got(2, {-1, -1});
        std::vector<int> levels(2, -1);
        int team = 0;
        pldr::parallel_rows(n, true, [&](int64_t r0, int64_t r1) {
            const int t = omp_get_thread_num();
            got[size_t(t)] = {r0, r1};
            levels[size_t(t)] = omp_get_level();
#pragma omp atomic
            ++team;
        });
        if (omp_get_level() == 0 && team == 1 && n > 1) GTEST_SKIP() << "a team of one";
        if (n == 1) {  // one row: no region
            EXPECT_EQ(got[0], std::make_pair(int64_t(0), int64_t(1)));
            EXPECT_EQ(levels[0], 0);
            continue;
        }
        EXPECT_EQ(got[0], std::make_pair(int64_t(0), n / 2)) << n;
        EXPECT_EQ(got[1], std::make_pair(n / 2, n)) << n;
        EXPECT_EQ(levels, (std::vector<int>{1, 1})) << n;
    }
    std::vector<std::pair<int64_t, int64_t>> serial;
    pldr::parallel_rows(79, false, [&](int64_t r0, int64_t r1) { serial.push_back({r0, r1}); });
    EXPECT_EQ(serial, (std::vector<std::pair<int64_t, int64_t>>{{0, 79}}));
}

TEST(ParallelFor, OneThreadEntersNoRegion) {
    int level = -1;
    const int before = omp_get_max_threads();
    omp_set_num_threads(1);
    parallel_for(100, true, [&](int64_t) { level = omp_get_level(); });
    omp_set_num_threads(before);
    EXPECT_EQ(level, 0);
}

TEST(ParallelFor, InsideARegionRunsInlineOnTheCallingThread) {
    std::vector<int> bad(2, 0);
    int team = 0;
#pragma omp parallel num_threads(2)
    {
        const int me = omp_get_thread_num();
#pragma omp single
        team = omp_get_num_threads();
        parallel_for(50, true, [&](int64_t) {
            if (omp_get_thread_num() != me || omp_get_level() != 1) bad[size_t(me)] = 1;
        });
    }
    if (team < 2) GTEST_SKIP() << "the runtime gave a team of " << team;
    EXPECT_EQ(bad, (std::vector<int>{0, 0}));
}

// The bias passes split over the threads from kBiasParallelElems on: the bias rows and the bias
// gradient (each column summed over the rows in order) against the serial loops, bit for bit.
TEST(ParallelFor, BiasPassesKeepTheBitsOfTheSerialLoop) {
    const TwoThreads two;
    const int64_t N = 300, O = 1000;  // 300K elements: split
    ASSERT_GE(N * O, pldr::kBiasParallelElems);
    std::vector<float> dout(static_cast<size_t>(N * O)), b(static_cast<size_t>(O));
    uint32_t s = 12345;
    auto next = [&] {
        s = s * 1664525u + 1013904223u;
        return float(int32_t(s >> 8) - (1 << 23)) * 1e-7f;
    };
    for (float& x : dout) x = next();
    for (float& x : b) x = next();
    std::vector<float> db(static_cast<size_t>(O)), want(static_cast<size_t>(O));
    for (int64_t o = 0; o < O; ++o) db[size_t(o)] = want[size_t(o)] = b[size_t(o)];
    for (int64_t n = 0; n < N; ++n)
        for (int64_t o = 0; o < O; ++o) want[size_t(o)] += dout[size_t(n * O + o)];
    pldr::linear_backward<float>(nullptr, nullptr, db.data(), dout.data(), nullptr, nullptr, N, 4,
                                 O);
    EXPECT_EQ(std::memcmp(db.data(), want.data(), sizeof(float) * size_t(O)), 0);

    std::vector<float> rows(static_cast<size_t>(N * O), -1.0f);
    pldr::fill_rows(rows.data(), b.data(), N, O);
    for (int64_t n = 0; n < N; ++n)
        ASSERT_EQ(std::memcmp(rows.data() + n * O, b.data(), sizeof(float) * size_t(O)), 0) << n;
}

// zero_on_team: every element of [0, n) all bits clear and nothing past n written, at the
// edges of its chunks and of the size from which the team takes it; zeros_on_team's shape.
TEST(ZeroOnTeam, ClearsExactlyTheRangeAtEveryEdge) {
    const TwoThreads two;
    const int64_t C = pldr::kZeroChunk, P = pldr::kZeroParallelElems;
    for (int64_t n : {int64_t(0), int64_t(1), C - 1, C, C + 1, P - 1, P, P + 1, P + C + 5}) {
        constexpr int64_t kGuard = 16;
        std::vector<float> buf(size_t(n + kGuard));
        std::memset(buf.data(), 0xff, buf.size() * sizeof(float));  // NaN bits
        pldr::zero_on_team(buf.data(), n);
        for (int64_t i = 0; i < n; ++i) {
            uint32_t bits;
            std::memcpy(&bits, &buf[size_t(i)], sizeof bits);
            if (bits != 0) {
                ADD_FAILURE() << "element " << i << " of n = " << n << " not cleared";
                break;
            }
        }
        for (int64_t i = n; i < n + kGuard; ++i) {
            uint32_t bits;
            std::memcpy(&bits, &buf[size_t(i)], sizeof bits);
            EXPECT_EQ(bits, 0xffffffffu) << "element " << i << " past n = " << n;
        }
    }
    const pldr::Tensor<double> t = pldr::zeros_on_team<double>({3, P / 3 + 7});
    EXPECT_EQ(t.shape, (pldr::Shape{3, P / 3 + 7}));
    for (double v : t.data) EXPECT_EQ(v, 0.0);
}

}  // namespace
