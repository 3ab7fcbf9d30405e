// One PLDR-LLM decoder layer (spec §1.2–1.8, docs/plga.md §1): the q, k, v projections and RoPE,
// PLGA attention (model/plga_attention.h: the metric learner, the operator, the scores), the
// output projection, then the post-LN residual blocks around the SwiGLU FFN. Forward and
// backward side by side in plga_layer.cpp.
#pragma once
#include "model/plga_attention.h"

namespace pldr {

// la.x_in must hold the layer input [B,S,d]. Fills every field of la that in.keep keeps
// (KeepActs in model/activations.h).
template <typename T>
void decoder_layer_forward(const Model<T>& m, int64_t l, int64_t B, int64_t S,
                           const AttnInput<T>& in, LayerActs<T>& la);

// Given d(loss)/d(hidden) of layer l, accumulates the layer's parameter gradients into g and
// writes d(loss)/d(x_in) to dx_in. No KV-cache (training). consume: null, or a.layers[l] handed
// over to be freed part by part as the backward passes it (the layer input goes last).
template <typename T>
void decoder_layer_backward(const Model<T>& m, int64_t l, const Activations<T>& a,
                            const DeductiveGrads<T>* extra, const Tensor<T>& dhidden,
                            ModelView<T>& g, Tensor<T>& dx_in, LayerActs<T>* consume = nullptr);

}  // namespace pldr
