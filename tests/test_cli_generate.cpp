// pldr generate and pldr collapse through the CLI: reproducible sampling, the JSON format,
// G-cache files, collapse as an exact no-op on fixed-G models, and every bad-input case.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "cli_util.h"
#include "infer/collapse.h"
#include "infer/generate.h"
#include "io/model_load.h"

namespace {

const std::string kGolden = std::string(PLDR_SOURCE_DIR) + "/tests/golden/models/";
const std::string kTiny = kGolden + "a_tiny_v510.f32";
const std::string kEval =
    std::string(PLDR_SOURCE_DIR) + "/tests/golden/eval/models/eval_v510_s2024";

// The ids and per-step log-probabilities of a --json line equal a library run.
void expect_json_equals(const nlohmann::json& j, const pldr::GenResult& want) {
    EXPECT_EQ(j["prompt_ids"].get<std::vector<int64_t>>(), want.prompt_ids);
    EXPECT_EQ(j["ids"].get<std::vector<int64_t>>(), want.ids);
    ASSERT_EQ(j["steps"].size(), want.steps.size());
    for (size_t k = 0; k < want.steps.size(); ++k) {
        EXPECT_EQ(j["steps"][k]["id"].get<int64_t>(), want.steps[k].id) << k;
        // The same computation in another process (1e-6: float32 logits, room for another
        // summation order; a wrong token or position moves a log-probability by far more).
        EXPECT_NEAR(j["steps"][k]["logprob"].get<double>(), want.steps[k].logprob, 1e-6) << k;
        ASSERT_EQ(j["steps"][k]["top"].size(), want.steps[k].top.size());
        for (size_t t = 0; t < want.steps[k].top.size(); ++t) {
            EXPECT_EQ(j["steps"][k]["top"][t][0].get<int64_t>(), want.steps[k].top[t].first);
            EXPECT_NEAR(j["steps"][k]["top"][t][1].get<double>(), want.steps[k].top[t].second,
                        1e-6);
        }
    }
}

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
    // The values: the library's sampled run with the same options.
    auto m = pldr::load_model<float>(kTiny);
    pldr::keep_panel_weights(m);  // as the command's model (Model::load)
    pldr::GenerateOptions o;
    o.max_new = 8;
    o.stop_at_eos = false;
    o.sampler.temperature = 0.8;
    o.sampler.top_k = 20;
    o.sampler.seed = 7;
    expect_json_equals(j, pldr::generate(m, {10, 10, 14}, o));
}

TEST(CliGenerate, StopsRightAfterEos) {
    // a_tiny's greedy continuation of [10,10,14,11,31] is 19 2 33 37 13 33 37 (golden). A copy
    // of the model whose config says EOS = 33 must stop after the first 33.
    const std::string d = cli_test::tmp_dir("gen_eos") + "/m";
    std::filesystem::copy(kTiny, d);
    nlohmann::json cfg = nlohmann::json::parse(cli_test::slurp(d + "/config.json"));
    cfg["eos_token_id"] = 33;
    std::ofstream(d + "/config.json") << cfg.dump(2);
    auto r = cli_test::run("generate " + d + " --ids 10,10,14,11,31 -n 7 --greedy --json");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["ids"], nlohmann::json({19, 2, 33}));
    // Streamed output stops there too; --no-eos-stop runs all 7 steps.
    r = cli_test::run("generate " + d + " --ids 10,10,14,11,31 -n 7 --greedy");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("| 19 2 33\n"), std::string::npos) << r.out;
    r = cli_test::run("generate " + d + " --ids 10,10,14,11,31 -n 7 --greedy --json --no-eos-stop");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["ids"], nlohmann::json({19, 2, 33, 37, 13, 33, 37}));
    // The original model (EOS = 3, never generated here) runs all 7 steps by default.
    r = cli_test::run("generate " + kTiny + " --ids 10,10,14,11,31 -n 7 --greedy --json");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["ids"].size(), 7u);
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
    // The same batch as JSON: each prompt's ids are the library's greedy run on that prompt.
    r = cli_test::run("generate " + kEval +
                      " -p \"The quick brown fox\" -p \"Q: What is\" -n 4 --greedy --json");
    ASSERT_EQ(r.code, 0) << r.err;
    std::istringstream in(r.out);
    std::string line;
    std::vector<nlohmann::json> js;
    while (std::getline(in, line))
        if (!line.empty()) js.push_back(nlohmann::json::parse(line));
    ASSERT_EQ(js.size(), 2u);
    auto m = pldr::load_model<float>(kEval);
    pldr::keep_panel_weights(m);  // as the command's model (Model::load)
    pldr::GenerateOptions o;
    o.max_new = 4;
    o.sampler.greedy = true;
    for (const auto& j : js) {
        const auto prompt = j["prompt_ids"].get<std::vector<int64_t>>();
        ASSERT_FALSE(prompt.empty());
        expect_json_equals(j, pldr::generate(m, prompt, o));
    }
}

TEST(CliGenerate, GCacheFilesAndShapeMismatch) {
    const std::string d = cli_test::tmp_dir("gen_gcache");
    auto r = cli_test::run("generate " + kGolden +
                           "b_small_v510.f32 --ids 5,6,7 -n 2 --greedy --save-g-cache " + d +
                           "/g.safetensors");
    ASSERT_EQ(r.code, 0) << r.err;
    r = cli_test::run("generate " + kGolden +
                      "b_small_v510.f32 --ids 9,40,41,2 -n 4 --greedy --json --g-cache " + d +
                      "/g.safetensors");
    ASSERT_EQ(r.code, 0) << r.err;
    // The values: the library's run of this prompt with the saved operator (prompt 5,6,7's G),
    // which is not the run with the prompt's own G.
    auto m = pldr::load_model<float>(kGolden + "b_small_v510.f32");
    pldr::keep_panel_weights(m);  // as the command's model (Model::load)
    auto g = pldr::load_g_cache<float>(d + "/g.safetensors", m.cfg);
    EXPECT_EQ(g[0].G.data, pldr::prompt_g_cache(m, {5, 6, 7})[0].G.data);
    pldr::GenerateOptions o;
    o.max_new = 4;
    o.sampler.greedy = true;
    const auto j = nlohmann::json::parse(r.out);
    expect_json_equals(j, pldr::generate(m, {9, 40, 41, 2}, o, &g));
    const auto own = pldr::generate(m, {9, 40, 41, 2}, o);
    EXPECT_NE(j["steps"][0]["logprob"].get<double>(), own.steps[0].logprob);
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
    cli_test::expect_error("generate " + kTiny + " --ids 5,6 --temp -1",
                           "--temp: must be in [0, inf) (got -1)");
    cli_test::expect_error("generate " + kTiny + " --ids 5,6 --top-p 0", "--top-p");
    cli_test::expect_error("generate " + kTiny + " --ids 5,6 --top-p 1.5", "--top-p");
    cli_test::expect_error("generate " + kTiny + " --ids 5,6 --top-k -2",
                           "--top-k: must be in [-1, inf)");
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
    // The numbers: the library's comparison of the model and its v510Gi collapse (the default
    // recipe), printed with 6 significant digits (KL) and 4-5 decimals.
    auto m = pldr::load_model<float>(kGolden + "b_small_v510.f32");
    pldr::keep_panel_weights(m);  // as the command's model (Model::load)
    const auto c = pldr::collapse_model(m, pldr::reference_g_cache(m));
    const auto rep = pldr::compare_models(m, c, {5, 17, 3, 99, 42, 7, 7, 8, 150, 3, 21, 60}, 6);
    double kl_mean = 0, kl_max = 0, agree = 0, nll_a = 0, nll_b = 0;
    const size_t at = r.out.find("KL(full || collapsed) mean");
    ASSERT_NE(at, std::string::npos);
    ASSERT_EQ(std::sscanf(r.out.c_str() + at,
                          "KL(full || collapsed) mean %lf nats, max %lf; top-1 agreement %lf; "
                          "NLL full %lf, collapsed %lf",
                          &kl_mean, &kl_max, &agree, &nll_a, &nll_b),
              5)
        << r.out;
    EXPECT_EQ(rep.tokens, 11);
    EXPECT_NEAR(kl_mean, rep.kl_mean, 1e-5 * rep.kl_mean);
    EXPECT_NEAR(kl_max, rep.kl_max, 1e-5 * rep.kl_max);
    EXPECT_NEAR(agree, rep.top1_agree, 5e-5);
    EXPECT_NEAR(nll_a, rep.nll_a, 1e-5);
    EXPECT_NEAR(nll_b, rep.nll_b, 1e-5);
    EXPECT_GT(rep.kl_mean, 0.0);
    r = cli_test::run("inspect " + out);
    EXPECT_NE(r.out.find("custom_G_type external"), std::string::npos);
}

}  // namespace
