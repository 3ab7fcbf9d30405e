// The GLU block of the FFN and of the metric learner, forward and backward (src/ops/dense.cpp).
#pragma once
#include <cstdint>

#include "ops/linear.h"

namespace pldr {

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
// The same with the three weights in any storage format (the FFN of a model with packed
// weights); with dense weights it is the function above.
template <typename T>
struct GluLinears {
    LinearWeight<T> w1;
    const T* b1;
    LinearWeight<T> w2;
    const T* b2;
    LinearWeight<T> w3;
    const T* b3;
};
template <typename T>
void glu_forward(T* out, T* h1, T* h2, T* gated, const T* x, const GluLinears<T>& p, int64_t N,
                 int64_t I, int64_t F, int64_t O);
// gated = silu(h1) ⊙ h2 over NF elements (the forward's gate, also for recomputing it).
template <typename T>
void glu_gate(T* gated, const T* h1, const T* h2, int64_t NF);
// scratch: 2·N·F workspace. gated may be null: it is then recomputed from h1 and h2 (the same
// bits as the forward's) in the scratch. dx accumulates; it may be dout itself (dout is read
// before dx is written).
template <typename T>
void glu_backward(T* dx, const GluGrads<T>& g, const T* dout, const T* x, const T* h1, const T* h2,
                  const T* gated, const GluParams<T>& p, int64_t N, int64_t I, int64_t F, int64_t O,
                  T* scratch);
// The same for a caller that is done with h1 and h2 (the training step's backward, which frees
// a layer's activations as it passes them): they become dh1 and dh2, and the scratch is N·F.
// gated is recomputed. The same products on the same values: glu_backward's bits.
template <typename T>
void glu_backward_in_place(T* dx, const GluGrads<T>& g, const T* dout, const T* x, T* h1, T* h2,
                           const GluParams<T>& p, int64_t N, int64_t I, int64_t F, int64_t O,
                           T* scratch);

}  // namespace pldr
