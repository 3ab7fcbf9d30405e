// Log-likelihood scoring of (context, continuation) requests (spec §6), in three modes:
//   block      — one pass over context + continuation[:-1] (the published evaluations, §6.2):
//                A and G come from the whole pass, the continuation included;
//   sequential — one uncached pass per proper prefix (§6.3): A and G from the prefix only;
//   cached     — KV + G cache from the context, then token by token (G frozen at the context).
// Request encoding follows the lm-eval fork (§6.1, §11.7).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "infer/session.h"
#include "model/forward.h"

namespace pldr {

class Tokenizer;
template <typename T>
class Session;

enum class ScoreMode { BLOCK, SEQUENTIAL, CACHED };
ScoreMode score_mode_from_name(const std::string& s);  // "block" | "sequential" | "cached"

struct ScoreRequest {
    std::vector<int64_t> context, continuation;  // token ids
};

struct ScoreResult {
    double logprob = 0;                  // Σ token_logprobs (summed in double, left to right)
    bool is_greedy = false;              // every continuation token is its position's argmax
    std::vector<double> token_logprobs;  // one per continuation token
    std::vector<int64_t> argmax_ids;     // the argmax at each continuation position
    // The top_n best (id, logprob) at each continuation position (top_n > 0), best first, from
    // the same logits as token_logprobs.
    std::vector<std::vector<std::pair<int64_t, double>>> top;
    int64_t ctxlen = 0;  // context tokens kept after the window cut
};

// The lm-eval encoding: context "" → [EOS] and the continuation encoded alone; otherwise the
// context's trailing whitespace moves to the front of the continuation, and the continuation ids
// are enc(context + continuation)[len(enc(context)):]. No BOS, no EOS.
ScoreRequest encode_request(const Tokenizer& tok, const std::string& context,
                            const std::string& continuation, int64_t eos_id);

// Scores one request. The input (context + continuation) is cut on the left to
// max_position_embeddings tokens, as the harness does; a request whose continuation alone does
// not fit (no context token left to condition the first continuation token) is an error.
// top_n > 0 also keeps each position's best alternatives, from the same pass.
// A model on a device (the CUDA backend, through the API): the logits [S, V] of one sequence's
// forward over ids (causal + padding mask), row-major, and its sessions.
template <typename T>
struct DeviceScoring {
    std::function<void(const int64_t* ids, int64_t S, std::vector<T>& logits)> logits;
    DeviceDecoders<T> decoders;
};

// device: the passes there (block: its forward's logits; sequential and cached: its sessions).
template <typename T>
ScoreResult score_request(const Model<T>& m, const ScoreRequest& r, ScoreMode mode,
                          int64_t top_n = 0, const DeviceScoring<T>* device = nullptr);

// The scores of a session's prefilled tokens after the first (token i predicted by row i − 1),
// read from the prefill's own pass: the head over its final hidden rows, no other forward. The
// context is the first token (ctxlen 1); A and G saw the whole prompt, the last token included
// (block scoring of the same split runs over tokens[:-1]). The session's last call must be its
// prefill, with activations kept.
template <typename T>
ScoreResult score_prefill(const Session<T>& s, int64_t top_n = 0);

// Rolling log-likelihood of a token stream (lm-eval loglikelihood_rolling, context_len 1):
// disjoint windows of `window` predicted tokens (default and upper bound max_position); the first
// is conditioned on EOS, each later full window on the previous token, and a shorter last window
// on as many earlier tokens as fill its `window`-token input.
// Returns Σ log p over every token of `tokens`.
// device: each window's forward there.
template <typename T>
double rolling_loglikelihood(const Model<T>& m, const std::vector<int64_t>& tokens, int64_t eos_id,
                             int64_t window = 0, const DeviceScoring<T>* device = nullptr);

}  // namespace pldr
