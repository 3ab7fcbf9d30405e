// pldr generate and pldr collapse through the CLI: reproducible sampling, the JSON format,
// G-cache files, collapse as an exact no-op on fixed-G models, and every bad-input case.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "io/model_load.h"

namespace {

const std::string kGolden = std::string(PLDR_SOURCE_DIR) + "/tests/golden/models/";
const std::string kTiny = kGolden + "a_tiny_v510.f32";
const std::string kEval =
    std::string(PLDR_SOURCE_DIR) + "/tests/golden/eval/models/eval_v510_s2024";

TEST(CliGenerate, SeedReproducesAndJsonHasTheFields) {
    const std::string args =
        "generate " + kTiny +
        " --ids 10,10,14 -n 8 --temp 0.8 --top-k 20 --seed 7 --json --no-eos-stop";
    auto a = cli_test::run(args), b = cli_test::run(args);
    ASSERT_EQ(a.code, 0) << a.err;
    EXPECT_EQ(a.out, b.out);
    auto j = nlohmann::json::parse(a.out);
    EXPECT_EQ(j["prompt_ids"], nlohmann::json({10, 10, 14}));
    ASSERT_EQ(j["ids"].size(), 8u);
    ASSERT_EQ(j["steps"].size(), 8u);
    EXPECT_EQ(j["steps"][0]["id"], j["ids"][0]);
    EXPECT_EQ(j["steps"][0]["top"].size(), 5u);
    EXPECT_LE(j["steps"][0]["logprob"].get<double>(), 0.0);
    EXPECT_NE(a.err.find("tok/s"), std::string::npos);  // timings on stderr
    auto c =
        cli_test::run("generate " + kTiny +
                      " --ids 10,10,14 -n 8 --temp 0.8 --top-k 20 --seed 8 --json --no-eos-stop");
    EXPECT_NE(a.out, c.out);
}

TEST(CliGenerate, GreedyMatchesTheGoldenTokensInEveryCacheMode) {
    // a_tiny's reference greedy continuation of [10,10,14,11,31] (gen.cached.tokens).
    for (const char* mode : {"kvg", "kv"}) {
        auto r = cli_test::run("generate " + kTiny +
                               " --ids 10,10,14,11,31 -n 7 --greedy --no-eos-stop --cache " + mode);
        ASSERT_EQ(r.code, 0) << r.err;
        EXPECT_NE(r.out.find("| 19 2 33 37 13 33 37"), std::string::npos) << r.out;
    }
}

TEST(CliGenerate, TextPromptWithTokenizerAndBatch) {
    auto r = cli_test::run("generate " + kEval +
                           " -p \"The quick brown fox\" -p \"Q: What is\" -n 4 --greedy");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("[0] The quick brown fox"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("[1] Q: What is"), std::string::npos) << r.out;
}

TEST(CliGenerate, GCacheFilesAndShapeMismatch) {
    const std::string d = cli_test::tmp_dir("gen_gcache");
    auto r = cli_test::run("generate " + kGolden +
                           "b_small_v510.f32 --ids 5,6,7 -n 2 --greedy --save-g-cache " + d +
                           "/g.safetensors");
    ASSERT_EQ(r.code, 0) << r.err;
    r = cli_test::run("generate " + kGolden +
                      "b_small_v510.f32 --ids 5,6,7 -n 4 --greedy --g-cache " + d +
                      "/g.safetensors");
    EXPECT_EQ(r.code, 0) << r.err;
    cli_test::expect_error(
        "generate " + kTiny + " --ids 5,6,7 -n 2 --g-cache " + d + "/g.safetensors", "shape");
}

TEST(CliGenerate, BadInput) {
    cli_test::expect_error("generate " + kTiny + " --ids \"\" -n 2", "empty token id");
    cli_test::expect_error("generate " + kEval + " -p \"\" -n 2", "empty prompt");
    std::string long_ids = "1";
    for (int i = 1; i < 60; ++i) long_ids += ",1";
    cli_test::expect_error("generate " + kTiny + " --ids " + long_ids + " -n 10",
                           "longer than the context");
    cli_test::expect_error("generate " + kTiny + " --ids 5,50 -n 2", "outside the vocabulary");
    cli_test::expect_error("generate " + kTiny + " --ids 5,6 --temp -1", "--temp must be >= 0");
    cli_test::expect_error("generate " + kTiny + " --ids 5,6 --top-p 0", "--top-p");
    cli_test::expect_error("generate " + kTiny + " --ids 5,6 --top-p 1.5", "--top-p");
    cli_test::expect_error("generate " + kTiny + " --ids 5,6 --top-k -1", "--top-k");
    cli_test::expect_error("generate " + kTiny + " --ids 5,6 --min-p 1", "--min-p");
    cli_test::expect_error("generate " + kTiny + " --ids 5,6 --repeat-penalty 0",
                           "--repeat-penalty");
    cli_test::expect_error("generate " + kTiny + " --ids 5,6 --cache fast", "--cache");
    cli_test::expect_error("generate " + kTiny + " -p hello", "no tokenizer");
}

TEST(CliCollapse, FixedGModelIsAnExactNoOp) {
    const std::string src = kGolden + "d_tiny_v510G_random.f64";
    const std::string out = cli_test::tmp_dir("collapse_noop") + "/m";
    auto r = cli_test::run("collapse " + src + " --out " + out + " --dtype f64 --save-dtype f64");
    ASSERT_EQ(r.code, 0) << r.err;
    auto a = pldr::load_model<double>(src), b = pldr::load_model<double>(out);
    EXPECT_EQ(a.params, b.params);
    EXPECT_EQ(a.G_fixed, b.G_fixed);
}

TEST(CliCollapse, LearnedModelReportsKl) {
    const std::string out = cli_test::tmp_dir("collapse_v510") + "/m";
    auto r = cli_test::run("collapse " + kGolden + "b_small_v510.f32 --out " + out +
                           " --eval-ids 5,17,3,99,42,7,7,8,150,3,21,60 --window 6");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("KL(full || collapsed) mean"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("on 11 positions"), std::string::npos) << r.out;
    r = cli_test::run("inspect " + out);
    EXPECT_NE(r.out.find("custom_G_type external"), std::string::npos);
}

}  // namespace
