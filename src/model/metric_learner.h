// The metric learner of PLGA (spec §1.4 steps 4–6, §1.7; docs/plga.md §2): from the rotated
// queries, A0 = Qᵀ·Q per (b,h) → LayerNorm (LN_A) → R residual units, each N GLUs + its input →
// LayerNorm; the output is the metric A [B,H,D,D] that the operator G_LM is built from
// (model/plga_attention.h). The chain runs in float32 under mixed precision (spec §5.2).
#pragma once
#include "model/forward.h"

namespace pldr {

// From the rotated queries q_all [B,S,d]; fills la.A0, la.A_ln with LN_A's statistics, la.res
// (each residual unit's input, sum and LayerNorm statistics, not its GLUs' internals) and la.A.
template <typename T>
void metric_learner_forward(const Model<T>& m, const LayerView<T>& w, int64_t B, int64_t S,
                            const T* q_all, LayerActs<T>& la);

// The learner's output A alone (la.A of metric_learner_forward, the same bits), for a forward
// that keeps nothing else (KeepActs::INFERENCE): the chain runs in a per-thread workspace that is
// reused from call to call, without the copies that keeping each unit's input needs.
template <typename T>
void metric_learner_output(const Model<T>& m, const LayerView<T>& w, int64_t B, int64_t S,
                           const T* q_all, Tensor<T>& A);

// For a forward that runs the learner's blocks inside a parallel region of its own (a prompt's
// PLGA attention, each thread through its heads: model/plga_attention.cpp): how many blocks
// metric_learner_output, called here, splits the rows of `pairs` (b,h) pairs into, when each
// block is the rows of a whole and equal number of pairs, with one block per thread of the team;
// 0 when not.
int64_t metric_learner_pair_blocks(const Config& c, int64_t pairs);
// metric_learner_output's A on the rows [lo, hi) of A0 [B·H·D, D] (the Gram matrices Qᵀ·Q of the
// pairs), on this thread: one of its blocks, for the same bits.
template <typename T>
void metric_learner_output_rows(const Model<T>& m, const LayerView<T>& w, const T* A0, int64_t lo,
                                int64_t hi, T* A);

// The learner's rows run in one block per thread, each block through the whole chain
// (metric_learner.cpp). Tests set a number of blocks here to run that split on any number of
// threads; 0 (the default): as many blocks as threads, for products big enough to share.
int64_t& metric_learner_row_blocks();

// Given dA (consumed), accumulates the learner's parameter gradients into gw and
// dq += d(A0 = Qᵀ·Q)/dq. q_all: the forward's queries; la: what its forward kept — A0 with LN_A's
// statistics and each unit's input at least (the units' GLUs are recomputed one unit at a time,
// and a unit's sum and statistics too where they were not kept).
template <typename T>
void metric_learner_backward(const Model<T>& m, const LayerView<T>& w, const T* q_all,
                             const LayerActs<T>& la, int64_t B, int64_t S, Tensor<T>& dA,
                             LayerView<T>& gw, Tensor<T>& dq);

}  // namespace pldr
