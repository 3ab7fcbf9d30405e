// The inference collapse made explicit (spec §3.4, §4.3): turn a full PLGA model into the
// fixed-G_LM model (custom_G_type external, metric learner dropped) whose constant operator is a
// G-cache, and measure how far the two models' predictions are apart on a text.
#pragma once
#include <vector>

#include "infer/session.h"

namespace pldr {

// The reference's v510Gi recipe: G from a pass over the single token EOS (S = 1).
template <typename T>
GCache<T> reference_g_cache(const Model<T>& m);
// The G-cache of a prompt's prefill.
template <typename T>
GCache<T> prompt_g_cache(const Model<T>& m, const std::vector<int64_t>& prompt);

// A fixed-G model (custom_G_type external) with every weight of m except the metric learner and
// the PLGA operator parameters, and G_l = g[l].G. A fixed-G model is returned unchanged.
template <typename T>
Model<T> collapse_model(const Model<T>& m, const GCache<T>& g);

struct CompareReport {
    int64_t tokens = 0;  // predicted positions compared
    double kl_mean = 0;  // mean KL(p_a || p_b) in nats
    double kl_max = 0;
    double top1_agree = 0;        // fraction of positions where the argmaxes agree
    double nll_a = 0, nll_b = 0;  // mean negative log-likelihood of the next token
};

// Block forward passes (causal mask, A and G from each window, as the published evaluations) of
// both models over consecutive windows of `window` tokens; every position's next-token
// distribution is compared. Both models must share the vocabulary.
template <typename T>
CompareReport compare_models(const Model<T>& a, const Model<T>& b,
                             const std::vector<int64_t>& tokens, int64_t window);

}  // namespace pldr
