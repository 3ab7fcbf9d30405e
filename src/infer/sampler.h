// Token sampler for generation: repetition penalty, temperature, top-p, top-k, min-p and a
// seeded categorical draw over the last position's logits.
//
// Order of transforms (spec §4.4, §11.4), applied to a double-precision copy of the logits:
//   1. repetition penalty on the raw logits (CTRL / llama.cpp rule): for each distinct id in
//      the last `repeat_last_n` entries of the history (−1 = all of it), logit > 0 ⇒ logit / r,
//      otherwise logit · r. r = 1 is off.
//   1b. presence and frequency penalties (OpenAI): for each id this sampler has drawn c > 0
//      times, logit − c · frequency_penalty − presence_penalty (the prompt does not count).
//   2. temperature: logits / T. The reference divides only when T < 1 and rejects T > 1; we
//      keep its rule for T ≤ 1 (T = 1 is a no-op) and also divide for T > 1 (an extension).
//      T = 0 means greedy (the reference's EVAL: top-k = 1, ignoring top-p and top-k).
//   3. top-p (when p < 1), on the softmax of the temperature-scaled logits, sorted descending,
//      c_j = cumsum(softmax(sorted))_j:
//        REFERENCE: n = max(Σ_j [c_j ≤ p] − 1, 0)    (the token that crosses p is dropped)
//        HF:        n = min(Σ_j [c_j <  p], F − 1)   (smallest prefix with mass ≥ p: the
//                   crossing token is kept; F = number of finite logits)
//      threshold = sorted[n]; logits < threshold are removed (ties at the threshold kept).
//   4. top-k (when k > 0): logits below the k-th largest remaining logit are removed (ties
//      kept). Applied after top-p, so if top-p left fewer than k tokens it changes nothing.
//   5. min-p (when > 0): remove tokens whose probability is < min_p · p_max, i.e.
//      exp(logit − max) < min_p (the ratio does not depend on the truncation above).
//   6. draw: u = uniform() from the Rng (exactly one draw per non-greedy call, so the Rng
//      position is the number of sampled tokens), then the inverse CDF of the softmax of the
//      remaining logits, summed in double in index order (reproducible, independent of any
//      sort order).
// Removed logits are −inf here (the reference writes −1e10; both get probability 0).
// Greedy (config.greedy, or T = 0) = argmax of the penalized logits, lowest index on ties; it
// consumes no randomness. top_k = 1 with a unique maximum gives the same token (ties at the
// maximum are kept and sampled among, as in the reference).
// NaN or +inf logits, or all logits −inf, are a pldr::Error ("non-finite logits").
//
// Arithmetic: Z = Σ exp(w − max) in index order; c_j accumulates exp(sorted_j − max) / Z in
// descending order (tie order is irrelevant: tied values add equal terms). Cost per token:
// a few O(V) passes; top-k ≤ 4096 uses a min-heap (no sort); top-p sorts only the prefix it
// needs (nth_element + sort, or a radix sort when most of the vocabulary is needed) and never
// more than k values when top-k is set. A Sampler keeps scratch buffers: one per thread.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "pldr/options.hpp"

namespace pldr {

enum class TopPMode {
    REFERENCE,  // exclude the token that crosses p (spec §4.4)
    HF          // include it (Hugging Face TopPLogitsWarper)
};

// The sampling settings: the rows of PLDR_SAMPLING_OPTIONS (pldr/options.h), the one
// declaration of their names, defaults and ranges (the public SamplingOptions has the same
// members).
struct SamplerConfig {
    PLDR_SAMPLING_OPTIONS(PLDR_CXX_OPTION)

    // Throws a one-line pldr::Error naming the member for the first value outside its declared
    // range, e.g. "temperature must be in [0, inf) (got -1)".
    void validate() const;
    // True when sampling reduces to the deterministic argmax.
    bool is_greedy() const { return greedy || temperature == 0.0; }
    TopPMode top_p_mode() const { return top_p_hf ? TopPMode::HF : TopPMode::REFERENCE; }
};

// The members of a SamplerConfig, for the option visitors (pldr/options.hpp).
PLDR_FOR_EACH_OPTION(SamplerConfig, visit_sampling_options)
inline void SamplerConfig::validate() const {
    api::check_options(*this);
}

class Sampler {
  public:
    explicit Sampler(const SamplerConfig& config);

    // logits [V] of the last position; history = the ids so far (prompt + generated), used by
    // the repetition penalty (ids in the window must lie in [0, V)). Returns the chosen id.
    // Deterministic for a given seed and call sequence.
    template <typename T>
    int64_t sample(const T* logits, int64_t V, const std::vector<int64_t>& history);

    // The distribution sample() draws from, after all transforms: probabilities [V] in double,
    // 0 for removed tokens (one-hot for greedy). Same code path as sample(); no Rng draw.
    template <typename T>
    std::vector<double> distribution(const T* logits, int64_t V,
                                     const std::vector<int64_t>& history);

    // log-softmax of the UNMODIFIED logits (for reporting logprobs), in double. −inf logits
    // give −inf; NaN/+inf or all −inf throw.
    template <typename T>
    static void log_softmax(const T* logits, int64_t V, std::vector<double>& out);

    // The n best (id, logprob), best first, ties by lower id; n is clipped to the size.
    static std::vector<std::pair<int64_t, double>> top_n(const std::vector<double>& logprobs,
                                                         int64_t n);

    const SamplerConfig& config() const { return cfg_; }
    Rng& rng() { return rng_; }  // for checkpointing the state

  private:
    // Applies every transform to w_ and fills kept_/kept_e_/total_ (index order).
    void filter(int64_t V, const std::vector<int64_t>& history);
    int64_t draw();
    void apply_repeat_penalty(int64_t V, const std::vector<int64_t>& history);
    void apply_presence_frequency(int64_t V);

    SamplerConfig cfg_;
    Rng rng_;
    // Scratch buffers reused across calls (no allocation per token once warm).
    std::vector<double> w_;                  // working logits
    std::vector<double> e_;                  // exp(w − max), when computed
    std::vector<double> vals_;               // candidate values, partially sorted descending
    std::vector<uint64_t> keys_, keys_tmp_;  // radix-sort scratch
    std::vector<int64_t> seen_;              // penalty window ids
    std::vector<int32_t> kept_;              // surviving ids, index order
    std::vector<double> kept_e_;             // their exp(w − max)
    double total_ = 0;                       // Σ kept_e_ in index order
    std::vector<int64_t> drawn_;             // how often each id was drawn (presence, frequency)
};

extern template int64_t Sampler::sample<float>(const float*, int64_t, const std::vector<int64_t>&);
extern template int64_t Sampler::sample<double>(const double*, int64_t,
                                                const std::vector<int64_t>&);
extern template std::vector<double> Sampler::distribution<float>(const float*, int64_t,
                                                                 const std::vector<int64_t>&);
extern template std::vector<double> Sampler::distribution<double>(const double*, int64_t,
                                                                  const std::vector<int64_t>&);
extern template void Sampler::log_softmax<float>(const float*, int64_t, std::vector<double>&);
extern template void Sampler::log_softmax<double>(const double*, int64_t, std::vector<double>&);

}  // namespace pldr
