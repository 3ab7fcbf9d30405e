// pldr perplexity MODEL_DIR --data SHARD_DIR [--split valid|train] [--batch B] [--batches M]:
// the loss, accuracy, perplexity and DAG metrics of a model on a prepared split (every chunk by
// default), next to the split's unigram entropy in the same token units.
#include <cstdio>
#include <filesystem>

#include "legacy.h"
#include "train/data_loader.h"

namespace pldr::cli {

namespace {

struct PerplexityArgs {
    std::string dir, data, split = "valid";
    int64_t batch = 16, batches = 0, ctx = 0;
    ModelOptions mo;
};

template <typename T>
int run_perplexity(const PerplexityArgs& a) {
    const std::string path = (std::filesystem::path(a.data) / (a.split + ".pldrtok")).string();
    PLDR_REQUIRE(std::filesystem::exists(path), a.data, ": no ", a.split, ".pldrtok");
    ShardReader shard(path);
    Model<T> m = a.mo.load<T>(a.dir);
    PLDR_REQUIRE(shard.vocab_size() == m.cfg.vocab_size, path, ": vocabulary size ",
                 shard.vocab_size(), " differs from the model's ", m.cfg.vocab_size);
    PLDR_REQUIRE(shard.ctx() > 0, path, ": the shard is not packed into chunks");
    const int64_t ctx = a.ctx > 0 ? a.ctx : shard.ctx();
    PLDR_REQUIRE(ctx >= 2 && ctx <= shard.ctx(), "--ctx must be in [2, ", shard.ctx(), "]");
    PLDR_REQUIRE(ctx - 1 <= m.cfg.max_position, "the context (", ctx - 1,
                 " tokens) is longer than max_position_embeddings = ", m.cfg.max_position);
    PLDR_REQUIRE(a.batch > 0 && a.batches >= 0, "--batch must be > 0 and --batches >= 0");
    TrainConfig tc;
    Trainer<T> tr(m, tc);
    const int64_t nb = a.batches > 0 ? a.batches : (shard.num_chunks() + a.batch - 1) / a.batch;
    const EvalResult e = evaluate_shard(tr, shard, ctx, a.batch, nb);
    std::printf("%s on %s (%lld chunks of %lld tokens, %lld scored tokens):\n", a.dir.c_str(),
                path.c_str(), (long long)e.chunks, (long long)ctx, (long long)e.tokens);
    std::printf("  loss %.4f  accuracy %.4f  perplexity %.2f\n", e.ce, e.accuracy, e.perplexity);
    if (m.cfg.learned_g())
        std::printf("  dag metrics: A_LM %.6g  A_P %.6g  G_LM %.6g\n", e.dagA, e.dagAp, e.dagG);
    std::printf("  unigram entropy of %s.pldrtok: %.4f nats/token\n", a.split.c_str(),
                unigram_entropy(shard, m.cfg.pad_token_id));
    return 0;
}

}  // namespace

void add_perplexity(CLI::App& app) {
    auto a = std::make_shared<PerplexityArgs>();
    auto* cmd = app.add_subcommand("perplexity",
                                   "loss, accuracy and perplexity of a model on a prepared split");
    cmd->add_option("MODEL_DIR", a->dir, "model directory")->required();
    cmd->add_option("--data", a->data, "shard directory")->required();
    cmd->add_option("--split", a->split, "valid or train")
        ->check(CLI::IsMember({"valid", "train"}))
        ->capture_default_str();
    cmd->add_option("--batch", a->batch, "chunks per batch")->capture_default_str();
    cmd->add_option("--batches", a->batches, "batches to score (0 = every chunk)")
        ->capture_default_str();
    cmd->add_option("--ctx", a->ctx, "tokens per chunk (default: the shard's)");
    a->mo.add_to(cmd);
    cmd->callback([a]() {
        return with_dtype(a->mo.dtype, [&]<typename T>() { return run_perplexity<T>(*a); });
    });
}

}  // namespace pldr::cli
