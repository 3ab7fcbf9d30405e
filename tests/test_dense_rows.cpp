// The float32 rows kernel of decode and batched decode (src/ops/dense_rows.cpp): every row of a
// batch gets the bits of the same row computed alone (so batched generation equals one at a
// time), across the AVX2 path (fewer than 4 rows) and the AVX-512 one (4 and more), and each
// output is the float64 dot product within the float32 summation bound.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/rng.h"
#include "ops/linear.h"

using namespace pldr;

TEST(DenseRows, EveryBatchSizeGivesTheBitsOfOneRowAndTheFloat64Sum) {
    Rng rng(5);
    int checked = 0;
    for (int64_t I : {5, 16, 37, 768, 771})
        for (int64_t O : {1, 3, 17, 64}) {
            std::vector<float> W(size_t(O * I)), x(size_t(kDenseRows * I)),
                b(static_cast<size_t>(O));
            for (auto& v : W) v = float(rng.normal());
            for (auto& v : x) v = float(rng.normal());
            for (auto& v : b) v = float(rng.normal());
            for (int64_t N : {1, 2, 3, 4, 5, 8, 13, 16}) {
                std::vector<float> y(size_t(N * O), NAN), y1(size_t(O), NAN);
                if (!dense_rows_forward(y.data(), x.data(), W.data(), b.data(), N, I, O))
                    GTEST_SKIP() << "no AVX2 on this CPU (or PLDR_KERNELS=scalar): BLAS path";
                for (int64_t n = 0; n < N; ++n) {
                    ASSERT_TRUE(dense_rows_forward(y1.data(), x.data() + n * I, W.data(), b.data(),
                                                   1, I, O));
                    ASSERT_EQ(std::memcmp(y1.data(), y.data() + n * O, size_t(O) * 4), 0)
                        << "I=" << I << " O=" << O << " N=" << N << " row " << n;
                    for (int64_t o = 0; o < O; ++o) {
                        double ref = b[size_t(o)], mag = std::fabs(ref);
                        for (int64_t i = 0; i < I; ++i) {
                            const double t = double(W[size_t(o * I + i)]) * x[size_t(n * I + i)];
                            ref += t;
                            mag += std::fabs(t);
                        }
                        ASSERT_LE(std::fabs(y[size_t(n * O + o)] - ref),
                                  double(I + 2) * 0x1p-24 * mag)
                            << "I=" << I << " O=" << O << " N=" << N;
                    }
                    ++checked;
                }
            }
        }
    EXPECT_EQ(checked, 5 * 4 * (1 + 2 + 3 + 4 + 5 + 8 + 13 + 16));
    // Outside 1..kDenseRows it declines (the caller takes the GEMM).
    std::vector<float> y(1);
    EXPECT_FALSE(dense_rows_forward(y.data(), y.data(), y.data(), nullptr, kDenseRows + 1, 1, 1));
}
