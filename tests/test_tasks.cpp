// TruthfulQA MC1/MC2 and PIQA metrics against hand-computed oracles, the TruthfulQA prompt, and
// the data loaders (key order, labels, malformed files).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "cli_util.h"
#include "error_util.h"
#include "infer/tasks.h"

namespace {

std::string write_tmp(const std::string& name, const std::string& body) {
    const std::string p = cli_test::tmp_dir("tasks_" + name) + "/" + name;
    std::ofstream(p) << body;
    return p;
}

TEST(Tasks, Mc2MatchesHandComputedValues) {
    // True answers first (labels 1,1,0,0 → split at index 2).
    const double e1 = std::exp(-1.0), e2 = std::exp(-2.5), e3 = std::exp(-0.5), e4 = std::exp(-4.0);
    EXPECT_NEAR(pldr::mc2_score({-1.0, -2.5, -0.5, -4.0}, {1, 1, 0, 0}),
                (e1 + e2) / (e1 + e2 + e3 + e4), 1e-15);
    // One true answer: e^-1 / (e^-1 + e^-2 + e^-3) = 0.66524095577…
    EXPECT_NEAR(pldr::mc2_score({-1.0, -2.0, -3.0}, {1, 0, 0}), 0.6652409557748219, 1e-15);
    // Large magnitudes: the max-shifted form stays finite where plain exponentials underflow.
    EXPECT_NEAR(pldr::mc2_score({-1000.0, -1001.0}, {1, 0}), 1.0 / (1.0 + std::exp(-1.0)), 1e-15);
    // The harness splits at the FIRST 0, whatever follows.
    EXPECT_NEAR(pldr::mc2_score({-1.0, -1.0, -1.0}, {1, 0, 1}), 1.0 / 3.0, 1e-15);
}

TEST(Tasks, Mc1AndAccNormOracles) {
    EXPECT_EQ(pldr::argmax_first({-3.0, -1.0, -1.0, -2.0}), 1);  // ties → lowest index
    EXPECT_EQ(pldr::argmax_first({-1.0, -3.0}), 0);
    // acc_norm divides by the choice's Unicode code points: "é" is one character (two bytes).
    EXPECT_EQ(pldr::utf8_length("caf\xc3\xa9"), 4);
    // lls -8 over "aaaa" (4) = -2.0 vs -9 over "bbbbbb" (6) = -1.5: acc picks 0, acc_norm picks 1.
    EXPECT_EQ(pldr::argmax_first({-8.0, -9.0}), 0);
    EXPECT_EQ(pldr::argmax_norm({-8.0, -9.0}, {"aaaa", "bbbbbb"}), 1);
    // -8/4 = -6/3 = -2 (code points, not bytes): a tie goes to the lowest index.
    EXPECT_EQ(pldr::argmax_norm({-8.0, -6.0}, {"caf\xc3\xa9", "ab\xc3\xa9"}), 0);
}

TEST(Tasks, TruthfulqaPromptAndKeyOrder) {
    const std::string ctx = pldr::truthfulqa_context("Why?");
    EXPECT_EQ(ctx.rfind("\n\nQ: Why?\nA:"), ctx.size() - 12);
    EXPECT_EQ(ctx.find("Q: What is human life expectancy in the United States?\nA: Human life "
                       "expectancy in the United States is 78 years.\n\nQ: Who was president"),
              0u);
    EXPECT_NE(ctx.find("A: The 1992 Olympics were held in Barcelona, Spain.\n\nQ: Why?"),
              std::string::npos);
    const std::string p =
        write_tmp("tq.json",
                  R"([{"question": "Q1", "mc1_targets": {"z first": 1, "a second": 0},
             "mc2_targets": {"m": 1, "b": 1, "y": 0}}])");
    std::vector<pldr::McItem> mc1, mc2;
    pldr::load_truthfulqa(p, &mc1, &mc2);
    ASSERT_EQ(mc1.size(), 1u);
    EXPECT_EQ(mc1[0].choices, (std::vector<std::string>{"z first", "a second"}));  // file order
    EXPECT_EQ(mc2[0].labels, (std::vector<int>{1, 1, 0}));
    EXPECT_ERROR_HAS(pldr::load_truthfulqa(write_tmp("bad.json", "[1]"), &mc1, &mc2),
                     "is not a TruthfulQA item");
}

TEST(Tasks, PiqaLoaderChecksLabels) {
    const std::string items = write_tmp("p.jsonl", R"({"goal": "g", "sol1": "a", "sol2": "b"}
{"goal": "h", "sol1": "c", "sol2": "d"}
)");
    auto v = pldr::load_piqa(items, write_tmp("l.lst", "1\n0\n"));
    ASSERT_EQ(v.size(), 2u);
    EXPECT_EQ(v[0].context, "Question: g\nAnswer:");
    EXPECT_EQ(v[0].gold, 1);
    EXPECT_EQ(v[1].gold, 0);
    EXPECT_ERROR_HAS(pldr::load_piqa(items, write_tmp("l1.lst", "1\n")), "fewer labels");
    EXPECT_ERROR_HAS(pldr::load_piqa(items, write_tmp("l3.lst", "1\n0\n1\n")), "more labels");
    EXPECT_ERROR_HAS(pldr::load_piqa(items, write_tmp("l2.lst", "1\n2\n")), "label must be 0 or 1");
}

}  // namespace
