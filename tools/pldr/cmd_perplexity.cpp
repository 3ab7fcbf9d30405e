// pldr perplexity MODEL_DIR --data SHARD_DIR [--split valid|train] [--batch B] [--batches M]:
// the loss, accuracy, perplexity and DAG metrics of a model on a prepared split (every chunk by
// default), next to the split's unigram entropy in the same token units.
#include <cstdio>
#include <filesystem>

#include "common.h"

namespace pldr::cli {

namespace {

struct PerplexityArgs {
    std::string dir, data, split = "valid";
    int64_t batch = 16, batches = 0, ctx = 0;
    ModelOptions mo;
};

int run_perplexity(const PerplexityArgs& a) {
    const std::string path = (std::filesystem::path(a.data) / (a.split + ".pldrtok")).string();
    require(std::filesystem::exists(path), a.data, ": no ", a.split, ".pldrtok");
    const api::Model m = a.mo.open(a.dir);
    const api::ShardEval e = api::evaluate_shard(m, path, a.batch, a.batches, a.ctx);
    std::printf("%s on %s (%lld chunks of %lld tokens, %lld scored tokens):\n", a.dir.c_str(),
                path.c_str(), (long long)e.chunks, (long long)e.ctx, (long long)e.tokens);
    std::printf("  loss %.4f  accuracy %.4f  perplexity %.2f\n", e.ce, e.accuracy, e.perplexity);
    if (m.info().learned_g)
        std::printf("  dag metrics: A_LM %.6g  A_P %.6g  G_LM %.6g\n", e.dagA, e.dagAp, e.dagG);
    std::printf("  unigram entropy of %s.pldrtok: %.4f nats/token\n", a.split.c_str(),
                e.unigram_entropy);
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
    cmd->callback([a]() { return run_perplexity(*a); });
}

}  // namespace pldr::cli
