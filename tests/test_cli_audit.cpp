// `pldr audit` end to end (ids and text models), its bad input, and `pldr dump` --prompt / .npy.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "io/npy.h"

namespace {

using cli_test::run;

const std::string kSrc = PLDR_SOURCE_DIR;
const std::string kTiny = kSrc + "/tests/golden/models/a_tiny_v510.f32";
const std::string kEval = kSrc + "/tests/golden/eval/models/eval_v510_s2024";

nlohmann::json load_json(const std::string& path) {
    return nlohmann::json::parse(cli_test::slurp(path));
}

void expect_sections(const nlohmann::json& j) {
    for (const char* k : {"model", "config", "prompts", "eps_G", "order_parameter",
                          "block_vs_sequential", "spectral", "sdpa_identity_residual",
                          "absorption_residual", "padding", "loss_vs_unigram", "paper"})
        EXPECT_TRUE(j.contains(k)) << k;
    EXPECT_TRUE(j["eps_G"].contains("max_eps_G"));
    EXPECT_TRUE(j["order_parameter"]["continuations"]["max"].contains("G_LM"));
    EXPECT_TRUE(j["order_parameter"]["prompts"]["max"].contains("A"));
}

TEST(CliAudit, TinyIdModelEndToEnd) {
    const std::string out = cli_test::tmp_dir("audit_tiny");
    auto r = run("audit " + kTiny + " --out " + out + " --steps 4 --cont-len 8");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("eps_G"), std::string::npos);
    auto j = load_json(out + "/audit.json");
    expect_sections(j);
    EXPECT_EQ(j["prompts"].size(), 3u);  // the built-in id prompts
    EXPECT_GT(j["eps_G"]["max_eps_G"].get<double>(), 0.0);
    EXPECT_LE(j["absorption_residual"].get<double>(), 1e-5);  // float32 compute, float64 check
    const std::string html = cli_test::slurp(out + "/report.html");
    EXPECT_NE(html.find("<svg"), std::string::npos);
    EXPECT_EQ(html.find("src="), std::string::npos);
    // An ids prompt file in float64.
    const std::string pf = out + "/prompts.txt";
    std::ofstream(pf) << "5,17,3,22\n\n9, 31, 12\n";
    r = run("audit " + kTiny + " --prompts " + pf + " --out " + out +
            "/f64 --dtype f64 --steps 3 --cont-len 4");
    ASSERT_EQ(r.code, 0) << r.err;
    j = load_json(out + "/f64/audit.json");
    EXPECT_EQ(j["prompts"].size(), 2u);
    EXPECT_EQ(j["model"]["dtype"], "f64");
    EXPECT_LE(j["absorption_residual"].get<double>(), 1e-12);
}

TEST(CliAudit, FixedGModelIsExactlyCollapsed) {
    const std::string out = cli_test::tmp_dir("audit_fixed");
    auto r =
        run("audit " + kSrc + "/tests/golden/models/c_tiny_v510G_identity.f64 --dtype f64 --out " +
            out + " --steps 3 --cont-len 4");
    ASSERT_EQ(r.code, 0) << r.err;
    auto j = load_json(out + "/audit.json");
    EXPECT_EQ(j["eps_G"]["max_eps_G"].get<double>(), 0.0);
    EXPECT_EQ(j["order_parameter"]["prompts"]["max"]["G_LM"]["rms"].get<double>(), 0.0);
    EXPECT_TRUE(j["order_parameter"]["prompts"]["max"]["A"].is_null());
    EXPECT_LE(j["sdpa_identity_residual"].get<double>(), 1e-13);
}

TEST(CliAudit, EvalModelWithTextAndTruthfulQA) {
    const std::string out = cli_test::tmp_dir("audit_eval");
    const std::string pf = out + "/prompts.txt";
    std::ofstream(pf) << "The capital of France is\nOnce upon a time\n";
    auto r =
        run("audit " + kEval + " --prompts " + pf + " --out " + out + " --steps 3 --cont-len 6 " +
            "--truthfulqa " + kSrc + "/data/eval/truthfulqa/mc_task.dev.json --items 1");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("TruthfulQA-MC2 on 1 items"), std::string::npos) << r.out;
    auto j = load_json(out + "/audit.json");
    expect_sections(j);
    EXPECT_EQ(j["prompts"][0]["text"], "The capital of France is");
    ASSERT_FALSE(j["block_vs_sequential"]["truthfulqa_mc2"].is_null());
    EXPECT_EQ(j["block_vs_sequential"]["truthfulqa_mc2"]["items"], 1);
    ASSERT_FALSE(j["loss_vs_unigram"].is_null());
    EXPECT_GT(j["loss_vs_unigram"]["unigram_entropy"].get<double>(), 0.0);
}

TEST(CliAudit, BadInputIsOneLineExit1) {
    const std::string out = cli_test::tmp_dir("audit_bad");
    const std::string pf = out + "/empty.txt";
    std::ofstream(pf) << "\n   \n";
    auto r = run("audit " + kTiny + " --prompts " + pf + " --out " + out + "/o");
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(cli_test::count_lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("empty prompt set"), std::string::npos) << r.err;
    r = run("audit " + kSrc + "/no/such/model --out " + out + "/o");
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(cli_test::count_lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("not found"), std::string::npos) << r.err;
    // A text prompt for a model without a tokenizer.
    std::ofstream(pf) << "hello world\n";
    r = run("audit " + kTiny + " --prompts " + pf + " --out " + out + "/o");
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(cli_test::count_lines(r.err), 1) << r.err;
}

TEST(CliAudit, DumpPromptToNpyDirectory) {
    const std::string out = cli_test::tmp_dir("dump_npy");
    auto r = run("dump " + kEval + " --prompt 'The capital of France is' --out " + out + "/npy");
    ASSERT_EQ(r.code, 0) << r.err;
    auto G = pldr::load_npy<float>(out + "/npy/fwd.layer0.G_LM.npy");
    ASSERT_EQ(G.shape.size(), 4u);
    EXPECT_EQ(G.shape[1], 2);
    EXPECT_EQ(G.shape[2], 16);
    auto ids = pldr::load_npy<int64_t>(out + "/npy/fwd.input_ids.npy");
    EXPECT_EQ(ids.shape[0], 1);
    EXPECT_GE(ids.shape[1], 2);
    // The same ids through --tokens give the same G_LM (safetensors path unchanged).
    std::string toks;
    for (int64_t v : ids.data) {
        if (!toks.empty()) toks += ',';
        toks += std::to_string(v);
    }
    r = run("dump " + kEval + " --tokens " + toks + " --out " + out + "/t");
    ASSERT_EQ(r.code, 0) << r.err;
    auto G2 = pldr::load_npy<float>(out + "/t/fwd.layer0.G_LM.npy");
    EXPECT_EQ(G.data, G2.data);
    r = run("dump " + kEval + " --out " + out + "/x.safetensors");
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(cli_test::count_lines(r.err), 1) << r.err;
    // --prompt needs a tokenizer; the tiny golden models have none.
    r = run("dump " + kTiny + " --prompt hello --out " + out + "/y");
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(cli_test::count_lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("tokenizer.model"), std::string::npos) << r.err;
}

}  // namespace
