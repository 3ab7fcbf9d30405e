// The PLDR-LLM forward pass on the GPU (src/cuda/forward.cu): the model's parameters uploaded once,
// then the forward of model/forward.h composed from the backend's kernels (cuda/kernels.h) and
// cuBLASLt products (cuda/gemm.h), step for step in the CPU's order, so that each intermediate
// can be held against the CPU's (tests/gpu/test_cuda_forward.cpp):
//   embedding·√d → LN → per layer: q, k, v (+ RoPE on q, k) → A0 = Qᵀ·Q → the metric learner
//   (LN_A, R residual units of N GLUs + LN) → the operator (Z = W·A + b, A_LM, A_P, G = a·A_P +
//   b_a; a fixed G is copied) → Ep = (Q·G)·Kᵀ/√dk, E = softmax(Ep + mask·(−1e9)), O = E·V → the
//   output projection, + x, LN1 → the SwiGLU FFN, + out1, LN2 → the head.
// T = float or double. The float32 operator runs in float64 and rounds Z, A_LM, A_P and G once,
// as the CPU's (ops/plga.cpp); the rest is float32 throughout (TF32 off).
//
// This is the first piece of the device seam (docs/gpu.md): the full forward without caches,
// as `forward(m, ids, B, S, acts)` with KeepActs::ALL or only the logits, and the training
// objective with its gradient (`loss_and_grads`, train/loss.h's on the device: backward.cu). The
// optimizer's step, the cached sessions and the fused kernels come on top of it.
#pragma once
#include <cstdint>
#include <memory>

#include "model/activations.h"
#include "model/model.h"
#include "train/loss.h"
#include "train/step.h"

namespace pldr::cuda {

template <class T>
class DeviceModel {
  public:
    // Uploads m's parameters, fixed G and RoPE table to CUDA device `device` (an index below
    // cuda::device_count(); every later call selects it again, so one thread may hold models on
    // several devices). m must outlive this object and keep its parameters (they are read once,
    // here). Throws pldr::Error (one line) for a model the backend cannot run: an operator
    // variant without a CUDA kernel.
    explicit DeviceModel(const Model<T>& m, int device = 0);
    ~DeviceModel();
    DeviceModel(const DeviceModel&) = delete;
    DeviceModel& operator=(const DeviceModel&) = delete;

    const Model<T>& model() const;
    int device() const;
    // Bytes of device memory the parameters take.
    int64_t param_bytes() const;

    // The forward of ids [B,S] (causal + padding mask, positions 0..S-1), inputs checked as the
    // CPU checks them. Fills out.logits [B,S,V]; with keep = KeepActs::ALL also every tensor
    // the CPU's forward keeps for inspection (x0, embed_ln and its statistics; per layer q, k,
    // v, A0, A, Z, A_LM, A_P, G, QG, Ep, E, O, attn_out, out1, ffn_out, hidden). Any other keep:
    // the logits only. Waits for the device.
    void forward(const int64_t* ids, int64_t B, int64_t S, Activations<T>& out,
                 KeepActs keep = KeepActs::INFERENCE);
    // A prompt's forward as a prefill needs it: the same pass, with the head over each
    // sequence's last position only; out [B,V] gets those logits, nothing else is downloaded.
    // Waits for the device.
    void last_logits(const int64_t* ids, int64_t B, int64_t S, Tensor<T>& out);

    // The training objective of train/loss.h on the device (backward.cu): the forward over
    // tokens[:, :-1] [B, S1], masked cross-entropy against tokens[:, 1:] (the pad id never
    // scored), the DAG metrics and terms as the CPU's loss_and_grads computes them (whenever the
    // model has a learned G, even with zero coefficients; they enter the loss for positive
    // ones), and the backward. ACCUMULATES d value / d params · grad_scale into grads_host
    // (m.num_params() values, the CPU's layout) and returns the CPU's LossResult. The gradient is
    // computed in a device buffer (cleared per call, downloaded and added at the end). Inputs
    // are refused with the CPU's one-line errors. Waits for the device.
    // grads_host null: the loss alone (validation), as the CPU's. ce_denominator > 0 replaces
    // the batch's count of scored targets as the divisor of the CE gradient (train/loss.h).
    LossResult loss_and_grads(const int64_t* tokens, int64_t B, int64_t S1, const DagCoeffs& dag,
                              T* grads_host, double grad_scale = 1.0, double ce_denominator = 0);
    // Uploads the host model's parameters again (after an optimizer step changed them). Waits
    // for the device.
    void refresh_params();

    // ---- the optimizer's step on the device (a resident StepBackend, train/step.h): the
    // gradient and the AdamW moments in device memory, the CPU's kernels' bits (cuda/kernels.h).
    // accumulate: loss_and_grads into the device gradient, which zero_grads() clears.
    void zero_grads();
    LossResult accumulate(const int64_t* tokens, int64_t B, int64_t S1, const DagCoeffs& dag,
                          double grad_scale, double ce_denominator = 0);
    GradPass grad_pass(T limit);
    bool grads_finite();
    void download_grads(T* host);
    void clip_grads_by_value(T limit);
    void scale_grads_to_norm(double max_norm, double norm);
    // AdamW step t on the device parameters with the device moments (zero until set_moments),
    // then, unless host is null, the parameters downloaded into it (the model's, m.num_params()
    // values).
    void adamw(int64_t t, double lr, const AdamWConfig& cfg, T* host);
    // The device's parameters into host (m.num_params() values). Waits for the device.
    void download_params(T* host);
    void set_moments(const T* m, const T* v);
    // The precision of the training passes (loss_and_grads, accumulate): BF16 runs the linear
    // layers' products with bf16 operands and float32 accumulation (float32 models), as the
    // CPU's Bf16Autocast; FP32 (the default) runs everything in T.
    void set_precision(Precision p);
    void get_moments(T* m, T* v);

    // Decode steps (DeviceSession) as CUDA graphs, captured once per batch size and replayed
    // (on by default; PLDR_CUDA_GRAPHS=0 turns them off): off runs the same work eagerly.
    void set_decode_graphs(bool on);
    // The decode graphs made so far (a capture that failed made none: its steps run eagerly).
    int64_t decode_graphs_made() const;

    struct Impl;
    Impl& impl() { return *impl_; }  // (the device's other passes: session.cu)

  private:
    std::unique_ptr<Impl> impl_;
};

// A Trainer's steps on CUDA device `device` (train/step.h StepBackend): m uploaded once, each
// micro-batch's loss and gradient on the device (validation's loss too). m must outlive it.
// Resident (train/step.h): the gradient, the clipping and AdamW on the device, the parameters
// written back into m after each step.
template <class T>
std::shared_ptr<StepBackend<T>> make_step_backend(Model<T>& m, int device);

}  // namespace pldr::cuda
