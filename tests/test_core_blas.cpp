// The float32 product's two engines (core/blas.h, core/onednn.h): which products oneDNN takes,
// each engine against float64 maths within the float32 accumulation bound (every transpose,
// padded leading dimensions, alpha and beta), the same bits on a second call, and the same bits
// when two threads run the same product at once (a server's sessions do).
//
// The oneDNN checks need a build with oneDNN (PLDR_DNNL) and skip elsewhere, saying why.
#include <gtest/gtest.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <thread>
#include <tuple>
#include <vector>

#include "core/blas.h"
#include "core/onednn.h"
#include "core/rng.h"

using namespace pldr;

namespace {

// Restores the engine a test changed.
struct EngineScope {
    SgemmEngine was = sgemm_engine();
    explicit EngineScope(SgemmEngine e) { set_sgemm_engine(e); }
    ~EngineScope() { set_sgemm_engine(was); }
};

std::vector<float> random_vec(size_t n, uint64_t seed) {
    Rng r(seed);
    std::vector<float> v(n);
    for (auto& x : v) x = float(r.normal());
    return v;
}

float at(const float* X, bool t, int64_t ld, int64_t r, int64_t c) {
    return t ? X[c * ld + r] : X[r * ld + c];
}

struct Problem {
    bool ta, tb;
    int64_t M, N, K, lda, ldb, ldc;
    float alpha, beta;
    std::vector<float> A, B, C0;
    Problem(bool ta_, bool tb_, int64_t M_, int64_t N_, int64_t K_, float alpha_, float beta_,
            uint64_t seed)
        : ta(ta_),
          tb(tb_),
          M(M_),
          N(N_),
          K(K_),
          lda((ta_ ? M_ : K_) + 3),
          ldb((tb_ ? K_ : N_) + 1),
          ldc(N_ + 2),
          alpha(alpha_),
          beta(beta_),
          A(random_vec(size_t((ta_ ? K_ : M_) * lda), seed)),
          B(random_vec(size_t((tb_ ? N_ : K_) * ldb), seed + 1)),
          C0(random_vec(size_t(M_ * ldc), seed + 2)) {}
    std::vector<float> run() const {
        std::vector<float> C = C0;
        gemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
        return C;
    }
    // The worst error in units of the float32 accumulation bound, (K + 4)·2⁻²⁴·Σ|terms|, over
    // a sample of elements (every 7th row and column); the padding of C must be untouched.
    double worst_error(const std::vector<float>& C) const {
        double worst = 0;
        for (int64_t m = 0; m < M; m += 7)
            for (int64_t n = 0; n < N; n += 7) {
                double s = 0, g = 0;
                for (int64_t k = 0; k < K; ++k) {
                    const double p =
                        double(at(A.data(), ta, lda, m, k)) * double(at(B.data(), tb, ldb, k, n));
                    s += p;
                    g += std::abs(p);
                }
                const double c0 = double(C0[size_t(m * ldc + n)]);
                const double want = double(alpha) * s + double(beta) * c0;
                const double mag = std::abs(double(alpha)) * g + std::abs(double(beta) * c0);
                const double e = std::abs(double(C[size_t(m * ldc + n)]) - want);
                worst = std::max(worst, e / (double(K + 4) * 0x1p-24 * mag + 1e-30));
            }
        for (int64_t m = 0; m < M; ++m)
            for (int64_t n = N; n < ldc; ++n)
                if (C[size_t(m * ldc + n)] != C0[size_t(m * ldc + n)]) return 1e30;
        return worst;
    }
};

// Products of at least kBlasParallelWork multiply-adds (oneDNN's under AUTO), every transpose.
std::vector<Problem> large_problems() {
    std::vector<Problem> ps;
    uint64_t seed = 1;
    const float ab[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {0.5f, -0.75f}};
    int i = 0;
    for (int t = 0; t < 4; ++t)
        for (const auto& p : ab) {
            const bool ta = t & 1, tb = t & 2;
            // 128 × 200 × 264 and 97 × 301 × 160: past the threshold, ragged against any blocking
            if (i++ % 2 == 0)
                ps.emplace_back(ta, tb, 128, 200, 264, p[0], p[1], seed);
            else
                ps.emplace_back(ta, tb, 97, 301, 160, p[0], p[1], seed);
            seed += 3;
        }
    return ps;
}

#define REQUIRE_ONEDNN() \
    if (!onednn::built()) GTEST_SKIP() << "built without oneDNN: every product is OpenBLAS's"

}  // namespace

TEST(SgemmEngine, OneDnnTakesLargeProductsOutsideAndTallOnesInsideParallelRegions) {
    REQUIRE_ONEDNN();
    EngineScope auto_(SgemmEngine::AUTO);
    // On a core with full-width AVX-512 and oneDNN's AVX-512 kernels, oneDNN takes every product
    // it can; elsewhere the rules measured on a double-pumped core (blas.h).
    const bool wide = onednn_outpaces_openblas();
    if (wide) {
        EXPECT_TRUE(full_width_avx512());
    }
    EXPECT_TRUE(sgemm_uses_onednn(false, 128, 256, 256));   // 8M multiply-adds
    EXPECT_TRUE(sgemm_uses_onednn(true, 2048, 896, 2048));  // a weight gradient
    EXPECT_FALSE(sgemm_uses_onednn(false, 64, 64, 64));     // small
    static_assert(kBlasParallelWork == 1024 * 4096);
    EXPECT_FALSE(sgemm_uses_onednn(false, 1, 1023, 4096));       // just below the threshold
    EXPECT_TRUE(sgemm_uses_onednn(false, 1, 1024, 4096));        // at it
    EXPECT_EQ(sgemm_uses_onednn(false, 262, 896, 32000), wide);  // head: K = V
    EXPECT_EQ(sgemm_uses_onednn(true, 32000, 896, 262), wide);   // head: dW
    EXPECT_EQ(sgemm_uses_onednn(true, 896, 2389, 2048), wide);   // FFN output's dW: N ≥ 2M
    EXPECT_TRUE(sgemm_uses_onednn(false, 262, 32000, 896));      // head forward
    // Inside a parallel region (one-thread products): M from 256, N and K from 64, K below 8192;
    // on a wide core, M from 64, N and K from 16.
    struct Case {
        bool ta;
        int64_t M, N, K;
        bool want, want_wide;
    };
    const Case inside[] = {
        {false, 256, 64, 64, true, true},       // at the bounds
        {false, 448, 170, 64, true, true},      // the 110M learner's GLU
        {false, 512, 64, 170, true, true},      // its input gradient
        {false, 255, 4096, 4096, false, true},  // one row short
        {false, 64, 256, 64, false, true},      // an attention block of 64 query rows
        {false, 63, 256, 64, false, false},     // one row short of the wide bound
        {false, 64, 16, 16, false, true},       // at the wide bounds
        {false, 128, 48, 32, false, true},      // the M learner's GLU: K = 32
        {false, 128, 15, 32, false, false},     // N below 16
        {false, 4096, 63, 4096, false, true},   // N below 64
        {false, 4096, 64, 8192, false, true},   // K over the vocabulary bound
        {false, 2048, 2048, 2048, true, true},
    };
    int wrong = 0;
#pragma omp parallel num_threads(2)
    for (const Case& k : inside)
        if (sgemm_uses_onednn(k.ta, k.M, k.N, k.K) != (wide ? k.want_wide : k.want)) {
#pragma omp atomic
            ++wrong;
        }
    if (omp_get_max_threads() > 1) {
        EXPECT_EQ(wrong, 0) << "a product inside a parallel region went to the wrong engine";
    }
    EngineScope openblas(SgemmEngine::OPENBLAS);
    EXPECT_FALSE(sgemm_uses_onednn(false, 2048, 2048, 2048));
}

// Each thread of a team runs its own one-thread products at once (the learner's row blocks, the
// attention's heads): oneDNN's from 256 rows with N, K ≥ 64, OpenBLAS's below; each within the
// float32 accumulation bound of float64 maths, every transpose, alpha and beta.
TEST(SgemmEngine, ProductsInsideAParallelRegionEqualFloat64Maths) {
    std::vector<Problem> ps;
    uint64_t seed = 101;
    for (int t = 0; t < 4; ++t) {
        const bool ta = t & 1, tb = t & 2;
        ps.emplace_back(ta, tb, 300, 170, 64, 1.0f, 0.0f, seed);
        ps.emplace_back(ta, tb, 256, 72, 130, 0.5f, -0.75f, seed + 3);
        ps.emplace_back(ta, tb, 128, 48, 32, 1.0f, 1.0f, seed + 6);
        seed += 9;
    }
    int64_t want = 0;
    const bool wide = onednn_outpaces_openblas();  // M from 64, N and K from 16 (blas.h)
    for (const Problem& p : ps)
        want +=
            onednn::built() && p.M >= (wide ? 64 : 256) && std::min(p.N, p.K) >= (wide ? 16 : 64);
    std::vector<std::vector<float>> C(ps.size());
    const int64_t calls0 = onednn::f32_calls();
#pragma omp parallel for schedule(static, 1) num_threads(2)
    for (size_t i = 0; i < ps.size(); ++i) C[i] = ps[i].run();
    for (size_t i = 0; i < ps.size(); ++i)
        EXPECT_LE(ps[i].worst_error(C[i]), 1.0)
            << "M N K " << ps[i].M << " " << ps[i].N << " " << ps[i].K << " ta " << ps[i].ta
            << " tb " << ps[i].tb;
    if (omp_get_max_threads() > 1 && sgemm_engine() == SgemmEngine::AUTO) {
        EXPECT_EQ(onednn::f32_calls() - calls0, want);
    }
}

TEST(SgemmEngine, BothEnginesEqualFloat64MathsWithinTheAccumulationBound) {
    for (SgemmEngine e : {SgemmEngine::AUTO, SgemmEngine::OPENBLAS}) {
        EngineScope scope(e);
        const int64_t calls0 = onednn::f32_calls();
        const auto problems = large_problems();
        for (const Problem& p : problems) {
            const std::vector<float> C = p.run();
            EXPECT_LE(p.worst_error(C), 1.0)
                << (e == SgemmEngine::AUTO ? "auto" : "openblas") << " M N K " << p.M << " " << p.N
                << " " << p.K << " ta " << p.ta << " tb " << p.tb << " alpha " << p.alpha
                << " beta " << p.beta;
        }
        // Each product ran where the rule says (the count would stay put had a product fallen
        // back to OpenBLAS), and oneDNN ran some of them.
        int64_t want = 0;
        for (const Problem& p : problems) want += sgemm_uses_onednn(p.ta, p.M, p.N, p.K);
        if (e == SgemmEngine::AUTO && onednn::built()) {
            EXPECT_GE(want, 8);
        }
        EXPECT_EQ(onednn::f32_calls() - calls0, want);
    }
}

TEST(SgemmEngine, LongProductsWithADenseAEqualFloat64MathsAndRunAsTwoHalvesOfK) {
    // An untransposed A with lda == K and K from kPackedAK: oneDNN runs the product as two halves
    // of K (blas.h), the second added with beta = 1. alpha ≠ 1 and beta ≠ 0 catch a half that
    // drops alpha or scales C twice; an odd K, halves that miss a column.
    const float ab[][2] = {{1.0f, 0.0f}, {0.5f, -0.75f}};
    uint64_t seed = 301;
    for (bool tb : {false, true})
        for (const auto& a : ab) {
            Problem p(false, tb, 48, 24, kPackedAK + 37, a[0], a[1], seed);
            seed += 3;
            p.lda = p.K;
            p.A = random_vec(size_t(p.M * p.K), seed);
            const int64_t calls0 = onednn::f32_calls();
            const std::vector<float> C = p.run();
            EXPECT_LE(p.worst_error(C), 1.0)
                << "tb " << tb << " alpha " << a[0] << " beta " << a[1];
            if (sgemm_uses_onednn(false, p.M, p.N, p.K)) {
                EXPECT_EQ(onednn::f32_calls() - calls0, 2) << "tb " << tb;
            }
        }
}

TEST(SgemmEngine, OneDnnWrongOperandsAreCaughtByTheBound) {
    // The bound above is tight enough to see a wrong product: the same call with one operand
    // element changed by 1 % of its row's scale fails it.
    Problem p(false, true, 128, 200, 264, 1.0f, 0.0f, 77);
    std::vector<float> C = p.run();
    EXPECT_LE(p.worst_error(C), 1.0);
    Problem q = p;
    q.A[0] += 0.05f;
    EXPECT_GT(p.worst_error(q.run()), 1.0);
}

TEST(SgemmEngine, OneDnnGivesTheSameBitsAgainAndFromTwoThreadsAtOnce) {
    REQUIRE_ONEDNN();
    EngineScope scope(SgemmEngine::AUTO);
    const auto problems = large_problems();
    std::vector<std::vector<float>> first;
    for (const Problem& p : problems) first.push_back(p.run());
    for (size_t i = 0; i < problems.size(); ++i)
        EXPECT_EQ(problems[i].run(), first[i]) << "problem " << i << " changed on a second call";
    // Two threads of their own (as a server's sessions), each running every problem a few
    // times: each result must be the sequential one (the primitives are shared, each call
    // brings its own scratchpad).
    std::vector<int> mismatches(2, 0);
    const int threads = omp_get_max_threads();  // the same team size, so the same primitives
    std::vector<std::thread> ts;
    for (int t = 0; t < 2; ++t)
        ts.emplace_back([&, t] {
            omp_set_num_threads(threads);
            for (int r = 0; r < 3; ++r)
                for (size_t i = 0; i < problems.size(); ++i)
                    if (problems[i].run() != first[i]) ++mismatches[size_t(t)];
        });
    for (auto& t : ts) t.join();
    EXPECT_EQ(mismatches[0] + mismatches[1], 0);
}

TEST(SgemmEngine, BiasInTheKernelIsTheProductPlusTheBiasOnEveryRow) {
    REQUIRE_ONEDNN();
    EngineScope scope(SgemmEngine::AUTO);
    // B as a linear weight [N,K] (tb) and as its transposed copy [K,N]; with a bias and without.
    for (const bool tb : {true, false})
        for (const bool with_bias : {true, false})
            for (const auto& [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{128, 200, 264},
                                          std::tuple<int64_t, int64_t, int64_t>{97, 301, 160}}) {
                // beta = 1 over C0 = the bias on every row (or 0 over zeros) is the reference
                Problem p(false, tb, M, N, K, 1.0f, 1.0f, 500 + uint64_t(M));
                const std::vector<float> bias = random_vec(size_t(N), 900 + uint64_t(N));
                for (int64_t m = 0; m < M; ++m)
                    for (int64_t n = 0; n < N; ++n)
                        p.C0[size_t(m * p.ldc + n)] = with_bias ? bias[size_t(n)] : 0.0f;
                std::vector<float> C = p.C0;  // the padding must stay
                for (int64_t m = 0; m < M; ++m)
                    for (int64_t n = 0; n < N; ++n)
                        C[size_t(m * p.ldc + n)] = -7.0f;  // overwritten
                const int64_t calls0 = onednn::f32_calls();
                ASSERT_TRUE(gemm_bias(tb, M, N, K, p.A.data(), p.lda, p.B.data(), p.ldb,
                                      with_bias ? bias.data() : nullptr, C.data(), p.ldc));
                EXPECT_EQ(onednn::f32_calls() - calls0, 1);
                EXPECT_LE(p.worst_error(C), 1.0) << tb << with_bias << " " << M << " " << N;
            }
    // Where oneDNN does not take the product: false, nothing written.
    std::vector<float> A(64 * 64, 1.0f), B(64 * 64, 1.0f), bias(64, 2.0f), C(64 * 64, -1.0f);
    EXPECT_FALSE(
        gemm_bias(true, 64, 64, 64, A.data(), 64, B.data(), 64, bias.data(), C.data(), 64));
    EXPECT_EQ(C, std::vector<float>(64 * 64, -1.0f));
    EngineScope openblas(SgemmEngine::OPENBLAS);
    std::vector<float> A2(128 * 256, 1.0f), B2(256 * 256, 1.0f), C2(128 * 256, -1.0f);
    EXPECT_FALSE(gemm_bias(true, 128, 256, 256, A2.data(), 256, B2.data(), 256, bias.data(),
                           C2.data(), 256));
}
