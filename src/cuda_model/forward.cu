// The PLDR-LLM forward pass on the GPU (see forward.h): the CPU's steps (model/forward.cpp,
// model/plga_layer.cpp, model/plga_attention.cpp, model/metric_learner.cpp) in the same order,
// from the backend's kernels and cuBLASLt products, with the few element-wise kernels of its own
// below (the embedding gather, per-head broadcasts, the masked softmax; impl.cuh: the residual
// sums, casts and products both passes share). The training objective and the backward, on top
// of the same pass (DevActs::train), are backward.cu's.
#include <cmath>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda_model/impl.cuh"

namespace pldr::cuda {

using namespace model_detail;

namespace {

// ---- the pass's own element-wise kernels --------------------------------------------------------

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
    // x_j = s_j / scale (+ the mask), kept in E; then the softmax of the row.
    for (int64_t j = threadIdx.x; j < S; j += blockDim.x) {
        T x = sr[j] / scale;
        if (epr) epr[j] = x;
        if (j > i || key[j] == pad) x += T(-1e9);
        er[j] = x;
    }
    softmax_row(er, S, red);
}

template <class T>
void add_periodic(T* x, const T* p, int64_t n, int64_t period, Stream s) {
    if (n == 0) return;
    add_periodic_kernel<T><<<grid_for(n), kThreads, 0, s>>>(x, p, n, period);
    PLDR_CUDA_LAUNCHED("add_periodic");
}
}  // namespace

// ---- the model on the device -------------------------------------------------------------------

template <class T>
DeviceModel<T>::Impl::Impl(const Model<T>& model, int device)
    : m(model), on(device), gemm(stream), rope(model.rope) {
    const char* graphs = std::getenv("PLDR_CUDA_GRAPHS");
    decode_graphs = !(graphs && std::string(graphs) == "0");
    const Config& c = m.cfg;
    if (c.learned_g()) {
        PLDR_REQUIRE(cuda_has_positive_map(c.plga_positive_map),
                     "the CUDA backend has no kernel for the positive map '", c.plga_positive_map,
                     "'");
        PLDR_REQUIRE(cuda_has_coupling(c.plga_coupling),
                     "the CUDA backend has no kernel for the coupling '", c.plga_coupling, "'");
    }
    params = Scratch<T>(m.num_params(), stream);
    if (!m.G_fixed.empty()) {
        G_fixed = Scratch<T>(int64_t(m.G_fixed.size()), stream);
        copy_to_device(G_fixed.get(), m.G_fixed.data(), int64_t(m.G_fixed.size()), stream);
    }
    upload_params();
}

template <class T>
void DeviceModel<T>::Impl::upload_params() {
    on.select();
    PLDR_REQUIRE(m.num_params() == params.size(), "the model's parameter count changed (",
                 params.size(), " on the device, ", m.num_params(), " on the host)");
    copy_to_device(params.get(), m.params.data(), m.num_params(), stream);
    params16_fresh = false;
    upload_op64();
    PLDR_CUDA_CALL(cudaStreamSynchronize(stream));
}

template <class T>
void DeviceModel<T>::Impl::upload_op64() {
    if constexpr (std::is_same_v<T, float>) {
        const Config& c = m.cfg;
        if (!c.learned_g()) return;
        // From the device's own parameters (current after an upload or an optimizer step),
        // widened there: no trip through the host.
        const int64_t HDD = c.num_heads * c.head_dim * c.head_dim, L = c.num_layers;
        if (!op64.get()) op64 = Scratch<double>(5 * HDD * L, stream);
        for (int64_t l = 0; l < L; ++l) {
            const LayerView<T>& w = m.w.layers[size_t(l)];
            const T* const parts[5] = {w.W, w.b, w.P, w.a, w.ba};
            for (int k = 0; k < 5; ++k)
                cast(op64.get() + (l * 5 + k) * HDD, dev(parts[k]), HDD, stream);
        }
    }
}

template <class T>
const bf16* DeviceModel<T>::Impl::weight16(const T* dev_ptr) {
    const int64_t P = m.num_params();
    if (!params16_fresh) {
        if constexpr (std::is_same_v<T, float>)
            to_bf16(sized(params16, P, stream), params.get(), P, stream);
        params16_fresh = true;
    }
    return params16.get() + (dev_ptr - params.get());
}

template <class T>
void DeviceModel<T>::Impl::proj(T* y, const T* x, const T* W, const T* b, int64_t N, int64_t I,
                                int64_t O) {
    if constexpr (std::is_same_v<T, float>) {
        if (autocast) {  // x rounded per call, W once per parameter change
            Scratch<bf16> x16(N * I, stream);
            to_bf16(x16.get(), x, N * I, stream);
            gemm.bf16(false, true, N, O, I, 1.0f, x16.get(), I, weight16(dev(W)), I, 0.0f, y, O,
                      dev(b));
            return;
        }
    }
    linear(gemm, y, x, dev(W), dev(b), N, I, O);
}

template <class T>
void DeviceModel<T>::Impl::learner_units(const LayerView<T>& w, int64_t rows, const T* in,
                                         DevLayer<T>& L, bool train) {
    const Config& c = m.cfg;
    const int64_t D = c.head_dim, n = rows * D, Fa = c.A_dff, R = c.num_reslayerA,
                  Nd = c.num_denseA;
    Stream s = stream;
    // train: every unit and GLU its own buffers; else two of each, alternating (a unit's input,
    // GLU inputs and outputs never share a buffer)
    auto slot = [train](int64_t i) { return size_t(train ? i : i % 2); };
    L.ml.res.resize(size_t(train ? R : std::min<int64_t>(R, 2)));
    for (DevUnit<T>& u : L.ml.res) u.glu.resize(size_t(train ? Nd : std::min<int64_t>(Nd, 2)));
    T* A = sized(L.A, n, s);
    for (int64_t r = 0; r < R; ++r) {
        const ResUnitView<T>& rw = w.res[size_t(r)];
        DevUnit<T>& u = L.ml.res[slot(r)];
        T* y = sized(u.y, n, s);
        if (Nd == 0) zero(y, n, s);
        const T* x = in;  // the unit's GLUs: each GLU's output is the next one's input
        for (int64_t k = 0; k < Nd; ++k) {
            const GluView<T>& gw = rw.glu[size_t(k)];
            DevGlu<T>& g = u.glu[slot(k)];
            T* h1 = sized(g.h1, rows * Fa, s);
            T* h2 = sized(g.h2, rows * Fa, s);
            T* gated = sized(g.gated, rows * Fa, s);
            T* out = k + 1 < Nd ? sized(u.glu[slot(k + 1)].x, n, s) : y;
            linear(gemm, h1, x, dev(gw.w1), dev(gw.b1), rows, D, Fa);
            linear(gemm, h2, x, dev(gw.w2), dev(gw.b2), rows, D, Fa);
            glu_gate<T>(gated, h1, h2, rows * Fa, s);
            linear(gemm, out, gated, dev(gw.w3), dev(gw.b3), rows, Fa, D);
            x = out;
        }
        T* sum = sized(u.sum, n, s);
        add(sum, y, in, n, s);
        T* out = r + 1 == R ? A : sized(L.ml.res[slot(r + 1)].in, n, s);
        layernorm_forward<T>(out, sized(u.mean, rows, s), sized(u.rstd, rows, s), sum, dev(rw.ln_g),
                             dev(rw.ln_b), rows, D, c.layer_norm_eps, s);
        in = out;
    }
}

template <class T>
void DeviceModel<T>::Impl::learned_g(int64_t l, int64_t B, int64_t S, DevLayer<T>& L, bool train,
                                     LayerActs<T>& la, bool all) {
    const Config& c = m.cfg;
    const LayerView<T>& w = m.w.layers[size_t(l)];
    const int64_t d = c.hidden_size, H = c.num_heads, D = c.head_dim, DD = D * D, HDD = H * DD;
    Stream s = stream;
    auto keep_t = [&](Tensor<T>& dst, const T* src, Shape shape) {
        download(all, dst, src, std::move(shape));
    };
    const int64_t rows = B * H * D, n = B * HDD;
    // A0 = Qᵀ·Q per (b,h)
    const T* q = L.q.get();
    T* A0 = sized(L.ml.A0, n, s);
    mm_heads(gemm, B, H, true, false, D, D, S, q, d, {S * d, D}, q, d, {S * d, D}, A0, D,
             {HDD, DD});
    keep_t(la.A0, A0, {B, H, D, D});
    // The learner: LN_A, then each residual unit: its GLUs, + its input, LayerNorm (with no
    // unit, LN_A's output is A).
    T* A = sized(L.A, n, s);
    T* ln_out = c.num_reslayerA == 0 ? A : sized(L.ml.A_ln, n, s);
    layernorm_forward<T>(ln_out, sized(L.ml.mean, rows, s), sized(L.ml.rstd, rows, s), A0,
                         dev(w.lnA_g), dev(w.lnA_b), rows, D, c.layer_norm_eps, s);
    keep_t(la.A_ln, ln_out, {B, H, D, D});
    // (training too keeps only two units' buffers: its backward recomputes them, learner_backward)
    learner_units(w, rows, ln_out, L, false);
    if (train) L.ml.res.clear();
    keep_t(la.A, A, {B, H, D, D});

    operator_g(l, B, A, L.G.get(), &L, train, all ? &la : nullptr);
}

template <class T>
void DeviceModel<T>::Impl::operator_g(int64_t l, int64_t B, const T* A, T* G_out, DevLayer<T>* L,
                                      bool train, LayerActs<T>* la) {
    const Config& c = m.cfg;
    const LayerView<T>& w = m.w.layers[size_t(l)];
    const int64_t H = c.num_heads, D = c.head_dim, DD = D * D, HDD = H * DD, n = B * HDD;
    Stream s = stream;
    // The operator in float64: Z = W·A + b; A_LM = f(Z); A_P = c(A_LM, P); G = a·A_P + b_a. A
    // float32 model's Z, A_LM and A_P are kept rounded to float32 (training: its backward runs in
    // float32 on them, as the CPU's).
    Scratch<double> A64, Z64, ALM64, AP64, G64;
    const double *A_d, *W, *bb, *P, *a, *ba;
    double *Z, *ALM, *AP, *G_d;
    if constexpr (std::is_same_v<T, double>) {
        A_d = A;
        W = dev(w.W), bb = dev(w.b), P = dev(w.P), a = dev(w.a), ba = dev(w.ba);
        if (L) {  // kept in the layer's buffers
            Z = sized(L->Z, n, s), ALM = sized(L->A_LM, n, s), AP = sized(L->A_P, n, s);
        } else {
            Z64 = Scratch<double>(n, s), ALM64 = Scratch<double>(n, s),
            AP64 = Scratch<double>(n, s);
            Z = Z64.get(), ALM = ALM64.get(), AP = AP64.get();
        }
        G_d = G_out;
    } else {
        A64 = Scratch<double>(n, s);
        cast(A64.get(), A, n, s);
        A_d = A64.get();
        const double* p = op64.get() + l * 5 * HDD;
        W = p, bb = p + HDD, P = p + 2 * HDD, a = p + 3 * HDD, ba = p + 4 * HDD;
        Z64 = Scratch<double>(n, s), ALM64 = Scratch<double>(n, s), AP64 = Scratch<double>(n, s);
        G64 = Scratch<double>(n, s);
        Z = Z64.get(), ALM = ALM64.get(), AP = AP64.get(), G_d = G64.get();
    }
    mm_heads(gemm, B, H, false, false, D, D, D, W, D, {0, DD}, A_d, D, {HDD, DD}, Z, D, {HDD, DD});
    add_periodic(Z, bb, n, HDD, s);
    positive_map_forward<double>(c.plga_positive_map, Z, ALM, n, s);
    for (int64_t b = 0; b < B; ++b)
        coupling_forward<double>(c.plga_coupling, ALM + b * HDD, P, AP + b * HDD, HDD, s);
    mm_heads(gemm, B, H, false, false, D, D, D, a, D, {0, DD}, AP, D, {HDD, DD}, G_d, D, {HDD, DD});
    add_periodic(G_d, ba, n, HDD, s);
    if constexpr (!std::is_same_v<T, double>) {
        cast(G_out, G_d, n, s);
        if (train && L) {
            cast(sized(L->Z, n, s), Z, n, s);
            cast(sized(L->A_LM, n, s), ALM, n, s);
            cast(sized(L->A_P, n, s), AP, n, s);
        }
    }
    if (la) {
        auto keep64 = [&](Tensor<T>& dst, const double* src) {
            std::vector<double> h(static_cast<size_t>(n));
            copy_to_host(h.data(), src, n, s);
            dst = Tensor<T>({B, H, D, D});
            for (int64_t i = 0; i < n; ++i) dst[i] = T(h[size_t(i)]);
        };
        keep64(la->Z, Z);
        keep64(la->A_LM, ALM);
        keep64(la->A_P, AP);
    }
}

template <class T>
void DeviceModel<T>::Impl::attention(const T* q, const T* k, const T* v, const T* G,
                                     const int64_t* ids, int64_t B, int64_t S, T* QG, T* Ep, T* E,
                                     T* O) {
    const Config& c = m.cfg;
    const int64_t d = c.hidden_size, H = c.num_heads, D = c.head_dim, DD = D * D;
    const int64_t SD = S * D, SS = S * S;
    const Tf32Scope tf32(gemm, autocast);
    mm_heads(gemm, B, H, false, false, S, D, D, q, d, {S * d, D}, G, D, {H * DD, DD}, QG, D,
             {H * SD, SD});
    scores(QG, k, ids, B, S, Ep, E);
    mm_heads(gemm, B, H, false, false, S, D, S, E, S, {H * SS, SS}, v, d, {S * d, D}, O, d,
             {S * d, D});
}

template <class T>
void DeviceModel<T>::Impl::scores(const T* QG, const T* k, const int64_t* ids, int64_t B, int64_t S,
                                  T* Ep, T* E) {
    const Config& c = m.cfg;
    const int64_t d = c.hidden_size, H = c.num_heads, D = c.head_dim, SD = S * D, SS = S * S;
    Stream s = stream;
    const Tf32Scope tf32(gemm, autocast);
    mm_heads(gemm, B, H, false, true, S, S, D, QG, D, {H * SD, SD}, k, d, {S * d, D}, E, S,
             {H * SS, SS});
    // the raw scores are in E; the kernel writes Ep (kept) and E from them, row by row
    masked_softmax_kernel<T><<<dim3(unsigned(S), unsigned(B * H)), kThreads, 0, s>>>(
        E, Ep, E, ids, S, H, m.score_scale(), c.pad_token_id);
    PLDR_CUDA_LAUNCHED("masked_softmax");
}

template <class T>
void DeviceModel<T>::Impl::layer(int64_t l, int64_t B, int64_t S, DevActs<T>& da, LayerActs<T>& la,
                                 bool all) {
    const Config& c = m.cfg;
    const LayerView<T>& w = m.w.layers[size_t(l)];
    const int64_t d = c.hidden_size, H = c.num_heads, D = c.head_dim, F = c.intermediate_size;
    const int64_t N = B * S, HDD = H * D * D, Hs = B * H * S;
    const double eps = c.layer_norm_eps;
    Stream s = stream;
    auto keep_t = [&](Tensor<T>& dst, const T* src, Shape shape) {
        download(all, dst, src, std::move(shape));
    };
    const T* x = da.input_of(l);  // (inference: the buffer LN2 overwrites below, after its reads)
    DevLayer<T>& L = da.layer(l);
    keep_t(la.x_in, x, {B, S, d});

    // 1-3. Projections and RoPE on q, k.
    std::optional<Phase> phase(std::in_place, "fwd.qkv_rope", s);
    T *q = sized(L.q, N * d, s), *k = sized(L.k, N * d, s), *v = sized(L.v, N * d, s);
    proj(q, x, w.wq, w.bq, N, d, d);
    proj(k, x, w.wk, w.bk, N, d, d);
    proj(v, x, w.wv, w.bv, N, d, d);
    rope_forward<T>(q, da.pos.get(), N, H, D, rope, c.reference_rope, m.round_f32(), nullptr, s);
    rope_forward<T>(k, da.pos.get(), N, H, D, rope, c.reference_rope, m.round_f32(), nullptr, s);
    keep_t(la.q, q, {B, S, d});
    keep_t(la.k, k, {B, S, d});
    keep_t(la.v, v, {B, S, d});

    // 4-6. G_LM: the model's fixed G, or the metric learner and the operator.
    phase.reset();
    phase.emplace("fwd.metric_learner_operator", s);
    T* G = sized(L.G, B * HDD, s);
    if (!c.learned_g() || !da.preset_G.empty()) {  // the model's fixed G, or a preset one
        const T* Gf = da.preset_G.empty() ? G_fixed.get() + l * HDD : da.preset_G[size_t(l)];
        tile_kernel<T><<<grid_for(B * HDD), kThreads, 0, s>>>(G, Gf, B * HDD, HDD);
        PLDR_CUDA_LAUNCHED("tile");
    } else {
        learned_g(l, B, S, L, da.train || da.keep_operator, la, all);
    }
    keep_t(la.G, G, {B, H, D, D});

    // 7. Ep = (Q·G)·Kᵀ / √dk; E = softmax(Ep + mask·(−1e9)); O = E·V.
    phase.reset();
    phase.emplace("fwd.attention", s);
    // (training: E in the shared work buffer, recomputed by the layer's backward)
    T *QG = sized(L.QG, Hs * D, s), *O = sized(L.O, N * d, s);
    T* E = sized(da.train ? da.E_work : L.E, Hs * S, s);
    T* Ep = all ? sized(L.Ep, Hs * S, s) : nullptr;
    attention(q, k, v, G, da.ids.get(), B, S, QG, Ep, E, O);
    keep_t(la.QG, QG, {B, H, S, D});
    keep_t(la.Ep, Ep, {B, H, S, S});
    keep_t(la.E, E, {B, H, S, S});
    keep_t(la.O, O, {B, S, d});

    // The output projection, + x, LN1; the FFN, + out1, LN2.
    phase.reset();
    phase.emplace("fwd.out_ln_ffn_ln", s);
    T *attn = sized(da.train ? da.attn_work : L.attn, N * d, s), *r1 = sized(L.r1, N * d, s);
    T *out1 = sized(L.out1, N * d, s), *mean1 = sized(L.mean1, N, s), *rstd1 = sized(L.rstd1, N, s);
    proj(attn, O, w.wo, w.bo, N, d, d);
    keep_t(la.attn_out, attn, {B, S, d});
    add(r1, attn, x, N * d, s);
    layernorm_forward<T>(out1, mean1, rstd1, r1, dev(w.ln1_g), dev(w.ln1_b), N, d, eps, s);
    keep_t(la.out1, out1, {B, S, d});
    keep_t(la.ln1_mean, mean1, {N});
    keep_t(la.ln1_rstd, rstd1, {N});
    T *h1 = sized(L.h1, N * F, s), *h2 = sized(L.h2, N * F, s), *gated = sized(L.gated, N * F, s);
    T *ffn = sized(da.train ? da.ffn_work : L.ffn, N * d, s), *r2 = sized(L.r2, N * d, s);
    proj(h1, out1, w.ffn.w1, w.ffn.b1, N, d, F);
    proj(h2, out1, w.ffn.w2, w.ffn.b2, N, d, F);
    glu_gate<T>(gated, h1, h2, N * F, s);
    proj(ffn, gated, w.ffn.w3, w.ffn.b3, N, F, d);
    keep_t(la.ffn.h1, h1, {N, F});
    keep_t(la.ffn.h2, h2, {N, F});
    keep_t(la.ffn.gated, gated, {N, F});
    keep_t(la.ffn_out, ffn, {B, S, d});
    add(r2, ffn, out1, N * d, s);
    T *hidden = sized(L.hidden, N * d, s), *mean2 = sized(L.mean2, N, s),
      *rstd2 = sized(L.rstd2, N, s);
    layernorm_forward<T>(hidden, mean2, rstd2, r2, dev(w.ln2_g), dev(w.ln2_b), N, d, eps, s);
    keep_t(la.hidden, hidden, {B, S, d});
    keep_t(la.ln2_mean, mean2, {N});
    keep_t(la.ln2_rstd, rstd2, {N});
}

template <class T>
void DeviceModel<T>::Impl::layers(const int64_t* ids_host, int64_t B, int64_t S, DevActs<T>& da,
                                  Activations<T>& out, bool all) {
    check_inputs(m, ids_host, B, S);
    on.select();
    const Config& c = m.cfg;
    const int64_t d = c.hidden_size, N = B * S;
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
    copy_to_device(sized(da.ids, N, s), out.ids.data(), N, s);
    copy_to_device(sized(da.pos, N, s), out.pos.data(), N, s);

    const Phase whole("forward", s);
    // Embedding·√d, then the input LayerNorm.
    T* x0 = sized(da.x0, N * d, s);
    embed_kernel<T><<<grid_for(N * d), kThreads, 0, s>>>(x0, dev(m.w.emb), da.ids.get(), N, d,
                                                         m.embed_scale());
    PLDR_CUDA_LAUNCHED("embed");
    layernorm_forward<T>(sized(da.embed_ln, N * d, s), sized(da.mean, N, s), sized(da.rstd, N, s),
                         x0, dev(m.w.ln_in_g), dev(m.w.ln_in_b), N, d, c.layer_norm_eps, s);
    keep_t(out.x0, x0, {B, S, d});
    keep_t(out.embed_ln, da.embed_ln.get(), {B, S, d});
    keep_t(out.ln_mean, da.mean.get(), {N});
    keep_t(out.ln_rstd, da.rstd.get(), {N});
    if (!da.train) da.x0.reset();  // the backward's LN_in input; a forward's no longer

    da.layers.resize(size_t(da.train ? c.num_layers : 1));
    out.layers.resize(size_t(c.num_layers));
    for (int64_t l = 0; l < c.num_layers; ++l) {
        layer(l, B, S, da, out.layers[size_t(l)], all);
        if (da.after_layer) da.after_layer(l, da.layer(l));
    }
}

template <class T>
void DeviceModel<T>::Impl::forward(const int64_t* ids_host, int64_t B, int64_t S,
                                   Activations<T>& out, KeepActs keep, bool last_only) {
    const Config& c = m.cfg;
    const int64_t d = c.hidden_size, V = c.vocab_size, N = B * S;
    Stream s = stream;
    DevActs<T> da;
    layers(ids_host, B, S, da, out, keep == KeepActs::ALL);
    const T* x = da.input_of(c.num_layers);

    // The head: over every row, or over each sequence's last (rows S·d apart).
    const int64_t rows = last_only ? B : N;
    Scratch<T> logits(rows * V, s);
    mm(gemm, false, true, rows, V, d, x + (last_only ? (S - 1) * d : 0), last_only ? S * d : d,
       dev(m.w.head_w), d, logits.get(), V, dev(m.w.head_b));
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
void DeviceModel<T>::refresh_params() {
    impl_->upload_params();
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
// (with their Impl: the pass's pieces that backward.cu calls; its own are instantiated there)

}  // namespace pldr::cuda
