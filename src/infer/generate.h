// Text generation over inference sessions (spec §4.4): prefill, then sample token by token
// until EOS, a stop string, the caller's callback or the token limit, with per-step
// log-probabilities for reporting. The one generation loop of the project: the C++ and C APIs,
// the CLI, the Python module, the audit and the benchmarks all run it. Every prompt has its own
// session (own KV- and G-cache) and sampler; the unfinished sequences step together
// (decode_step: one forward over their new tokens; a step of one sequence is its own
// Session::decode), so one prompt is a batch of one.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "infer/sampler.h"
#include "infer/session.h"

namespace pldr {

class Tokenizer;

struct GenerateOptions {
    int64_t max_new = 64;     // tokens to generate at most
    bool stop_at_eos = true;  // stop after appending EOS (the reference loop)
    CacheMode cache = CacheMode::KVG;
    SamplerConfig sampler;
    int64_t top_report = 5;  // best (id, logprob) pairs kept per step
    // Generation stops when the generated text contains one of these (non-empty; they need a
    // tokenizer); the text is cut before the first one found.
    std::vector<std::string> stop;
};

struct GenStep {
    int64_t id = 0;
    double logprob = 0;  // of the chosen id, from the unmodified logits
    std::vector<std::pair<int64_t, double>> top;
};

struct GenResult {
    std::vector<int64_t> prompt_ids, ids;  // ids: the generated tokens
    std::vector<GenStep> steps;
    // With a tokenizer: the generated text as it continues the prompt's text
    // (Tokenizer::continuation_text), cut before a stop string; "" without one.
    std::string text;
    std::string finish_reason = "length";  // "length" | "eos" | "stop" | "callback"
    double prefill_seconds = 0, decode_seconds = 0;
    int64_t decode_calls = 0;
};

// Called after each generated token of prompt `index` with its result so far (the token is
// ids.back(), the text is cut before a stop string); returning false stops that sequence
// (finish_reason "callback", unless EOS or a stop string ended it at that token). Called on the
// calling thread, in prompt order within a step; an exception it throws ends the generation.
using GenCallback = std::function<bool(size_t index, const GenResult& r)>;

// Checks the prompt (non-empty, ids in the vocabulary) and that prompt + max_new fits in the
// context (max_position_embeddings); throws pldr::Error otherwise.
template <typename T>
void check_generation_fits(const Model<T>& m, const std::vector<int64_t>& prompt, int64_t max_new);

// Several prompts, opts[i] for prompts[i] (token limit, EOS stop, cache mode, sampler and seed,
// stop strings may all differ). Each prompt is prefilled, then every unfinished sequence decodes
// in one shared step (decode_step) until it stops. preset: a G-cache every session runs with;
// tok: the tokenizer that gives the texts (needed by stop strings). decode_seconds: from the
// first decode step to the sequence's last token; decode_calls: the steps it took part in. Each
// result equals its one-at-a-time generation up to the rounding that decode_step documents.
// device: the sequences' sessions there (no preset G-cache; each sequence steps on its own).
template <typename T>
std::vector<GenResult> generate_batch(const Model<T>& m,
                                      const std::vector<std::vector<int64_t>>& prompts,
                                      const std::vector<GenerateOptions>& opts,
                                      const GCache<T>* preset = nullptr,
                                      const Tokenizer* tok = nullptr,
                                      const GenCallback& on_token = {},
                                      const DeviceDecoders<T>* device = nullptr);
// The same options for every prompt.
template <typename T>
std::vector<GenResult> generate_batch(const Model<T>& m,
                                      const std::vector<std::vector<int64_t>>& prompts,
                                      const GenerateOptions& opt, const GCache<T>* preset = nullptr,
                                      const Tokenizer* tok = nullptr,
                                      const GenCallback& on_token = {},
                                      const DeviceDecoders<T>* device = nullptr);

// One prompt: generate_batch of one (on_token's index is 0).
template <typename T>
GenResult generate(const Model<T>& m, const std::vector<int64_t>& prompt,
                   const GenerateOptions& opt, const GCache<T>* preset = nullptr,
                   const Tokenizer* tok = nullptr, const GenCallback& on_token = {});

}  // namespace pldr
