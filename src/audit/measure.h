// The collapse measurements of spec §8.1 as plain functions returning plain structs, so that
// tests can compare each number with an independent computation. Every deductive output is
// taken for batch element 0 as a [H,dk,dk] tensor per layer and widened to double before any
// statistic is formed. See docs/audit.md for the definitions.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "audit/stats.h"
#include "infer/score.h"
#include "infer/tasks.h"
#include "model/forward.h"

namespace pldr::audit {

// The four deductive outputs in report order.
inline constexpr std::array<const char*, 4> kQuantities{"A", "A_LM", "A_P", "G_LM"};

// Per layer: A, A_LM, A_P, G_LM [H,dk,dk] in double; A, A_LM, A_P are empty for fixed-G models.
struct Deductive {
    std::vector<std::array<Tensor<double>, 4>> layers;
};
template <typename T>
Deductive deductive_outputs(const Model<T>& m, const std::vector<int64_t>& ids);

// eps_G, max|ΔG|, dlogit and margin at one decode step t ≥ 1: the sequence is prompt + t greedy
// tokens (the argmax of the cached logits); "cached" = KV+G cache from the prompt prefill,
// "uncached" = a full forward over the whole sequence.
struct StepRecord {
    int64_t step = 0, token = 0;        // token: the t-th greedy token
    std::vector<double> eps_G, max_dG;  // per layer
    double dlogit = 0, margin = 0;      // at the last position after the step
    bool criterion = false;             // 2·dlogit < margin
    bool argmax_agree = true;           // cached and uncached argmax equal
};
template <typename T>
std::vector<StepRecord> eps_g_steps(const Model<T>& m, const std::vector<int64_t>& prompt,
                                    int64_t steps);

// eps_G (audit/stats.h eps_g) of a given token sequence after a prefix: out[t − 1][l] for
// t = 1 … ids.size() − prefix_len, with G_c = layer l's G_LM of a forward over ids[:prefix_len]
// and G_u(t) that of a forward over ids[:prefix_len + t] (the tokens given, not decoded; the
// forwards of the steps run in parallel). prefix_len in [1, ids.size()]; 0 for a layer without
// an operator of [H,dk,dk].
template <typename T>
std::vector<std::vector<double>> eps_g_after(const Model<T>& m, const std::vector<int64_t>& ids,
                                             int64_t prefix_len);

// Order parameters per layer and quantity (present[q] false when the model lacks it).
struct OrderTable {
    std::vector<std::array<OrderParam, 4>> layers;
    std::array<bool, 4> present{};
    // Max over layers of one form (0 = rms, 1 = signed) of quantity q.
    double max(int q, int form) const;
};
OrderTable order_between(const Deductive& a, const Deductive& b);
// Elementwise max of several tables (same shape).
OrderTable order_max(const std::vector<OrderTable>& t);

// (a) Two sampled continuations of `prompt` (seeded sampling at temperature 1 with KV+G cache,
// no EOS stop, `len` tokens, clipped to the context), each run uncached over prompt + it.
struct ContinuationOrder {
    std::vector<int64_t> cont1, cont2;
    OrderTable table;
};
template <typename T>
ContinuationOrder continuation_order(const Model<T>& m, const std::vector<int64_t>& prompt,
                                     int64_t len, uint64_t seed1 = 100, uint64_t seed2 = 101);

// Block vs sequential scoring gaps: |Δ logprob| per continuation token and per candidate.
struct BlockSeqGaps {
    std::vector<double> token_gaps, cand_gaps;
    // TruthfulQA-MC2 per item (empty without data): mc2 in both modes and |Δ|.
    std::vector<double> mc2_block, mc2_seq, mc2_gaps;
};
template <typename T>
void block_vs_sequential(const Model<T>& m, const std::vector<ScoreRequest>& reqs,
                         BlockSeqGaps& out);
// Scores every choice of the first n MC2 items in both modes (adds their token and candidate
// gaps too).
template <typename T>
void truthfulqa_gaps(const Model<T>& m, const Tokenizer& tok, const std::vector<McItem>& items,
                     int64_t n, BlockSeqGaps& out);

// Numerical ranks and DAG values of one (prompt, layer, head) instance.
struct SpectralRecord {
    int64_t prompt = 0, layer = 0, head = 0;
    int64_t rank_A = -1, rank_A_LM = -1, rank_G = -1;  // −1: not present
    double s2s1_A = 0, s2s1_G = 0;
    double dag_A_LM = 0, dag_A_P = 0, dag_G = 0;  // |log(tr e^{X∘X}/dk)|, float64 EXACT
};
std::vector<SpectralRecord> spectral(const Deductive& d, int64_t prompt_index);

// max|logits_PLGA(G = I) − logits_SDPA| / max|logits_SDPA| over every position of `ids`, where
// the PLGA model is m's fixed-G twin with G_LM = I in every layer and head.
template <typename T>
double sdpa_identity_residual(const Model<T>& m, const std::vector<int64_t>& ids);

// Spec §7 absorption, in float64, without RoPE, for every layer and head: X = the layer's input
// over `ids`, G* = the layer's G_LM of that pass, K = X·Wkᵀ + bk (unrotated),
//   lhs = ((X·Wqᵀ + bq)·G*)·Kᵀ,   rhs = (X·(Wqᵀ·G*) + bq·G*)·Kᵀ.
// Returns max|lhs − rhs| / max|lhs|.
template <typename T>
double absorption_residual(const Model<T>& m, const std::vector<int64_t>& ids);

// Spec §4.5: `pad` pad tokens appended; G_LM per layer and the last real row's logits compared.
struct PaddingResult {
    int64_t pad = 0;
    std::vector<double> max_dG;  // per layer
    double max_dlogit = 0;
};
template <typename T>
PaddingResult padding_sensitivity(const Model<T>& m, const std::vector<int64_t>& ids, int64_t pad);

// Mean next-token NLL of the model over `tokens` (windows of max_position tokens overlapping by
// one) and the unigram entropy of the predicted tokens (tokens[1:]), both in nats per token.
struct LossVsUnigram {
    int64_t tokens = 0;
    double loss = 0, unigram_entropy = 0;
    bool degenerate = false;  // loss ≥ (1 − 0.05)·entropy: the model ignores its context
};
template <typename T>
LossVsUnigram loss_vs_unigram(const Model<T>& m, const std::vector<int64_t>& tokens);

}  // namespace pldr::audit
