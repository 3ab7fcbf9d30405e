// The forward's outputs by name: every intermediate of a forward pass (model/forward.h) under the
// golden fixture naming (fwd.logits, fwd.embed_ln, fwd.layer{i}.{q_rope,k_rope,q,k,v,A_ln,A,
// A_LM,Ap,G_LM,Ep,scores_masked,E,attn_out,out1,ffn_out,hidden}, fwd.mask): what the API's
// forward and the audits dump, the golden tests compare, and the training step's non-finite
// report names.
#pragma once
#include <string>
#include <vector>

#include "model/forward.h"

namespace pldr {

template <typename T>
struct NamedTensor {
    std::string name;
    Tensor<T> t;
};

// The tensors of one forward pass in golden naming. Layouts follow the reference:
// q_rope/k_rope [B,S,H,dk], q/k/v [B,H,S,dk], metric tensors [B,H,dk,dk], scores [B,H,S,S].
template <typename T>
std::vector<NamedTensor<T>> forward_tensors(const Model<T>& m, const Activations<T>& a);

// The first tensor, in forward order (mask, embedding, layer 0 from q_rope to hidden, layer 1,
// ..., logits), that holds a NaN or an infinity, as "fwd.layer2.A_LM (nan at element 17)"; ""
// when every value is finite. fwd.mask and fwd.layer{i}.scores_masked hold −inf by design: only
// NaN and +inf count there.
template <typename T>
std::string first_non_finite(const std::vector<NamedTensor<T>>& ts);

// [B,S,H,D] → [B,H,S,D]
template <typename T>
Tensor<T> heads_first(const Tensor<T>& x, int64_t B, int64_t S, int64_t H, int64_t D);

}  // namespace pldr
