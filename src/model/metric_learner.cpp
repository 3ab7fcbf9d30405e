// The metric learner of PLGA (see metric_learner.h), forward and backward side by side: the
// rows of its chain in blocks over the threads, through the kernels of ops/ (A0 = Qᵀ·Q:
// ops/attention.h; the GLUs and LayerNorms: ops/glu.h, ops/layernorm.h).
#include "model/metric_learner.h"

#include <algorithm>
#include <utility>

#include "core/alloc.h"  // kCachedPagesMin
#include "core/gemm_bf16.h"
#include "core/parallel.h"
#include "core/zero.h"
#include "ops/attention.h"
#include "ops/glu.h"
#include "ops/layernorm.h"

namespace pldr {

namespace {

// The learner's rows. Every row of every head's A (B·H·D rows of D) goes through the same chain
// on its own: the GLUs act on rows and each LayerNorm normalizes one row. So the chain runs in
// blocks of rows, one or a few per thread, each thread through all the units with one-thread
// products, in one OpenMP region per layer. Before, each of the 3·N·R products (48 at 110M) woke
// OpenBLAS's team for a product of 10M multiply-adds at most: the learner took 42 % of a 110M
// prefill for 27 % of its FLOPs. Every caller (the forward that keeps activations, the inference
// output, the backward's recomputation) splits the rows the same way, so they all get the same
// bits.
constexpr int64_t kLearnerParallelWork = kParallelWork;
// At most this many rows per block, and so per pass through a unit: a block's GLU temporaries
// ([rows, A_dff] three times) then stay in a 2 MB L2. A 110M training batch has 7,168 rows; in
// two blocks of 3,584 they did not (measured, 3 steps: the learner's forward 1.00 / 1.27 s →
// 0.89 / 0.94, its backward 3.03 / 2.99 → 2.67 / 2.80, and 25 MB less peak memory). Prefills
// (896 rows at 110M, 256 at M) keep one block per thread.
constexpr int64_t kLearnerBlockRows = 512;

// How the rows split: `blocks` blocks of `size` rows (the last one shorter), on `threads`.
struct RowSplit {
    int64_t blocks, size;
    int threads;
};

RowSplit row_split(const Config& c, int64_t rows) {
    const int64_t work = rows * c.head_dim * c.A_dff * 3 * c.num_denseA * c.num_reslayerA;
    const int nt = work >= kLearnerParallelWork && !omp_in_parallel() ? omp_get_max_threads() : 1;
    const int64_t forced = metric_learner_row_blocks();
    // A multiple of the thread count of blocks of at most kLearnerBlockRows rows.
    const int64_t per_thread = (rows + kLearnerBlockRows * nt - 1) / (kLearnerBlockRows * nt);
    const int64_t blocks =
        std::max<int64_t>(1, std::min(rows, forced > 0 ? forced : per_thread * nt));
    return {blocks, (rows + blocks - 1) / blocks, nt};
}

// f(block, lo, hi) for each block of rows, the blocks spread over the threads one at a time as
// each thread gets free (a block's bits do not depend on its thread; the two threads of a VM do
// not run at the same pace: in a 110M step one finished its static share 5-6 ms early).
template <typename F>
void for_row_blocks(const RowSplit& sp, int64_t rows, F&& f) {
    if (sp.blocks == 1) {
        f(int64_t(0), int64_t(0), rows);
        return;
    }
#pragma omp parallel for schedule(dynamic, 1) num_threads(sp.threads) if (sp.threads > 1)
    for (int64_t i = 0; i < sp.blocks; ++i) {
        const int64_t lo = std::min(rows, i * sp.size), hi = std::min(rows, lo + sp.size);
        if (lo < hi) f(i, lo, hi);
    }
}

// Per-thread buffers of the chain, reused from call to call (they grow to the largest block).
template <typename T>
struct LearnerWorkspace {
    std::vector<T> a0, cur, y, t0, t1, h1, h2, gated, mean, rstd;  // forward
    std::vector<T> dy, dx, sc;                                     // backward
};

template <typename T>
T* sized(std::vector<T>& v, int64_t n) {
    if (int64_t(v.size()) < n) v.resize(static_cast<size_t>(n));
    return v.data();
}

template <typename T>
LearnerWorkspace<T>& workspace() {
    thread_local LearnerWorkspace<T> ws;
    return ws;
}

// Where a GLU of the chain keeps its input, h1, h2 and gate ([n,D], [n,F] × 3).
template <typename T>
struct GluRows {
    T *x, *h1, *h2, *gated;
};

// The N GLUs of one unit on n rows: x [n,D] → y [n,D]. keep (N entries): each GLU's input, h1,
// h2 and gate go there (the backward's recomputation); else to the thread's workspace.
template <typename T>
void glu_chain_rows(const Config& c, const ResUnitView<T>& rw, const T* x, int64_t n,
                    const GluRows<T>* keep, T* y) {
    const int64_t D = c.head_dim, F = c.A_dff, N = c.num_denseA;
    LearnerWorkspace<T>& ws = workspace<T>();
    if (N == 0) std::fill(y, y + n * D, T(0));
    if (keep && N > 0) std::copy(x, x + n * D, keep[0].x);
    for (int64_t k = 0; k < N; ++k) {
        T *h1, *h2, *gated, *out;
        if (keep) {
            x = keep[k].x;
            h1 = keep[k].h1;
            h2 = keep[k].h2;
            gated = keep[k].gated;
            out = k + 1 < N ? keep[k + 1].x : y;
        } else {
            h1 = sized(ws.h1, n * F);
            h2 = sized(ws.h2, n * F);
            gated = sized(ws.gated, n * F);
            out = k + 1 < N ? sized(k % 2 ? ws.t1 : ws.t0, n * D) : y;
        }
        const GluView<T>& gw = rw.glu[size_t(k)];
        glu_forward(out, h1, h2, gated, x, GluParams<T>{gw.w1, gw.b1, gw.w2, gw.b2, gw.w3, gw.b3},
                    n, D, F, D);
        x = out;
    }
}

// What the forward that keeps the learner's activations keeps (see metric_learner_forward).
template <typename T>
struct LearnerKeep {
    T *A_ln, *lnA_mean, *lnA_rstd;
    std::vector<ResUnitActs<T>>* res;
};

// The chain from A0 to A on the rows [lo, hi): LN_A, then each unit's GLUs, + its input,
// LayerNorm. keep: the activations go to their rows of the kept tensors; else (inference) to
// the thread's workspace, with each unit's sum formed in place.
template <typename T>
void learner_rows(const Config& c, const LayerView<T>& w, const T* A0, int64_t lo, int64_t hi,
                  const LearnerKeep<T>* keep, T* A) {
    const int64_t D = c.head_dim, n = hi - lo, R = c.num_reslayerA;
    LearnerWorkspace<T>& ws = workspace<T>();
    T* cur = keep ? keep->A_ln + lo * D : (R == 0 ? A + lo * D : sized(ws.cur, n * D));
    layernorm_forward(cur, keep ? keep->lnA_mean + lo : sized(ws.mean, n),
                      keep ? keep->lnA_rstd + lo : sized(ws.rstd, n), A0 + lo * D, w.lnA_g, w.lnA_b,
                      n, D, c.layer_norm_eps);
    if (keep && R == 0) std::copy(cur, cur + n * D, A + lo * D);
    for (int64_t r = 0; r < R; ++r) {
        const ResUnitView<T>& rw = w.res[size_t(r)];
        ResUnitActs<T>* ru = keep ? &(*keep->res)[size_t(r)] : nullptr;
        T* in = ru ? ru->in.ptr() + lo * D : cur;
        if (in != cur) std::copy(cur, cur + n * D, in);  // unit 0 keeps a copy of LN_A's output
        T* y = sized(ws.y, n * D);
        glu_chain_rows<T>(c, rw, in, n, nullptr, y);
        T* sum = ru ? ru->sum.ptr() + lo * D : y;  // inference: in place
        for (int64_t i = 0; i < n * D; ++i) sum[i] = y[i] + in[i];
        T* out = r + 1 == R ? A + lo * D : ru ? (*keep->res)[size_t(r + 1)].in.ptr() + lo * D : cur;
        layernorm_forward(out, ru ? ru->mean.ptr() + lo : sized(ws.mean, n),
                          ru ? ru->rstd.ptr() + lo : sized(ws.rstd, n), sum, rw.ln_g, rw.ln_b, n, D,
                          c.layer_norm_eps);
        cur = out;
    }
}

// A0 = Qᵀ·Q per (b,h) into A0 [B,H,D,D].
template <typename T>
void learner_a0(const Config& c, int64_t B, int64_t S, const T* q_all, T* A0) {
    const int64_t H = c.num_heads, D = c.head_dim, d = c.hidden_size;
    parallel_for_2d(B, H, B * H * S * D * D > kParallelWork, [&](int64_t b, int64_t h) {
        gram_forward(q_all + b * S * d + h * D, d, S, D, A0 + (b * H + h) * D * D);
    });
}

// One block's share of a residual unit's parameter gradients, in a zeroed buffer of its own
// (the blocks' shares are added to the model's gradients in block order afterwards).
template <typename T>
struct UnitGrads {
    std::vector<T> buf;
    ResUnitView<T> v;
    explicit UnitGrads(const Config& c) {
        const int64_t D = c.head_dim, F = c.A_dff;
        buf.assign(static_cast<size_t>(2 * D + c.num_denseA * (3 * F * D + 2 * F + D)), T(0));
        T* p = buf.data();
        auto take = [&p](int64_t n) { return std::exchange(p, p + n); };
        v.ln_g = take(D);
        v.ln_b = take(D);
        v.glu.resize(static_cast<size_t>(c.num_denseA));
        for (GluView<T>& g : v.glu) {
            g.w1 = take(F * D);
            g.b1 = take(F);
            g.w2 = take(F * D);
            g.b2 = take(F);
            g.w3 = take(D * F);
            g.b3 = take(D);
        }
    }
    // dst += this share.
    void add_to(const Config& c, ResUnitView<T>& dst) const {
        const int64_t D = c.head_dim, F = c.A_dff;
        auto add = [](T* d, const T* s, int64_t n) {
            for (int64_t i = 0; i < n; ++i) d[i] += s[i];
        };
        add(dst.ln_g, v.ln_g, D);
        add(dst.ln_b, v.ln_b, D);
        for (size_t k = 0; k < v.glu.size(); ++k) {
            const GluView<T>& s = v.glu[k];
            GluView<T>& d = dst.glu[k];
            add(d.w1, s.w1, F * D);
            add(d.b1, s.b1, F);
            add(d.w2, s.w2, F * D);
            add(d.b2, s.b2, F);
            add(d.w3, s.w3, D * F);
            add(d.b3, s.b3, D);
        }
    }
};

}  // namespace

int64_t& metric_learner_row_blocks() {
    static int64_t n = 0;
    return n;
}

template <typename T>
void metric_learner_forward(const Model<T>& m, const LayerView<T>& w, int64_t B, int64_t S,
                            const T* q_all, LayerActs<T>& la) {
    // The learner's chain stays float32 under mixed precision (spec §5.2: its power law
    // amplifies rounding; it is a small share of the FLOPs).
    const Bf16Autocast fp32(Precision::FP32);
    const Config& c = m.cfg;
    const int64_t H = c.num_heads, D = c.head_dim, rows = B * H * D;
    la.A0.resize_for_overwrite({B, H, D, D});
    learner_a0(c, B, S, q_all, la.A0.ptr());
    la.A_ln.resize_for_overwrite({B, H, D, D});
    la.lnA_mean.resize_for_overwrite({rows});
    la.lnA_rstd.resize_for_overwrite({rows});
    la.res.resize(static_cast<size_t>(c.num_reslayerA));
    for (ResUnitActs<T>& ru : la.res) {
        ru.in.resize_for_overwrite({B, H, D, D});
        ru.sum.resize_for_overwrite({B, H, D, D});
        ru.mean.resize_for_overwrite({rows});
        ru.rstd.resize_for_overwrite({rows});
    }
    la.A.resize_for_overwrite({B, H, D, D});
    const LearnerKeep<T> keep{la.A_ln.ptr(), la.lnA_mean.ptr(), la.lnA_rstd.ptr(), &la.res};
    for_row_blocks(row_split(c, rows), rows, [&](int64_t, int64_t lo, int64_t hi) {
        learner_rows(c, w, la.A0.ptr(), lo, hi, &keep, la.A.ptr());
    });
}

template <typename T>
void metric_learner_output(const Model<T>& m, const LayerView<T>& w, int64_t B, int64_t S,
                           const T* q_all, Tensor<T>& A) {
    const Bf16Autocast fp32(Precision::FP32);  // as metric_learner_forward
    const Config& c = m.cfg;
    const int64_t H = c.num_heads, D = c.head_dim, rows = B * H * D;
    T* A0 = sized(workspace<T>().a0, rows * D);  // the calling thread's; the blocks read it
    learner_a0(c, B, S, q_all, A0);
    A.resize_for_overwrite({B, H, D, D});
    for_row_blocks(row_split(c, rows), rows, [&](int64_t, int64_t lo, int64_t hi) {
        learner_rows<T>(c, w, A0, lo, hi, nullptr, A.ptr());
    });
}

int64_t metric_learner_pair_blocks(const Config& c, int64_t pairs) {
    const int64_t D = c.head_dim, rows = pairs * D;
    const RowSplit sp = row_split(c, rows);
    const bool whole = sp.threads > 1 && sp.blocks == sp.threads && sp.size % D == 0 &&
                       sp.size * sp.blocks == rows;
    return whole ? sp.blocks : 0;
}

template <typename T>
void metric_learner_output_rows(const Model<T>& m, const LayerView<T>& w, const T* A0, int64_t lo,
                                int64_t hi, T* A) {
    const Bf16Autocast fp32(Precision::FP32);  // as metric_learner_output
    learner_rows<T>(m.cfg, w, A0, lo, hi, nullptr, A);
}

template void metric_learner_output_rows<float>(const Model<float>&, const LayerView<float>&,
                                                const float*, int64_t, int64_t, float*);
template void metric_learner_output_rows<double>(const Model<double>&, const LayerView<double>&,
                                                 const double*, int64_t, int64_t, double*);

template <typename T>
void metric_learner_backward(const Model<T>& m, const LayerView<T>& w, const T* q_all,
                             const LayerActs<T>& la, int64_t B, int64_t S, Tensor<T>& dA,
                             LayerView<T>& gw, Tensor<T>& dq) {
    const Bf16Autocast fp32(Precision::FP32);  // as the forward
    const Config& c = m.cfg;
    const int64_t H = c.num_heads, D = c.head_dim, d = c.hidden_size, DD = D * D;
    // Res units in reverse, then LN_A, then A0 = qᵀq.
    const int64_t rows = B * H * D;
    const RowSplit sp = row_split(c, rows);
    const int64_t F = c.A_dff;
    // Each thread's block buffers, in one block of at least kCachedPagesMin bytes (pages from the
    // page cache, core/alloc.h): its unit's GLUs again, their output, the unit's sum and
    // statistics. This call's, not the thread's workspace: they go when the backward is done.
    const int64_t N = c.num_denseA, nb = sp.size;
    const int64_t per_thread = std::max<int64_t>(N * (nb * D + 3 * nb * F) + 2 * nb * D + 2 * nb,
                                                 int64_t(kCachedPagesMin / sizeof(T)));
    Tensor<T> bufs;
    bufs.resize_for_overwrite({sp.threads * per_thread});
    for (int64_t r = c.num_reslayerA - 1; r >= 0; --r) {
        const ResUnitActs<T>& ru = la.res[size_t(r)];
        const ResUnitView<T>& rw = w.res[size_t(r)];
        ResUnitView<T>& rg = gw.res[size_t(r)];
        // Each block of rows back through the unit; its parameter gradients go to its own
        // share (with one block: straight to gw). A block first runs the unit's GLUs once more
        // from its input, into its thread's buffers, where the backward finds them in cache; and
        // where a training forward kept only that input, the unit's sum and LayerNorm statistics
        // again. The forward's blocks and code on the same values: the same bits.
        const bool again = ru.sum.numel() == 0;
        std::vector<UnitGrads<T>> shares;
        for (int64_t i = 0; sp.blocks > 1 && i < sp.blocks; ++i) shares.emplace_back(c);
        for_row_blocks(sp, rows, [&](int64_t blk, int64_t lo, int64_t hi) {
            const int64_t n = hi - lo, o = lo * D;
            ResUnitView<T>& g = sp.blocks > 1 ? shares[size_t(blk)].v : rg;
            LearnerWorkspace<T>& ws = workspace<T>();
            T* p = bufs.ptr() + (sp.blocks > 1 ? omp_get_thread_num() : 0) * per_thread;
            auto take = [&p](int64_t k) { return std::exchange(p, p + k); };
            std::vector<GluRows<T>> glus(static_cast<size_t>(N));
            for (GluRows<T>& ga : glus) ga = {take(n * D), take(n * F), take(n * F), take(n * F)};
            T* yb = take(n * D);
            glu_chain_rows(c, rw, ru.in.ptr() + o, n, glus.data(), yb);
            const T* sum = again ? nullptr : ru.sum.ptr() + o;
            const T* mean = again ? nullptr : ru.mean.ptr() + lo;
            const T* rstd = again ? nullptr : ru.rstd.ptr() + lo;
            if (again) {
                T* sb = take(n * D);
                for (int64_t i = 0; i < n * D; ++i) sb[i] = yb[i] + ru.in[o + i];
                T* mb = take(n);
                T* rb = take(n);
                layernorm_forward(yb, mb, rb, sb, rw.ln_g, rw.ln_b, n, D, c.layer_norm_eps);
                sum = sb;
                mean = mb;
                rstd = rb;
            }
            T* dsum = sized(ws.y, n * D);
            std::fill(dsum, dsum + n * D, T(0));
            layernorm_backward(dsum, g.ln_g, g.ln_b, dA.ptr() + o, sum, mean, rstd, rw.ln_g, n, D);
            T* dy = sized(ws.dy, n * D);
            T* dx = sized(ws.dx, n * D);
            std::copy(dsum, dsum + n * D, dy);
            T* sc = sized(ws.sc, 2 * n * F);
            for (int64_t k = c.num_denseA - 1; k >= 0; --k) {
                const GluRows<T>& ga = glus[size_t(k)];
                const GluView<T>& gv = rw.glu[size_t(k)];
                GluView<T>& gg = g.glu[size_t(k)];
                std::fill(dx, dx + n * D, T(0));
                glu_backward(dx, GluGrads<T>{gg.w1, gg.b1, gg.w2, gg.b2, gg.w3, gg.b3}, dy, ga.x,
                             ga.h1, ga.h2, ga.gated,
                             GluParams<T>{gv.w1, gv.b1, gv.w2, gv.b2, gv.w3, gv.b3}, n, D, F, D,
                             sc);
                std::swap(dy, dx);
            }
            for (int64_t i = 0; i < n * D; ++i) dA[o + i] = dsum[i] + dy[i];  // d(unit input)
        });
        for (const UnitGrads<T>& share : shares) share.add_to(c, rg);
    }
    Tensor<T> dA0 = zeros_on_team<T>({B, H, D, D});
    layernorm_backward(dA0.ptr(), gw.lnA_g, gw.lnA_b, dA.ptr(), la.A0.ptr(), la.lnA_mean.ptr(),
                       la.lnA_rstd.ptr(), w.lnA_g, rows, D);
    // A0 = qᵀq ⇒ dq += q·(dA0 + dA0ᵀ)
    parallel_for_2d(B, H, B * H * S * D * D > kParallelWork, [&](int64_t b, int64_t h) {
        gram_backward(dq.ptr() + b * S * d + h * D, q_all + b * S * d + h * D, d,
                      dA0.ptr() + (b * H + h) * DD, S, D);
    });
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
