// The PLDR-LLM forward pass (spec §1) over a batch of token ids, keeping every intermediate
// (the deductive outputs A, A_LM, A_P, G_LM, Ep, E and the layer states) for dumps, audits and
// the backward pass.
#pragma once
#include <vector>

#include "core/tensor.h"
#include "model/model.h"

namespace pldr {

// Saved state of one GLU application (metric learner or FFN).
template <typename T>
struct GluActs {
    Tensor<T> x, h1, h2, gated;  // x: input [N,I]; h1, h2, gated: [N,F]
};

// One residual unit of the metric learner: A_in → N GLUs → + A_in → LayerNorm.
template <typename T>
struct ResUnitActs {
    Tensor<T> in;                 // [B,H,D,D]
    std::vector<GluActs<T>> glu;  // N entries
    Tensor<T> sum, mean, rstd;    // pre-LN sum [B,H,D,D]; stats [B·H·D]
};

template <typename T>
struct LayerActs {
    Tensor<T> x_in;     // [B,S,d] layer input
    Tensor<T> q, k, v;  // [B,S,d] = [B,S,H,dk]; q, k after RoPE
    // Learned-G metric learner (empty for fixed-G models).
    Tensor<T> A0, A_ln, lnA_mean, lnA_rstd;  // A0 = qᵀq and its LayerNorm [B,H,D,D]
    std::vector<ResUnitActs<T>> res;
    Tensor<T> A;                // metric learner output [B,H,D,D]
    Tensor<T> Z, A_LM, A_P, G;  // PLGA operator [B,H,D,D] (G also for fixed-G models)
    Tensor<T> QG;               // Q·G [B,H,S,D]
    Tensor<T> Ep, E;            // scores before the mask, and softmax [B,H,S,T]
    Tensor<T> O;                // attention output, heads concatenated [B,S,d]
    Tensor<T> attn_out;         // after the dense projection [B,S,d]
    Tensor<T> out1, ln1_mean, ln1_rstd;
    GluActs<T> ffn;
    Tensor<T> ffn_out;
    Tensor<T> hidden, ln2_mean, ln2_rstd;
};

template <typename T>
struct Activations {
    int64_t B = 0, S = 0;
    std::vector<int64_t> ids;  // [B,S]
    std::vector<int64_t> pos;  // [B,S] positions
    Tensor<T> x0;              // scaled embeddings [B,S,d]
    Tensor<T> embed_ln, ln_mean, ln_rstd;
    std::vector<LayerActs<T>> layers;
    Tensor<T> logits;  // [B,S,V] from forward(); the training loss leaves it empty
    // The last decoder layer's output (the head's input), [B,S,d].
    const Tensor<T>& final_hidden() const {
        return layers.empty() ? embed_ln : layers.back().hidden;
    }
    // d loss / d logits of one chunk of rows of the last training step: kept here so that its
    // storage is reused across steps instead of mapped and faulted anew.
    Tensor<T> dlogits;
    Tensor<T> head_chunk;  // the training loss's logits of one chunk of rows (train/loss.cpp)
};

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
// keep_learner = false (training) drops the metric learner's internals (A0, LN_A, the residual
// units) after each layer; the backward recomputes them from q (a few % of a step's FLOPs for
// the largest share of its activation memory).
template <typename T>
void forward_layers(const Model<T>& m, const int64_t* ids, int64_t B, int64_t S,
                    Activations<T>& acts, bool keep_learner = true);

// The plain SDPA decoder (no G at all): a separate, minimal path whose only use is to prove
// that the fixed-G model at G = I is SDPA. Returns logits [B,S,V].
template <typename T>
Tensor<T> sdpa_reference_forward(const Model<T>& m, const int64_t* ids, int64_t B, int64_t S);

}  // namespace pldr
