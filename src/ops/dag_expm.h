// The DAG regularizer's per-instance algorithms (ops/dag.h), written once for the CPU
// (ops/dag_*.cpp) and the GPU (src/cuda/dag.cu): torch's float32 matrix exponential with its
// autograd backward (REFERENCE_F32) and the overflow-safe float64 evaluation (EXACT). docs/dag.md
// has the methods.
//
// Each algorithm is a sequence of whole-matrix steps on an executor `Ex`, which owns the scratch
// and runs the steps: on the CPU one thread runs them in order; on the GPU one thread block runs
// each step across its threads and synchronises between steps. Every step gives the same bits
// on both (the products are one chain of operations over k from zero per element, the sums run
// in a stated order), so the CPU suite tests the arithmetic that the GPU runs. Ex provides:
//   S* slot(int i)                       scratch matrix i (room for (2n)² values; i < kDagSlots)
//   void mm(A, B, C, n)                  C = A·B, per element fma(A[i,k], B[k,j], c) over k from 0
//   void mm_plain(A, B, C, n)            the same with a separate multiply and add
//   void each(count, f)                  f(e) for e < count, then a barrier
//   S norm1(A, n)                        max over columns of Σ_i |A[i,j]| (top to bottom), NaN
//                                        if any is NaN
//   S max_entry(A, count)                max(0, the largest of count values) (no NaN among them)
//   bool all_finite(A, count)            whether every one of count values is finite
// Scalar steps (the degree, the trace, the logs) run on every thread alike.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/hd.h"

namespace pldr::dag_detail {

// Scratch matrices an executor provides per instance.
constexpr int kDagSlots = 17;

// ------------------------------------------------------------------------------------------
// torch.linalg.matrix_exp (Bader, Blanes & Casas 2019, "Computing the matrix exponential with
// an optimized Taylor polynomial approximation"): by the 1-norm, one of the polynomials T1, T2,
// T4, T8, T12 (no scaling), or T18 with scaling by 2^-s and s squarings.

template <typename S>
PLDR_HD inline S bbc_theta(int i);
template <>
PLDR_HD inline float bbc_theta<float>(int i) {
    switch (i) {
        case 0:
            return 1.192092800768788e-07f;
        case 1:
            return 5.978858893805233e-04f;
        case 2:
            return 5.116619363445086e-02f;
        case 3:
            return 5.800524627688768e-01f;
        case 4:
            return 1.461661507209034e+00f;
        default:
            return 3.010066362817634e+00f;
    }
}
template <>
PLDR_HD inline double bbc_theta<double>(int i) {
    switch (i) {
        case 0:
            return 2.220446049250313e-16;
        case 1:
            return 2.580956802971767e-08;
        case 2:
            return 3.397168839976962e-04;
        case 3:
            return 4.991228871115323e-02;
        case 4:
            return 2.996158913811580e-01;
        default:
            return 1.090863719290036e+00;
    }
}

// Coefficients of the degree-12 and degree-18 schemes, row i giving B_i = Σ_j b[i][j]·A^(p_j)
// with powers {I, A, A², A³} (12) and {I, A, A², A³, A⁶} (18). Rounded to S like torch does.
PLDR_HD inline double bbc_b12(int i, int j) {
    const double b[4][4] = {
        {9.0198e-16, 0.46932117595418237389, -0.20099424927047284052, -0.04623946134063071740},
        {5.31597895759871264183, 1.19926790417132231573, 0.01179296240992997031,
         0.01108844528519167989},
        {0.18188869982170434744, 0.05502798439925399070, 0.09351590770535414968,
         0.00610700528898058230},
        {-2.0861320e-13, -0.13181061013830184015, -0.02027855540589259079,
         -0.00675951846863086359}};
    return b[i][j];
}
PLDR_HD inline double bbc_b18(int i, int j) {
    const double b[5][5] = {
        {0., -1.00365581030144618291e-01, -8.02924648241156932449e-03, -8.92138498045729985177e-04,
         0.},
        {0., 3.97849749499645077844e-01, 1.36783778460411720168e+00, 4.98289622525382669416e-01,
         -6.37898194594723280150e-04},
        {-1.09676396052962061844e+01, 1.68015813878906206114e+00, 5.71779846478865511061e-02,
         -6.98210122488052056106e-03, 3.34975017086070470649e-05},
        {-9.04316832390810593223e-02, -6.76404519071381882256e-02, 6.75961301770459654925e-02,
         2.95552570429315521194e-02, -1.39180257516060693404e-05},
        {0., 0., -9.23364619367118555360e-02, -1.69364939002081722752e-02,
         -1.40086798182036094347e-05}};
    return b[i][j];
}

// Which degree-8 polynomial to use. BBC's construction needs x7 = (89 − √177)/(5040·x3²);
// torch up to at least 2.x (so the 1.13 reference) has x3 instead of x3² there, which makes its
// "T8" agree with the Taylor polynomial only through degree 4 (coefficient errors of 10–33% on
// A⁵..A⁸; used for float32 1-norms in (0.0512, 0.580]). REFERENCE_F32 reproduces that; the
// public expm uses the corrected coefficient.
enum class T8Flavor { CORRECT, TORCH_1_13 };

// Degree-8 coefficients. They are evaluated with the operand types of the reference (a mix of
// S-typed and double intermediates, each assignment rounding to S), so the float32 values are
// the ones torch uses.
template <typename S>
struct T8Coefs {
    S x1, x2, x3, x4, x5, x6, x7, y2;
    PLDR_HD explicit T8Coefs(T8Flavor flavor) {
        const S r177 = S(0.1330413469565007072504e+2);  // sqrt(177)
        x3 = S(2. / 3.);
        x1 = S(x3 * ((1. + r177) / 88.));
        x2 = S(x3 * ((1. + r177) / 352.));
        x4 = S((-271. + 29. * r177) / (315. * x3));
        x5 = S((-11. + 11. * r177) / (1260. * x3));
        x6 = S((-99. + 11. * r177) / (5040. * x3));
        x7 = flavor == T8Flavor::TORCH_1_13 ? S((89. - r177) / (5040. * x3))
                                            : S((89. - r177) / (5040. * x3 * x3));
        y2 = S((857. - 58. * r177) / 630.);
    }
};

// out = Σ_j coef[j]·in[j] (elementwise), accumulated from zero in the order j = 0, 1, ...
// (the order torch's _compute_linear_combination uses), with fused multiply-adds.
template <int K, class Ex, typename S>
PLDR_HD void lincomb(Ex& ex, const S* const (&in)[K], const S (&coef)[K], int64_t nn, S* out) {
    ex.each(nn, [&](int64_t e) {
        S o = S(0);
        for (int j = 0; j < K; ++j) o = std::fma(in[j][e], coef[j], o);
        out[e] = o;
    });
}

template <class Ex, typename S>
PLDR_HD void set_identity(Ex& ex, S* I, int64_t n) {
    ex.each(n * n, [&](int64_t e) { I[e] = e / n == e % n ? S(1) : S(0); });
}

// The polynomials: expm(A) for ‖A‖₁ in each one's range (no scaling), into out. Scratch: slots
// 0..9.
template <class Ex, typename S>
PLDR_HD void bbc_T1(Ex& ex, const S* A, int64_t n, S* out) {
    ex.each(n * n, [&](int64_t e) { out[e] = (e / n == e % n ? S(1) : S(0)) + A[e]; });
}

template <class Ex, typename S>
PLDR_HD void bbc_T2(Ex& ex, const S* A, int64_t n, S* out) {
    S* A2 = ex.slot(1);
    ex.mm(A, A, A2, n);
    ex.each(n * n, [&](int64_t e) {
        const S a2 = A2[e] / S(2);
        out[e] = ((e / n == e % n ? S(1) : S(0)) + A[e]) + a2;
    });
}

template <class Ex, typename S>
PLDR_HD void bbc_T4(Ex& ex, const S* A, int64_t n, S* out) {
    const int64_t nn = n * n;
    S *I = ex.slot(0), *A2 = ex.slot(1), *L = ex.slot(2), *P = ex.slot(3);
    set_identity(ex, I, n);
    ex.mm(A, A, A2, n);
    lincomb<3>(ex, {I, A, A2}, {S(1 / 2.0), S(1 / 6.0), S(1 / 24.0)}, nn, L);
    ex.mm(A2, L, P, n);  // A²·(I/2 + A/6 + A²/24)
    lincomb<4>(ex, {I, A, A2, P}, {S(1), S(1), S(0), S(1)}, nn, out);
}

template <class Ex, typename S>
PLDR_HD void bbc_T8(Ex& ex, const S* A, int64_t n, S* out, T8Flavor flavor) {
    const T8Coefs<S> k(flavor);
    const int64_t nn = n * n;
    S *I = ex.slot(0), *A2 = ex.slot(1), *A4 = ex.slot(2), *A8 = ex.slot(3);
    S *L1 = ex.slot(4), *L2 = ex.slot(5);
    set_identity(ex, I, n);
    ex.mm(A, A, A2, n);
    lincomb<2>(ex, {A, A2}, {k.x1, k.x2}, nn, L1);
    ex.mm(A2, L1, A4, n);  // A4 = A²·(x1·A + x2·A²)
    lincomb<2>(ex, {A2, A4}, {k.x3, S(1)}, nn, L1);
    lincomb<4>(ex, {I, A, A2, A4}, {k.x4, k.x5, k.x6, k.x7}, nn, L2);
    ex.mm(L1, L2, A8, n);  // A8 = (x3·A² + A4)·(x4·I + x5·A + x6·A² + x7·A4)
    lincomb<5>(ex, {I, A, A2, A4, A8}, {S(1), S(1), k.y2, S(0), S(1)}, nn, out);
}

template <class Ex, typename S>
PLDR_HD void bbc_T12(Ex& ex, const S* A, int64_t n, S* out) {
    const int64_t nn = n * n;
    S *I = ex.slot(0), *A2 = ex.slot(1), *A3 = ex.slot(2), *tmp = ex.slot(7);
    S* B[4] = {ex.slot(3), ex.slot(4), ex.slot(5), ex.slot(6)};
    set_identity(ex, I, n);
    ex.mm(A, A, A2, n);
    ex.mm(A, A2, A3, n);
    for (int i = 0; i < 4; ++i)
        lincomb<4>(ex, {I, A, A2, A3},
                   {S(bbc_b12(i, 0)), S(bbc_b12(i, 1)), S(bbc_b12(i, 2)), S(bbc_b12(i, 3))}, nn,
                   B[i]);
    ex.mm(B[3], B[3], tmp, n);
    ex.each(nn, [&](int64_t e) {
        B[2][e] += tmp[e];  // A6 = B2 + B3²
        B[1][e] += B[2][e];
    });
    ex.mm(B[1], B[2], tmp, n);  // (B1 + A6)·A6
    ex.each(nn, [&](int64_t e) { out[e] = B[0][e] + tmp[e]; });
}

template <class Ex, typename S>
PLDR_HD void bbc_T18(Ex& ex, const S* A, int64_t n, S* out) {
    const int64_t nn = n * n;
    S *I = ex.slot(0), *A2 = ex.slot(1), *A3 = ex.slot(2), *A6 = ex.slot(3), *tmp = ex.slot(9);
    S* B[5] = {ex.slot(4), ex.slot(5), ex.slot(6), ex.slot(7), ex.slot(8)};
    set_identity(ex, I, n);
    ex.mm(A, A, A2, n);
    ex.mm(A, A2, A3, n);
    ex.mm(A3, A3, A6, n);
    for (int i = 0; i < 5; ++i)
        lincomb<5>(ex, {I, A, A2, A3, A6},
                   {S(bbc_b18(i, 0)), S(bbc_b18(i, 1)), S(bbc_b18(i, 2)), S(bbc_b18(i, 3)),
                    S(bbc_b18(i, 4))},
                   nn, B[i]);
    ex.mm(B[0], B[4], tmp, n);
    ex.each(nn, [&](int64_t e) {
        B[3][e] += tmp[e];  // A9 = B3 + B0·B4
        B[2][e] += B[3][e];
    });
    ex.mm(B[2], B[3], tmp, n);  // (B2 + A9)·A9
    ex.each(nn, [&](int64_t e) { out[e] = B[1][e] + tmp[e]; });
}

// expm(A) into out (A, out n×n; neither a scratch slot below 12). Scratch: slots 0..11.
template <class Ex, typename S>
PLDR_HD void bbc_expm(Ex& ex, const S* A, int64_t n, S* out, T8Flavor flavor) {
    const int64_t nn = n * n;
    if (n == 1) {
        ex.each(1, [&](int64_t) { out[0] = std::exp(A[0]); });
        return;
    }
    const S norm = ex.norm1(A, n);
    if (std::isnan(norm)) {
        ex.each(nn, [&](int64_t e) { out[e] = S(NAN); });
        return;
    }
    if (norm <= bbc_theta<S>(0)) return bbc_T1(ex, A, n, out);
    if (norm <= bbc_theta<S>(1)) return bbc_T2(ex, A, n, out);
    if (norm <= bbc_theta<S>(2)) return bbc_T4(ex, A, n, out);
    if (norm <= bbc_theta<S>(3)) return bbc_T8(ex, A, n, out, flavor);
    if (norm < bbc_theta<S>(4)) return bbc_T12(ex, A, n, out);
    // T18 with scaling and squaring: s = max(0, ceil(log2(norm / theta18))), evaluated in S.
    S ls = std::ceil(std::log2(norm / bbc_theta<S>(5)));
    if (!(ls > S(0))) ls = S(0);
    if (!std::isfinite(ls)) {  // infinite norm
        ex.each(nn, [&](int64_t e) { out[e] = S(NAN); });
        return;
    }
    const int s = int(ls);
    S *As = ex.slot(10), *tmp = ex.slot(11);
    const S scale = std::ldexp(S(1), s);
    ex.each(nn, [&](int64_t e) { As[e] = A[e] / scale; });
    bbc_T18(ex, As, n, out);
    for (int p = 0; p < s; ++p) {
        ex.mm(out, out, tmp, n);
        ex.each(nn, [&](int64_t e) { out[e] = tmp[e]; });
    }
}

// Float32 sum of `size` values `stride` apart in the order of torch's CPU reduction for small
// sizes: four interleaved partial sums (elements k, k+4, k+8, ... summed in order), any remainder
// added to the first, then ((p0 + p1) + p2) + p3.
PLDR_HD inline float torch_sum_f32(const float* x, int64_t size, int64_t stride) {
    float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const int64_t rows = size / 4;
    for (int64_t r = 0; r < rows; ++r)
        for (int k = 0; k < 4; ++k) p[k] += x[(4 * r + k) * stride];
    for (int64_t i = 4 * rows; i < size; ++i) p[0] += x[i * stride];
    return ((p[0] + p[1]) + p[2]) + p[3];
}

// The dag of REFERENCE_F32 from the instance's y = tr(expm(X∘X)) / dk (float32): |log y|, by the
// CPU's float32 log for every backend (ops/dag_torch.cpp), so that a GPU's log does not round it
// otherwise.
float dag_ref_value(float y);

// REFERENCE_F32, one instance: torch's einsum('ii', matrix_exp(X*X)) / dk in float32 (returned:
// the dag is dag_ref_value of it), and when dX is not null the autograd backward of
// abs(log(·)) seeded with `seed`, accumulated into dX. Scratch: slots 0..16 (12 Xf, 13 Mf, 14 E,
// 15 the block matrix, 16 its exponential).
template <class Ex, typename T>
PLDR_HD float dag_ref_instance(Ex& ex, const T* X, int64_t n, T* dX, float seed) {
    const int64_t nn = n * n;
    float *Xf = ex.slot(12), *Mf = ex.slot(13), *E = ex.slot(14);
    ex.each(nn, [&](int64_t e) {
        Xf[e] = float(X[e]);
        Mf[e] = Xf[e] * Xf[e];
    });
    bbc_expm(ex, static_cast<const float*>(Mf), n, E, T8Flavor::TORCH_1_13);
    const float tr = torch_sum_f32(E, n, n + 1);
    const float dk = float(n);
    const float y = tr / dk;
    if (!dX) return y;

    // abs → log → div → diagonal/sum → matrix_exp → mul, as torch autograd runs them. The sign
    // of log y is that of y − 1 (a float log is monotonic and exact at 1; NaN: 0).
    const float sgn = y > 1.0f ? 1.0f : (y < 1.0f ? -1.0f : 0.0f);
    const float g1 = seed * sgn;
    const float g2 = g1 / y;
    const float g3 = g2 / dk;
    // matrix_exp backward: upper-right n×n block of expm([[Mᵀ, G], [0, Mᵀ]]), G = g3·I.
    const int64_t m = 2 * n;
    float *Bk = ex.slot(15), *EB = ex.slot(16);
    ex.each(m * m, [&](int64_t e) {
        const int64_t i = e / m, j = e % m;
        float b = 0.0f;
        if (i < n && j < n) b = Mf[j * n + i];
        if (i >= n && j >= n) b = Mf[(j - n) * n + (i - n)];
        if (i < n && j == n + i) b = g3;
        Bk[e] = b;
    });
    bbc_expm(ex, static_cast<const float*>(Bk), m, EB, T8Flavor::TORCH_1_13);
    ex.each(nn, [&](int64_t e) {
        const int64_t i = e / n, j = e % n;
        const float h = EB[i * m + (n + j)] * Xf[e];  // mul backward, once per operand
        dX[e] += T(h + h);
    });
    return y;
}

// ------------------------------------------------------------------------------------------
// EXACT: log(tr expm(M)/n) for nonnegative M in double, plus expm(M)ᵀ/tr expm(M).

constexpr double kTaylorTheta = 1.0;  // ‖A‖₁ bound after scaling; tail ≤ θ²¹/21!·e^θ ≈ 1e-19
constexpr int kTaylorBlocks = 5;  // at most degree 4·5 = 20, Paterson–Stockmeyer in A⁴
constexpr int kRenormExp = 400;   // keep stored entries below 2^400 between squarings

// log(tr(expm(M))/n) for a finite nonnegative M (in a slot other than 0..5), P (may be null, not
// in 0..5) = expm(M)ᵀ / tr expm(M). Scratch: slots 0..5.
template <class Ex>
PLDR_HD double log_mean_trace_expm_steps(Ex& ex, const double* M, int64_t n, double* P) {
    const int64_t nn = n * n;
    // Shift by the smallest diagonal entry: M − sI stays nonnegative, so every term below is a
    // sum of nonnegative numbers (no cancellation), and log tr expm(M) = s + log tr expm(M − sI).
    double s = M[0];
    for (int64_t i = 1; i < n; ++i) s = M[i * n + i] < s ? M[i * n + i] : s;
    double* A = ex.slot(0);
    ex.each(nn, [&](int64_t e) {
        double a = M[e];
        if (e / n == e % n) {
            a -= s;  // exact zero on the minimizing entry
            a = a < 0.0 ? 0.0 : a;
        }
        A[e] = a;
    });

    // Scale so that ‖A‖₁ ≤ θ (division by a power of two: exact).
    const double norm = ex.norm1(A, n);
    int k = 0;
    if (norm > kTaylorTheta) {
        int e;
        std::frexp(norm / kTaylorTheta, &e);  // norm/θ < 2^e
        k = e;
        ex.each(nn, [&](int64_t i) { A[i] = std::ldexp(A[i], -k); });
    }

    // Φ = expm(A) − I = Σ_{j=1..4b} A^j / j!, Paterson–Stockmeyer with blocks in A⁴:
    // Φ = B0 + A⁴(B1 + A⁴(B2 + A⁴(B3 + A⁴ B4))), B_i = Σ_{r=1..4} A^r / (4i + r)!.
    // The number of blocks b is the smallest whose relative truncation bound
    // ν^{4b}·e/(4b+1)! (ν = ‖A‖₁ ≤ 1; Φ ≥ A entrywise) is below 2^-56. Besides saving work for
    // small ν, this keeps the high powers of tiny matrices (entries ~1e-18) out of the
    // subnormal range, where arithmetic is very slow.
    const double nu = std::ldexp(norm, -k);
    int blocks = 1;
    for (double fact = 120.0; blocks < kTaylorBlocks; ++blocks) {
        if (std::pow(nu, 4.0 * blocks) * std::exp(1.0) / fact <= std::ldexp(1.0, -56)) break;
        for (int j = 4 * blocks + 2; j <= 4 * blocks + 5; ++j) fact *= j;
    }
    double* Pw[4] = {A, ex.slot(1), ex.slot(2), ex.slot(3)};
    ex.mm_plain(Pw[0], Pw[0], Pw[1], n);
    ex.mm_plain(Pw[1], Pw[0], Pw[2], n);
    ex.mm_plain(Pw[1], Pw[1], Pw[3], n);
    double inv_fact[4 * kTaylorBlocks + 1];
    inv_fact[0] = 1;
    for (int j = 1; j <= 4 * kTaylorBlocks; ++j) inv_fact[j] = inv_fact[j - 1] / j;
    double *F = ex.slot(4), *tmp = ex.slot(5);  // F: Φ
    for (int b = blocks - 1; b >= 0; --b) {
        if (b == blocks - 1) {
            ex.each(nn, [&](int64_t e) {
                double bi = 0.0;
                for (int r = 1; r <= 4; ++r) bi += inv_fact[4 * b + r] * Pw[r - 1][e];
                F[e] = bi;
            });
        } else {
            ex.mm_plain(Pw[3], F, tmp, n);
            ex.each(nn, [&](int64_t e) {
                double bi = 0.0;
                for (int r = 1; r <= 4; ++r) bi += inv_fact[4 * b + r] * Pw[r - 1][e];
                F[e] = bi + tmp[e];
            });
        }
    }

    // Undo the scaling: k squarings. While entries are moderate we keep Φ = E − I and square as
    // Φ ← Φ² + 2Φ (exact relative accuracy for tiny Φ). When entries grow large we switch to
    // E = I + Φ stored as 2^L · F, renormalising F by powers of two (no rounding) after each
    // squaring, so nothing overflows however large tr expm(M) is. The renormalisation must also
    // act when F shrinks: it leaves F's largest entry in [0.5, 1), and when F's spectral radius ρ
    // is below 1 (e.g. M dominated by one large diagonal entry), the following squarings shrank F
    // like ρ^(2^p) until it underflowed to 0, giving log(0), dag = |−inf| = inf and a NaN
    // gradient for a finite M.
    bool expm1_form = true;
    double L = 0;  // log2 of the scale of F (integer-valued)
    const double big = std::ldexp(1.0, kRenormExp);
    for (int p = 0; p < k; ++p) {
        if (expm1_form && ex.max_entry(F, nn) > big) {
            ex.each(nn, [&](int64_t e) {
                if (e / n == e % n) F[e] += 1.0;
            });
            expm1_form = false;
        }
        if (!expm1_form) {
            const double mx = ex.max_entry(F, nn);
            if (mx > big || (mx > 0 && mx < 1.0 / big)) {
                int e;
                std::frexp(mx, &e);
                ex.each(nn, [&](int64_t i) { F[i] = std::ldexp(F[i], -e); });
                L += e;
            }
        }
        ex.mm_plain(F, F, tmp, n);
        if (expm1_form) {
            ex.each(nn, [&](int64_t e) { F[e] = tmp[e] + 2.0 * F[e]; });
        } else {
            ex.each(nn, [&](int64_t e) { F[e] = tmp[e]; });
            L *= 2;
        }
    }

    double result;
    const double dn = double(n);
    if (expm1_form) {
        double h = 0;
        for (int64_t i = 0; i < n; ++i) h += F[i * n + i];
        result = s + std::log1p(h / dn);
        if (P) {
            const double tr = dn + h;
            ex.each(nn, [&](int64_t e) {
                const int64_t i = e / n, j = e % n;
                P[e] = (F[j * n + i] + (i == j ? 1.0 : 0.0)) / tr;
            });
        }
    } else {
        double tr = 0;
        for (int64_t i = 0; i < n; ++i) tr += F[i * n + i];
        result = s + (L * std::log(2.0) + (std::log(tr) - std::log(dn)));
        if (P) {
            ex.each(nn, [&](int64_t e) {
                const int64_t i = e / n, j = e % n;
                P[e] = F[j * n + i] / tr;
            });
        }
    }
    return result;
}

// EXACT, one instance: |log tr expm(X∘X)/n| in double; when dX is not null accumulates
// scale·d/dX into it. A non-finite X gives NaN (and a NaN gradient). Scratch: slots 0..7
// (6: M, 7: P).
template <class Ex, typename T>
PLDR_HD double dag_exact_instance(Ex& ex, const T* X, int64_t n, T* dX, double scale) {
    const int64_t nn = n * n;
    double *M = ex.slot(6), *P = ex.slot(7);
    ex.each(nn, [&](int64_t e) {
        const double x = double(X[e]);
        M[e] = x * x;
    });
    const bool finite = ex.all_finite(M, nn);
    const double v = finite ? log_mean_trace_expm_steps(ex, M, n, dX ? P : nullptr) : double(NAN);
    if (dX) {
        // d|v|/dX = sign(v) · 2·X ∘ (expm(M)ᵀ / tr expm(M)); sign(0) = 0.
        const double sg = v > 0 ? 1.0 : (v < 0 ? -1.0 : (std::isnan(v) ? v : 0.0));
        const double g = scale * sg * 2.0;
        ex.each(nn, [&](int64_t e) { dX[e] += T(g * double(X[e]) * (finite ? P[e] : v)); });
    }
    return std::fabs(v);
}

}  // namespace pldr::dag_detail
