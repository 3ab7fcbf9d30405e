// The model on the device, shared by its passes (device code; included by src/cuda_model/*.cu
// only): DeviceModel<T>::Impl, what a pass keeps on the device (DevActs), and the helpers of both
// passes (element-wise kernels, the products in T, strided batches over (sequence, head)).
// forward.cu runs the forward, backward.cu the training objective and the backward.
#pragma once
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/gemm.h"
#include "cuda/profile.h"
#include "cuda_model/forward.h"
#include "model/forward.h"

namespace pldr::cuda::model_detail {

// ---- element-wise kernels of both passes -------------------------------------------------------

// out = a + b (the residual sums; out may be a or b)
template <class T>
__global__ void __launch_bounds__(kThreads) add_kernel(T* out, const T* a, const T* b, int64_t n) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        out[i] = a[i] + b[i];
}

template <class To, class From>
__global__ void __launch_bounds__(kThreads) cast_kernel(To* dst, const From* src, int64_t n) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        dst[i] = To(src[i]);
}

// x0[n, :] = emb[ids[n], :]·scale (the embedding of N tokens)
template <class T>
__global__ void __launch_bounds__(kThreads)
    embed_kernel(T* x0, const T* emb, const int64_t* ids, int64_t N, int64_t d, T scale) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < N * d;
         i += int64_t(gridDim.x) * blockDim.x)
        x0[i] = emb[ids[i / d] * d + i % d] * scale;
}

// The block's maximum and sum of one value per thread (kThreads threads, red: kThreads of shared
// memory); every thread gets the result. A fixed tree: the same bits on every run.
template <class T>
__device__ T block_max(T v, T* red) {
    red[threadIdx.x] = v;
    __syncthreads();
    for (int w = kThreads / 2; w > 0; w /= 2) {
        if (int(threadIdx.x) < w && red[threadIdx.x + w] > red[threadIdx.x])
            red[threadIdx.x] = red[threadIdx.x + w];
        __syncthreads();
    }
    const T r = red[0];
    __syncthreads();
    return r;
}
template <class T>
__device__ T block_sum(T v, T* red) {
    red[threadIdx.x] = v;
    __syncthreads();
    for (int w = kThreads / 2; w > 0; w /= 2) {
        if (int(threadIdx.x) < w) red[threadIdx.x] += red[threadIdx.x + w];
        __syncthreads();
    }
    const T r = red[0];
    __syncthreads();
    return r;
}
// The softmax of a row of n logits in place, by one block (ops/dense.cpp softmax_forward: the
// row's maximum, exp(x − max), the sum, each divided by it); each thread reads back only what
// it wrote of the row.
template <class T>
__device__ void softmax_row(T* r, int64_t n, T* red) {
    T mx = T(-INFINITY);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) mx = r[j] > mx ? r[j] : mx;
    mx = block_max(mx, red);
    T sum = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        const T y = exp(r[j] - mx);
        r[j] = y;
        sum += y;
    }
    sum = block_sum(sum, red);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) r[j] /= sum;
}

// dst = src rounded to bf16 (nearest, ties to even: the CPU's round_to_bf16)
// (templates, as every kernel of this header: one definition across the files that include it)
template <class F>
__global__ void __launch_bounds__(kThreads) to_bf16_kernel(bf16* dst, const F* src, int64_t n) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        store<bf16>(dst, i, float(src[i]));
}
template <class F>
void to_bf16(bf16* dst, const F* src, int64_t n, Stream s) {
    if (n == 0) return;
    to_bf16_kernel<F><<<grid_for(n), kThreads, 0, s>>>(dst, src, n);
    PLDR_CUDA_LAUNCHED("to_bf16");
}

template <class T>
void add(T* out, const T* a, const T* b, int64_t n, Stream s) {
    if (n == 0) return;
    add_kernel<T><<<grid_for(n), kThreads, 0, s>>>(out, a, b, n);
    PLDR_CUDA_LAUNCHED("add");
}
template <class To, class From>
void cast(To* dst, const From* src, int64_t n, Stream s) {
    if (n == 0) return;
    cast_kernel<To, From><<<grid_for(n), kThreads, 0, s>>>(dst, src, n);
    PLDR_CUDA_LAUNCHED("cast");
}
template <class U>
void zero(U* p, int64_t n, Stream s) {
    if (n > 0) PLDR_CUDA_CALL(cudaMemsetAsync(p, 0, size_t(n) * sizeof(U), s));
}

// A kept buffer of n values: allocated on first use (or when its size changes), else reused.
template <class U>
U* sized(Scratch<U>& b, int64_t n, Stream s) {
    if (!b.get() || b.size() != n) b = Scratch<U>(n, s);
    return b.get();
}

// ---- the products in T: row-major C = op(A)·op(B) (+ bias) + beta·C, through cuBLASLt ----------
inline void mm(Gemm& g, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A,
               int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc,
               const float* bias = nullptr, const GemmBatch& batch = {}, float beta = 0.0f) {
    g.f32(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc, bias, batch);
}
inline void mm(Gemm& g, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double* A,
               int64_t lda, const double* B, int64_t ldb, double* C, int64_t ldc,
               const double* bias = nullptr, const GemmBatch& batch = {}, double beta = 0.0) {
    g.f64(ta, tb, M, N, K, 1.0, A, lda, B, ldb, beta, C, ldc, bias, batch);
}

// An operand's offsets, in elements, from one sequence to the next and from one head to the next.
struct Strides {
    int64_t b, h;
};
// The same product for every (sequence b, head h) pair: one strided batch over the larger of B
// and H per value of the smaller (a stride of 0 repeats an operand: a head's parameter for
// every sequence). beta = 1 accumulates into C (no two pairs share a C).
template <class T>
void mm_heads(Gemm& g, int64_t B, int64_t H, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
              const T* A, int64_t lda, Strides sa, const T* Bm, int64_t ldb, Strides sb, T* C,
              int64_t ldc, Strides sc, T beta = T(0)) {
    if (B >= H) {
        for (int64_t h = 0; h < H; ++h)
            mm(g, ta, tb, M, N, K, A + h * sa.h, lda, Bm + h * sb.h, ldb, C + h * sc.h, ldc,
               nullptr, GemmBatch{B, sa.b, sb.b, sc.b}, beta);
    } else {
        for (int64_t b = 0; b < B; ++b)
            mm(g, ta, tb, M, N, K, A + b * sa.b, lda, Bm + b * sb.b, ldb, C + b * sc.b, ldc,
               nullptr, GemmBatch{H, sa.h, sb.h, sc.h}, beta);
    }
}
// y[N,O] = x[N,I]·Wᵀ + b (W [O,I] row-major: the linear layers' convention)
template <class T>
void linear(Gemm& g, T* y, const T* x, const T* W, const T* b, int64_t N, int64_t I, int64_t O) {
    mm(g, false, true, N, O, I, x, I, W, I, y, O, b);
}

// Under mixed precision (Impl::autocast) the attention's float32 products, forward and backward
// ((Q·G)·Kᵀ, E·V and their gradients), run on the tensor cores in TF32 (10-bit mantissas, float32
// accumulation): finer than the bf16 operands that the reference's autocast gives them, and
// 8 times the float32 rate of an H100/H200 for the step's largest products after the linear
// layers' (2 TFLOP of a 110M step of 32 x 1024 tokens). The scope restores the setting.
struct Tf32Scope {
    Gemm& g;
    bool was;
    Tf32Scope(Gemm& gemm, bool on) : g(gemm), was(gemm.tf32()) { g.set_tf32(was || on); }
    ~Tf32Scope() { g.set_tf32(was); }
    Tf32Scope(const Tf32Scope&) = delete;
    Tf32Scope& operator=(const Tf32Scope&) = delete;
};

// Makes `device` the calling thread's current device (before anything of the model's is made).
struct Selected {
    int device;
    explicit Selected(int d) : device(d) { select(); }
    void select() const {
        PLDR_REQUIRE(device >= 0, "CUDA device index ", device, " is negative");
        PLDR_CUDA_CALL(cudaSetDevice(device));
    }
};

// The model's stream: created (a capture needs a stream of its own; the legacy default stream
// cannot be captured into a CUDA graph) and non-blocking, so that another thread's work on the
// legacy stream (a model being uploaded) neither waits for it nor breaks a capture on it: every
// pass's work goes to this stream, and what is made on the legacy stream (the RoPE table) is
// complete before its constructor returns. Destroyed after its last work.
struct OwnedStream {
    Stream s = nullptr;
    OwnedStream() { PLDR_CUDA_CALL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
    ~OwnedStream() {
        if (!s) return;
        cudaStreamSynchronize(s);
        cudaStreamDestroy(s);
    }
    OwnedStream(const OwnedStream&) = delete;
    OwnedStream& operator=(const OwnedStream&) = delete;
};

// ---- what a pass keeps on the device -----------------------------------------------------------
// A forward for inference (or one that downloads every tensor) reuses one layer's buffers for all
// layers, and two of the metric learner's residual units and GLUs. A training forward
// (DevActs::train) keeps, per layer, what its backward reads, with the CPU's memory plan
// (KeepActs::TRAINING) where it pays: the attention's probabilities E [B,H,S,S] are recomputed
// from the kept Q·G and K in the layer's backward (one work buffer for all layers), the metric
// learner's residual units and GLUs from LN_A's kept output (learner_backward), and the output
// projection's and the FFN's outputs, which no backward reads, share one buffer each. At the
// 110M shape and 32 x 1024 tokens in float32 that keeps 2.0 GB per layer instead of 5.3 GB.

// One GLU of a residual unit of the metric learner ([B·H·D, A_dff] each; x [B,H,D,D]: its input,
// the previous GLU's output; the unit's first GLU reads the unit's input instead).
template <class T>
struct DevGlu {
    Scratch<T> x, h1, h2, gated;
};
// A residual unit: its input (unit 0 reads LN_A's output instead), its GLUs' output y, the sum
// y + input and its LayerNorm's statistics.
template <class T>
struct DevUnit {
    Scratch<T> in, y, sum, mean, rstd;
    std::vector<DevGlu<T>> glu;
};
template <class T>
struct DevLearner {
    Scratch<T> A0, A_ln, mean, rstd;  // A0 = Qᵀ·Q, LN_A's output and statistics
    std::vector<DevUnit<T>> res;
};
template <class T>
struct DevLayer {
    Scratch<T> q, k, v;                       // [N,d], q and k after RoPE
    DevLearner<T> ml;                         // learned G
    Scratch<T> A, Z, A_LM, A_P;               // learned G, [B,H,D,D] in T (float32: rounded)
    Scratch<T> G, QG, Ep, E, O;               // G [B,H,D,D]; QG [B,H,S,D]; Ep, E [B,H,S,S]
    Scratch<T> attn, r1, out1, mean1, rstd1;  // attn_out; r1 = attn_out + x_in; LN1
    Scratch<T> h1, h2, gated, ffn;            // the FFN [N,F] and its output [N,d]
    Scratch<T> r2, hidden, mean2, rstd2;      // r2 = ffn_out + out1; LN2
};
template <class T>
struct DevActs {
    bool train = false;  // keep every layer's buffers (else one set, reused)
    Scratch<int64_t> ids, pos;
    Scratch<T> x0, embed_ln, mean, rstd;  // x0 = embedding·√d; LN_in
    std::vector<DevLayer<T>> layers;      // train: one per layer; else one
    // train: what no layer keeps, shared by all (E, and the backward's E again; attn_out and
    // ffn_out, read only inside their layer's forward)
    Scratch<T> E_work, attn_work, ffn_work;
    // Called after each layer with its buffers (a session's prefill copies K, V and G from them).
    std::function<void(int64_t, DevLayer<T>&)> after_layer;
    // A session's preset G-cache: layer l's G_LM [H,D,D] on the device, for every sequence (the
    // metric learner and the operator skipped); empty: the model's own.
    std::vector<const T*> preset_G;
    // Keep the operator's A_LM and A_P (a float32 model's rounded copies) in the layer's buffers
    // for after_layer, as a training forward does (a session's prefill: its G-cache).
    bool keep_operator = false;
    DevLayer<T>& layer(int64_t l) { return layers[train ? size_t(l) : 0]; }
    // Layer l's input: the previous layer's output, or LN_in's.
    const T* input_of(int64_t l) { return l == 0 ? embed_ln.get() : layer(l - 1).hidden.get(); }
};

}  // namespace pldr::cuda::model_detail

namespace pldr::cuda {

template <class T>
struct DecodeWork;  // (session.cu)

template <class T>
struct DeviceModel<T>::Impl {
    const Model<T>& m;
    model_detail::Selected on;  // first: the members below are made on that device
    model_detail::OwnedStream own_stream;
    Stream stream = own_stream.s;  // every pass's work, in order
    Gemm gemm;
    Scratch<T> params, G_fixed;
    // The operator's parameters in float64, [L][5][H,D,D] (W, b, P, a, b_a): a float32
    // model's operator runs in float64 as the CPU's; a float64 model's reads params directly.
    Scratch<double> op64;
    DeviceRopeTable rope;
    // The gradient (the layout of params), cleared by each loss_and_grads; kept for the
    // optimizer's step on the device.
    Scratch<T> grads;
    // The AdamW moments of a resident step backend (allocated, zero, on first use).
    Scratch<T> adam_m, adam_v;
    // The DAG terms' inputs on the host (dag_terms' host path: A_LM, A_P, G_LM of every layer),
    // copied while the device goes on, and the event that says they have arrived.
    PinnedHost<T> dag_stage;
    std::unique_ptr<Event> dag_staged;
    // Mixed precision (train/step.h TrainConfig::precision, core/gemm_bf16.h): with autocast on,
    // the linear layers' products (projections, FFN, head; not the metric learner's chain, the
    // operator or the attention) take bf16 operands with float32 accumulation, as the CPU's
    // Bf16Autocast; the weights rounded once per parameter change (params16).
    Precision precision = Precision::FP32;
    bool autocast = false;  // inside a pass with precision BF16, outside the learner
    Scratch<bf16> params16;
    bool params16_fresh = false;
    // Decode steps (session.cu): their buffers and CUDA graph per (rows, cache capacity), made
    // on first use; graphs unless PLDR_CUDA_GRAPHS=0 (or a capture fails: then eager steps).
    std::map<std::pair<int64_t, int64_t>, std::shared_ptr<DecodeWork<T>>> decode_work;
    bool decode_graphs = true;

    Impl(const Model<T>& model, int device);
    // Uploads the host model's parameters (and a float32 model's operator parameters in
    // float64) again; waits for the device.
    void upload_params();
    // The float32 model's operator parameters in float64 (op64), widened from the device's
    // parameters (after an upload or an optimizer step); stream-ordered.
    void upload_op64();

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

    // The bf16 copy of a parameter, by its device pointer (rounded on first use after a change).
    const bf16* weight16(const T* dev_ptr);
    // A linear layer y[N,O] = x·Wᵀ + b (W, b: host views): bf16 products under autocast.
    void proj(T* y, const T* x, const T* W, const T* b, int64_t N, int64_t I, int64_t O);

    // ---- forward.cu
    // The pass; last_only: the head over each sequence's last row only, into out.logits [B,V].
    void forward(const int64_t* ids, int64_t B, int64_t S, Activations<T>& out, KeepActs keep,
                 bool last_only = false);
    // The decoder below the head: the inputs checked as the CPU checks them, out's ids and
    // positions set, every layer run; what it keeps on the device is da's (DevActs::train), what
    // it downloads out's (all: every tensor of KeepActs::ALL). The final hidden state is
    // da.input_of(num_layers).
    void layers(const int64_t* ids, int64_t B, int64_t S, model_detail::DevActs<T>& da,
                Activations<T>& out, bool all);
    // One decoder layer, from da.input_of(l).
    void layer(int64_t l, int64_t B, int64_t S, model_detail::DevActs<T>& da, LayerActs<T>& la,
               bool all);
    // Layer l's G_LM [B,H,D,D] into L.G from its rotated queries: A0 = Qᵀ·Q, the metric learner,
    // the operator (in float64).
    void learned_g(int64_t l, int64_t B, int64_t S, model_detail::DevLayer<T>& L, bool train,
                   LayerActs<T>& la, bool all);
    // The operator of layer l over B sequences' metrics A [B,H,D,D] into G_out (in float64, as
    // the CPU's): Z, A_LM, A_P kept in L's buffers (float64; float32 ones when train), or in
    // temporaries when L is null; downloaded into la when not null (KeepActs::ALL).
    void operator_g(int64_t l, int64_t B, const T* A, T* G_out, model_detail::DevLayer<T>* L,
                    bool train, LayerActs<T>* la);
    // The learner's residual units, from LN_A's output to A.
    void learner_units(const LayerView<T>& w, int64_t rows, const T* in,
                       model_detail::DevLayer<T>& L, bool train);
    // Ep = (Q·G)·Kᵀ / √dk (kept when Ep is not null), E = softmax(Ep + mask·(−1e9)), O = E·V.
    void attention(const T* q, const T* k, const T* v, const T* G, const int64_t* ids, int64_t B,
                   int64_t S, T* QG, T* Ep, T* E, T* O);
    // Its middle: E (and Ep when not null) from QG and the rotated keys (ids [B,S] on the
    // device: the padding mask); a training backward recomputes E with it.
    void scores(const T* QG, const T* k, const int64_t* ids, int64_t B, int64_t S, T* Ep, T* E);

    // ---- backward.cu
    // The DAG terms' device gradients (DeductiveGrads of the CPU), [L,B,H,D,D] each, or empty.
    struct DagGrads {
        Scratch<T> dA_LM, dA_P, dG;
    };
    // grads_host null and !resident: the loss alone; resident: accumulate into `grads` (not
    // cleared, not downloaded).
    LossResult loss_and_grads(const int64_t* tokens, int64_t B, int64_t S1, const DagCoeffs& dag,
                              T* grads_host, double grad_scale, double ce_denominator,
                              bool resident = false);
    // The device gradient, allocated (zero) on first use.
    T* grad_buffer();
    // The head over chunks of rows and the masked cross-entropy: dhidden [N,d] written, the
    // head's gradient accumulated; ce and accuracy into r.
    void head_loss(const T* hidden, const std::vector<int64_t>& tgt, int64_t N, double scale,
                   const ModelView<T>& g, T* dhidden, LossResult& r);
    // dag_terms.cu: the DAG terms. With gradients (grad_scale ≠ 0 and a positive coefficient)
    // computed on the device (on the host with PLDR_CUDA_DAG=host) into out, an empty future
    // returned; else computed on the host by the returned task on a thread of its own, which
    // writes r's DAG fields (dagA, dagAp, dagG, dag_loss) and nothing else: get() it before
    // reading them.
    std::future<void> dag_terms(model_detail::DevActs<T>& da, int64_t B, const DagCoeffs& dag,
                                double grad_scale, LossResult& r, DagGrads& out);
    // Layer l's backward: dx holds d(layer output) and leaves with d(layer input).
    void layer_backward(int64_t l, int64_t B, int64_t S, model_detail::DevActs<T>& da,
                        const DagGrads& dg, const ModelView<T>& g, Scratch<T>& dx);
    // PLGA attention's backward from dO and E (the probabilities, recomputed by scores): dq, dk,
    // dv written (the learner's term added to dq).
    void attention_backward(int64_t l, int64_t B, int64_t S, model_detail::DevLayer<T>& L,
                            const DagGrads& dg, const ModelView<T>& g, const T* dO, const T* E,
                            T* dq, T* dk, T* dv);
    // The operator's backward: dA [B,H,D,D] written from dG (+ the DAG's dA_LM, dA_P).
    void operator_backward(int64_t l, int64_t B, model_detail::DevLayer<T>& L, const T* dG,
                           const T* xA_LM, const T* xA_P, const LayerView<T>& gw, T* dA);
    // The metric learner's backward from dA (consumed): its residual units recomputed from LN_A's
    // output (learner_units), then dq += its term; the units freed after.
    void learner_backward(int64_t l, int64_t B, int64_t S, model_detail::DevLayer<T>& L, T* dA,
                          const LayerView<T>& gw, T* dq);
    // The GLU block's backward (ops/glu.h glu_backward): dx (accumulated when dx_acc, else
    // written) and the parameter gradients g; sc: 2·N·F.
    void glu_backward(T* dx, bool dx_acc, const GluView<T>& g, const T* dout, const T* x,
                      const T* h1, const T* h2, const T* gated, const GluView<T>& p, int64_t N,
                      int64_t I, int64_t F, int64_t O, T* sc);
    // ops/linear.h linear_backward: din [N,I] (accumulated when din_acc, else written; may be
    // null), dW += doutᵀ·in, db += Σ_n dout (in row order; dW, db may be null).
    void linear_backward(T* din, bool din_acc, T* dW, T* db, const T* dout, const T* in, const T* W,
                         int64_t N, int64_t I, int64_t O);
    // The input LayerNorm and the embedding's gradient (the scatter-add in the CPU's order).
    void embed_backward(model_detail::DevActs<T>& da, const std::vector<int64_t>& ids,
                        const ModelView<T>& g, const T* dx);
};

}  // namespace pldr::cuda
