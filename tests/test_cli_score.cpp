// pldr score and pldr eval through the CLI: output format and order, the three modes, and every
// bad-input case (malformed JSONL with its line number, a request that does not fit, an unknown
// task, data files of the wrong shape).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_util.h"
#include "infer/score.h"
#include "infer/tasks.h"
#include "io/model_load.h"
#include "io/tokenizer.h"

namespace {

const std::string kSrc = PLDR_SOURCE_DIR;
const std::string kTiny = kSrc + "/tests/golden/models/a_tiny_v510.f32";
const std::string kIdent = kSrc + "/tests/golden/models/c_tiny_v510G_identity.f64";
const std::string kEval = kSrc + "/tests/golden/eval/models/eval_v510_s2024";

std::string write_tmp(const std::string& name, const std::string& body) {
    const std::string p = cli_test::tmp_dir("score_" + name) + "/" + name;
    std::ofstream(p) << body;
    return p;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol) {
    ASSERT_EQ(got.size(), want.size());
    ASSERT_FALSE(want.empty());
    for (size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(got[k], want[k], tol) << k;
}

std::vector<nlohmann::json> lines(const std::string& s) {
    std::vector<nlohmann::json> out;
    std::istringstream in(s);
    std::string l;
    while (std::getline(in, l))
        if (!l.empty()) out.push_back(nlohmann::json::parse(l));
    return out;
}

TEST(CliScore, IdsRequestsInOrderAndModesAgreeOnFixedG) {
    const std::string req =
        write_tmp("r.jsonl",
                  "{\"context_ids\": [10,10,14,11,31], \"continuation_ids\": [12,24,32,9]}\n"
                  "\n"
                  "{\"context_ids\": [5], \"continuation_ids\": [6]}\n");
    std::vector<std::vector<nlohmann::json>> by_mode;
    for (const char* mode : {"block", "sequential", "cached"}) {
        auto r =
            cli_test::run("score " + kIdent + " --requests " + req + " --dtype f64 --mode " + mode);
        ASSERT_EQ(r.code, 0) << r.err;
        auto ls = lines(r.out);
        ASSERT_EQ(ls.size(), 2u);
        EXPECT_EQ(ls[0]["token_logprobs"].size(), 4u);
        EXPECT_EQ(ls[1]["token_logprobs"].size(), 1u);
        double sum = 0;
        for (const auto& x : ls[0]["token_logprobs"]) sum += x.get<double>();
        EXPECT_NEAR(ls[0]["logprob"].get<double>(), sum, 1e-12);
        EXPECT_TRUE(ls[0]["is_greedy"].is_boolean());
        by_mode.push_back(ls);
    }
    for (size_t k = 0; k < 4; ++k) {
        const double b = by_mode[0][0]["token_logprobs"][k], s = by_mode[1][0]["token_logprobs"][k],
                     c = by_mode[2][0]["token_logprobs"][k];
        EXPECT_NEAR(b, s, 1e-12);
        EXPECT_NEAR(b, c, 1e-12);
    }
    // The values: one float64 forward over the input (a fixed-G model has no mode dependence).
    auto m = pldr::load_model<double>(kIdent);
    const std::vector<int64_t> inp{10, 10, 14, 11, 31, 12, 24, 32, 9};
    pldr::Activations<double> a;
    pldr::forward(m, inp.data(), 1, 8, a);
    const int64_t V = m.cfg.vocab_size;
    for (size_t k = 0; k < 4; ++k) {
        const double* row = a.logits.ptr() + int64_t(4 + k) * V;
        double mx = row[0], z = 0;
        for (int64_t v = 0; v < V; ++v) mx = std::max(mx, row[v]);
        for (int64_t v = 0; v < V; ++v) z += std::exp(row[v] - mx);
        EXPECT_NEAR(by_mode[0][0]["token_logprobs"][k].get<double>(),
                    row[inp[5 + k]] - mx - std::log(z), 1e-12);
    }
}

TEST(CliScore, LearnedGModesEqualTheLibraryValues) {
    // a_tiny (learned G, float32): each mode's output is the library's score of the request.
    const std::string req =
        write_tmp("l.jsonl",
                  "{\"context_ids\": [10,10,14,11,31], \"continuation_ids\": [19,2,33,37]}\n"
                  "{\"context_ids\": [7], \"continuation_ids\": [8,9]}\n");
    auto m = pldr::load_model<float>(kTiny);
    const std::vector<pldr::ScoreRequest> reqs{{{10, 10, 14, 11, 31}, {19, 2, 33, 37}},
                                               {{7}, {8, 9}}};
    std::vector<double> first, last;  // token logprobs 0 and 3 of request 0, per mode
    for (const char* mode : {"block", "sequential", "cached"}) {
        auto r = cli_test::run("score " + kTiny + " --requests " + req + " --mode " + mode);
        ASSERT_EQ(r.code, 0) << r.err;
        auto ls = lines(r.out);
        ASSERT_EQ(ls.size(), reqs.size());
        for (size_t i = 0; i < reqs.size(); ++i) {
            const auto want = pldr::score_request(m, reqs[i], pldr::score_mode_from_name(mode));
            // Same computation, another process (float32: room for another summation order).
            EXPECT_NEAR(ls[i]["logprob"].get<double>(), want.logprob, 1e-5) << mode << " " << i;
            EXPECT_EQ(ls[i]["is_greedy"].get<bool>(), want.is_greedy) << mode << " " << i;
            expect_near(ls[i]["token_logprobs"].get<std::vector<double>>(), want.token_logprobs,
                        1e-5);
        }
        // The greedy continuation of request 0 (golden a_tiny tokens) is greedy in cached mode.
        if (std::string(mode) == "cached") {
            EXPECT_TRUE(ls[0]["is_greedy"].get<bool>());
        }
        first.push_back(ls[0]["token_logprobs"][0].get<double>());
        last.push_back(ls[0]["token_logprobs"][3].get<double>());
    }
    // Learned G: block's G_LM comes from the whole input, so its first continuation token differs
    // from sequential's (a forward over the context alone); cached keeps the context's G_LM, so
    // its last token differs from block's. Where the inputs are the same the values agree:
    // sequential's last step is block's whole input, and cached's first step is a prefill of the
    // context as sequential's is.
    const double a = std::fabs(first[0] - first[1]), c = std::fabs(last[0] - last[2]);
    EXPECT_GT(a, 1e-6) << "block and sequential agree on the first token";
    EXPECT_GT(c, 1e-6) << "block and cached agree on the last token";
    EXPECT_NEAR(last[0], last[1], 1e-3 * a);
    EXPECT_NEAR(first[1], first[2], 1e-3 * c);
}

TEST(CliScore, TextRequestsUseTheHarnessEncoding) {
    const std::string req = write_tmp("t.jsonl",
                                      "{\"context\": \"Question: dresser\\nAnswer:\", "
                                      "\"continuation\": \" replace drawer with bobby pin \"}\n");
    const std::string out = cli_test::tmp_dir("score_out") + "/o.jsonl";
    auto r = cli_test::run("score " + kEval + " --requests " + req + " --out " + out);
    ASSERT_EQ(r.code, 0) << r.err;
    auto ls = lines(cli_test::slurp(out));
    ASSERT_EQ(ls.size(), 1u);
    // The golden eval fixture's float32 ll for this PIQA request (item 1, choice 0).
    EXPECT_NEAR(ls[0]["logprob"].get<double>(), -58.75189781188965, 1e-4);
}

TEST(CliScore, BadInput) {
    cli_test::expect_error(
        "score " + kTiny + " --requests " +
            write_tmp("m.jsonl", "{\"context_ids\": [1], \"continuation_ids\": [2]}\n{oops\n"),
        ":2: malformed JSON");
    cli_test::expect_error("score " + kTiny + " --requests " + write_tmp("e.jsonl", "\n\n"),
                           "no requests");
    cli_test::expect_error(
        "score " + kTiny + " --requests " + write_tmp("k.jsonl", "{\"ctx\": 1}\n"), ":1: needs");
    std::string big = "{\"context_ids\": [1], \"continuation_ids\": [1";
    for (int i = 0; i < 70; ++i) big += ",2";
    cli_test::expect_error("score " + kTiny + " --requests " + write_tmp("b.jsonl", big + "]}\n"),
                           "does not fit the context");
    cli_test::expect_error(
        "score " + kTiny + " --requests " +
            write_tmp("v.jsonl", "{\"context_ids\": [1], \"continuation_ids\": [99]}\n"),
        "outside the vocabulary");
    cli_test::expect_error(
        "score " + kTiny + " --requests " +
            write_tmp("t.jsonl", "{\"context\": \"a\", \"continuation\": \"b\"}\n"),
        "need a tokenizer");
    cli_test::expect_error("score " + kTiny + " --requests /nonexistent.jsonl", "cannot open");
}

TEST(CliEval, TruthfulqaInAllModesAndPiqa) {
    const std::string data = kSrc + "/data/eval/";
    for (const char* mode : {"block", "sequential", "cached"}) {
        const std::string out = cli_test::tmp_dir(std::string("eval_") + mode) + "/o.jsonl";
        auto r =
            cli_test::run("eval " + kEval + " truthfulqa --data " + data +
                          "truthfulqa/mc_task.dev.json --limit 1 --mode " + mode + " --out " + out);
        ASSERT_EQ(r.code, 0) << r.err;
        EXPECT_NE(r.out.find("mc2"), std::string::npos);
        auto ls = lines(cli_test::slurp(out));
        ASSERT_EQ(ls.size(), 1u);
        EXPECT_EQ(ls[0]["index"], 0);
        EXPECT_TRUE(ls[0].contains("mc1") && ls[0].contains("mc2") && ls[0].contains("ll_mc1") &&
                    ls[0].contains("ll_mc2"));
        // The values: the library's scores of item 0 in this mode, and its metrics.
        std::vector<pldr::McItem> mc1, mc2;
        pldr::load_truthfulqa(data + "truthfulqa/mc_task.dev.json", &mc1, &mc2);
        ASSERT_FALSE(mc1.empty());
        mc1.resize(1);
        mc2.resize(1);
        auto m = pldr::load_model<float>(kEval);
        pldr::Tokenizer tok(kEval + "/tokenizer.model");
        const auto s1 = pldr::score_choices(m, tok, mc1, pldr::score_mode_from_name(mode));
        const auto s2 = pldr::score_choices(m, tok, mc2, pldr::score_mode_from_name(mode));
        ASSERT_FALSE(s1.lls[0].empty());
        expect_near(ls[0]["ll_mc1"].get<std::vector<double>>(), s1.lls[0], 1e-4);
        expect_near(ls[0]["ll_mc2"].get<std::vector<double>>(), s2.lls[0], 1e-4);
        EXPECT_NEAR(ls[0]["mc2"].get<double>(), pldr::mc2_score(s2.lls[0], mc2[0].labels), 1e-6)
            << mode;
        EXPECT_EQ(ls[0]["mc1"].get<double>(), pldr::argmax_first(s1.lls[0]) == 0 ? 1.0 : 0.0);
    }
    auto r = cli_test::run("eval " + kEval + " piqa --data " + data + "piqa/valid.jsonl --labels " +
                           data + "piqa/valid-labels.lst --limit 3");
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("acc_norm"), std::string::npos);
}

TEST(CliEval, BadInput) {
    const std::string data = kSrc + "/data/eval/";
    cli_test::expect_error("eval " + kEval + " hellaswag --data x", "unknown task");
    cli_test::expect_error("eval " + kEval + " truthfulqa --data " + data + "piqa/valid.jsonl",
                           "malformed JSON");
    cli_test::expect_error(
        "eval " + kEval + " truthfulqa --data " + write_tmp("o.json", "{\"question\": 1}"),
        "expected a JSON array");
    cli_test::expect_error("eval " + kEval + " piqa --data " + data +
                               "truthfulqa/mc_task.dev.json --labels " + data +
                               "piqa/valid-labels.lst",
                           ":1: malformed JSON");
    cli_test::expect_error("eval " + kEval + " piqa --data " +
                               write_tmp("p.jsonl", "{\"goal\": \"x\"}\n") + " --labels " + data +
                               "piqa/valid-labels.lst",
                           ":1: not a PIQA item");
    cli_test::expect_error("eval " + kEval + " piqa --data " + data + "piqa/valid.jsonl",
                           "--labels");
    cli_test::expect_error("eval " + kTiny + " piqa --data x --labels y", "tokenizer");
}

}  // namespace
