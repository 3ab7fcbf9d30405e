// The training objective and the backward of PLDR-LLM on the GPU (see forward.h,
// loss_and_grads): train/loss.cpp, model/backward.cpp, model/plga_layer.cpp
// (decoder_layer_backward), model/plga_attention.cpp (plga_attention_backward, operator_backward),
// model/metric_learner.cpp (metric_learner_backward), ops/attention.cpp (head_attention_backward,
// gram_backward), ops/plga.cpp (plga_g_backward) and ops/dense.cpp (linear, LayerNorm, GLU,
// softmax) step for step in the CPU's order, from the activations that the training forward keeps
// on the device (impl.cuh, DevActs::train), recomputing the attention's probabilities and the
// metric learner's units as the CPU's KeepActs::TRAINING does.
// The DAG terms (dag_terms.cu) with their gradient run on the device (cuda/dag.cu, ops/dag_expm.h's
// algorithm, one block per instance), their values reduced on the host as train/loss.cpp's
// dag_loss_term does, the gradients entering the backward where the CPU's DeductiveGrads enter it;
// without gradients (the metrics of zero coefficients), or with PLDR_CUDA_DAG=host, the layers'
// A_LM, A_P and G_LM are downloaded and dag_loss_term runs on the host (the metrics on a thread of
// their own while the device runs the backward). Per-parameter sums over rows (the bias and
// LayerNorm gradients, the operator's per-head parameters over sequences) run in cuda/colsum.cuh's
// fixed chunked order, the embedding's over each id's tokens in the CPU's order; the products' sums
// are cuBLASLt's.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <future>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cuda/colsum.cuh"
#include "cuda_model/impl.cuh"

namespace pldr::cuda {

using namespace model_detail;

namespace {

// The softmax's backward over one row of a (b,h) block [S,S], in place: g = (0 + E ⊙ (g − Σ E⊙g))
// / scale (ops/dense.cpp softmax_backward into zeros, then ops/attention.cpp's division). No
// mask is needed: E is exactly 0 on the masked keys wherever the CPU skips them, and 0·(g − Σ)
// adds nothing to the sum and leaves 0 (the CPU skips the causal corner only where E is 0 there,
// and otherwise runs the full row, as here). One block per row; grid (S, B·H).
template <class T>
__global__ void __launch_bounds__(kThreads)
    softmax_backward_kernel(T* g, const T* E, int64_t S, T scale) {
    const int64_t i = blockIdx.x, bh = blockIdx.y;
    const T* er = E + (bh * S + i) * S;
    T* gr = g + (bh * S + i) * S;
    __shared__ T red[kThreads];
    T dot = 0;
    for (int64_t j = threadIdx.x; j < S; j += blockDim.x) dot += er[j] * gr[j];
    dot = block_sum(dot, red);
    for (int64_t j = threadIdx.x; j < S; j += blockDim.x)
        gr[j] = (T(0) + er[j] * (gr[j] - dot)) / scale;
}

// out = a + aᵀ for each D×D block of n values (ops/attention.cpp gram_backward's sym).
template <class T>
__global__ void __launch_bounds__(kThreads) sym_kernel(T* out, const T* a, int64_t n, int64_t D) {
    const int64_t DD = D * D;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t blk = i / DD, r = (i % DD) / D, c = i % D;
        out[i] = a[i] + a[blk * DD + c * D + r];
    }
}

// The embedding's gradient (model/backward.cpp): for each distinct id u, row uids[u] of gemb
// += dx0[n, :]·scale over its tokens n = order[start[u]], ..., order[start[u+1] − 1], increasing:
// the CPU's order of the sum. One thread per (id, column): no two threads write one element.
template <class T>
__global__ void __launch_bounds__(kThreads)
    embed_backward_kernel(T* gemb, const T* dx0, const int64_t* uids, const int64_t* start,
                          const int64_t* order, int64_t U, int64_t d, T scale) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < U * d;
         i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t u = i / d, j = i % d;
        T* e = gemb + uids[u] * d + j;
        T acc = *e;
        for (int64_t p = start[u]; p < start[u + 1]; ++p) acc += dx0[order[p] * d + j] * scale;
        *e = acc;
    }
}

// db[o] += Σ_n x[n, o] (ops/dense.cpp's bias gradient; also the operator's b and b_a: [B, H·D·D]
// summed over the sequences), in cuda/colsum.cuh's chunks.
template <class T>
void colsum(T* db, const T* x, int64_t N, int64_t O, Stream s) {
    column_sums(db, N, O, PlainTerm<T, T>{x, O}, s);
}

}  // namespace

// ---- the products' backward --------------------------------------------------------------------

template <class T>
void DeviceModel<T>::Impl::linear_backward(T* din, bool din_acc, T* dW, T* db, const T* dout,
                                           const T* in, const T* W, int64_t N, int64_t I,
                                           int64_t O) {
    // din[N,I] (+)= dout[N,O]·W[O,I]; dW[O,I] += doutᵀ·in[N,I]; db[O] += Σ_n dout
    if constexpr (std::is_same_v<T, float>) {
        if (autocast) {  // mixed precision: bf16 operands, float32 accumulation (ops/dense.cpp)
            Scratch<bf16> dout16(N * O, stream), in16(dW ? N * I : 0, stream);
            to_bf16(dout16.get(), dout, N * O, stream);
            if (din)
                gemm.bf16(false, false, N, I, O, 1.0f, dout16.get(), O, weight16(W), I,
                          din_acc ? 1.0f : 0.0f, din, I);
            if (dW) {
                to_bf16(in16.get(), in, N * I, stream);
                gemm.bf16(true, false, O, I, N, 1.0f, dout16.get(), O, in16.get(), I, 1.0f, dW, I);
            }
            if (db) colsum(db, dout, N, O, stream);
            return;
        }
    }
    if (din)
        mm(gemm, false, false, N, I, O, dout, O, W, I, din, I, nullptr, {}, T(din_acc ? 1 : 0));
    if (dW) mm(gemm, true, false, O, I, N, dout, O, in, I, dW, I, nullptr, {}, T(1));
    if (db) colsum(db, dout, N, O, stream);
}

template <class T>
void DeviceModel<T>::Impl::glu_backward(T* dx, bool dx_acc, const GluView<T>& g, const T* dout,
                                        const T* x, const T* h1, const T* h2, const T* gated,
                                        const GluView<T>& p, int64_t N, int64_t I, int64_t F,
                                        int64_t O, T* sc) {
    const int64_t NF = N * F;
    T* dgated = sc;  // [N,F], becomes dh1 in place
    T* dh2 = sc + NF;
    linear_backward(dgated, false, g.w3, g.b3, dout, gated, dev(p.w3), N, F, O);
    glu_gate_backward<T>(dgated, dh2, dgated, h1, h2, NF, stream);
    linear_backward(dx, dx_acc, g.w1, g.b1, dgated, x, dev(p.w1), N, I, F);
    linear_backward(dx, true, g.w2, g.b2, dh2, x, dev(p.w2), N, I, F);
}

// ---- the head and the cross-entropy ------------------------------------------------------------

template <class T>
void DeviceModel<T>::Impl::head_loss(const T* h, const std::vector<int64_t>& tgt, int64_t N,
                                     double scale, const ModelView<T>& g, T* dhidden,
                                     LossResult& r) {
    const Config& c = m.cfg;
    const int64_t d = c.hidden_size, V = c.vocab_size;
    Stream s = stream;
    const int64_t rows = loss_head_rows(N, d, V);  // the CPU's chunks: the same sums
    Scratch<int64_t> t(N, s);
    copy_to_device(t.get(), tgt.data(), N, s);
    Scratch<T> chunk(rows * V, s), ce(N, s);
    Scratch<char> hit(N, s);
    for (int64_t n0 = 0; n0 < N; n0 += rows) {
        const int64_t nr = std::min(rows, N - n0);
        proj(chunk.get(), h + n0 * d, m.w.head_w, m.w.head_b, nr, d, V);
        // the logits' gradient overwrites the logits (one buffer per chunk)
        cross_entropy_fused_rows<T>(chunk.get(), ce.get() + n0, hit.get() + n0, chunk.get(),
                                    t.get() + n0, nr, V, c.pad_token_id, T(scale), s);
        if (dhidden)  // (validation: the loss alone)
            linear_backward(dhidden + n0 * d, false, g.head_w, g.head_b, chunk.get(), h + n0 * d,
                            dev(m.w.head_w), nr, d, V);
    }
    std::vector<T> ce_h(static_cast<size_t>(N));
    std::vector<char> hit_h(static_cast<size_t>(N));
    copy_to_host(ce_h.data(), ce.get(), N, s);
    copy_to_host(hit_h.data(), hit.get(), N, s);
    double total = 0;
    for (int64_t n = 0; n < N; ++n)
        if (tgt[size_t(n)] != c.pad_token_id) {
            total += double(ce_h[size_t(n)]);
            if (hit_h[size_t(n)]) ++r.correct;
        }
    r.ce = r.scored > 0 ? total / double(r.scored) : 0.0;
    r.accuracy = r.scored > 0 ? double(r.correct) / double(r.scored) : 0.0;
    r.value = r.ce;
}

// ---- the decoder layer's backward (model/plga_layer.cpp decoder_layer_backward) ----------------

template <class T>
void DeviceModel<T>::Impl::layer_backward(int64_t l, int64_t B, int64_t S, DevActs<T>& da,
                                          const DagGrads& dg, const ModelView<T>& g,
                                          Scratch<T>& dx) {
    const Config& c = m.cfg;
    const LayerView<T>& w = m.w.layers[size_t(l)];
    const LayerView<T>& gw = g.layers[size_t(l)];
    const int64_t H = c.num_heads, D = c.head_dim, d = c.hidden_size, N = B * S;
    const int64_t F = c.intermediate_size;
    Stream s = stream;
    DevLayer<T>& L = da.layer(l);
    const T* x_in = da.input_of(l);
    Scratch<T> dr1(N * d, s);
    std::optional<Phase> phase(std::in_place, "bwd.ln_ffn_ln", s);
    {
        // hidden = LN2(r2), r2 = ffn_out + out1
        Scratch<T> dout1(N * d, s), dr2(N * d, s), sc(2 * N * F, s);
        zero(dout1.get(), N * d, s);
        layernorm_backward<T>(dout1.get(), gw.ln2_g, gw.ln2_b, dx.get(), L.r2.get(), L.mean2.get(),
                              L.rstd2.get(), dev(w.ln2_g), N, d, s);
        // ffn_out = GLU(out1); the residual passes d(r2) to out1 too
        copy_on_device(dr2.get(), dout1.get(), N * d, s);
        glu_backward(dout1.get(), true, gw.ffn, dr2.get(), L.out1.get(), L.h1.get(), L.h2.get(),
                     L.gated.get(), w.ffn, N, d, F, d, sc.get());
        // out1 = LN1(r1), r1 = attn_out + x_in
        zero(dr1.get(), N * d, s);
        layernorm_backward<T>(dr1.get(), gw.ln1_g, gw.ln1_b, dout1.get(), L.r1.get(), L.mean1.get(),
                              L.rstd1.get(), dev(w.ln1_g), N, d, s);
    }
    // attn_out = O·Woᵀ + bo; then PLGA attention: E·V, the softmax, the scores, the operator,
    // the metric learner.
    phase.reset();
    phase.emplace("bwd.out_attention", s);
    Scratch<T> dO(N * d, s), dq(N * d, s), dk(N * d, s), dv(N * d, s);
    linear_backward(dO.get(), false, gw.wo, gw.bo, dr1.get(), L.O.get(), dev(w.wo), N, d, d);
    // the probabilities again, from the kept Q·G and K (the forward's products: the same bits)
    T* E = sized(da.E_work, B * H * S * S, s);
    scores(L.QG.get(), L.k.get(), da.ids.get(), B, S, nullptr, E);
    attention_backward(l, B, S, L, dg, g, dO.get(), E, dq.get(), dk.get(), dv.get());
    // RoPE (the transpose rotation), then the three projections; d(x_in) is the residual's dr1
    // plus theirs.
    phase.reset();
    phase.emplace("bwd.rope_qkv", s);
    rope_backward<T>(dq.get(), da.pos.get(), N, H, D, rope, c.reference_rope, m.round_f32(),
                     nullptr, s);
    rope_backward<T>(dk.get(), da.pos.get(), N, H, D, rope, c.reference_rope, m.round_f32(),
                     nullptr, s);
    linear_backward(dr1.get(), true, gw.wq, gw.bq, dq.get(), x_in, dev(w.wq), N, d, d);
    linear_backward(dr1.get(), true, gw.wk, gw.bk, dk.get(), x_in, dev(w.wk), N, d, d);
    linear_backward(dr1.get(), true, gw.wv, gw.bv, dv.get(), x_in, dev(w.wv), N, d, d);
    dx = std::move(dr1);
}

// ---- PLGA attention's backward (model/plga_attention.cpp, ops/attention.cpp) -------------------

template <class T>
void DeviceModel<T>::Impl::attention_backward(int64_t l, int64_t B, int64_t S, DevLayer<T>& L,
                                              const DagGrads& dg, const ModelView<T>& g,
                                              const T* dO, const T* E, T* dq, T* dk, T* dv) {
    const Config& c = m.cfg;
    const int64_t H = c.num_heads, D = c.head_dim, d = c.hidden_size, DD = D * D, HDD = H * DD;
    const int64_t SS = S * S, SD = S * D, n = B * HDD;
    Stream s = stream;
    const T *q = L.q.get(), *k = L.k.get(), *v = L.v.get(), *QG = L.QG.get();
    std::optional<Tf32Scope> tf32(std::in_place, gemm, autocast);  // (ends before the learner's)
    const Strides rows_bsd{S * d, D};  // q, k, v, dO and their gradients: [B,S,H,D]
    Scratch<T> dE(B * H * SS, s), dQG(B * H * SD, s);
    // Per (b,h): dE = dO·Vᵀ; dV = Eᵀ·dO
    mm_heads(gemm, B, H, false, true, S, S, D, dO, d, rows_bsd, v, d, rows_bsd, dE.get(), S,
             {H * SS, SS});
    mm_heads(gemm, B, H, true, false, S, D, S, E, S, {H * SS, SS}, dO, d, rows_bsd, dv, d,
             rows_bsd);
    // dEp = softmax'(dE) / √dk, in place
    softmax_backward_kernel<T>
        <<<dim3(unsigned(S), unsigned(B * H)), kThreads, 0, s>>>(dE.get(), E, S, m.score_scale());
    PLDR_CUDA_LAUNCHED("softmax_backward");
    // dQG = dEp·K; dK = dEpᵀ·QG; dQ = dQG·Gᵀ
    mm_heads(gemm, B, H, false, false, S, D, S, dE.get(), S, {H * SS, SS}, k, d, rows_bsd,
             dQG.get(), D, {H * SD, SD});
    mm_heads(gemm, B, H, true, false, S, D, S, dE.get(), S, {H * SS, SS}, QG, D, {H * SD, SD}, dk,
             d, rows_bsd);
    mm_heads(gemm, B, H, false, true, S, D, D, dQG.get(), D, {H * SD, SD}, L.G.get(), D, {HDD, DD},
             dq, d, rows_bsd);
    if (!c.learned_g()) return;  // a fixed G is a constant
    dE.reset();
    tf32.reset();

    // dG = Qᵀ·dQG (+ the DAG's), then the operator and the metric learner.
    Scratch<T> dG(n, s), dA(n, s);
    mm_heads(gemm, B, H, true, false, D, D, S, q, d, rows_bsd, dQG.get(), D, {H * SD, SD}, dG.get(),
             D, {HDD, DD});
    const int64_t at = l * n;  // layer l's part of the DAG's [L,B,H,D,D] gradients
    if (dg.dG.get()) add(dG.get(), dG.get(), dg.dG.get() + at, n, s);
    const LayerView<T>& gw = g.layers[size_t(l)];
    {
        const Phase phase("bwd.operator", s);
        operator_backward(l, B, L, dG.get(), dg.dA_LM.get() ? dg.dA_LM.get() + at : nullptr,
                          dg.dA_P.get() ? dg.dA_P.get() + at : nullptr, gw, dA.get());
    }
    const Phase phase("bwd.metric_learner", s);
    learner_backward(l, B, S, L, dA.get(), gw, dq);
}

template <class T>
void DeviceModel<T>::Impl::operator_backward(int64_t l, int64_t B, DevLayer<T>& L, const T* dG,
                                             const T* xA_LM, const T* xA_P, const LayerView<T>& gw,
                                             T* dA) {
    const Config& c = m.cfg;
    const LayerView<T>& w = m.w.layers[size_t(l)];
    const int64_t H = c.num_heads, D = c.head_dim, DD = D * D, HDD = H * DD, n = B * HDD;
    Stream s = stream;
    const T *A = L.A.get(), *Z = L.Z.get(), *ALM = L.A_LM.get(), *AP = L.A_P.get();
    // The per-head parameters' gradients add the sequences' terms in order (the CPU's loop over
    // b inside each head): one strided batch over the heads per sequence.
    const GemmBatch heads{H, DD, DD, DD};
    // b_a += dG; a += dG·A_Pᵀ
    colsum(gw.ba, dG, B, HDD, s);
    for (int64_t b = 0; b < B; ++b)
        mm(gemm, false, true, D, D, D, dG + b * HDD, D, AP + b * HDD, D, gw.a, D, nullptr, heads,
           T(1));
    // dA_P = aᵀ·dG (+ the DAG's)
    Scratch<T> dAp(n, s), dZ(n, s);
    mm_heads(gemm, B, H, true, false, D, D, D, dev(w.a), D, {0, DD}, dG, D, {HDD, DD}, dAp.get(), D,
             {HDD, DD});
    if (xA_P) add(dAp.get(), dAp.get(), xA_P, n, s);
    // dA_LM = dA_P·∂c/∂A_LM and P += dA_P·∂c/∂P (sequence by sequence: P's sum in order); + the
    // DAG's; dZ = dA_LM ⊙ f'(Z)
    for (int64_t b = 0; b < B; ++b)
        coupling_backward<T>(c.plga_coupling, dZ.get() + b * HDD, gw.P, dAp.get() + b * HDD,
                             ALM + b * HDD, AP + b * HDD, dev(w.P), HDD, s);
    if (xA_LM) add(dZ.get(), dZ.get(), xA_LM, n, s);
    positive_map_backward<T>(c.plga_positive_map, dZ.get(), Z, ALM, n, s);
    // W += dZ·Aᵀ; b += dZ; dA = Wᵀ·dZ
    for (int64_t b = 0; b < B; ++b)
        mm(gemm, false, true, D, D, D, dZ.get() + b * HDD, D, A + b * HDD, D, gw.W, D, nullptr,
           heads, T(1));
    colsum(gw.b, dZ.get(), B, HDD, s);
    mm_heads(gemm, B, H, true, false, D, D, D, dev(w.W), D, {0, DD}, dZ.get(), D, {HDD, DD}, dA, D,
             {HDD, DD});
}

// ---- the metric learner's backward (model/metric_learner.cpp) ----------------------------------

template <class T>
void DeviceModel<T>::Impl::learner_backward(int64_t l, int64_t B, int64_t S, DevLayer<T>& L, T* dA,
                                            const LayerView<T>& gw, T* dq) {
    const Config& c = m.cfg;
    const LayerView<T>& w = m.w.layers[size_t(l)];
    const int64_t H = c.num_heads, D = c.head_dim, d = c.hidden_size, DD = D * D, HDD = H * DD;
    const int64_t rows = B * H * D, n = B * HDD, Fa = c.A_dff;
    Stream s = stream;
    DevLearner<T>& ml = L.ml;
    // The learner's chain runs in float32 under autocast too (the CPU's Bf16Autocast(FP32)).
    const bool was = autocast;
    autocast = false;
    struct Restore {
        bool& flag;
        bool value;
        ~Restore() { flag = value; }
    } restore{autocast, was};
    // The residual units again, every unit and GLU its own buffers (the forward kept two), from
    // LN_A's output; they rewrite A with the forward's bits.
    if (c.num_reslayerA > 0) learner_units(w, rows, ml.A_ln.get(), L, true);
    // Residual units in reverse: each one's LayerNorm, its GLUs in reverse, + the residual.
    Scratch<T> dsum(n, s), by(n, s), bx(n, s), sc(2 * rows * Fa, s);
    for (int64_t r = c.num_reslayerA - 1; r >= 0; --r) {
        DevUnit<T>& u = ml.res[size_t(r)];
        const ResUnitView<T>& rw = w.res[size_t(r)];
        const ResUnitView<T>& rg = gw.res[size_t(r)];
        const T* in = r == 0 ? ml.A_ln.get() : u.in.get();
        zero(dsum.get(), n, s);
        layernorm_backward<T>(dsum.get(), rg.ln_g, rg.ln_b, dA, u.sum.get(), u.mean.get(),
                              u.rstd.get(), dev(rw.ln_g), rows, D, s);
        T *dy = by.get(), *dx = bx.get();
        copy_on_device(dy, dsum.get(), n, s);
        for (int64_t k = c.num_denseA - 1; k >= 0; --k) {
            const DevGlu<T>& gl = u.glu[size_t(k)];
            glu_backward(dx, false, rg.glu[size_t(k)], dy, k == 0 ? in : gl.x.get(), gl.h1.get(),
                         gl.h2.get(), gl.gated.get(), rw.glu[size_t(k)], rows, D, Fa, D, sc.get());
            std::swap(dy, dx);
        }
        add(dA, dsum.get(), dy, n, s);  // d(unit input)
    }
    // LN_A, then A0 = qᵀq ⇒ dq += q·(dA0 + dA0ᵀ)
    Scratch<T>& dA0 = dsum;
    zero(dA0.get(), n, s);
    layernorm_backward<T>(dA0.get(), gw.lnA_g, gw.lnA_b, dA, ml.A0.get(), ml.mean.get(),
                          ml.rstd.get(), dev(w.lnA_g), rows, D, s);
    T* sym = by.get();
    sym_kernel<T><<<grid_for(n), kThreads, 0, s>>>(sym, dA0.get(), n, D);
    PLDR_CUDA_LAUNCHED("sym");
    mm_heads(gemm, B, H, false, false, S, D, D, L.q.get(), d, {S * d, D}, sym, D, {HDD, DD}, dq, d,
             {S * d, D}, T(1));
    ml.res.clear();  // (stream-ordered frees)
}

// ---- the input LayerNorm and the embedding (model/backward.cpp) --------------------------------

template <class T>
void DeviceModel<T>::Impl::embed_backward(DevActs<T>& da, const std::vector<int64_t>& ids,
                                          const ModelView<T>& g, const T* dx) {
    const int64_t d = m.cfg.hidden_size, N = int64_t(ids.size());
    Stream s = stream;
    Scratch<T> dx0(N * d, s);
    zero(dx0.get(), N * d, s);
    layernorm_backward<T>(dx0.get(), g.ln_in_g, g.ln_in_b, dx, da.x0.get(), da.mean.get(),
                          da.rstd.get(), dev(m.w.ln_in_g), N, d, s);
    // The tokens grouped by id, each group in increasing position (a stable sort).
    std::vector<int64_t> order(static_cast<size_t>(N)), uids, start;
    std::iota(order.begin(), order.end(), int64_t(0));
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return ids[size_t(a)] < ids[size_t(b)]; });
    for (int64_t p = 0; p < N; ++p)
        if (p == 0 || ids[size_t(order[size_t(p)])] != ids[size_t(order[size_t(p - 1)])]) {
            uids.push_back(ids[size_t(order[size_t(p)])]);
            start.push_back(p);
        }
    start.push_back(N);
    const int64_t U = int64_t(uids.size());
    Scratch<int64_t> d_order(N, s), d_uids(U, s), d_start(U + 1, s);
    copy_to_device(d_order.get(), order.data(), N, s);
    copy_to_device(d_uids.get(), uids.data(), U, s);
    copy_to_device(d_start.get(), start.data(), U + 1, s);
    embed_backward_kernel<T><<<grid_for(U * d), kThreads, 0, s>>>(
        g.emb, dx0.get(), d_uids.get(), d_start.get(), d_order.get(), U, d, m.embed_scale());
    PLDR_CUDA_LAUNCHED("embed_backward");
    PLDR_CUDA_CALL(cudaStreamSynchronize(s));  // before the host's arrays go
}

// ---- the objective (train/loss.cpp loss_and_grads) ---------------------------------------------

template <class T>
LossResult DeviceModel<T>::Impl::loss_and_grads(const int64_t* tokens, int64_t B, int64_t S1,
                                                const DagCoeffs& dag, T* grads_host,
                                                double grad_scale, double ce_denominator,
                                                bool resident) {
    PLDR_REQUIRE(S1 >= 2, "a training sequence needs at least 2 tokens (got ", S1, ")");
    PLDR_REQUIRE(dag.A >= 0 && dag.Ap >= 0 && dag.G >= 0, "DAG coefficients must be >= 0 (got ",
                 dag.A, ",", dag.Ap, ",", dag.G, ")");
    const bool want = resident || grads_host;  // else the loss alone (validation)
    if (want) require_float_weights(m);
    const Config& c = m.cfg;
    const int64_t S = S1 - 1, N = B * S, d = c.hidden_size, P = m.num_params();
    std::vector<int64_t> in, tgt;
    split_training_batch(tokens, B, S1, in, tgt);
    check_inputs(m, tgt.data(), B, S);
    check_inputs(m, in.data(), B, S);  // the forward's check, before the count (the CPU's order)
    LossResult r;
    for (int64_t n = 0; n < N; ++n) r.scored += tgt[size_t(n)] != c.pad_token_id;
    PLDR_REQUIRE(r.scored > 0 || (want && ce_denominator > 0),
                 "no scored target tokens in the batch (all are pad)");
    const double denominator = ce_denominator > 0 ? ce_denominator : double(r.scored);

    // Mixed precision for this pass where asked (the linear layers' products in bf16).
    autocast = std::is_same_v<T, float> && precision == Precision::BF16;
    struct Off {
        bool& flag;
        ~Off() { flag = false; }
    } off{autocast};
    // The forward, keeping every activation on the device; nothing downloaded.
    DevActs<T> da;
    da.train = true;
    Activations<T> ids_only;
    layers(in.data(), B, S, da, ids_only, false);
    Stream s = stream;
    T* gd = nullptr;
    ModelView<T> g;
    Scratch<T> dx;
    if (want) {
        if (resident) {
            gd = grad_buffer();  // accumulated into, as the CPU's step accumulates
        } else {
            gd = sized(grads, P, s);
            zero(gd, P, s);
        }
        g = bind_view(m.layout, c, gd);  // device pointers
        dx = Scratch<T>(N * d, s);
    }
    // The head over chunks of rows with the cross-entropy: d(final hidden) and the head's
    // gradient; then the DAG terms (learned G: as metrics always, in the loss for positive
    // coefficients); then the layers in reverse, LN_in and the embedding.
    {
        const Phase phase("head_loss", s);
        head_loss(da.input_of(c.num_layers), tgt, N, grad_scale / denominator, g, dx.get(), r);
    }
    // Without their gradient (zero coefficients, or validation) the DAG terms run on the host
    // while the device runs the backward; they write r's DAG fields only.
    DagGrads dg;
    std::future<void> dag_host;
    if (c.learned_g()) {
        const Phase phase("dag_terms", s);
        dag_host = dag_terms(da, B, dag, want ? grad_scale : 0.0, r, dg);
    }
    const auto dag_done = [&] {
        if (dag_host.valid()) dag_host.get();
        r.value += r.dag_loss;
    };
    if (!want) {
        dag_done();
        return r;
    }
    {
        const Phase phase("backward", s);
        for (int64_t l = c.num_layers - 1; l >= 0; --l) layer_backward(l, B, S, da, dg, g, dx);
        embed_backward(da, in, g, dx.get());
    }
    dag_done();
    if (resident) return r;
    std::vector<T> host(static_cast<size_t>(P));
    copy_to_host(host.data(), gd, P, s);
    for (int64_t i = 0; i < P; ++i) grads_host[i] += host[size_t(i)];
    return r;
}

template <class T>
LossResult DeviceModel<T>::loss_and_grads(const int64_t* tokens, int64_t B, int64_t S1,
                                          const DagCoeffs& dag, T* grads_host, double grad_scale,
                                          double ce_denominator) {
    return impl_->loss_and_grads(tokens, B, S1, dag, grads_host, grad_scale, ce_denominator);
}

template LossResult DeviceModel<float>::loss_and_grads(const int64_t*, int64_t, int64_t,
                                                       const DagCoeffs&, float*, double, double);
template LossResult DeviceModel<double>::loss_and_grads(const int64_t*, int64_t, int64_t,
                                                        const DagCoeffs&, double*, double, double);

}  // namespace pldr::cuda
