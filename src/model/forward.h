// The PLDR-LLM forward pass (spec §1) over a batch of token ids, keeping every intermediate
// (the deductive outputs A, A_LM, A_P, G_LM, Ep, E and the layer states: model/activations.h)
// for dumps, audits and the backward pass (model/backward.h).
#pragma once
#include <vector>

#include "core/tensor.h"
#include "model/activations.h"
#include "model/model.h"

namespace pldr {

// Checks ids (0 ≤ id < vocab) and the length (S ≤ max_position_embeddings); throws pldr::Error.
template <typename T>
void check_inputs(const Model<T>& m, const int64_t* ids, int64_t B, int64_t S);

// Embedding · sqrt(d), then the input LayerNorm, for N tokens (x0, embed_ln [N,d]; stats [N]).
template <typename T>
void embed_forward(const Model<T>& m, const int64_t* ids, int64_t N, Tensor<T>& x0,
                   Tensor<T>& embed_ln, Tensor<T>& mean, Tensor<T>& rstd);

// Full forward pass without caches: causal + padding mask (key id == pad), positions 0..S-1,
// A summed over all S positions (non-causal, as the reference). Fills `acts`.
template <typename T>
void forward(const Model<T>& m, const int64_t* ids, int64_t B, int64_t S, Activations<T>& acts);

// forward() without the LM head (acts.logits untouched): for callers that need only some rows.
// `keep` says what each layer keeps (see KeepActs; TRAINING is the training step's plan).
template <typename T>
void forward_layers(const Model<T>& m, const int64_t* ids, int64_t B, int64_t S,
                    Activations<T>& acts, KeepActs keep = KeepActs::ALL);

// The plain SDPA decoder (no G at all): a separate, minimal path whose only use is to prove
// that the fixed-G model at G = I is SDPA. Returns logits [B,S,V].
template <typename T>
Tensor<T> sdpa_reference_forward(const Model<T>& m, const int64_t* ids, int64_t B, int64_t S);

}  // namespace pldr
