// pldr eval MODEL_DIR TASK --data FILE [--labels FILE] [--mode ...] [--out F]: TruthfulQA MC1 and
// MC2, PIQA (acc, acc_norm), and perplexity / bits per byte on a text file.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common.h"
#include "core/fs.h"
#include "infer/tasks.h"
#include "io/tokenizer.h"

namespace pldr::cli {

namespace {

struct EvalArgs {
    std::string dir, task, data, labels, out, mode = "block", tokenizer;
    int64_t limit = 0;
    ModelOptions mo;
};

template <typename T>
int run_eval(const EvalArgs& a) {
    const ScoreMode mode = score_mode_from_name(a.mode);
    PLDR_REQUIRE(a.task == "truthfulqa" || a.task == "piqa" || a.task == "perplexity",
                 "unknown task '", a.task, "' (known: truthfulqa, piqa, perplexity)");
    {
        InputSet in;
        in.add_dir(a.dir);
        in.add_file(a.data);
        in.add_file(a.labels);
        in.add_file(a.tokenizer);
        require_not_input(a.out, in, "--out");
    }
    const std::string tp = a.tokenizer.empty() ? a.dir + "/tokenizer.model" : a.tokenizer;
    PLDR_REQUIRE(file_exists(tp), "eval needs a tokenizer: ", tp, " not found");
    Tokenizer tok(tp);
    Model<T> m = a.mo.load<T>(a.dir);
    PLDR_REQUIRE(tok.vocab_size() == m.cfg.vocab_size, "tokenizer has ", tok.vocab_size(),
                 " pieces but the model's vocab_size is ", m.cfg.vocab_size);
    const auto t0 = std::chrono::steady_clock::now();
    std::string lines;
    std::printf("%-12s %-10s %-8s %10s %10s\n", "task", "mode", "items", "metric", "value");
    if (a.task == "perplexity") {
        auto r = perplexity(m, tok, read_file(a.data));
        std::printf("%-12s %-10s %-8lld %10s %10.4f\n", "perplexity", "rolling",
                    (long long)r.tokens, "token_ppl", r.token_perplexity());
        std::printf("%-12s %-10s %-8lld %10s %10.4f\n", "", "", (long long)r.words, "word_ppl",
                    r.word_perplexity());
        std::printf("%-12s %-10s %-8lld %10s %10.5f\n", "", "", (long long)r.bytes, "bits/byte",
                    r.bits_per_byte());
        nlohmann::ordered_json j{{"tokens", r.tokens},
                                 {"bytes", r.bytes},
                                 {"words", r.words},
                                 {"loglikelihood", r.loglikelihood},
                                 {"token_perplexity", r.token_perplexity()},
                                 {"word_perplexity", r.word_perplexity()},
                                 {"bits_per_byte", r.bits_per_byte()}};
        lines = j.dump() + "\n";
    } else if (a.task == "truthfulqa") {
        std::vector<McItem> mc1, mc2;
        load_truthfulqa(a.data, &mc1, &mc2);
        if (a.limit > 0 && size_t(a.limit) < mc1.size())
            mc1.resize(size_t(a.limit)), mc2.resize(size_t(a.limit));
        auto s1 = score_choices(m, tok, mc1, mode);
        auto s2 = score_choices(m, tok, mc2, mode);
        double acc1 = 0, acc2 = 0;
        for (size_t i = 0; i < mc1.size(); ++i) {
            const double v1 = argmax_first(s1.lls[i]) == 0;
            const double v2 = mc2_score(s2.lls[i], mc2[i].labels);
            acc1 += v1;
            acc2 += v2;
            nlohmann::ordered_json j{{"index", i},
                                     {"mc1", v1},
                                     {"mc2", v2},
                                     {"ll_mc1", s1.lls[i]},
                                     {"ll_mc2", s2.lls[i]}};
            lines += j.dump() + "\n";
        }
        const double n = double(mc1.size());
        std::printf("%-12s %-10s %-8zu %10s %10.4f\n", "truthfulqa", a.mode.c_str(), mc1.size(),
                    "mc1", acc1 / n);
        std::printf("%-12s %-10s %-8zu %10s %10.4f\n", "", "", mc2.size(), "mc2", acc2 / n);
    } else {
        PLDR_REQUIRE(!a.labels.empty(), "piqa needs --labels FILE (valid-labels.lst)");
        auto items = load_piqa(a.data, a.labels);
        if (a.limit > 0 && size_t(a.limit) < items.size()) items.resize(size_t(a.limit));
        auto s = score_choices(m, tok, items, mode);
        double acc = 0, norm = 0;
        for (size_t i = 0; i < items.size(); ++i) {
            const double v = argmax_first(s.lls[i]) == items[i].gold;
            const double w = argmax_norm(s.lls[i], items[i].choices) == items[i].gold;
            acc += v;
            norm += w;
            nlohmann::ordered_json j{{"index", i}, {"acc", v}, {"acc_norm", w}, {"ll", s.lls[i]}};
            lines += j.dump() + "\n";
        }
        const double n = double(items.size());
        std::printf("%-12s %-10s %-8zu %10s %10.4f\n", "piqa", a.mode.c_str(), items.size(), "acc",
                    acc / n);
        std::printf("%-12s %-10s %-8zu %10s %10.4f\n", "", "", items.size(), "acc_norm", norm / n);
    }
    if (!a.out.empty()) write_file_atomic(a.out, lines);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "eval %s: %.2f s (%s)\n", a.task.c_str(), secs, type_name<T>());
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
    cmd->add_option("--out", a->out, "per-item JSONL output");
    cmd->add_option("--limit", a->limit, "score only the first N items");
    cmd->add_option("--tokenizer", a->tokenizer,
                    "SentencePiece model (default MODEL_DIR/tokenizer.model)");
    a->mo.add_to(cmd);
    cmd->callback(
        [a]() { return with_dtype(a->mo.dtype, [&]<typename T>() { return run_eval<T>(*a); }); });
}

}  // namespace pldr::cli
