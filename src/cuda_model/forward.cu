// The PLDR-LLM forward pass on the GPU (see forward.h): the CPU's steps (model/forward.cpp,
// model/plga_layer.cpp, model/plga_attention.cpp, model/metric_learner.cpp) in the same order,
// from the backend's kernels and cuBLASLt products, with the few element-wise kernels of its own
// below (the embedding gather, residual sums, per-head broadcasts, the masked softmax, casts).
#include <cmath>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/gemm.h"
#include "cuda_model/forward.h"
#include "model/forward.h"

namespace pldr::cuda {

namespace {

// ---- the pass's own element-wise kernels
// ---------------------------------------------------------

// x0[n, :] = emb[ids[n], :]·scale
template <class T>
__global__ void __launch_bounds__(kThreads)
    embed_kernel(T* x0, const T* emb, const int64_t* ids, int64_t N, int64_t d, T scale) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < N * d;
         i += int64_t(gridDim.x) * blockDim.x)
        x0[i] = emb[ids[i / d] * d + i % d] * scale;
}

// out = a + b (the residual sums; out may be a or b)
template <class T>
__global__ void __launch_bounds__(kThreads) add_kernel(T* out, const T* a, const T* b, int64_t n) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        out[i] = a[i] + b[i];
}

// x[i] += p[i mod period]: a per-head D×D parameter added to each sequence's [H,D,D] block
template <class T>
__global__ void __launch_bounds__(kThreads)
    add_periodic_kernel(T* x, const T* p, int64_t n, int64_t period) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        x[i] += p[i % period];
}

// dst[i] = src[i mod period] (a fixed G for every sequence)
template <class T>
__global__ void __launch_bounds__(kThreads)
    tile_kernel(T* dst, const T* src, int64_t n, int64_t period) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        dst[i] = src[i % period];
}

template <class To, class From>
__global__ void __launch_bounds__(kThreads) cast_kernel(To* dst, const From* src, int64_t n) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        dst[i] = To(src[i]);
}

// The scores of one (b,h) block [S,S] in place: Ep = s / scale (kept when ep is not null),
// E = softmax over the row of Ep + (−1e9 where key j > query i or key j is the pad token), as
// ops/attention.cpp (head_attention_forward) and ops/dense.cpp (softmax_forward) compute them:
// the row's maximum, exp(x − max), the sum, each divided by it. One block per row; grid (S, B·H).
template <class T>
__global__ void __launch_bounds__(kThreads)
    masked_softmax_kernel(T* E, T* ep, const T* scores, const int64_t* ids, int64_t S, int64_t H,
                          T scale, int64_t pad) {
    const int64_t i = blockIdx.x, bh = blockIdx.y, b = bh / H;
    const T* sr = scores + (bh * S + i) * S;
    T* er = E + (bh * S + i) * S;
    T* epr = ep ? ep + (bh * S + i) * S : nullptr;
    const int64_t* key = ids + b * S;
    __shared__ T red[kThreads];
    // x_j = s_j / scale (+ the mask), kept in E; the row's maximum.
    T mx = T(-INFINITY);
    for (int64_t j = threadIdx.x; j < S; j += blockDim.x) {
        T x = sr[j] / scale;
        if (epr) epr[j] = x;
        if (j > i || key[j] == pad) x += T(-1e9);
        er[j] = x;
        mx = x > mx ? x : mx;
    }
    red[threadIdx.x] = mx;
    __syncthreads();
    for (int w = kThreads / 2; w > 0; w /= 2) {
        if (int(threadIdx.x) < w && red[threadIdx.x + w] > red[threadIdx.x])
            red[threadIdx.x] = red[threadIdx.x + w];
        __syncthreads();
    }
    mx = red[0];
    __syncthreads();
    T sum = 0;
    for (int64_t j = threadIdx.x; j < S; j += blockDim.x) {
        const T y = exp(er[j] - mx);
        er[j] = y;
        sum += y;
    }
    red[threadIdx.x] = sum;
    __syncthreads();
    for (int w = kThreads / 2; w > 0; w /= 2) {
        if (int(threadIdx.x) < w) red[threadIdx.x] += red[threadIdx.x + w];
        __syncthreads();
    }
    sum = red[0];
    for (int64_t j = threadIdx.x; j < S; j += blockDim.x) er[j] /= sum;
}

template <class T>
void add(T* out, const T* a, const T* b, int64_t n, Stream s) {
    if (n == 0) return;
    add_kernel<T><<<grid_for(n), kThreads, 0, s>>>(out, a, b, n);
    PLDR_CUDA_LAUNCHED("add");
}
template <class T>
void add_periodic(T* x, const T* p, int64_t n, int64_t period, Stream s) {
    if (n == 0) return;
    add_periodic_kernel<T><<<grid_for(n), kThreads, 0, s>>>(x, p, n, period);
    PLDR_CUDA_LAUNCHED("add_periodic");
}
template <class To, class From>
void cast(To* dst, const From* src, int64_t n, Stream s) {
    if (n == 0) return;
    cast_kernel<To, From><<<grid_for(n), kThreads, 0, s>>>(dst, src, n);
    PLDR_CUDA_LAUNCHED("cast");
}

// The products in T: row-major C = op(A)·op(B) (+ bias), through cuBLASLt.
inline void mm(Gemm& g, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A,
               int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc,
               const float* bias = nullptr, const GemmBatch& batch = {}) {
    g.f32(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc, bias, batch);
}
inline void mm(Gemm& g, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double* A,
               int64_t lda, const double* B, int64_t ldb, double* C, int64_t ldc,
               const double* bias = nullptr, const GemmBatch& batch = {}) {
    g.f64(ta, tb, M, N, K, 1.0, A, lda, B, ldb, 0.0, C, ldc, bias, batch);
}

// An operand's offsets, in elements, from one sequence to the next and from one head to the next.
struct Strides {
    int64_t b, h;
};
// The same product for every (sequence b, head h) pair: one strided batch over the larger of B
// and H per value of the smaller (a stride of 0 repeats an operand: a head's parameter for
// every sequence).
template <class T>
void mm_heads(Gemm& g, int64_t B, int64_t H, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
              const T* A, int64_t lda, Strides sa, const T* Bm, int64_t ldb, Strides sb, T* C,
              int64_t ldc, Strides sc) {
    if (B >= H) {
        for (int64_t h = 0; h < H; ++h)
            mm(g, ta, tb, M, N, K, A + h * sa.h, lda, Bm + h * sb.h, ldb, C + h * sc.h, ldc,
               nullptr, GemmBatch{B, sa.b, sb.b, sc.b});
    } else {
        for (int64_t b = 0; b < B; ++b)
            mm(g, ta, tb, M, N, K, A + b * sa.b, lda, Bm + b * sb.b, ldb, C + b * sc.b, ldc,
               nullptr, GemmBatch{H, sa.h, sb.h, sc.h});
    }
}
// y[N,O] = x[N,I]·Wᵀ + b (W [O,I] row-major: the linear layers' convention)
template <class T>
void linear(Gemm& g, T* y, const T* x, const T* W, const T* b, int64_t N, int64_t I, int64_t O) {
    mm(g, false, true, N, O, I, x, I, W, I, y, O, b);
}

}  // namespace

// ---- the model on the device -------------------------------------------------------------------

namespace {

// Makes `device` the calling thread's current device (before anything of the model's is made).
struct Selected {
    int device;
    explicit Selected(int d) : device(d) { select(); }
    void select() const {
        PLDR_REQUIRE(device >= 0, "CUDA device index ", device, " is negative");
        PLDR_CUDA_CALL(cudaSetDevice(device));
    }
};

}  // namespace

template <class T>
struct DeviceModel<T>::Impl {
    const Model<T>& m;
    Selected on;  // first: the members below are made on that device
    Stream stream = nullptr;
    Gemm gemm;
    Scratch<T> params, G_fixed;
    // The operator's parameters in float64, [L][5][H,D,D] (W, b, P, a, b_a): a float32
    // model's operator runs in float64 as the CPU's; a float64 model's reads params directly.
    Scratch<double> op64;
    DeviceRopeTable rope;

    Impl(const Model<T>& model, int device)
        : m(model), on(device), gemm(nullptr), rope(model.rope) {
        const Config& c = m.cfg;
        if (c.learned_g()) {
            PLDR_REQUIRE(cuda_has_positive_map(c.plga_positive_map),
                         "the CUDA backend has no kernel for the positive map '",
                         c.plga_positive_map, "'");
            PLDR_REQUIRE(cuda_has_coupling(c.plga_coupling),
                         "the CUDA backend has no kernel for the coupling '", c.plga_coupling, "'");
        }
        params = Scratch<T>(m.num_params(), stream);
        copy_to_device(params.get(), m.params.data(), m.num_params(), stream);
        if (!m.G_fixed.empty()) {
            G_fixed = Scratch<T>(int64_t(m.G_fixed.size()), stream);
            copy_to_device(G_fixed.get(), m.G_fixed.data(), int64_t(m.G_fixed.size()), stream);
        }
        if (std::is_same_v<T, float> && c.learned_g()) {
            const int64_t HDD = c.num_heads * c.head_dim * c.head_dim, L = c.num_layers;
            std::vector<double> host;
            host.reserve(size_t(5 * HDD * L));
            for (const LayerView<T>& w : m.w.layers) {
                const T* const parts[5] = {w.W, w.b, w.P, w.a, w.ba};
                for (const T* src : parts) host.insert(host.end(), src, src + HDD);
            }
            op64 = Scratch<double>(5 * HDD * L, stream);
            copy_to_device(op64.get(), host.data(), 5 * HDD * L, stream);
            PLDR_CUDA_CALL(cudaStreamSynchronize(stream));  // before host goes
        }
        PLDR_CUDA_CALL(cudaStreamSynchronize(stream));
    }

    // The device copy of a parameter the host view points at (null stays null).
    const T* dev(const T* host) const {
        return host ? params.get() + (host - m.params.data()) : nullptr;
    }

    // Downloads a device tensor into a host one of the given shape (a forward that keeps ALL).
    void download(bool all, Tensor<T>& dst, const T* src, Shape shape) const {
        if (!all) return;
        dst.resize_for_overwrite(std::move(shape));
        copy_to_host(dst.ptr(), src, dst.numel(), stream);
    }

    // The pass; last_only: the head over each sequence's last row only, into out.logits [B,V].
    void forward(const int64_t* ids, int64_t B, int64_t S, Activations<T>& out, KeepActs keep,
                 bool last_only = false);
    // Layer l's G_LM [B,H,D,D] from its rotated queries: A0 = Qᵀ·Q, the metric learner, the
    // operator (in float64).
    void learned_g(int64_t l, const T* q, int64_t B, int64_t S, T* G, LayerActs<T>& la, bool all);
    // Ep = (Q·G)·Kᵀ / √dk (kept when Ep is not null), E = softmax(Ep + mask·(−1e9)), O = E·V.
    void attention(const T* q, const T* k, const T* v, const T* G, const int64_t* ids, int64_t B,
                   int64_t S, T* QG, T* Ep, T* E, T* O);
};

template <class T>
void DeviceModel<T>::Impl::learned_g(int64_t l, const T* q_ptr, int64_t B, int64_t S, T* G_out,
                                     LayerActs<T>& la, bool all) {
    const Config& c = m.cfg;
    const LayerView<T>& w = m.w.layers[size_t(l)];
    const int64_t d = c.hidden_size, H = c.num_heads, D = c.head_dim, DD = D * D, HDD = H * DD;
    const double eps = c.layer_norm_eps;
    Stream s = stream;
    auto keep_t = [&](Tensor<T>& dst, const T* src, Shape shape) {
        download(all, dst, src, std::move(shape));
    };
    const int64_t rows = B * H * D, Fa = c.A_dff;
    // A0 = Qᵀ·Q per (b,h)
    Scratch<T> A0(B * HDD, s), cur(B * HDD, s), t0(B * HDD, s), t1(B * HDD, s), sum(B * HDD, s),
        rm(rows, s), rr(rows, s), g1(rows * Fa, s), g2(rows * Fa, s), gg(rows * Fa, s);
    mm_heads(gemm, B, H, true, false, D, D, S, q_ptr, d, {S * d, D}, q_ptr, d, {S * d, D}, A0.get(),
             D, {HDD, DD});
    keep_t(la.A0, A0.get(), {B, H, D, D});
    // The learner: LN_A, then each residual unit: its GLUs, + its input, LayerNorm.
    layernorm_forward<T>(cur.get(), rm.get(), rr.get(), A0.get(), dev(w.lnA_g), dev(w.lnA_b), rows,
                         D, eps, s);
    keep_t(la.A_ln, cur.get(), {B, H, D, D});
    for (int64_t r = 0; r < c.num_reslayerA; ++r) {
        const ResUnitView<T>& rw = w.res[size_t(r)];
        const T* xin = cur.get();
        T* yout = t0.get();
        if (c.num_denseA == 0)
            PLDR_CUDA_CALL(cudaMemsetAsync(yout, 0, size_t(B * HDD) * sizeof(T), s));
        for (int64_t n = 0; n < c.num_denseA; ++n) {
            const GluView<T>& gw = rw.glu[size_t(n)];
            yout = n % 2 ? t1.get() : t0.get();
            linear(gemm, g1.get(), xin, dev(gw.w1), dev(gw.b1), rows, D, Fa);
            linear(gemm, g2.get(), xin, dev(gw.w2), dev(gw.b2), rows, D, Fa);
            glu_gate<T>(gg.get(), g1.get(), g2.get(), rows * Fa, s);
            linear(gemm, yout, gg.get(), dev(gw.w3), dev(gw.b3), rows, Fa, D);
            xin = yout;
        }
        add(sum.get(), yout, cur.get(), B * HDD, s);
        layernorm_forward<T>(cur.get(), rm.get(), rr.get(), sum.get(), dev(rw.ln_g), dev(rw.ln_b),
                             rows, D, eps, s);
    }
    keep_t(la.A, cur.get(), {B, H, D, D});

    // The operator in float64: Z = W·A + b; A_LM = f(Z); A_P = c(A_LM, P); G = a·A_P + b_a.
    const int64_t n = B * HDD;
    Scratch<double> A64, Z(n, s), ALM(n, s), AP(n, s), G64;
    const double *A_d, *W, *bb, *P, *a, *ba;
    if constexpr (std::is_same_v<T, double>) {
        A_d = cur.get();
        W = dev(w.W), bb = dev(w.b), P = dev(w.P), a = dev(w.a), ba = dev(w.ba);
    } else {
        A64 = Scratch<double>(n, s);
        cast(A64.get(), cur.get(), n, s);
        A_d = A64.get();
        const double* p = op64.get() + l * 5 * HDD;
        W = p, bb = p + HDD, P = p + 2 * HDD, a = p + 3 * HDD, ba = p + 4 * HDD;
        G64 = Scratch<double>(n, s);
    }
    double* G_d;
    if constexpr (std::is_same_v<T, double>)
        G_d = G_out;
    else
        G_d = G64.get();
    mm_heads(gemm, B, H, false, false, D, D, D, W, D, {0, DD}, A_d, D, {HDD, DD}, Z.get(), D,
             {HDD, DD});
    add_periodic(Z.get(), bb, n, HDD, s);
    positive_map_forward<double>(c.plga_positive_map, Z.get(), ALM.get(), n, s);
    for (int64_t b = 0; b < B; ++b)
        coupling_forward<double>(c.plga_coupling, ALM.get() + b * HDD, P, AP.get() + b * HDD, HDD,
                                 s);
    mm_heads(gemm, B, H, false, false, D, D, D, a, D, {0, DD}, AP.get(), D, {HDD, DD}, G_d, D,
             {HDD, DD});
    add_periodic(G_d, ba, n, HDD, s);
    if constexpr (!std::is_same_v<T, double>) cast(G_out, G_d, n, s);
    if (all) {
        auto keep64 = [&](Tensor<T>& dst, const double* src) {
            std::vector<double> h(static_cast<size_t>(n));
            copy_to_host(h.data(), src, n, s);
            dst = Tensor<T>({B, H, D, D});
            for (int64_t i = 0; i < n; ++i) dst[i] = T(h[size_t(i)]);
        };
        keep64(la.Z, Z.get());
        keep64(la.A_LM, ALM.get());
        keep64(la.A_P, AP.get());
    }
}

template <class T>
void DeviceModel<T>::Impl::attention(const T* q, const T* k, const T* v, const T* G,
                                     const int64_t* ids, int64_t B, int64_t S, T* QG, T* Ep, T* E,
                                     T* O) {
    const Config& c = m.cfg;
    const int64_t d = c.hidden_size, H = c.num_heads, D = c.head_dim, DD = D * D;
    Stream s = stream;
    const int64_t SD = S * D, SS = S * S;
    mm_heads(gemm, B, H, false, false, S, D, D, q, d, {S * d, D}, G, D, {H * DD, DD}, QG, D,
             {H * SD, SD});
    mm_heads(gemm, B, H, false, true, S, S, D, QG, D, {H * SD, SD}, k, d, {S * d, D}, E, S,
             {H * SS, SS});
    // the raw scores are in E; the kernel writes Ep (kept) and E from them, row by row
    masked_softmax_kernel<T><<<dim3(unsigned(S), unsigned(B * H)), kThreads, 0, s>>>(
        E, Ep, E, ids, S, H, m.score_scale(), c.pad_token_id);
    PLDR_CUDA_LAUNCHED("masked_softmax");
    mm_heads(gemm, B, H, false, false, S, D, S, E, S, {H * SS, SS}, v, d, {S * d, D}, O, d,
             {S * d, D});
}

template <class T>
void DeviceModel<T>::Impl::forward(const int64_t* ids_host, int64_t B, int64_t S,
                                   Activations<T>& out, KeepActs keep, bool last_only) {
    check_inputs(m, ids_host, B, S);
    on.select();
    const Config& c = m.cfg;
    const int64_t d = c.hidden_size, H = c.num_heads, D = c.head_dim, F = c.intermediate_size;
    const int64_t V = c.vocab_size, N = B * S, DD = D * D, HDD = H * DD;
    const double eps = c.layer_norm_eps;
    const bool all = keep == KeepActs::ALL;
    Stream s = stream;

    out = Activations<T>();
    out.B = B;
    out.S = S;
    out.kept = all ? KeepActs::ALL : KeepActs::INFERENCE;
    out.ids.assign(ids_host, ids_host + N);
    out.pos.resize(size_t(N));
    for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < S; ++t) out.pos[size_t(b * S + t)] = t;
    rope_check_positions(out.pos.data(), N, rope.max_pos());
    PLDR_REQUIRE(B * c.num_heads <= 65535,
                 "the GPU forward takes at most 65535 (sequence, head) pairs; got ", B, " x ",
                 c.num_heads);

    auto keep_t = [&](Tensor<T>& dst, const T* src, Shape shape) {
        download(all, dst, src, std::move(shape));
    };

    Scratch<int64_t> ids(N, s), pos(N, s);
    copy_to_device(ids.get(), out.ids.data(), N, s);
    copy_to_device(pos.get(), out.pos.data(), N, s);

    // Embedding·√d, then the input LayerNorm.
    Scratch<T> x0(N * d, s), x(N * d, s), mean(N, s), rstd(N, s);
    embed_kernel<T><<<grid_for(N * d), kThreads, 0, s>>>(x0.get(), dev(m.w.emb), ids.get(), N, d,
                                                         m.embed_scale());
    PLDR_CUDA_LAUNCHED("embed");
    layernorm_forward<T>(x.get(), mean.get(), rstd.get(), x0.get(), dev(m.w.ln_in_g),
                         dev(m.w.ln_in_b), N, d, eps, s);
    keep_t(out.x0, x0.get(), {B, S, d});
    keep_t(out.embed_ln, x.get(), {B, S, d});
    keep_t(out.ln_mean, mean.get(), {N});
    keep_t(out.ln_rstd, rstd.get(), {N});
    x0.reset();

    Scratch<T> q(N * d, s), k(N * d, s), v(N * d, s), G(B * HDD, s), QG(B * H * S * D, s),
        Ep(all ? B * H * S * S : 1, s), E(B * H * S * S, s), O(N * d, s), y(N * d, s),
        out1(N * d, s), h1(N * F, s), h2(N * F, s), gated(N * F, s);
    out.layers.resize(size_t(c.num_layers));
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const LayerView<T>& w = m.w.layers[size_t(l)];
        LayerActs<T>& la = out.layers[size_t(l)];
        keep_t(la.x_in, x.get(), {B, S, d});

        // 1-3. Projections and RoPE on q, k.
        linear(gemm, q.get(), x.get(), dev(w.wq), dev(w.bq), N, d, d);
        linear(gemm, k.get(), x.get(), dev(w.wk), dev(w.bk), N, d, d);
        linear(gemm, v.get(), x.get(), dev(w.wv), dev(w.bv), N, d, d);
        rope_forward<T>(q.get(), pos.get(), N, H, D, rope, c.reference_rope, m.round_f32(), nullptr,
                        s);
        rope_forward<T>(k.get(), pos.get(), N, H, D, rope, c.reference_rope, m.round_f32(), nullptr,
                        s);
        keep_t(la.q, q.get(), {B, S, d});
        keep_t(la.k, k.get(), {B, S, d});
        keep_t(la.v, v.get(), {B, S, d});

        // 4-6. G_LM: the model's fixed G, or the metric learner and the operator.
        if (!c.learned_g()) {
            const T* Gf = G_fixed.get() + l * HDD;
            tile_kernel<T><<<grid_for(B * HDD), kThreads, 0, s>>>(G.get(), Gf, B * HDD, HDD);
            PLDR_CUDA_LAUNCHED("tile");
        } else {
            learned_g(l, q.get(), B, S, G.get(), la, all);
        }
        keep_t(la.G, G.get(), {B, H, D, D});

        // 7. Ep = (Q·G)·Kᵀ / √dk; E = softmax(Ep + mask·(−1e9)); O = E·V.
        attention(q.get(), k.get(), v.get(), G.get(), ids.get(), B, S, QG.get(),
                  all ? Ep.get() : nullptr, E.get(), O.get());
        keep_t(la.QG, QG.get(), {B, H, S, D});
        keep_t(la.Ep, Ep.get(), {B, H, S, S});
        keep_t(la.E, E.get(), {B, H, S, S});
        keep_t(la.O, O.get(), {B, S, d});

        // The output projection, + x, LN1; the FFN, + out1, LN2.
        linear(gemm, y.get(), O.get(), dev(w.wo), dev(w.bo), N, d, d);
        keep_t(la.attn_out, y.get(), {B, S, d});
        add(y.get(), y.get(), x.get(), N * d, s);
        layernorm_forward<T>(out1.get(), mean.get(), rstd.get(), y.get(), dev(w.ln1_g),
                             dev(w.ln1_b), N, d, eps, s);
        keep_t(la.out1, out1.get(), {B, S, d});
        keep_t(la.ln1_mean, mean.get(), {N});
        keep_t(la.ln1_rstd, rstd.get(), {N});
        linear(gemm, h1.get(), out1.get(), dev(w.ffn.w1), dev(w.ffn.b1), N, d, F);
        linear(gemm, h2.get(), out1.get(), dev(w.ffn.w2), dev(w.ffn.b2), N, d, F);
        glu_gate<T>(gated.get(), h1.get(), h2.get(), N * F, s);
        linear(gemm, y.get(), gated.get(), dev(w.ffn.w3), dev(w.ffn.b3), N, F, d);
        keep_t(la.ffn.h1, h1.get(), {N, F});
        keep_t(la.ffn.h2, h2.get(), {N, F});
        keep_t(la.ffn.gated, gated.get(), {N, F});
        keep_t(la.ffn_out, y.get(), {B, S, d});
        add(y.get(), y.get(), out1.get(), N * d, s);
        layernorm_forward<T>(x.get(), mean.get(), rstd.get(), y.get(), dev(w.ln2_g), dev(w.ln2_b),
                             N, d, eps, s);
        keep_t(la.hidden, x.get(), {B, S, d});
        keep_t(la.ln2_mean, mean.get(), {N});
        keep_t(la.ln2_rstd, rstd.get(), {N});
    }

    // The head: over every row, or over each sequence's last (rows S·d apart).
    const int64_t rows = last_only ? B : N;
    Scratch<T> logits(rows * V, s);
    mm(gemm, false, true, rows, V, d, x.get() + (last_only ? (S - 1) * d : 0),
       last_only ? S * d : d, dev(m.w.head_w), d, logits.get(), V, dev(m.w.head_b));
    if (last_only)
        out.logits.resize_for_overwrite({B, V});
    else
        out.logits.resize_for_overwrite({B, S, V});
    copy_to_host(out.logits.ptr(), logits.get(), rows * V, s);
}

template <class T>
DeviceModel<T>::DeviceModel(const Model<T>& m, int device)
    : impl_(std::make_unique<Impl>(m, device)) {}
template <class T>
DeviceModel<T>::~DeviceModel() = default;
template <class T>
const Model<T>& DeviceModel<T>::model() const {
    return impl_->m;
}
template <class T>
int DeviceModel<T>::device() const {
    return impl_->on.device;
}
template <class T>
int64_t DeviceModel<T>::param_bytes() const {
    int64_t n =
        impl_->params.size() * int64_t(sizeof(T)) + impl_->G_fixed.size() * int64_t(sizeof(T));
    n += impl_->op64.size() * int64_t(sizeof(double));
    return n;
}
template <class T>
void DeviceModel<T>::forward(const int64_t* ids, int64_t B, int64_t S, Activations<T>& out,
                             KeepActs keep) {
    impl_->forward(ids, B, S, out, keep);
}
template <class T>
void DeviceModel<T>::last_logits(const int64_t* ids, int64_t B, int64_t S, Tensor<T>& out) {
    Activations<T> acts;
    impl_->forward(ids, B, S, acts, KeepActs::INFERENCE, true);
    out = std::move(acts.logits);
}

template class DeviceModel<float>;
template class DeviceModel<double>;

}  // namespace pldr::cuda
