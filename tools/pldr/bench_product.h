// pldr bench --only product: the commands users run, end to end, each in a process of its own
// (this binary with the real subcommand), timed whole (load included) with its peak RSS
// (getrusage of the child, as /usr/bin/time -v reports it):
//   - `pldr train`: a new run of the model's shape on random token shards, `steps` steps of
//     batch × seq tokens, validation at the end and the final checkpoint;
//   - `pldr generate`: 1 prompt and `batch` prompts of `prompt` ids, `n_new` greedy tokens each
//     (EOS ignored), alternated round by round; the ratio is batch × t(1) / t(batch), the
//     aggregate speed-up of the batched command over the single one;
//   - `pldr serve`: the server with `batch` slots under a bounded load: `batch` clients, each
//     sending `requests` completions of `prompt` ids and `n_new` tokens back to back; requests/s
//     and generated tokens/s per round, the server's peak RSS at the end. The server needs a
//     tokenizer (the model directory's, or `tokenizer`); without one the row is skipped, with a
//     note.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace pldr::cli {

struct ProductBench {
    std::string model_dir, config;  // one of them: a model directory, or a --config shape
    std::string tokenizer;          // for serve, where the model directory has none
    std::string only = "train,generate,serve";
    int threads = 2, rounds = 3;
    int64_t context = 1024, batch = 8, prompt = 32, n_new = 64;
    int64_t train_batch = 8, train_seq = 256, train_steps = 2, requests = 2;
};

// Runs the workloads; {"product": [rows]}, each row with its command, seconds and peak RSS per
// round (and their medians), and the workload's own figures.
nlohmann::json run_product_bench(const ProductBench& p);
// The markdown table of run_product_bench's result.
void print_product_report(const nlohmann::json& out);

}  // namespace pldr::cli
