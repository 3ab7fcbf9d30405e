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

// One residual unit of the metric learner: A_in → N GLUs → + A_in → LayerNorm. Its GLUs'
// internals ([B·H·D, A_dff] each, the bulk of the learner's activations whatever the length)
// are not kept: the backward recomputes them from `in`, one unit at a time.
template <typename T>
struct ResUnitActs {
    Tensor<T> in;               // [B,H,D,D]
    Tensor<T> sum, mean, rstd;  // pre-LN sum [B,H,D,D]; stats [B·H·D]
};

// What a forward keeps of each layer:
//   ALL       every intermediate (dumps, audits, tests, the backward of any caller);
//   INFERENCE the metric learner's output A but not its internals (A0, LN_A, the residual
//             units), nor the scores before the mask (Ep), for sessions that keep no
//             activations;
//   TRAINING  the training step's memory plan: what the backward cannot recompute cheaply.
//             Of the learner: A0 with LN_A's statistics and each residual unit's input (the
//             backward recomputes a unit's GLUs, sum and statistics from it). Not kept: Ep
//             (an audit output), E, Q·G and O (recomputed head by head in the backward: a few
//             % of a step's FLOPs for the largest activations), the FFN's gate silu(h1)⊙h2
//             (recomputed from h1, h2), out1 (LN1 of attn_out + x_in, recomputed), the scaled
//             embeddings x0 (gathered again), and the copy of the layer input (x_in holds the
//             previous layer's output, moved, not copied). The same bits.
//   LAYER_INPUTS  activation checkpointing for the least memory: each layer keeps its input
//             x_in and the deductive outputs A_LM, A_P, G (the DAG loss reads them); the backward
//             runs each layer's forward again (as TRAINING) just before its backward. The
//             same bits again, for one more forward of the decoder layers (about a fifth more
//             FLOPs per training step at the 110M shape).
enum class KeepActs { ALL, INFERENCE, TRAINING, LAYER_INPUTS };

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
    KeepActs kept = KeepActs::ALL;  // what forward_layers kept (see KeepActs)
    std::vector<int64_t> ids;       // [B,S]
    std::vector<int64_t> pos;       // [B,S] positions
    Tensor<T> x0;                   // scaled embeddings [B,S,d]
    Tensor<T> embed_ln, ln_mean, ln_rstd;
    std::vector<LayerActs<T>> layers;
    Tensor<T> logits;  // [B,S,V] from forward(); the training loss leaves it empty
    // The last decoder layer's output (the head's input), [B,S,d].
    const Tensor<T>& final_hidden() const {
        return layers.empty() ? embed_ln : layers.back().hidden;
    }
    // The training loss's logits of one chunk of rows, then their gradient in place
    // (train/loss.cpp), released once the head is done.
    Tensor<T> head_chunk;
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
// `keep` says what each layer keeps (see KeepActs; TRAINING is the training step's plan).
template <typename T>
void forward_layers(const Model<T>& m, const int64_t* ids, int64_t B, int64_t S,
                    Activations<T>& acts, KeepActs keep = KeepActs::ALL);

// The plain SDPA decoder (no G at all): a separate, minimal path whose only use is to prove
// that the fixed-G model at G = I is SDPA. Returns logits [B,S,V].
template <typename T>
Tensor<T> sdpa_reference_forward(const Model<T>& m, const int64_t* ids, int64_t B, int64_t S);

}  // namespace pldr
