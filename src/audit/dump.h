// Deductive-output dumps: every forward intermediate under the golden fixture naming
// (fwd.logits, fwd.embed_ln, fwd.layer{i}.{q_rope,k_rope,q,k,v,A_ln,A,A_LM,Ap,G_LM,Ep,
// scores_masked,E,attn_out,out1,ffn_out,hidden}, fwd.mask).
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

// [B,S,H,D] → [B,H,S,D]
template <typename T>
Tensor<T> heads_first(const Tensor<T>& x, int64_t B, int64_t S, int64_t H, int64_t D);

}  // namespace pldr
