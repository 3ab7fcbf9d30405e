// Kernels of PLDR-LLM, forward and backward side by side (llm.c style): plain functions over
// raw row-major pointers plus shape integers. Backward functions ACCUMULATE (+=) into every
// gradient they produce, so callers zero gradient buffers once per step.
// Shapes: N rows, C (or I/O) features; B batch, S queries, T keys, H heads, D head dim (dk).
// The maths is in docs/plga.md.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

namespace pldr {

// ---- linear: out[N,O] = in[N,I] · W[O,I]ᵀ + b[O] (b may be null) --------------------------------
template <typename T>
void linear_forward(T* out, const T* in, const T* W, const T* b, int64_t N, int64_t I, int64_t O);
// din[N,I] += dout·W (din may be null); dW[O,I] += doutᵀ·in; db[O] += Σ_n dout (db may be null).
template <typename T>
void linear_backward(T* din, T* dW, T* db, const T* dout, const T* in, const T* W, int64_t N,
                     int64_t I, int64_t O);

// ---- layernorm over the last axis (C), biased variance; saves mean and rstd [N] ---------------
template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* x, const T* g, const T* b, int64_t N,
                       int64_t C, double eps);
template <typename T>
void layernorm_backward(T* dx, T* dg, T* db, const T* dout, const T* x, const T* mean,
                        const T* rstd, const T* g, int64_t N, int64_t C);

// ---- activations ---------------------------------------------------------------------------
template <typename T>
inline T sigmoid(T x) {
    return T(1) / (T(1) + std::exp(-x));
}
template <typename T>
inline T silu(T x) {
    return x / (T(1) + std::exp(-x));
}
// d silu / dx
template <typename T>
inline T silu_grad(T x) {
    T s = sigmoid(x);
    return s * (T(1) + x * (T(1) - s));
}

// ---- GLU variant: out = W3·(silu(W1·x+b1) ⊙ (W2·x+b2)) + b3, x [N,I], hidden F, out [N,O] ----
// Saves h1 = W1·x+b1 and h2 = W2·x+b2 (each [N,F]) and gated = silu(h1)⊙h2 [N,F].
template <typename T>
struct GluParams {
    const T *w1, *b1, *w2, *b2, *w3, *b3;  // biases may be null
};
template <typename T>
struct GluGrads {
    T *w1, *b1, *w2, *b2, *w3, *b3;
};
template <typename T>
void glu_forward(T* out, T* h1, T* h2, T* gated, const T* x, const GluParams<T>& p, int64_t N,
                 int64_t I, int64_t F, int64_t O);
// scratch: 2·N·F workspace.
template <typename T>
void glu_backward(T* dx, const GluGrads<T>& g, const T* dout, const T* x, const T* h1, const T* h2,
                  const T* gated, const GluParams<T>& p, int64_t N, int64_t I, int64_t F, int64_t O,
                  T* scratch);

// ---- RoPE ------------------------------------------------------------------------------------
// The float32 (cos, sin) table of torchtune / the HF port: angle p·θ_m with θ_m =
// 1/theta^(2m/D), all in float32; cos and sin stored [max_pos, D/2].
//  - TORCH: bit for bit the table torch builds (the reference's `rope.cache`): θ with SLEEF's
//    powf_u10 and a float32 reciprocal, cos/sin with SLEEF's u10 functions (the vectorised
//    kernels torch runs on AVX2/AVX-512 CPUs; glibc's cosf/sinf on CPUs without FMA, where
//    torch's default kernels call them). Used by --numerics reference and by float32 models.
//  - CORRECTLY_ROUNDED: cos/sin of each float32 angle rounded once to float32 (--numerics exact).
enum class RopeTableKind { TORCH, CORRECTLY_ROUNDED };
struct RopeTable {
    int64_t max_pos = 0, half = 0;
    RopeTableKind kind = RopeTableKind::TORCH;
    std::vector<float> cos, sin;
    void build(int64_t max_pos, int64_t head_dim, double theta, RopeTableKind kind);
};
// Rotates x [N tokens, H, D] in place; token n has position pos[n].
// interleaved: pairs (2m, 2m+1) (reference_rope = true); otherwise halves (m, m + D/2).
// round_input_f32: the reference's x.float() before the rotation (float64 parity quirk).
template <typename T>
void rope_forward(T* x, const int64_t* pos, int64_t N, int64_t H, int64_t D, const RopeTable& t,
                  bool interleaved, bool round_input_f32);
// The transpose rotation, in place on the gradient. round_grad_f32 mirrors the reference's
// float32 cast on the way back.
template <typename T>
void rope_backward(T* dx, const int64_t* pos, int64_t N, int64_t H, int64_t D, const RopeTable& t,
                   bool interleaved, bool round_grad_f32);

// ---- softmax over the last axis (C) of N rows --------------------------------------------------
template <typename T>
void softmax_forward(T* y, const T* x, int64_t N, int64_t C);
// dx[N,C] += y ⊙ (dy − Σ y⊙dy)
template <typename T>
void softmax_backward(T* dx, const T* dy, const T* y, int64_t N, int64_t C);

// ---- PLGA core operator (spec §1.8), per instance of D×D matrices --------------------------
// Z = W·A + b; A_LM = Z·silu(Z) + 1e-9; A_P = A_LM^∘P; G = a·A_P + b_a.
template <typename T>
void plga_g_forward(T* Z, T* A_LM, T* A_P, T* G, const T* A, const T* W, const T* b, const T* P,
                    const T* a, const T* ba, int64_t D);
// Given dG (and optional extra dA_LM, dA_P from other losses, may be null): accumulates into
// dA, dW, db, dP, da, dba. scratch: 2·D·D.
template <typename T>
void plga_g_backward(T* dA, T* dW, T* db, T* dP, T* da, T* dba, const T* dG, const T* dA_LM_extra,
                     const T* dA_P_extra, const T* A, const T* Z, const T* A_LM, const T* A_P,
                     const T* W, const T* P, const T* a, int64_t D, T* scratch);

// ---- masked cross-entropy (spec §5.1) -------------------------------------------------------
// logits [N,V], targets [N]; positions with target == ignore_id are not scored.
// Returns Σ CE over scored rows in double; writes per-row CE (unmasked) and counts.
template <typename T>
double cross_entropy_forward(T* ce_rows, int64_t* n_scored, int64_t* n_correct, const T* logits,
                             const int64_t* targets, int64_t N, int64_t V, int64_t ignore_id);
// dlogits[N,V] += scale · (softmax(logits) − onehot(target)) on scored rows.
template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const int64_t* targets, int64_t N,
                            int64_t V, int64_t ignore_id, T scale);
// Both at once, for a training step: dlogits[N,V] is overwritten with what
// cross_entropy_backward would add to zeros (bit for bit), n_correct as the forward, and the
// forward's total is returned. The scale must be known upfront (it depends on the count of
// scored rows, a function of the targets only).
template <typename T>
double cross_entropy_fused(T* dlogits, int64_t* n_correct, const T* logits, const int64_t* targets,
                           int64_t N, int64_t V, int64_t ignore_id, T scale);

}  // namespace pldr
