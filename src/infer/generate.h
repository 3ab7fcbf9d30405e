// Text generation over inference sessions (spec §4.4): prefill, then sample token by token
// until EOS or the token limit, with per-step log-probabilities for reporting. Batched
// generation runs one session (own KV- and G-cache) and one sampler per prompt, and steps all
// unfinished sequences together (decode_step: one forward over their new tokens).
#pragma once
#include <functional>
#include <vector>

#include "infer/sampler.h"
#include "infer/session.h"

namespace pldr {

struct GenerateOptions {
    int64_t max_new = 64;     // tokens to generate at most
    bool stop_at_eos = true;  // stop after appending EOS (the reference loop)
    CacheMode cache = CacheMode::KVG;
    SamplerConfig sampler;
    int64_t top_report = 5;  // best (id, logprob) pairs kept per step
};

struct GenStep {
    int64_t id = 0;
    double logprob = 0;  // of the chosen id, from the unmodified logits
    std::vector<std::pair<int64_t, double>> top;
};

struct GenResult {
    std::vector<int64_t> prompt_ids, ids;  // ids: the generated tokens
    std::vector<GenStep> steps;
    double prefill_seconds = 0, decode_seconds = 0;
    int64_t decode_calls = 0;
};

// Checks the prompt (non-empty, ids in the vocabulary) and that prompt + max_new fits in the
// context (max_position_embeddings); throws pldr::Error otherwise.
template <typename T>
void check_generation_fits(const Model<T>& m, const std::vector<int64_t>& prompt, int64_t max_new);

// One prompt. on_token (may be empty) is called after each generated token.
template <typename T>
GenResult generate(const Model<T>& m, const std::vector<int64_t>& prompt,
                   const GenerateOptions& opt, const GCache<T>* preset = nullptr,
                   const std::function<void(const GenResult&)>& on_token = {});

// Several prompts, each with its own session and sampler (seeded with opt.sampler.seed, so each
// result equals its one-at-a-time generation up to the rounding that decode_step documents).
// Each prompt is prefilled, then every unfinished sequence decodes in one shared step
// (decode_step) until each stops at EOS or its token limit. decode_seconds: from the first
// decode step to the sequence's last token; decode_calls: the steps it took part in.
template <typename T>
std::vector<GenResult> generate_batch(const Model<T>& m,
                                      const std::vector<std::vector<int64_t>>& prompts,
                                      const GenerateOptions& opt,
                                      const GCache<T>* preset = nullptr);
// The same with options per prompt (opts[i] for prompts[i]: token limit, EOS stop, cache mode,
// sampler and seed may all differ).
template <typename T>
std::vector<GenResult> generate_batch(const Model<T>& m,
                                      const std::vector<std::vector<int64_t>>& prompts,
                                      const std::vector<GenerateOptions>& opts,
                                      const GCache<T>* preset = nullptr);

}  // namespace pldr
