// Chunk batches, validation and unigram entropy (see data_loader.h).
#include "train/data_loader.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace pldr {

namespace {
constexpr uint64_t kLoaderSeedSalt = 0x6c6f616465727631ull;  // "loaderv1"
}

ChunkLoader::ChunkLoader(const ShardReader& shard, int64_t ctx, uint64_t seed, bool shuffle)
    : shard_(&shard),
      ctx_(ctx),
      n_(shard.num_chunks()),
      shuffle_(shuffle),
      rng_(seed ^ kLoaderSeedSalt) {
    PLDR_REQUIRE(shard.ctx() > 0, shard.path(), ": the shard is not packed into chunks");
    PLDR_REQUIRE(ctx >= 2 && ctx <= shard.ctx(), shard.path(), ": context ", ctx,
                 " must be in [2, ", shard.ctx(), "] (the shard is packed in chunks of ",
                 shard.ctx(), " tokens)");
    PLDR_REQUIRE(n_ > 0, shard.path(), ": no complete chunk");
    epoch_rng_ = rng_.s;
    start_epoch(0);
}

void ChunkLoader::start_epoch(int64_t e) {
    // Called with e = perm_epoch_ + 1 (or on restore, with rng_ set to the epoch's start state).
    epoch_rng_ = rng_.s;
    perm_.resize(size_t(n_));
    for (int64_t i = 0; i < n_; ++i) perm_[size_t(i)] = i;
    if (shuffle_)
        for (int64_t i = n_ - 1; i > 0; --i)
            std::swap(perm_[size_t(i)], perm_[size_t(rng_.below(uint64_t(i) + 1))]);
    perm_epoch_ = e;
}

int64_t ChunkLoader::chunk_at(int64_t p) {
    const int64_t e = p / n_;
    PLDR_CHECK(e >= perm_epoch_);
    while (perm_epoch_ < e) start_epoch(perm_epoch_ + 1);
    return perm_[size_t(p % n_)];
}

TokenBatch ChunkLoader::next(int64_t B, std::vector<int64_t>& buf) {
    PLDR_REQUIRE(B > 0, "batch size must be > 0 (got ", B, ")");
    buf.resize(size_t(B * ctx_));
    for (int64_t b = 0; b < B; ++b) {
        const int64_t c = chunk_at(pos_++);
        shard_->read(c * shard_->ctx(), ctx_, buf.data() + b * ctx_);
    }
    // A batch that ends on an epoch boundary draws the next epoch's permutation now, so that
    // state() records the Rng of the epoch that pos_ is in and a restore redraws the same one.
    chunk_at(pos_);
    return TokenBatch{buf.data(), B, ctx_};
}

void ChunkLoader::skip(int64_t n) {
    PLDR_REQUIRE(n >= 0, "data loader: negative skip ", n);
    pos_ += n;
    chunk_at(pos_);  // draws the permutations up to the epoch of pos_ (see next())
}

void ChunkLoader::restore(const LoaderState& s) {
    PLDR_REQUIRE(s.position >= 0, "data loader: negative position ", s.position);
    rng_.s = s.epoch_rng;
    pos_ = s.position;
    start_epoch(pos_ / n_);
}

template <typename T>
EvalResult evaluate_shard(Trainer<T>& trainer, const ShardReader& shard, int64_t ctx, int64_t B,
                          int64_t max_batches) {
    PLDR_REQUIRE(shard.ctx() >= ctx, shard.path(), ": packed for ctx ", shard.ctx(),
                 ", shorter than the training context ", ctx);
    PLDR_REQUIRE(B > 0 && max_batches > 0, "validation needs a positive batch and batch count");
    const int64_t n = std::min(
        shard.num_chunks(), checked_mul(max_batches, B, "the batches' chunks (batches x batch)"));
    EvalResult r;
    std::vector<int64_t> buf;
    double ce_sum = 0, dA = 0, dAp = 0, dG = 0, dag_loss = 0;
    int64_t correct = 0;
    for (int64_t c0 = 0; c0 < n; c0 += B) {
        const int64_t nb = std::min(B, n - c0);
        buf.resize(size_t(nb * ctx));
        for (int64_t b = 0; b < nb; ++b)
            shard.read((c0 + b) * shard.ctx(), ctx, buf.data() + b * ctx);
        const LossResult l = trainer.evaluate(TokenBatch{buf.data(), nb, ctx});
        const double w = double(l.scored);
        ce_sum += l.ce * w;
        dA += l.dagA * w, dAp += l.dagAp * w, dG += l.dagG * w, dag_loss += l.dag_loss * w;
        correct += l.correct;
        r.tokens += l.scored;
    }
    r.chunks = n;
    if (r.tokens > 0) {
        const double t = double(r.tokens);
        r.ce = ce_sum / t;
        r.accuracy = double(correct) / t;
        r.dagA = dA / t, r.dagAp = dAp / t, r.dagG = dG / t;
        r.loss = r.ce + dag_loss / t;
    }
    r.perplexity = std::exp(r.ce);
    return r;
}

double unigram_entropy(const ShardReader& shard, int64_t ignore_id) {
    std::vector<int64_t> counts(size_t(shard.vocab_size()), 0);
    const int64_t n = shard.size();
    const int64_t block = 1 << 16;
    std::vector<int64_t> buf;
    int64_t total = 0;
    for (int64_t i = 0; i < n; i += block) {
        const int64_t k = std::min(block, n - i);
        buf.resize(size_t(k));
        shard.read(i, k, buf.data());
        for (int64_t t : buf)
            if (t != ignore_id) ++counts[size_t(t)], ++total;
    }
    PLDR_REQUIRE(total > 0, shard.path(), ": no tokens to compute an entropy from");
    double h = 0;
    for (int64_t c : counts)
        if (c > 0) {
            const double p = double(c) / double(total);
            h -= p * std::log(p);
        }
    return h;
}

template EvalResult evaluate_shard<float>(Trainer<float>&, const ShardReader&, int64_t, int64_t,
                                          int64_t);
template EvalResult evaluate_shard<double>(Trainer<double>&, const ShardReader&, int64_t, int64_t,
                                           int64_t);

}  // namespace pldr
