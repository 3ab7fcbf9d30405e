// Masked cross-entropy (spec §5.1), forward, backward and fused (src/ops/cross_entropy.cpp).
#pragma once
#include <cstdint>

namespace pldr {

// ---- masked cross-entropy (spec §5.1) -------------------------------------------------------
// logits [N,V], targets [N]; positions with target == ignore_id are not scored.
// Returns Σ CE over scored rows in double; writes per-row CE (unmasked) and counts.
template <typename T>
double cross_entropy_forward(T* ce_rows, int64_t* n_scored, int64_t* n_correct, const T* logits,
                             const int64_t* targets, int64_t N, int64_t V, int64_t ignore_id);
// dlogits[N,V] += scale · (softmax(logits) − onehot(target)) on scored rows.
template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const int64_t* targets, int64_t N,
                            int64_t V, int64_t ignore_id, T scale);
// Both at once, for a training step: dlogits[N,V] is overwritten with what
// cross_entropy_backward would add to zeros (bit for bit), n_correct as the forward, and the
// forward's total is returned. The scale must be known upfront (it depends on the count of
// scored rows, a function of the targets only).
template <typename T>
double cross_entropy_fused(T* dlogits, int64_t* n_correct, const T* logits, const int64_t* targets,
                           int64_t N, int64_t V, int64_t ignore_id, T scale);
// The fused pass over some rows, leaving the reduction to the caller (the training loss runs the
// head in chunks of rows): per-row CE (unmasked) into ce_rows[N], top-1 hits into hit_rows[N].
// dlogits may be logits itself (the gradient then overwrites the logits, row by row).
template <typename T>
void cross_entropy_fused_rows(T* dlogits, T* ce_rows, char* hit_rows, const T* logits,
                              const int64_t* targets, int64_t N, int64_t V, int64_t ignore_id,
                              T scale);

}  // namespace pldr
