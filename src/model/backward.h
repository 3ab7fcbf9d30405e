// The backward pass of PLDR-LLM (v510 and fixed-G), layer by layer in reverse, beside the
// forward in plga_layer.cpp. Gradients accumulate into a flat buffer with the model's layout.
#pragma once
#include <vector>

#include "model/forward.h"

namespace pldr {

// Accumulates d(loss)/d(params) into grads (layout.total elements), given dlogits [B,S,V] and
// optional per-layer extra gradients (DeductiveGrads, model/activations.h: null or one entry
// per layer). The fixed G of fixed-G
// models is a constant and receives no gradient.
// Refuses (one line) a model whose linear weights are packed for inference (bf16, q8_0):
// gradients and training need the float weights.
template <typename T>
void require_float_weights(const Model<T>& m);

template <typename T>
void backward(const Model<T>& m, const Activations<T>& a, const Tensor<T>& dlogits,
              const std::vector<DeductiveGrads<T>>* extra, T* grads);
// The same below the head: given d(loss)/d(final hidden) [B,S,d] (consumed), the decoder layers,
// the input LayerNorm and the embedding (the training loss runs the head itself, in chunks).
// consume: null, or &a handed over to be freed as the backward passes it (each layer's
// activations part by part, then the whole layer, and the freed memory back to the system
// before the next layer's gradients are written: core/alloc.h); a.layers is empty afterwards.
template <typename T>
void backward_below_head(const Model<T>& m, const Activations<T>& a, Tensor<T>& dhidden,
                         const std::vector<DeductiveGrads<T>>* extra, T* grads,
                         Activations<T>* consume = nullptr);

}  // namespace pldr
