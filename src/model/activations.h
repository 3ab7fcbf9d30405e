// What a forward pass keeps and a backward pass reads, in one place: the activations of the
// decoder (Activations, per layer LayerActs, with what KeepActs says to keep) that the forward
// (model/forward.h) fills and the backward (model/backward.h) consumes, and the extra gradients
// that other losses send to the deductive outputs (DeductiveGrads). Their names in the golden
// naming are model/named_outputs.h's.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

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

// Extra gradients reaching the deductive outputs from other losses (the DAG regularizer),
// per layer, each [B,H,D,D] or empty.
template <typename T>
struct DeductiveGrads {
    Tensor<T> dA_LM, dA_P, dG;
};

}  // namespace pldr
