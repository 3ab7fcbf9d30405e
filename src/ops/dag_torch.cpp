// The DAG regularizer's torch-faithful mode (REFERENCE_F32, see dag.h): torch.linalg.matrix_exp
// (Bader–Blanes–Casas) in float32 with the reference's coefficients, its autograd backward, and
// the public expm(). docs/dag.md has the method.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "ops/dag.h"
#include "ops/dag_detail.h"

namespace pldr {

using namespace dag_detail;

namespace {

// ------------------------------------------------------------------------------------------
// torch.linalg.matrix_exp (Bader, Blanes & Casas 2019, "Computing the matrix exponential with
// an optimized Taylor polynomial approximation"): by the 1-norm, one of the polynomials T1, T2,
// T4, T8, T12 (no scaling), or T18 with scaling by 2^-s and s squarings.

template <typename S>
struct BbcThetas;
template <>
struct BbcThetas<float> {
    static constexpr float v[6] = {1.192092800768788e-07f, 5.978858893805233e-04f,
                                   5.116619363445086e-02f, 5.800524627688768e-01f,
                                   1.461661507209034e+00f, 3.010066362817634e+00f};
};
template <>
struct BbcThetas<double> {
    static constexpr double v[6] = {2.220446049250313e-16, 2.580956802971767e-08,
                                    3.397168839976962e-04, 4.991228871115323e-02,
                                    2.996158913811580e-01, 1.090863719290036e+00};
};

// Coefficients of the degree-12 and degree-18 schemes, row i giving B_i = Σ_j b[i][j]·A^(p_j)
// with powers {I, A, A², A³} (12) and {I, A, A², A³, A⁶} (18). Rounded to S like torch does.
constexpr double kB12[4][4] = {
    {9.0198e-16, 0.46932117595418237389, -0.20099424927047284052, -0.04623946134063071740},
    {5.31597895759871264183, 1.19926790417132231573, 0.01179296240992997031,
     0.01108844528519167989},
    {0.18188869982170434744, 0.05502798439925399070, 0.09351590770535414968,
     0.00610700528898058230},
    {-2.0861320e-13, -0.13181061013830184015, -0.02027855540589259079, -0.00675951846863086359}};
constexpr double kB18[5][5] = {
    {0., -1.00365581030144618291e-01, -8.02924648241156932449e-03, -8.92138498045729985177e-04, 0.},
    {0., 3.97849749499645077844e-01, 1.36783778460411720168e+00, 4.98289622525382669416e-01,
     -6.37898194594723280150e-04},
    {-1.09676396052962061844e+01, 1.68015813878906206114e+00, 5.71779846478865511061e-02,
     -6.98210122488052056106e-03, 3.34975017086070470649e-05},
    {-9.04316832390810593223e-02, -6.76404519071381882256e-02, 6.75961301770459654925e-02,
     2.95552570429315521194e-02, -1.39180257516060693404e-05},
    {0., 0., -9.23364619367118555360e-02, -1.69364939002081722752e-02,
     -1.40086798182036094347e-05}};

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
    explicit T8Coefs(T8Flavor flavor) {
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

// Scratch for the polynomial evaluation of one n×n matrix.
template <typename S>
struct BbcWork {
    int64_t n = 0;
    std::vector<S> buf;
    S* m(int i) { return buf.data() + size_t(i) * size_t(n * n); }
    explicit BbcWork(int64_t n_) : n(n_), buf(size_t(16) * size_t(n_ * n_)) {}
};

// Writes expm(A) for ‖A‖₁ in the range of each polynomial into out (no scaling).
template <typename S>
void bbc_T1(const S* A, int64_t n, S* out) {
    const int64_t nn = n * n;
    set_identity(out, n);
    for (int64_t e = 0; e < nn; ++e) out[e] = out[e] + A[e];
}

template <typename S>
void bbc_T2(const S* A, int64_t n, S* out, BbcWork<S>& w) {
    const int64_t nn = n * n;
    S* I = w.m(0);
    S* A2 = w.m(1);
    set_identity(I, n);
    matmul_fma(A, A, A2, n);
    for (int64_t e = 0; e < nn; ++e) A2[e] = A2[e] / S(2);
    for (int64_t e = 0; e < nn; ++e) out[e] = (I[e] + A[e]) + A2[e];
}

template <typename S>
void bbc_T4(const S* A, int64_t n, S* out, BbcWork<S>& w) {
    const int64_t nn = n * n;
    S* I = w.m(0);
    S* A2 = w.m(1);
    S* L = w.m(2);
    S* P = w.m(3);
    set_identity(I, n);
    matmul_fma(A, A, A2, n);
    const S c3[3] = {S(1 / 2.0), S(1 / 6.0), S(1 / 24.0)};
    lincomb<S>({I, A, A2}, c3, nn, L);
    matmul_fma(A2, L, P, n);  // A²·(I/2 + A/6 + A²/24)
    const S c4[4] = {S(1), S(1), S(0), S(1)};
    lincomb<S>({I, A, A2, P}, c4, nn, out);
}

template <typename S>
void bbc_T8(const S* A, int64_t n, S* out, BbcWork<S>& w, T8Flavor flavor) {
    static const T8Coefs<S> k_correct(T8Flavor::CORRECT), k_torch(T8Flavor::TORCH_1_13);
    const T8Coefs<S>& k = flavor == T8Flavor::TORCH_1_13 ? k_torch : k_correct;
    const int64_t nn = n * n;
    S* I = w.m(0);
    S* A2 = w.m(1);
    S* A4 = w.m(2);
    S* A8 = w.m(3);
    S* L1 = w.m(4);
    S* L2 = w.m(5);
    set_identity(I, n);
    matmul_fma(A, A, A2, n);
    const S ca[2] = {k.x1, k.x2};
    lincomb<S>({A, A2}, ca, nn, L1);
    matmul_fma(A2, L1, A4, n);  // A4 = A²·(x1·A + x2·A²)
    const S cb[2] = {k.x3, S(1)};
    lincomb<S>({A2, A4}, cb, nn, L1);
    const S cc[4] = {k.x4, k.x5, k.x6, k.x7};
    lincomb<S>({I, A, A2, A4}, cc, nn, L2);
    matmul_fma(L1, L2, A8, n);  // A8 = (x3·A² + A4)·(x4·I + x5·A + x6·A² + x7·A4)
    const S cd[5] = {S(1), S(1), k.y2, S(0), S(1)};
    lincomb<S>({I, A, A2, A4, A8}, cd, nn, out);
}

template <typename S>
void bbc_T12(const S* A, int64_t n, S* out, BbcWork<S>& w) {
    const int64_t nn = n * n;
    S* I = w.m(0);
    S* A2 = w.m(1);
    S* A3 = w.m(2);
    S* B[4] = {w.m(3), w.m(4), w.m(5), w.m(6)};
    S* tmp = w.m(7);
    set_identity(I, n);
    matmul_fma(A, A, A2, n);
    matmul_fma(A, A2, A3, n);
    for (int i = 0; i < 4; ++i) {
        S c[4];
        for (int j = 0; j < 4; ++j) c[j] = S(kB12[i][j]);
        lincomb<S>({I, A, A2, A3}, c, nn, B[i]);
    }
    matmul_fma(B[3], B[3], tmp, n);
    for (int64_t e = 0; e < nn; ++e) B[2][e] += tmp[e];  // A6 = B2 + B3²
    for (int64_t e = 0; e < nn; ++e) B[1][e] += B[2][e];
    matmul_fma(B[1], B[2], tmp, n);  // (B1 + A6)·A6
    for (int64_t e = 0; e < nn; ++e) out[e] = B[0][e] + tmp[e];
}

template <typename S>
void bbc_T18(const S* A, int64_t n, S* out, BbcWork<S>& w) {
    const int64_t nn = n * n;
    S* I = w.m(0);
    S* A2 = w.m(1);
    S* A3 = w.m(2);
    S* A6 = w.m(3);
    S* B[5] = {w.m(4), w.m(5), w.m(6), w.m(7), w.m(8)};
    S* tmp = w.m(9);
    set_identity(I, n);
    matmul_fma(A, A, A2, n);
    matmul_fma(A, A2, A3, n);
    matmul_fma(A3, A3, A6, n);
    for (int i = 0; i < 5; ++i) {
        S c[5];
        for (int j = 0; j < 5; ++j) c[j] = S(kB18[i][j]);
        lincomb<S>({I, A, A2, A3, A6}, c, nn, B[i]);
    }
    matmul_fma(B[0], B[4], tmp, n);
    for (int64_t e = 0; e < nn; ++e) B[3][e] += tmp[e];  // A9 = B3 + B0·B4
    for (int64_t e = 0; e < nn; ++e) B[2][e] += B[3][e];
    matmul_fma(B[2], B[3], tmp, n);  // (B2 + A9)·A9
    for (int64_t e = 0; e < nn; ++e) out[e] = B[1][e] + tmp[e];
}

// 1-norm (max column sum of |A|), columns summed top to bottom.
template <typename S>
S norm1(const S* A, int64_t n) {
    std::vector<S> col(static_cast<size_t>(n), S(0));
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) col[j] += std::abs(A[i * n + j]);
    S best = col[0];
    for (int64_t j = 1; j < n; ++j) {
        if (std::isnan(col[j])) return col[j];
        best = std::max(best, col[j]);
    }
    return best;
}

template <typename S>
void bbc_expm(const S* A, int64_t n, S* out, T8Flavor flavor) {
    PLDR_CHECK(n >= 1);
    const int64_t nn = n * n;
    if (n == 1) {
        out[0] = std::exp(A[0]);
        return;
    }
    const S* th = BbcThetas<S>::v;
    const S norm = norm1(A, n);
    if (std::isnan(norm)) {
        std::fill(out, out + nn, std::numeric_limits<S>::quiet_NaN());
        return;
    }
    BbcWork<S> w(n);
    if (norm <= th[0]) return bbc_T1(A, n, out);
    if (norm <= th[1]) return bbc_T2(A, n, out, w);
    if (norm <= th[2]) return bbc_T4(A, n, out, w);
    if (norm <= th[3]) return bbc_T8(A, n, out, w, flavor);
    if (norm < th[4]) return bbc_T12(A, n, out, w);
    // T18 with scaling and squaring: s = max(0, ceil(log2(norm / theta18))), evaluated in S.
    S ls = std::ceil(std::log2(norm / th[5]));
    if (!(ls > S(0))) ls = S(0);
    if (!std::isfinite(ls)) {  // infinite norm
        std::fill(out, out + nn, std::numeric_limits<S>::quiet_NaN());
        return;
    }
    const int s = int(ls);
    std::vector<S> As(A, A + nn);
    for (int64_t e = 0; e < nn; ++e) As[e] = As[e] / std::ldexp(S(1), s);
    bbc_T18(As.data(), n, out, w);
    std::vector<S> tmp(static_cast<size_t>(nn));
    for (int p = 0; p < s; ++p) {
        matmul_fma(out, out, tmp.data(), n);
        std::copy(tmp.begin(), tmp.end(), out);
    }
}

}  // namespace

namespace dag_detail {

// Float32 sum of `size` values `stride` apart in the order of torch's CPU reduction for small
// sizes: four interleaved partial sums (elements k, k+4, k+8, ... summed in order), any remainder
// added to the first, then ((p0 + p1) + p2) + p3.
float torch_sum_f32(const float* x, int64_t size, int64_t stride) {
    float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const int64_t rows = size / 4;
    for (int64_t r = 0; r < rows; ++r)
        for (int k = 0; k < 4; ++k) p[k] += x[(4 * r + k) * stride];
    for (int64_t i = 4 * rows; i < size; ++i) p[0] += x[i * stride];
    return ((p[0] + p[1]) + p[2]) + p[3];
}

// torch: abs(log(einsum('ii', matrix_exp(X*X)) / dk)) in float32, and its autograd backward with
// the incoming gradient `seed` (float32).
template <typename T>
float dag_ref_one(const T* X, int64_t n, T* dX, float seed) {
    const int64_t nn = n * n;
    std::vector<float> Xf(static_cast<size_t>(nn)), Mf(static_cast<size_t>(nn)),
        E(static_cast<size_t>(nn));
    for (int64_t e = 0; e < nn; ++e) {
        Xf[e] = float(X[e]);
        Mf[e] = Xf[e] * Xf[e];
    }
    bbc_expm<float>(Mf.data(), n, E.data(), T8Flavor::TORCH_1_13);
    const float tr = torch_sum_f32(E.data(), n, n + 1);
    const float dk = float(n);
    const float y = tr / dk;
    const float v = std::log(y);
    const float out = std::fabs(v);
    if (!dX) return out;

    // abs → log → div → diagonal/sum → matrix_exp → mul, as torch autograd runs them.
    const float sgn = v > 0.0f ? 1.0f : (v < 0.0f ? -1.0f : 0.0f);
    const float g1 = seed * sgn;
    const float g2 = g1 / y;
    const float g3 = g2 / dk;
    // matrix_exp backward: upper-right n×n block of expm([[Mᵀ, G], [0, Mᵀ]]), G = g3·I.
    const int64_t m = 2 * n;
    std::vector<float> Bk(size_t(m * m), 0.0f), EB(static_cast<size_t>(m * m));
    for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            Bk[i * m + j] = Mf[j * n + i];
            Bk[(n + i) * m + (n + j)] = Mf[j * n + i];
        }
        Bk[i * m + (n + i)] = g3;
    }
    bbc_expm<float>(Bk.data(), m, EB.data(), T8Flavor::TORCH_1_13);
    for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            const float gM = EB[i * m + (n + j)];
            const float h = gM * Xf[i * n + j];  // mul backward, once per operand
            dX[i * n + j] += T(h + h);
        }
    }
    return out;
}

template float dag_ref_one<float>(const float*, int64_t, float*, float);
template float dag_ref_one<double>(const double*, int64_t, double*, float);

}  // namespace dag_detail

template <typename T>
void expm(const T* A, int64_t n, T* out) {
    PLDR_REQUIRE(n >= 1, "expm: matrix size must be >= 1, got ", n);
    PLDR_REQUIRE(A != out, "expm: out must not alias A");
    bbc_expm<T>(A, n, out, T8Flavor::CORRECT);
}

template void expm<float>(const float*, int64_t, float*);
template void expm<double>(const double*, int64_t, double*);

template <typename T>
void expm_taylor_polynomial(const T* A, int64_t n, int degree, T* out) {
    PLDR_REQUIRE(n >= 1 && A != out, "expm_taylor_polynomial: bad arguments");
    BbcWork<T> w(n);
    switch (degree) {
        case 1:
            return bbc_T1(A, n, out);
        case 2:
            return bbc_T2(A, n, out, w);
        case 4:
            return bbc_T4(A, n, out, w);
        case 8:
            return bbc_T8(A, n, out, w, T8Flavor::CORRECT);
    }
    fail("expm_taylor_polynomial: degree must be 1, 2, 4 or 8 (got ", degree, ")");
}

template void expm_taylor_polynomial<float>(const float*, int64_t, int, float*);
template void expm_taylor_polynomial<double>(const double*, int64_t, int, double*);

}  // namespace pldr
