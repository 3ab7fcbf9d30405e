// The float32 rows kernel of decode and batched decode (src/ops/dense_rows.cpp): every row of a
// batch gets the bits of the same row computed alone (so batched generation equals one at a
// time), across the AVX2 path (fewer than 4 rows) and the AVX-512 one (4 and more), and each
// output is the float64 dot product within the float32 summation bound. Weights packed as bf16
// (a job's Wb) give the bits of their float32 widening.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/rng.h"
#include "model/packed.h"
#include "ops/linear.h"
#include "ops/qlinear.h"

using namespace pldr;

TEST(DenseRows, EveryBatchSizeGivesTheBitsOfOneRowAndTheFloat64Sum) {
    Rng rng(5);
    int checked = 0;
    for (int64_t I : {5, 16, 37, 768, 771})
        for (int64_t O : {1, 3, 17, 64}) {
            std::vector<float> W(size_t(O * I)), x(size_t(kDenseRows * I)),
                b(static_cast<size_t>(O));
            // The weights are bf16 values, so that the bf16 job below multiplies the same ones.
            std::vector<uint16_t> Wb(W.size());
            for (size_t k = 0; k < W.size(); ++k) {
                Wb[k] = qlinear::bf16_round(float(rng.normal()));
                W[k] = qlinear::bf16_value(Wb[k]);
            }
            for (auto& v : x) v = float(rng.normal());
            for (auto& v : b) v = float(rng.normal());
            for (int64_t N : {1, 2, 3, 4, 5, 8, 13, 16}) {
                std::vector<float> y(size_t(N * O), NAN), y1(size_t(O), NAN), yb(y.size(), NAN);
                if (!dense_rows_forward(y.data(), x.data(), W.data(), b.data(), N, I, O))
                    GTEST_SKIP() << "no AVX2 on this CPU (or PLDR_KERNELS=scalar): BLAS path";
                const DenseRowsJob bf16_job{yb.data(), nullptr, b.data(), O, Wb.data()};
                ASSERT_TRUE(dense_rows_forward(&bf16_job, 1, x.data(), N, I));
                ASSERT_EQ(std::memcmp(yb.data(), y.data(), y.size() * 4), 0)
                    << "bf16 I=" << I << " O=" << O << " N=" << N;
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

// Several products of the same rows in one parallel region (q, k, v; the FFN's two inputs): the
// bits of one call each, with ragged row counts, a missing bias, sizes on both sides of the
// parallel threshold and every batch size; through linear_forward_same_input too, which falls
// back to one linear_forward each for packed weights.
TEST(DenseRows, JobsOfTheSameInputGiveTheBitsOfOneCallEach) {
    Rng rng(8);
    for (int64_t I : {37, 256}) {
        const int64_t Os[3] = {300, 17, 259};  // 300·256 weights: past kDenseRowsParallelWeights
        std::vector<std::vector<float>> W(3), b(3);
        for (int j = 0; j < 3; ++j) {
            W[size_t(j)].resize(size_t(Os[j] * I));
            b[size_t(j)].resize(size_t(Os[j]));
            for (auto& v : W[size_t(j)]) v = float(rng.normal());
            for (auto& v : b[size_t(j)]) v = float(rng.normal());
        }
        std::vector<float> x(size_t(kDenseRows * I));
        for (auto& v : x) v = float(rng.normal());
        for (int64_t N : {1, 3, 4, 8, 13, 16}) {
            std::vector<std::vector<float>> y(3), y1(3);
            DenseRowsJob jobs[3];
            for (int j = 0; j < 3; ++j) {
                y[size_t(j)].assign(size_t(N * Os[j]), NAN);
                y1[size_t(j)].assign(size_t(N * Os[j]), NAN);
                const float* bias = j == 1 ? nullptr : b[size_t(j)].data();
                jobs[j] = DenseRowsJob{y[size_t(j)].data(), W[size_t(j)].data(), bias, Os[j]};
                if (!dense_rows_forward(y1[size_t(j)].data(), x.data(), W[size_t(j)].data(), bias,
                                        N, I, Os[j]))
                    GTEST_SKIP() << "no AVX2 on this CPU (or PLDR_KERNELS=scalar): BLAS path";
            }
            ASSERT_TRUE(dense_rows_forward(jobs, 3, x.data(), N, I));
            for (int j = 0; j < 3; ++j)
                ASSERT_EQ(
                    std::memcmp(y[size_t(j)].data(), y1[size_t(j)].data(), size_t(N * Os[j]) * 4),
                    0)
                    << "I=" << I << " N=" << N << " job " << j;
            // The same through linear_forward_same_input: dense weights, then one packed as bf16
            // (a bf16 job in the same region).
            const PackedTensor p = pack_tensor("w", W[2].data(), Os[2], I, WeightFormat::BF16);
            const LinearWeight<float> w0(W[0].data()), w1(W[1].data());
            for (bool packed : {false, true}) {
                const LinearWeight<float> w2 = packed ? p.view() : LinearWeight<float>(W[2].data());
                std::vector<std::vector<float>> z(3);
                for (int j = 0; j < 3; ++j) z[size_t(j)].assign(size_t(N * Os[j]), NAN);
                const LinearOut<float> outs[3] = {{z[0].data(), w0, b[0].data(), Os[0]},
                                                  {z[1].data(), w1, nullptr, Os[1]},
                                                  {z[2].data(), w2, b[2].data(), Os[2]}};
                linear_forward_same_input(x.data(), N, I, outs, 3);
                std::vector<float> ref(size_t(N * Os[2]), NAN);
                linear_forward(ref.data(), x.data(), w2, b[2].data(), N, I, Os[2]);
                for (int j = 0; j < 2; ++j)
                    ASSERT_EQ(std::memcmp(z[size_t(j)].data(), y1[size_t(j)].data(),
                                          size_t(N * Os[j]) * 4),
                              0)
                        << "I=" << I << " N=" << N << " job " << j << " packed " << packed;
                ASSERT_EQ(std::memcmp(z[2].data(), ref.data(), ref.size() * 4), 0)
                    << "I=" << I << " N=" << N << " packed " << packed;
            }
        }
    }
}
