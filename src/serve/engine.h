// The serving engine: the one adapter between `pldr serve` and the model library. Everything the
// server needs from a model goes through this interface (load, tokenization with per-token
// pieces and offsets, slots with their own KV- and G-caches, a batched decode step, prompt
// log-probabilities for echo, sampling, deductive outputs), and engine.cpp implements it over
// the public C++ API (include/pldr/pldr.hpp) only, as the CLI and the Python module do.
// Compute dtype: float32.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pldr/pldr.hpp"

namespace pldr::serve {

// Throws pldr::Error with the concatenated strings unless cond holds.
template <typename... A>
void require(bool cond, const A&... a) {
    if (cond) return;
    std::string msg;
    ((msg += a), ...);
    throw Error(msg);
}

// How echo prompt log-probabilities are computed (pldr serve --mode):
//   block  — one forward pass over prompt[:-1] (equal to `pldr score --mode block` for any split
//            of the prompt into context + continuation);
//   cached — read from the slot's prefill over the whole prompt (no extra pass; A and G then
//            also see the last prompt token).
enum class EchoMode { BLOCK, CACHED };

// A request's sampling settings (the server reads their JSON fields from the option table).
using SamplingParams = api::SamplingOptions;

// One token's log-probability and the best alternatives (id, logprob), best first.
struct TokenLogprob {
    int64_t id = 0;
    double logprob = 0;
    std::vector<std::pair<int64_t, double>> top;
};

// The deductive outputs of one text: per layer, [H,D,D] row-major in double; A, A_LM, A_P are
// empty for fixed-G models. eps_G[t][l]: `pldr audit`'s eps_G (api::eps_g) of layer l at the
// first prefix_len + 1 + t tokens, RMS(G_u − G_c) / RMS(G_u) with G_u the G_LM of those tokens
// (uncached) and G_c that of the first prefix_len tokens (the operator a KVG cache would keep
// frozen while the rest is generated).
struct Deductive {
    int64_t layers = 0, heads = 0, head_dim = 0, tokens = 0, prefix_len = 0;
    std::vector<std::vector<double>> A, A_LM, A_P, G;
    std::vector<std::vector<double>> eps_G;
};

class Engine;

// A slot: one sequence with its own KV- and G-cache and sampler.
class Slot {
  public:
    ~Slot();
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;

    // Starts a sequence (≥ 1 token) and keeps the logits of its last position.
    void prefill(const std::vector<int64_t>& ids, const SamplingParams& sp);
    // Samples the next token from the kept logits (does not append it).
    TokenLogprob sample(int64_t top_n);
    // Forgets the sequence.
    void reset();
    int64_t length() const;
    const std::vector<int64_t>& tokens() const;

  private:
    friend class Engine;
    explicit Slot(const Engine& e);
    struct Impl;
    std::unique_ptr<Impl> p_;
};

class Engine {
  public:
    // Loads MODEL_DIR (config.json, model.safetensors) and the tokenizer (default
    // MODEL_DIR/tokenizer.model). ctx: the context limit (0 = max_position_embeddings; larger is
    // an error). device: where the model runs ("cpu", "cuda[:N]": the slots' sessions and the
    // block scoring there; cached echo, which reads the prefill's outputs, needs the CPU).
    Engine(const std::string& model_dir, int64_t ctx, EchoMode echo,
           const std::string& tokenizer = {}, const std::string& device = "cpu");
    ~Engine();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    std::string model_name() const { return name_; }
    int64_t ctx() const { return ctx_; }
    int64_t vocab_size() const;
    int64_t eos_id() const;
    int64_t bos_id() const;
    int64_t pad_id() const;
    EchoMode echo_mode() const { return echo_; }

    // Plain ids (no BOS/EOS); "" gives [].
    std::vector<int64_t> tokenize(const std::string& text) const;
    // Text of ids (each must lie in the vocabulary; throws pldr::Error otherwise).
    std::string detokenize(const std::vector<int64_t>& ids) const;
    // The text each id adds to the decoded text of the ids before it (their concatenation is
    // detokenize(ids)), and the byte offset of each in that text.
    void pieces(const std::vector<int64_t>& ids, std::vector<std::string>* pieces,
                std::vector<int64_t>* offsets) const;
    std::string piece(int64_t id) const;       // SentencePiece piece string of one id
    std::string piece_text(int64_t id) const;  // the piece with "▁" as a space
    // The text generated ids add after prompt (api::Tokenizer::continuation_text).
    std::string continuation_text(const std::vector<int64_t>& prompt,
                                  const std::vector<int64_t>& ids) const;
    // Throws pldr::Error unless every id lies in [0, vocab).
    void check_ids(const std::vector<int64_t>& ids) const;

    std::unique_ptr<Slot> new_slot() const;
    // One decode step of every slot in `slots`, appending ids[i] to slots[i] and keeping its new
    // logits. The slots step together (one forward pass over their new tokens, each weight read
    // once); a slot that cannot step (full, or an id outside the vocabulary) gets its error in
    // errors[i] (empty when it succeeded), stays as it was, and leaves the others untouched.
    void decode_batch(const std::vector<Slot*>& slots, const std::vector<int64_t>& ids,
                      std::vector<std::string>* errors) const;

    // Log-probability of every prompt token after the first (entry i-1 for token i), with the
    // top_n alternatives, computed as the echo mode says. `slot` is the slot that prefilled the
    // prompt (used in cached mode).
    std::vector<TokenLogprob> prompt_logprobs(const std::vector<int64_t>& ids, int64_t top_n,
                                              const Slot* slot) const;

    // The deductive outputs of ids (eps_G over the tokens after prefix_len; prefix_len 0 = none).
    Deductive deductive(const std::vector<int64_t>& ids, int64_t prefix_len) const;

  private:
    friend class Slot;
    struct Impl;
    std::unique_ptr<Impl> p_;
    std::string name_;
    int64_t ctx_ = 0;
    EchoMode echo_;
};

}  // namespace pldr::serve
