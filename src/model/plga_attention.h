// PLGA attention (spec §1.4–1.8, docs/plga.md §2–3), forward and backward side by side, from the
// rotated q, k and the values v to the heads' output O:
//   A0 = Qᵀ·Q → LN_A → R residual units = A        the metric learner (learned G only)
//   Z = W·A + b;  A_LM = f(Z);  A_P = c(A_LM, P);  G = a·A_P + b_a      the operator (ops/plga.h)
//   Ep = (Q·G)·Kᵀ / √dk;  E = softmax(Ep + mask·(−1e9));  O = E·V
// A fixed-G model skips the first two lines (G is the layer's constant). The projections, RoPE,
// the residual LayerNorms and the FFN around it are the decoder layer's (model/plga_layer.h).
#pragma once
#include <vector>

#include "model/activations.h"
#include "model/forward.h"
#include "ops/plga.h"

namespace pldr {

// The PLGA operator's options of a model's config: its variants resolved by name through the
// registry (ops/plga_variants.h; throws on an unknown name, which validate_config has already
// refused) and the head dimension.
inline PlgaOptions plga_options(const Config& c) {
    return PlgaOptions{&positive_map(c.plga_positive_map), &coupling(c.plga_coupling), c.head_dim};
}

// One sequence of a batched decode step (AttnInput::seqs): its own KV-cache, past length and
// frozen operator. The step writes the new token's rotated key and value at row T_past and
// attends over all T_past + 1 rows. The operator: G set → used as is (the G-cache, or a preset
// one; A, A_LM, A_P then only travel with it); else A set (a learned G) → A_LM, A_P and G are
// recomputed from A; else the model's fixed G.
template <typename T>
struct DecodeSeq {
    T* K_cache = nullptr;  // [T_max,H,D], T_past rows filled
    T* V_cache = nullptr;
    int64_t T_past = 0;
    const T* A = nullptr;  // each [H,D,D] or null
    const T* A_LM = nullptr;
    const T* A_P = nullptr;
    const T* G = nullptr;
};

template <typename T>
struct AttnInput {
    const int64_t* pos = nullptr;      // [B,S] query positions (RoPE)
    bool mask = true;                  // causal + padding mask; false = decode step (mask None)
    const int64_t* key_ids = nullptr;  // [B,T] key ids for the padding mask (null: no pad mask)
    // KV-cache (batch 1): buffers of rotated keys and values [T_max,H,D] holding T_past rows.
    // The layer writes this chunk's S rows at T_past and attends over all T_past + S rows.
    // Null: no cache, the keys are this chunk's.
    T* K_cache = nullptr;
    T* V_cache = nullptr;
    int64_t T_past = 0;
    // Frozen operator (the caches of spec §4.1), each [B,H,D,D] or null:
    // A_frozen skips the metric learner; G_frozen (with A_LM/A_P) skips the PLGA operator too.
    const T* A_frozen = nullptr;
    const T* A_LM_frozen = nullptr;
    const T* A_P_frozen = nullptr;
    const T* G_frozen = nullptr;
    // What the layer keeps in LayerActs (see KeepActs in model/activations.h).
    KeepActs keep = KeepActs::ALL;
    // A batched decode step over B sequences of different past lengths (S = 1, mask None): B
    // entries, each with its own caches (see DecodeSeq). When set, the batch-1 cache and frozen
    // fields above must be unset. The layer's deductive outputs are then stored as follows:
    // la.A, la.Z, la.A_LM, la.A_P, la.G hold only the operators recomputed from A (the sequences
    // without G, in order of b), and la.Ep, la.E are [B,H,1,T_max] with T_max the longest
    // T_past + 1, each row padded with zeros after its own keys.
    const DecodeSeq<T>* seqs = nullptr;
};

// Whether an inference forward may run a prompt in few parallel regions: the decoder layer's
// row-wise steps (projections, RoPE, residual sums, LayerNorms, SwiGLU) in one region per group,
// each thread over its own rows, where every projection splits the rows over the threads anyway
// (model/plga_layer.cpp); and the heads' Gram matrices, metric learner, operators and attention
// in one region, each thread through its heads, where the learner's blocks are whole heads
// (below). On by default; the same bits either way (tests turn it off to compare).
bool& prompt_in_few_regions();

// Reads la.q, la.k (rotated) and la.v [B,S,d]; fills A0 … G (learned G), QG, Ep, E and O
// (KeepActs::TRAINING: A … G, QG, E and O; the learner's internals and Ep are not kept).
template <typename T>
void plga_attention_forward(const Model<T>& m, int64_t l, int64_t B, int64_t S,
                            const AttnInput<T>& in, LayerActs<T>& la);

// Given dO [B,S,d] (and the optional extra gradients of the deductive outputs), overwrites dq,
// dk, dv [B,S,d] (rotated q and k) and accumulates the metric learner's and the operator's
// parameter gradients into gw. No KV-cache (training: keys = queries; key_ids [B,S] for the
// padding mask, as the forward had them). Where the forward kept no E and QG (KeepActs::
// TRAINING) they are recomputed head by head with the forward's code (the same bits), and the
// recomputed O = E·V is written to O_out [B,S,d] when it is not null (the output projection's
// weight gradient needs it).
template <typename T>
void plga_attention_backward(const Model<T>& m, int64_t l, const LayerActs<T>& la, int64_t B,
                             int64_t S, const int64_t* key_ids, const DeductiveGrads<T>* extra,
                             const Tensor<T>& dO, LayerView<T>& gw, Tensor<T>& dq, Tensor<T>& dk,
                             Tensor<T>& dv, Tensor<T>* O_out = nullptr);

}  // namespace pldr
