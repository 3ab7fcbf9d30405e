// The cuBLASLt products (src/cuda/gemm.h) against the CPU's (core/blas.h) and a float64 sum of
// the same terms: every transposition, padded leading dimensions, alpha, beta, the bias, and the
// numeric cases' product shapes (projections, FFN, head) plus one large enough for the tensor
// cores' tiles. Bounds: float64 within 1e-12 of Σ|terms| per element; float32 (TF32 off) within
// (K + 4)·2^-24·Σ|terms| (the float32 summation bound, as tests/test_core_blas.cpp); bf16 inputs
// (rounded by the test, so the float64 reference multiplies the same values) with float32
// accumulation within the same bound.
#include <gtest/gtest.h>

#include <cmath>

#include "core/blas.h"
#include "core/rng.h"
#include "cuda/gemm.h"
#include "gpu_util.h"
#include "numeric_cases.h"

namespace {

using gpu::bf16;
using gpu::Buf;

struct Dims {
    int64_t M, N, K;
};

// C = alpha·op(A)·op(B) + beta·C0 + bias in float64, and Σ|terms| per element.
void reference(bool ta, bool tb, const Dims& d, double alpha, const std::vector<double>& A,
               int64_t lda, const std::vector<double>& B, int64_t ldb, double beta,
               const std::vector<double>& C0, int64_t ldc, const std::vector<double>* bias,
               std::vector<double>& C, std::vector<double>& mag) {
    C = C0;
    mag.assign(C0.size(), 0.0);
    for (int64_t i = 0; i < d.M; ++i)
        for (int64_t j = 0; j < d.N; ++j) {
            double s = 0, m = 0;
            for (int64_t k = 0; k < d.K; ++k) {
                const double a = ta ? A[size_t(k * lda + i)] : A[size_t(i * lda + k)];
                const double b = tb ? B[size_t(j * ldb + k)] : B[size_t(k * ldb + j)];
                s += a * b;
                m += std::fabs(a * b);
            }
            const size_t o = size_t(i * ldc + j);
            const double bb = bias ? (*bias)[size_t(j)] : 0.0;
            C[o] = alpha * s + (beta == 0 ? 0.0 : beta * C0[o]) + bb;
            mag[o] = std::fabs(alpha) * m + std::fabs(beta * C0[o]) + std::fabs(bb);
        }
}

std::vector<double> rand_bf16_values(size_t n, uint64_t seed) {
    pldr::Rng r(seed);
    std::vector<float> v(n);
    for (auto& x : v) x = float(r.normal());
    return gpu::cast<double>(gpu::widen(gpu::to_bf16(v)));
}

void check_product(pldr::cuda::Gemm& g, bool ta, bool tb, const Dims& d, bool bias, double beta,
                   int64_t pad, uint64_t seed) {
    SCOPED_TRACE(::testing::Message()
                 << "ta " << ta << " tb " << tb << " M " << d.M << " N " << d.N << " K " << d.K
                 << " bias " << bias << " beta " << beta << " pad " << pad);
    const int64_t lda = (ta ? d.M : d.K) + pad, ldb = (tb ? d.K : d.N) + pad, ldc = d.N + pad;
    const auto A = rand_bf16_values(size_t((ta ? d.K : d.M) * lda), seed);
    const auto B = rand_bf16_values(size_t((tb ? d.N : d.K) * ldb), seed + 1);
    const auto C0 = rand_bf16_values(size_t(d.M * ldc), seed + 2);
    const auto bv = rand_bf16_values(size_t(d.N), seed + 3);
    const double alpha = 0.75;
    std::vector<double> ref, mag;
    reference(ta, tb, d, alpha, A, lda, B, ldb, beta, C0, ldc, bias ? &bv : nullptr, ref, mag);
    auto check = [&](const auto& got, double unit, const char* what) {
        int bad = 0;
        for (int64_t i = 0; i < d.M; ++i)
            for (int64_t j = 0; j < d.N; ++j) {
                const size_t o = size_t(i * ldc + j);
                const double bound = unit * mag[o] + 1e-300;
                if (!(std::fabs(double(got[o]) - ref[o]) <= bound) && bad++ < 3)
                    ADD_FAILURE() << what << " C[" << i << "," << j << "] = " << got[o]
                                  << ", reference " << ref[o] << ", bound " << bound;
            }
        // The padding between rows is never written.
        for (int64_t i = 0; i < d.M; ++i)
            for (int64_t j = d.N; j < ldc; ++j)
                if (double(got[size_t(i * ldc + j)]) != C0[size_t(i * ldc + j)] && bad++ < 3)
                    ADD_FAILURE() << what << ": padding written at row " << i;
    };
    {  // float64 (and the CPU's product for comparison of conventions)
        Buf<double> a(A), b(B), c(C0), bb(bv);
        g.f64(ta, tb, d.M, d.N, d.K, alpha, a.get(), lda, b.get(), ldb, beta, c.get(), ldc,
              bias ? bb.get() : nullptr);
        check(c.download(), 1e-12, "float64");
    }
    const double f32_unit = double(d.K + 4) * std::ldexp(1.0, -24);
    {
        const auto Af = gpu::cast<float>(A), Bf = gpu::cast<float>(B), Cf = gpu::cast<float>(C0);
        const auto bf = gpu::cast<float>(bv);
        Buf<float> a(Af), b(Bf), c(Cf), bb(bf);
        g.f32(ta, tb, d.M, d.N, d.K, float(alpha), a.get(), lda, b.get(), ldb, float(beta), c.get(),
              ldc, bias ? bb.get() : nullptr);
        const auto got = c.download();
        check(got, f32_unit, "float32");
        // The CPU's float32 product within the same bound: the conventions agree.
        if (!bias) {
            std::vector<float> cpu = Cf;
            pldr::gemm(ta, tb, d.M, d.N, d.K, float(alpha), Af.data(), lda, Bf.data(), ldb,
                       float(beta), cpu.data(), ldc);
            check(cpu, f32_unit, "CPU float32");
        }
        Buf<bf16> ha(gpu::to_bf16(Af)), hb(gpu::to_bf16(Bf));
        Buf<float> hc(Cf);
        g.bf16(ta, tb, d.M, d.N, d.K, float(alpha), ha.get(), lda, hb.get(), ldb, float(beta),
               hc.get(), ldc, bias ? bb.get() : nullptr);
        check(hc.download(), f32_unit, "bf16");
    }
}

TEST(CudaGemm, EveryTranspositionBiasBetaAndPadding) {
    PLDR_REQUIRE_GPU();
    pldr::cuda::Gemm g;
    uint64_t seed = 1;
    for (const bool ta : {false, true})
        for (const bool tb : {false, true})
            for (const bool bias : {false, true})
                for (const double beta : {0.0, 0.5}) {
                    check_product(g, ta, tb, {7, 13, 29}, bias, beta, 0, seed++);
                    check_product(g, ta, tb, {33, 17, 64}, bias, beta, 3, seed++);
                }
    check_product(g, false, true, {5, 6, 0}, true, 0.5, 0, seed++);  // K = 0: beta·C + bias
    // One plan per distinct shape, reused.
    const size_t plans = g.plans();
    check_product(g, false, false, {7, 13, 29}, false, 0.0, 0, seed++);
    EXPECT_EQ(g.plans(), plans);
}

// Strided batches as the model's heads use them (GemmBatch): operands D columns apart inside
// rows of H·D (stride D, ld H·D), a repeated operand (stride 0: one head's parameter for every
// sequence), contiguous blocks, every transposition; each product against its own reference,
// and nothing outside the products written.
TEST(CudaGemm, StridedBatchesAsTheHeadsUseThem) {
    PLDR_REQUIRE_GPU();
    pldr::cuda::Gemm g;
    const int64_t H = 3;
    const Dims d{5, 7, 6};
    uint64_t seed = 500;
    for (const bool ta : {false, true})
        for (const bool tb : {false, true})
            for (const bool repeat_b : {false, true})
                for (const bool interleave_c : {false, true}) {
                    SCOPED_TRACE(::testing::Message()
                                 << "ta " << ta << " tb " << tb << " repeat_b " << repeat_b
                                 << " interleave_c " << interleave_c);
                    // A interleaved: head h's op(A) columns at h·(width) in rows of H·width.
                    const int64_t a_rows = ta ? d.K : d.M, a_cols = ta ? d.M : d.K;
                    const int64_t lda = H * a_cols, stride_a = a_cols;
                    const int64_t b_rows = tb ? d.N : d.K, ldb = tb ? d.K : d.N;
                    const int64_t stride_b = repeat_b ? 0 : b_rows * ldb;
                    const int64_t ldc = interleave_c ? H * d.N : d.N;
                    const int64_t stride_c = interleave_c ? d.N : d.M * ldc;
                    const auto A = rand_bf16_values(size_t(a_rows * lda), seed++);
                    const auto B =
                        rand_bf16_values(size_t((repeat_b ? 1 : H) * b_rows * ldb), seed++);
                    const int64_t c_size = interleave_c ? d.M * ldc : H * d.M * ldc;
                    const auto C0 = rand_bf16_values(size_t(c_size), seed++);
                    const pldr::cuda::GemmBatch batch{H, stride_a, stride_b, stride_c};
                    auto check = [&](const auto& got, double unit, const char* what) {
                        std::vector<bool> written(size_t(c_size), false);
                        for (int64_t h = 0; h < H; ++h) {
                            const std::vector<double> Ah(A.begin() + h * stride_a, A.end());
                            const std::vector<double> Bh(B.begin() + h * stride_b, B.end());
                            const std::vector<double> C0h(C0.begin() + h * stride_c, C0.end());
                            std::vector<double> ref, mag;
                            reference(ta, tb, d, 1.0, Ah, lda, Bh, ldb, 0.0, C0h, ldc, nullptr, ref,
                                      mag);
                            for (int64_t i = 0; i < d.M; ++i)
                                for (int64_t j = 0; j < d.N; ++j) {
                                    const size_t o = size_t(i * ldc + j);
                                    written[size_t(h * stride_c) + o] = true;
                                    const double v = double(got[size_t(h * stride_c) + o]);
                                    EXPECT_LE(std::fabs(v - ref[o]), unit * mag[o] + 1e-300)
                                        << what << " head " << h << " C[" << i << "," << j << "]";
                                }
                        }
                        for (size_t o = 0; o < written.size(); ++o)
                            if (!written[o]) {
                                EXPECT_EQ(double(got[o]), C0[o]) << what << " at " << o;
                            }
                    };
                    {
                        Buf<double> a(A), b(B), c(C0);
                        g.f64(ta, tb, d.M, d.N, d.K, 1.0, a.get(), lda, b.get(), ldb, 0.0, c.get(),
                              ldc, nullptr, batch);
                        check(c.download(), 1e-12, "float64");
                    }
                    {
                        Buf<float> a(gpu::cast<float>(A)), b(gpu::cast<float>(B)),
                            c(gpu::cast<float>(C0));
                        g.f32(ta, tb, d.M, d.N, d.K, 1.0f, a.get(), lda, b.get(), ldb, 0.0f,
                              c.get(), ldc, nullptr, batch);
                        check(c.download(), double(d.K + 4) * std::ldexp(1.0, -24), "float32");
                    }
                }
}

TEST(CudaGemm, TheNumericCasesProductsAndALargeOne) {
    PLDR_REQUIRE_GPU();
    pldr::cuda::Gemm g;
    uint64_t seed = 100;
    for (const numeric::Case& c : numeric::cases()) {
        if (c.g != pldr::GType::LEARNED || c.dag) continue;  // the same shapes again
        const numeric::Shape& s = c.shape;
        const int64_t rows = s.B * s.S, d = s.H * s.dk, F = 2 * d - 3;
        check_product(g, false, true, {rows, d, d}, false, 0.0, 0, seed++);    // q, k, v, o
        check_product(g, false, true, {rows, F, d}, true, 0.0, 0, seed++);     // FFN up, bias
        check_product(g, false, false, {rows, d, F}, false, 1.0, 0, seed++);   // dx += dy·W
        check_product(g, true, false, {F, d, rows}, false, 1.0, 0, seed++);    // dW += dyᵀ·x
        check_product(g, false, true, {rows, s.V, d}, false, 0.0, 0, seed++);  // the head
        check_product(g, false, false, {s.dk, s.dk, s.dk}, false, 0.0, 0, seed++);  // W·A
    }
    check_product(g, false, true, {256, 384, 512}, true, 0.0, 0, seed++);
}

TEST(CudaGemm, Tf32IsOffUnlessAsked) {
    PLDR_REQUIRE_GPU();
    pldr::cuda::Gemm g;
    EXPECT_FALSE(g.tf32());
    // 1 + 2^-20 times 1: float32 keeps it, TF32 (10 mantissa bits) rounds it to 1.
    const int64_t K = 1;
    Buf<float> a(std::vector<float>{1.0f + std::ldexp(1.0f, -20)}), b(std::vector<float>{1.0f}),
        c(std::vector<float>{0.0f});
    g.f32(false, false, 1, 1, K, 1.0f, a.get(), 1, b.get(), 1, 0.0f, c.get(), 1);
    EXPECT_EQ(c.download()[0], 1.0f + std::ldexp(1.0f, -20));
}

}  // namespace
