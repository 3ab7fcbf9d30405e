// The PLGA core operator G_LM(A) (spec §1.8), forward and backward; see plga.h. The element-wise
// steps are the registered variants of the options (ops/plga_variants.h), called once per D×D
// block.
#include "ops/plga.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/blas.h"

namespace pldr {

namespace {

// f32_path: the float32 forward's evaluation in double (the variants' vectorized forwards).
void plga_g_eval(const PlgaOptions& o, const PlgaParams<const double>& p, const double* A,
                 const PlgaSaved<double>& s, bool f32_path) {
    const int64_t D = o.D, DD = D * D;
    gemm(false, false, D, D, D, 1.0, p.W, D, A, D, 0.0, s.Z, D);  // Z = W·A
    for (int64_t i = 0; i < DD; ++i) s.Z[i] += p.b[i];
    const auto f = f32_path && o.positive_map->forward_f32_path ? o.positive_map->forward_f32_path
                                                                : o.positive_map->forward;
    const auto c = f32_path && o.coupling->forward_f32_path ? o.coupling->forward_f32_path
                                                            : o.coupling->forward;
    f(s.Z, s.A_LM, DD);                                               // A_LM = f(Z)
    c(s.A_LM, p.P, s.A_P, DD);                                        // A_P = c(A_LM, P)
    gemm(false, false, D, D, D, 1.0, p.a, D, s.A_P, D, 0.0, s.G, D);  // G = a·A_P
    for (int64_t i = 0; i < DD; ++i) s.G[i] += p.ba[i];
}

}  // namespace

template <typename T>
void plga_g_forward(const PlgaOptions& o, const PlgaParams<const T>& p, const T* A,
                    const PlgaSaved<T>& out) {
    if constexpr (std::is_same_v<T, double>) {
        plga_g_eval(o, p, A, out, false);
    } else {
        // float32: the operator is evaluated in double and rounded once per output. Many A_LM
        // entries sit near the 1e-9 floor, and A_P = A_LM^P amplifies every relative error of
        // those tiny entries: float32 rounding inside W·A + b made our float32 A_P 3× less
        // accurate than the reference's on the golden b_small model (1.35e-4 vs 4.5e-5 of
        // max|A_P|). The D×D work per head is negligible next to the projections.
        const size_t DD = size_t(o.D * o.D);
        std::vector<double> buf(11 * DD);
        double* in[6] = {};
        const T* src[6] = {A, p.W, p.b, p.P, p.a, p.ba};
        for (int i = 0; i < 6; ++i) {
            in[i] = buf.data() + i * DD;
            std::copy(src[i], src[i] + DD, in[i]);
        }
        double *z = buf.data() + 6 * DD, *alm = z + DD, *ap = alm + DD, *g = ap + DD;
        plga_g_eval(o, PlgaParams<const double>{in[1], in[2], in[3], in[4], in[5]}, in[0],
                    PlgaSaved<double>{z, alm, ap, g}, true);
        for (size_t i = 0; i < DD; ++i) {
            out.Z[i] = T(z[i]);
            out.A_LM[i] = T(alm[i]);
            out.A_P[i] = T(ap[i]);
            out.G[i] = T(g[i]);
        }
    }
}

template <typename T>
void plga_g_backward(const PlgaOptions& o, const PlgaParams<const T>& p, const T* A,
                     const PlgaSaved<const T>& s, const PlgaOutGrads<T>& dout, T* dA,
                     const PlgaParams<T>& g, T* scratch) {
    const int64_t D = o.D, DD = D * D;
    T* dAp = scratch;
    T* dZ = scratch + DD;
    for (int64_t i = 0; i < DD; ++i) g.ba[i] += dout.dG[i];
    gemm(false, true, D, D, D, T(1), dout.dG, D, s.A_P, D, T(1), g.a, D);  // da += dG·A_Pᵀ
    gemm(true, false, D, D, D, T(1), p.a, D, dout.dG, D, T(0), dAp, D);    // dA_P = aᵀ·dG
    if (dout.dA_P)
        for (int64_t i = 0; i < DD; ++i) dAp[i] += dout.dA_P[i];
    o.coupling->backward(dZ, g.P, dAp, s.A_LM, s.A_P, p.P, DD);  // dZ holds dA_LM
    if (dout.dA_LM)
        for (int64_t i = 0; i < DD; ++i) dZ[i] += dout.dA_LM[i];
    o.positive_map->backward(dZ, s.Z, s.A_LM, DD);                // dZ = dA_LM ⊙ f'(Z)
    gemm(false, true, D, D, D, T(1), dZ, D, A, D, T(1), g.W, D);  // dW += dZ·Aᵀ
    for (int64_t i = 0; i < DD; ++i) g.b[i] += dZ[i];
    gemm(true, false, D, D, D, T(1), p.W, D, dZ, D, T(1), dA, D);  // dA += Wᵀ·dZ
}

#define PLDR_INSTANTIATE(T)                                                                    \
    template void plga_g_forward<T>(const PlgaOptions&, const PlgaParams<const T>&, const T*,  \
                                    const PlgaSaved<T>&);                                      \
    template void plga_g_backward<T>(const PlgaOptions&, const PlgaParams<const T>&, const T*, \
                                     const PlgaSaved<const T>&, const PlgaOutGrads<T>&, T*,    \
                                     const PlgaParams<T>&, T*);
PLDR_INSTANTIATE(float)
PLDR_INSTANTIATE(double)
#undef PLDR_INSTANTIATE

}  // namespace pldr
