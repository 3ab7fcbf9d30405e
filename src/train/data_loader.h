// Batches for the trainer from a packed token shard (train/shard.h): chunks of `ctx` tokens,
// served in a deterministic order. Each epoch visits every complete chunk once, in a
// Fisher–Yates permutation drawn from a seeded Rng (or in file order with shuffle off, the
// reference's order, spec §5.3); the stream wraps to the next epoch with a fresh permutation,
// so a batch may straddle two epochs. The whole state is the global chunk position and the
// Rng state at the start of the current epoch: checkpoints store both and resume exactly.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "train/loss.h"
#include "train/shard.h"
#include "train/step.h"

namespace pldr {

struct LoaderState {
    int64_t position = 0;                 // chunks served so far, over all epochs
    std::array<uint64_t, 4> epoch_rng{};  // Rng state before drawing this epoch's permutation
};

class ChunkLoader {
  public:
    // `shard` must be packed (ctx > 0) and outlive the loader. `ctx` ≤ shard.ctx(): the first
    // ctx tokens of each chunk are used (the model input is ctx − 1 tokens, the targets the
    // last ctx − 1).
    ChunkLoader(const ShardReader& shard, int64_t ctx, uint64_t seed, bool shuffle);

    // The next B chunks as a row-major [B, ctx] batch in `buf` (resized); the returned view
    // points into buf.
    TokenBatch next(int64_t B, std::vector<int64_t>& buf);

    // Skips n chunks of the stream (data parallel: the other ranks' share of a batch).
    void skip(int64_t n);

    LoaderState state() const { return {pos_, epoch_rng_}; }
    // Restores a state from state() of a loader over the same shard, seed and shuffle flag.
    void restore(const LoaderState& s);

    int64_t num_chunks() const { return n_; }
    int64_t epoch() const { return n_ ? pos_ / n_ : 0; }
    int64_t ctx() const { return ctx_; }
    // The chunk index (in the shard) the stream serves at global position p (for tests).
    int64_t chunk_at(int64_t p);

  private:
    void start_epoch(int64_t e);

    const ShardReader* shard_;
    int64_t ctx_, n_;
    bool shuffle_;
    Rng rng_;
    std::array<uint64_t, 4> epoch_rng_{};
    int64_t pos_ = 0, perm_epoch_ = -1;
    std::vector<int64_t> perm_;
};

// Validation over the first min(max_batches·B, num_chunks) chunks of `shard` in file order,
// in batches of B (the last may be smaller). ce and accuracy are means over every scored token;
// the DAG metrics are means over the batches weighted like ce.
struct EvalResult {
    double loss = 0, ce = 0, accuracy = 0, perplexity = 0;
    double dagA = 0, dagAp = 0, dagG = 0;
    int64_t tokens = 0, chunks = 0;
};

template <typename T>
EvalResult evaluate_shard(Trainer<T>& trainer, const ShardReader& shard, int64_t ctx, int64_t B,
                          int64_t max_batches);

// Unigram entropy −Σ p ln p (nats per token) of the token frequencies of `shard`, counting
// only tokens ≠ `ignore_id` (pass -1 to count all); the bound a model that knows only token
// frequencies reaches on the same tokens.
double unigram_entropy(const ShardReader& shard, int64_t ignore_id = 0);

}  // namespace pldr
