// The metric learner of PLGA (see metric_learner.h), forward and backward side by side.
#include "model/metric_learner.h"

#include <algorithm>

#include "core/blas.h"
#include "core/gemm_bf16.h"
#include "ops/glu.h"
#include "ops/layernorm.h"

namespace pldr {

namespace {

// The GLU chain of one residual unit from its input: y [B,H,D,D]. Each GLU's saved tensors go to
// *keep (num_denseA entries), or, when keep is null, to one set reused along the chain.
template <typename T>
void res_unit_glus(const Config& c, const ResUnitView<T>& rw, int64_t B, const Tensor<T>& in,
                   std::vector<GluActs<T>>* keep, Tensor<T>& y) {
    const int64_t H = c.num_heads, D = c.head_dim, rows = B * H * D;
    y.resize({B, H, D, D});
    GluActs<T> one;
    if (keep) keep->resize(static_cast<size_t>(c.num_denseA));
    for (int64_t n = 0; n < c.num_denseA; ++n) {
        GluActs<T>& g = keep ? (*keep)[size_t(n)] : one;
        g.x = n == 0 ? in : y;
        g.h1.resize_for_overwrite({rows, c.A_dff});
        g.h2.resize_for_overwrite({rows, c.A_dff});
        g.gated.resize_for_overwrite({rows, c.A_dff});
        const GluView<T>& gw = rw.glu[size_t(n)];
        glu_forward(y.ptr(), g.h1.ptr(), g.h2.ptr(), g.gated.ptr(), g.x.ptr(),
                    GluParams<T>{gw.w1, gw.b1, gw.w2, gw.b2, gw.w3, gw.b3}, rows, D, c.A_dff, D);
    }
}

}  // namespace

template <typename T>
void metric_learner_forward(const Model<T>& m, const LayerView<T>& w, int64_t B, int64_t S,
                            const T* q_all, LayerActs<T>& la) {
    // The learner's chain stays float32 under mixed precision (spec §5.2: its power law
    // amplifies rounding; it is a small share of the FLOPs).
    const Bf16Autocast fp32(Precision::FP32);
    const Config& c = m.cfg;
    const int64_t H = c.num_heads, D = c.head_dim, d = c.hidden_size;
    const int64_t rows = B * H * D;
    la.A0.resize_for_overwrite({B, H, D, D});
#pragma omp parallel for collapse(2) if (B * H * S * D * D > kParallelWork)
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h) {
            const T* q = q_all + b * S * d + h * D;  // [S,D] with row stride d
            gemm(true, false, D, D, S, T(1), q, d, q, d, T(0), la.A0.ptr() + (b * H + h) * D * D,
                 D);
        }
    la.A_ln.resize_for_overwrite({B, H, D, D});
    la.lnA_mean.resize({rows});
    la.lnA_rstd.resize({rows});
    layernorm_forward(la.A_ln.ptr(), la.lnA_mean.ptr(), la.lnA_rstd.ptr(), la.A0.ptr(), w.lnA_g,
                      w.lnA_b, rows, D, c.layer_norm_eps);
    la.res.resize(static_cast<size_t>(c.num_reslayerA));
    const Tensor<T>* cur = &la.A_ln;
    for (int64_t r = 0; r < c.num_reslayerA; ++r) {
        ResUnitActs<T>& ru = la.res[size_t(r)];
        const ResUnitView<T>& rw = w.res[size_t(r)];
        ru.in = *cur;
        Tensor<T> y;
        res_unit_glus<T>(c, rw, B, ru.in, nullptr, y);
        ru.sum.resize({B, H, D, D});
        for (int64_t i = 0; i < ru.sum.numel(); ++i) ru.sum[i] = y[i] + ru.in[i];
        ru.mean.resize({rows});
        ru.rstd.resize({rows});
        Tensor<T>& out = (r + 1 == c.num_reslayerA) ? la.A : y;
        out.resize({B, H, D, D});
        layernorm_forward(out.ptr(), ru.mean.ptr(), ru.rstd.ptr(), ru.sum.ptr(), rw.ln_g, rw.ln_b,
                          rows, D, c.layer_norm_eps);
        if (r + 1 < c.num_reslayerA) {
            la.A = out;  // keep the chain: next unit reads la.A via cur
            cur = &la.A;
        }
    }
    if (c.num_reslayerA == 0) la.A = la.A_ln;
}

namespace {

// The inference chain's buffers, one set per thread, reused from call to call (they grow to the
// largest B seen and stay): no allocation and no first-touch page faults once warm.
template <typename T>
struct LearnerWorkspace {
    std::vector<T> cur, y0, y1, h1, h2, gated, mean, rstd;
};

template <typename T>
T* sized(std::vector<T>& v, int64_t n) {
    if (int64_t(v.size()) < n) v.resize(static_cast<size_t>(n));
    return v.data();
}

}  // namespace

template <typename T>
void metric_learner_output(const Model<T>& m, const LayerView<T>& w, int64_t B, int64_t S,
                           const T* q_all, Tensor<T>& A) {
    const Bf16Autocast fp32(Precision::FP32);  // as metric_learner_forward
    const Config& c = m.cfg;
    const int64_t H = c.num_heads, D = c.head_dim, d = c.hidden_size;
    const int64_t rows = B * H * D, n = rows * D, nf = rows * c.A_dff;
    thread_local LearnerWorkspace<T> ws;
    T* cur = sized(ws.cur, n);
    T* ys[2] = {sized(ws.y0, n), sized(ws.y1, n)};
    T* h1 = sized(ws.h1, nf);
    T* h2 = sized(ws.h2, nf);
    T* gated = sized(ws.gated, nf);
    T* mean = sized(ws.mean, rows);
    T* rstd = sized(ws.rstd, rows);
    A.resize_for_overwrite({B, H, D, D});
    // The operations of metric_learner_forward in its order, on other buffers: the same bits.
    T* a0 = ys[0];
#pragma omp parallel for collapse(2) if (B * H * S * D * D > kParallelWork)
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            gemm(true, false, D, D, S, T(1), q_all + b * S * d + h * D, d,
                 q_all + b * S * d + h * D, d, T(0), a0 + (b * H + h) * D * D, D);
    layernorm_forward(c.num_reslayerA == 0 ? A.ptr() : cur, mean, rstd, a0, w.lnA_g, w.lnA_b, rows,
                      D, c.layer_norm_eps);
    for (int64_t r = 0; r < c.num_reslayerA; ++r) {
        const ResUnitView<T>& rw = w.res[size_t(r)];
        const T* x = cur;
        T* y = ys[0];
        if (c.num_denseA == 0) std::fill(y, y + n, T(0));
        for (int64_t k = 0; k < c.num_denseA; ++k) {
            y = ys[k % 2];
            const GluView<T>& gw = rw.glu[size_t(k)];
            glu_forward(y, h1, h2, gated, x, GluParams<T>{gw.w1, gw.b1, gw.w2, gw.b2, gw.w3, gw.b3},
                        rows, D, c.A_dff, D);
            x = y;
        }
        for (int64_t i = 0; i < n; ++i) y[i] = y[i] + cur[i];  // the unit's sum, in place
        layernorm_forward(r + 1 == c.num_reslayerA ? A.ptr() : cur, mean, rstd, y, rw.ln_g, rw.ln_b,
                          rows, D, c.layer_norm_eps);
    }
}

template <typename T>
void metric_learner_backward(const Model<T>& m, const LayerView<T>& w, const T* q_all,
                             const LayerActs<T>& la, int64_t B, int64_t S, Tensor<T>& dA,
                             LayerView<T>& gw, Tensor<T>& dq) {
    const Bf16Autocast fp32(Precision::FP32);  // as the forward
    const Config& c = m.cfg;
    const int64_t H = c.num_heads, D = c.head_dim, d = c.hidden_size, DD = D * D;
    // Res units in reverse, then LN_A, then A0 = qᵀq.
    const int64_t rows = B * H * D;
    for (int64_t r = c.num_reslayerA - 1; r >= 0; --r) {
        const ResUnitActs<T>& ru = la.res[size_t(r)];
        const ResUnitView<T>& rw = w.res[size_t(r)];
        ResUnitView<T>& rg = gw.res[size_t(r)];
        std::vector<GluActs<T>> glus;  // this unit's GLUs once more, from its input
        Tensor<T> y;
        res_unit_glus(c, rw, B, ru.in, &glus, y);
        // A training forward kept only the unit's input: its sum and LayerNorm statistics
        // again (the forward's code on the same values: the same bits).
        Tensor<T> sum_again, mean_again, rstd_again;
        const bool again = ru.sum.numel() == 0;
        if (again) {
            sum_again.resize_for_overwrite({B, H, D, D});
            for (int64_t i = 0; i < sum_again.numel(); ++i) sum_again[i] = y[i] + ru.in[i];
            mean_again.resize({rows});
            rstd_again.resize({rows});
            layernorm_forward(y.ptr(), mean_again.ptr(), rstd_again.ptr(), sum_again.ptr(), rw.ln_g,
                              rw.ln_b, rows, D, c.layer_norm_eps);
        }
        Tensor<T> dsum({B, H, D, D});
        layernorm_backward(dsum.ptr(), rg.ln_g, rg.ln_b, dA.ptr(),
                           (again ? sum_again : ru.sum).ptr(), (again ? mean_again : ru.mean).ptr(),
                           (again ? rstd_again : ru.rstd).ptr(), rw.ln_g, rows, D);
        Tensor<T> dy = dsum;
        std::vector<T> sc(static_cast<size_t>(2 * rows * c.A_dff));
        for (int64_t n = c.num_denseA - 1; n >= 0; --n) {
            const GluActs<T>& ga = glus[size_t(n)];
            const GluView<T>& gv = rw.glu[size_t(n)];
            GluView<T>& gg = rg.glu[size_t(n)];
            Tensor<T> dxn({B, H, D, D});
            glu_backward(dxn.ptr(), GluGrads<T>{gg.w1, gg.b1, gg.w2, gg.b2, gg.w3, gg.b3}, dy.ptr(),
                         ga.x.ptr(), ga.h1.ptr(), ga.h2.ptr(), ga.gated.ptr(),
                         GluParams<T>{gv.w1, gv.b1, gv.w2, gv.b2, gv.w3, gv.b3}, rows, D, c.A_dff,
                         D, sc.data());
            dy = std::move(dxn);
        }
        for (int64_t i = 0; i < dA.numel(); ++i) dA[i] = dsum[i] + dy[i];  // d(unit input)
    }
    Tensor<T> dA0({B, H, D, D});
    layernorm_backward(dA0.ptr(), gw.lnA_g, gw.lnA_b, dA.ptr(), la.A0.ptr(), la.lnA_mean.ptr(),
                       la.lnA_rstd.ptr(), w.lnA_g, rows, D);
    // A0 = qᵀq ⇒ dq += q·(dA0 + dA0ᵀ)
#pragma omp parallel for collapse(2) if (B * H * S * D * D > kParallelWork)
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h) {
            const T* g0 = dA0.ptr() + (b * H + h) * DD;
            std::vector<T> sym(static_cast<size_t>(DD));
            for (int64_t i = 0; i < D; ++i)
                for (int64_t j = 0; j < D; ++j) sym[i * D + j] = g0[i * D + j] + g0[j * D + i];
            const T* q = q_all + b * S * d + h * D;
            gemm(false, false, S, D, D, T(1), q, d, sym.data(), D, T(1),
                 dq.ptr() + b * S * d + h * D, d);
        }
}

#define PLDR_INSTANTIATE(T)                                                                        \
    template void metric_learner_forward<T>(const Model<T>&, const LayerView<T>&, int64_t,         \
                                            int64_t, const T*, LayerActs<T>&);                     \
    template void metric_learner_output<T>(const Model<T>&, const LayerView<T>&, int64_t, int64_t, \
                                           const T*, Tensor<T>&);                                  \
    template void metric_learner_backward<T>(const Model<T>&, const LayerView<T>&, const T*,       \
                                             const LayerActs<T>&, int64_t, int64_t, Tensor<T>&,    \
                                             LayerView<T>&, Tensor<T>&);
PLDR_INSTANTIATE(float)
PLDR_INSTANTIATE(double)
#undef PLDR_INSTANTIATE

}  // namespace pldr
