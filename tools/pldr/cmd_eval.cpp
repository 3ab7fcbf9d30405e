// pldr eval MODEL_DIR TASK --data FILE [--labels FILE] [--mode ...] [--out F]: TruthfulQA MC1 and
// MC2, PIQA (acc, acc_norm), and perplexity / bits per byte on a text file.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common.h"

namespace pldr::cli {

namespace {

struct EvalArgs {
    std::string dir, task, data, labels, out, mode = "block", tokenizer;
    int64_t limit = 0;
    bool force = false;
    ModelOptions mo;
};

int run_eval(const EvalArgs& a) {
    const api::ScoreMode mode = api::score_mode_from_name(a.mode);
    require(a.task == "truthfulqa" || a.task == "piqa" || a.task == "perplexity", "unknown task '",
            a.task, "' (known: truthfulqa, piqa, perplexity)");
    if (!a.out.empty())
        api::Inputs()
            .dir(a.dir)
            .file(a.data)
            .file(a.labels)
            .file(a.tokenizer)
            .check_file(a.out, "--out", a.force);
    const std::string tp = a.tokenizer.empty() ? a.dir + "/tokenizer.model" : a.tokenizer;
    require(api::file_exists(tp), "eval needs a tokenizer: ", tp, " not found");
    const api::Model m = a.mo.open(a.dir, tp);
    const int64_t limit = std::max<int64_t>(a.limit, 0);
    const auto t0 = std::chrono::steady_clock::now();
    std::string lines;
    std::printf("%-12s %-10s %-8s %10s %10s\n", "task", "mode", "items", "metric", "value");
    if (a.task == "perplexity") {
        const api::Perplexity r = api::perplexity(m, api::read_file(a.data));
        std::printf("%-12s %-10s %-8lld %10s %10.4f\n", "perplexity", "rolling",
                    (long long)r.tokens, "token_ppl", r.token_perplexity);
        std::printf("%-12s %-10s %-8lld %10s %10.4f\n", "", "", (long long)r.words, "word_ppl",
                    r.word_perplexity);
        std::printf("%-12s %-10s %-8lld %10s %10.5f\n", "", "", (long long)r.bytes, "bits/byte",
                    r.bits_per_byte);
        nlohmann::ordered_json j{{"tokens", r.tokens},
                                 {"bytes", r.bytes},
                                 {"words", r.words},
                                 {"loglikelihood", r.loglikelihood},
                                 {"token_perplexity", r.token_perplexity},
                                 {"word_perplexity", r.word_perplexity},
                                 {"bits_per_byte", r.bits_per_byte}};
        lines = j.dump() + "\n";
    } else if (a.task == "truthfulqa") {
        const api::McAccuracy r = api::eval_truthfulqa(m, a.data, mode, limit);
        for (int64_t i = 0; i < r.items; ++i) {
            nlohmann::ordered_json j{{"index", i},
                                     {"mc1", r.item_mc1[size_t(i)]},
                                     {"mc2", r.item_mc2[size_t(i)]},
                                     {"ll_mc1", r.lls[size_t(i)]},
                                     {"ll_mc2", r.lls_mc2[size_t(i)]}};
            lines += j.dump() + "\n";
        }
        std::printf("%-12s %-10s %-8lld %10s %10.4f\n", "truthfulqa", a.mode.c_str(),
                    (long long)r.items, "mc1", r.mc1);
        std::printf("%-12s %-10s %-8lld %10s %10.4f\n", "", "", (long long)r.items, "mc2", r.mc2);
    } else {
        require(!a.labels.empty(), "piqa needs --labels FILE (valid-labels.lst)");
        const api::McAccuracy r = api::eval_piqa(m, a.data, a.labels, mode, limit);
        for (int64_t i = 0; i < r.items; ++i) {
            nlohmann::ordered_json j{{"index", i},
                                     {"acc", r.item_acc[size_t(i)]},
                                     {"acc_norm", r.item_acc_norm[size_t(i)]},
                                     {"ll", r.lls[size_t(i)]}};
            lines += j.dump() + "\n";
        }
        std::printf("%-12s %-10s %-8lld %10s %10.4f\n", "piqa", a.mode.c_str(), (long long)r.items,
                    "acc", r.acc);
        std::printf("%-12s %-10s %-8lld %10s %10.4f\n", "", "", (long long)r.items, "acc_norm",
                    r.acc_norm);
    }
    if (!a.out.empty()) api::write_file_atomic(a.out, lines);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "eval %s: %.2f s (%s)\n", a.task.c_str(), secs,
                 api::name_of(m.info().dtype));
    return 0;
}

}  // namespace

void add_eval(CLI::App& app) {
    auto a = std::make_shared<EvalArgs>();
    auto* cmd = app.add_subcommand("eval", "benchmarks: truthfulqa (MC1, MC2), piqa, perplexity");
    cmd->add_option("MODEL_DIR", a->dir, "model directory")->required();
    cmd->add_option("TASK", a->task, "truthfulqa | piqa | perplexity")->required();
    cmd->add_option("--data", a->data, "task data (mc_task.json, PIQA jsonl, or a text file)")
        ->required();
    cmd->add_option("--labels", a->labels, "PIQA labels file");
    cmd->add_option("--mode", a->mode, "block, sequential or cached")
        ->check(CLI::IsMember({"block", "sequential", "cached"}))
        ->capture_default_str();
    cmd->add_option("--out", a->out, "per-item JSONL output")->check(output_path());
    add_force(cmd, &a->force);
    cmd->add_option("--limit", a->limit, "score only the first N items");
    cmd->add_option("--tokenizer", a->tokenizer,
                    "SentencePiece model (default MODEL_DIR/tokenizer.model)");
    a->mo.add_to(cmd);
    cmd->callback([a]() { return run_eval(*a); });
}

}  // namespace pldr::cli
