// One PLDR-LLM decoder layer (spec §1.2–1.8): PLGA multi-head attention with its residual metric
// learner, then the post-LN SwiGLU FFN. Forward and backward.
#pragma once
#include "model/forward.h"

namespace pldr {

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
};

// la.x_in must hold the layer input [B,S,d]. Fills every field of la.
template <typename T>
void decoder_layer_forward(const Model<T>& m, int64_t l, int64_t B, int64_t S,
                           const AttnInput<T>& in, LayerActs<T>& la);

}  // namespace pldr
