// Benchmark tasks scored by log-likelihood (spec §6.4, §11.7): TruthfulQA MC1/MC2 and PIQA with
// the lm-eval request rules, and perplexity / bits per byte on a text. Data files are read in
// their original formats (TruthfulQA mc_task.json, PIQA jsonl + labels).
#pragma once
#include <string>
#include <vector>

#include <cmath>

#include "infer/score.h"

namespace pldr {

// One multiple-choice item: every choice is a request (context, " " + choice).
struct McItem {
    std::string context;
    std::vector<std::string> choices;
    std::vector<int> labels;  // TruthfulQA MC2: 1 = true; MC1/PIQA: unused
    int gold = 0;             // index of the correct choice (MC1: 0; PIQA: the label)
};

// The six-pair TruthfulQA preamble, then "\n\nQ: " + question + "\nA:".
std::string truthfulqa_context(const std::string& question);
// mc_task.json → (MC1 items, MC2 items), choices in the file's key order.
void load_truthfulqa(const std::string& path, std::vector<McItem>* mc1, std::vector<McItem>* mc2);
// PIQA valid.jsonl + valid-labels.lst.
std::vector<McItem> load_piqa(const std::string& jsonl, const std::string& labels);

// Metrics from per-choice summed log-likelihoods.
int argmax_first(const std::vector<double>& v);  // lowest index on ties
double mc2_score(const std::vector<double>& lls, const std::vector<int>& labels);  // max-shifted
// acc_norm: argmax of ll / (Unicode code points of the choice, no delimiter space).
int argmax_norm(const std::vector<double>& lls, const std::vector<std::string>& choices);
int64_t utf8_length(const std::string& s);

}  // namespace pldr

namespace pldr {

// Per-choice scores of a list of items: lls[i][c] = summed log-likelihood of choice c of item i
// (request (context, " " + choice)). Requests are scored in parallel.
struct ChoiceScores {
    std::vector<std::vector<double>> lls;
    std::vector<std::vector<ScoreRequest>> requests;
};
// device: the passes there (score_request), one request at a time.
template <typename T>
ChoiceScores score_choices(const Model<T>& m, const Tokenizer& tok,
                           const std::vector<McItem>& items, ScoreMode mode,
                           const DeviceScoring<T>* device = nullptr);

struct PerplexityResult {
    double loglikelihood = 0;  // Σ log p (nats)
    int64_t tokens = 0, bytes = 0, words = 0;
    double token_perplexity() const { return std::exp(-loglikelihood / double(tokens)); }
    double word_perplexity() const { return std::exp(-loglikelihood / double(words)); }
    double bits_per_byte() const { return -loglikelihood / (double(bytes) * std::log(2.0)); }
};
// device: the windows' forwards there (rolling_loglikelihood).
template <typename T>
PerplexityResult perplexity(const Model<T>& m, const Tokenizer& tok, const std::string& text,
                            int64_t window = 0, const DeviceScoring<T>* device = nullptr);

// The benchmark metrics over scored items (moved here from the CLI): TruthfulQA MC1 (the first
// choice has the highest log-likelihood) and MC2 (the normalized probability mass of the true
// choices); PIQA acc (argmax = gold) and acc_norm (argmax of the per-character likelihood).
struct TruthfulQAScores {
    ChoiceScores mc1_scores, mc2_scores;
    std::vector<double> mc1, mc2;  // per item
    double mc1_mean = 0, mc2_mean = 0;
};
template <typename T>
TruthfulQAScores eval_truthfulqa(const Model<T>& m, const Tokenizer& tok,
                                 const std::vector<McItem>& mc1, const std::vector<McItem>& mc2,
                                 ScoreMode mode, const DeviceScoring<T>* device = nullptr);
struct PiqaScores {
    ChoiceScores scores;
    std::vector<double> acc, acc_norm;  // per item
    double acc_mean = 0, acc_norm_mean = 0;
};
template <typename T>
PiqaScores eval_piqa(const Model<T>& m, const Tokenizer& tok, const std::vector<McItem>& items,
                     ScoreMode mode, const DeviceScoring<T>* device = nullptr);

}  // namespace pldr
