// The benchmark-scoring fixture (tests/golden/eval, see its README): a reference model with the
// real 32k tokenizer, TruthfulQA MC1/MC2 and PIQA requests built by the published harness's
// rules. Reproduced request by request: token ids exactly; per-token log-probabilities, summed
// log-likelihoods and metrics within the README's tolerances; argmax ids exactly.
#include <map>

#include "golden_util.h"
#include "infer/tasks.h"
#include "io/tokenizer.h"

namespace {

std::string eval_dir() {
    return golden::dir() + "/eval";
}

nlohmann::json fixture() {
    std::ifstream f(eval_dir() + "/eval_v510_s2024.json");
    return nlohmann::json::parse(f);
}

template <typename T>
void check_requests(const std::string& prec, double tok_tol, double ll_tol) {
    auto j = fixture();
    const std::string mdir = eval_dir() + "/models/eval_v510_s2024";
    pldr::Tokenizer tok(mdir + "/tokenizer.model");
    pldr::Model<T> m = pldr::load_model<T>(mdir);
    std::map<std::pair<std::string, std::string>, pldr::ScoreResult> done;
    int checked = 0;
    for (const auto& r : j["requests"]) {
        const std::string ctx = r["context"], cont = r["continuation"];
        auto req = pldr::encode_request(tok, ctx, cont, m.cfg.eos_token_id);
        ASSERT_EQ(req.context, r["context_ids"].get<std::vector<int64_t>>()) << r["id"];
        ASSERT_EQ(req.continuation, r["continuation_ids"].get<std::vector<int64_t>>()) << r["id"];
        auto key = std::make_pair(ctx, cont);
        if (!done.count(key)) done[key] = pldr::score_request(m, req, pldr::ScoreMode::BLOCK);
        const auto& s = done[key];
        EXPECT_EQ(s.ctxlen, r["ctxlen"].get<int64_t>());
        const auto& ref = r[prec];
        const auto lps = ref["logprobs"].get<std::vector<double>>();
        ASSERT_EQ(lps.size(), s.token_logprobs.size());
        for (size_t i = 0; i < lps.size(); ++i)
            EXPECT_NEAR(s.token_logprobs[i], lps[i], tok_tol)
                << "request " << r["id"] << " token " << i;
        EXPECT_NEAR(s.logprob, ref["ll"].get<double>(), ll_tol) << "request " << r["id"];
        EXPECT_EQ(s.is_greedy, ref["is_greedy"].get<bool>());
        EXPECT_EQ(s.argmax_ids, ref["argmax_ids"].get<std::vector<int64_t>>()) << r["id"];
        ++checked;
    }
    EXPECT_EQ(checked, 166);
}

TEST(GoldenEval, RequestsFloat32) {
    check_requests<float>("f32", 2e-5, 1e-4);
}
TEST(GoldenEval, RequestsFloat64) {
    check_requests<double>("f64", 1e-6, 1e-6);
}

TEST(GoldenEval, TaskMetricsFromTheOriginalDataFiles) {
    auto j = fixture();
    const std::string mdir = eval_dir() + "/models/eval_v510_s2024";
    pldr::Tokenizer tok(mdir + "/tokenizer.model");
    auto m = pldr::load_model<double>(mdir);
    const std::string data = std::string(PLDR_SOURCE_DIR) + "/data/eval/";
    std::vector<pldr::McItem> mc1, mc2;
    pldr::load_truthfulqa(data + "truthfulqa/mc_task.dev.json", &mc1, &mc2);
    auto piqa = pldr::load_piqa(data + "piqa/valid.jsonl", data + "piqa/valid-labels.lst");
    mc1.resize(12);
    mc2.resize(12);
    piqa.resize(12);
    auto s1 = pldr::score_choices(m, tok, mc1, pldr::ScoreMode::BLOCK);
    auto s2 = pldr::score_choices(m, tok, mc2, pldr::ScoreMode::BLOCK);
    auto sp = pldr::score_choices(m, tok, piqa, pldr::ScoreMode::BLOCK);
    double acc1 = 0, acc2 = 0, pacc = 0, pnorm = 0;
    for (size_t i = 0; i < 12; ++i) {
        const auto& t1 = j["tasks"]["truthfulqa_mc1"][i]["results"]["f64"];
        const auto& t2 = j["tasks"]["truthfulqa_mc2"][i]["results"]["f64"];
        const auto& tp = j["tasks"]["piqa"][i]["results"]["f64"];
        const auto l1 = t1["lls"].get<std::vector<double>>();
        for (size_t c = 0; c < l1.size(); ++c) EXPECT_NEAR(s1.lls[i][c], l1[c], 1e-6);
        const double a1 = pldr::argmax_first(s1.lls[i]) == 0;
        EXPECT_EQ(a1, t1["acc"].get<double>()) << "mc1 item " << i;
        const double a2 = pldr::mc2_score(s2.lls[i], mc2[i].labels);
        EXPECT_NEAR(a2, t2["acc"].get<double>(), 1e-5) << "mc2 item " << i;
        const double pa = pldr::argmax_first(sp.lls[i]) == piqa[i].gold;
        const double pn = pldr::argmax_norm(sp.lls[i], piqa[i].choices) == piqa[i].gold;
        EXPECT_EQ(pa, tp["acc"].get<double>()) << "piqa item " << i;
        EXPECT_EQ(pn, tp["acc_norm"].get<double>()) << "piqa item " << i;
        acc1 += a1;
        acc2 += a2;
        pacc += pa;
        pnorm += pn;
    }
    const auto& means = j["means"]["f64"];
    EXPECT_DOUBLE_EQ(acc1 / 12, means["truthfulqa_mc1"]["acc"].get<double>());
    EXPECT_NEAR(acc2 / 12, means["truthfulqa_mc2"]["acc"].get<double>(), 1e-5);
    EXPECT_DOUBLE_EQ(pacc / 12, means["piqa"]["acc"].get<double>());
    EXPECT_DOUBLE_EQ(pnorm / 12, means["piqa"]["acc_norm"].get<double>());
}

}  // namespace
