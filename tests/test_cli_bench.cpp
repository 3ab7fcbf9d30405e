// pldr bench: the benchmark model it writes, and how it compares each workload with the machine's
// limits (fractions of the limits measured next to each repetition; batched decode against
// batch 1 in pairs that ran together).
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_util.h"
#include "io/model_load.h"
#include "model/init.h"
#include "perf/workloads.h"

namespace {

using nlohmann::json;

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

json bench_json(const std::string& args) {
    const auto r = cli_test::run("bench --config S --context 64 --output json " + args);
    EXPECT_EQ(r.code, 0) << r.err;
    return json::parse(r.out);
}

}  // namespace

// pldr bench --save-model: the benchmark shape's random model as a directory that loads mapped,
// with bench's own weights; refused into a directory that holds a model, or without --config.
TEST(CliBench, SaveModelWritesTheBenchmarkWeightsAndRefusesToOverwrite) {
    const std::string dir = cli_test::tmp_dir("benchsave") + "/S";
    auto r = cli_test::run("bench --config S --context 64 --save-model " + dir);
    ASSERT_EQ(r.code, 0) << r.err;
    pldr::Model<float> want(pldr::perf::bench_config("S", 64));
    pldr::init_weights(want, 1234);
    const pldr::Model<float> got = pldr::load_model<float>(dir, true, /*map_file=*/true);
    EXPECT_TRUE(got.params.is_mapped());
    EXPECT_EQ(got.cfg.max_position, 64);
    EXPECT_EQ(got.params, want.params);
    cli_test::expect_error("bench --config S --save-model " + dir, "already holds a model");
    cli_test::expect_error("bench " + dir + " --save-model " + dir + "2",
                           "--save-model writes the random model of --config");
    cli_test::expect_error("bench --config S --only train --recompute most",
                           "is not none, selective or full");
    cli_test::expect_error("train --recompute most", "--recompute");
}

// --limits adjacent (the default): each workload's limit is measured in its own process before
// the first repetition, after the last, and between repetitions where a second has passed.
// Repetition i is compared with the larger of the probes just before and just after it, and the
// row's fraction is the median of those per-repetition fractions; batch 2 is divided by the
// batch-1 repetition that ran just before it.
TEST(CliBench, EachRepetitionIsComparedWithTheLimitsMeasuredAroundIt) {
    const json out = bench_json(
        "--only decode,train --caches kvg --batch 2 --reps 3 --n-new 8 --train-batch 2 "
        "--train-seq 16");
    const json& lim = out["limits"];
    ASSERT_EQ(out["results"].size(), 3u);  // decode batch 1, decode batch 2, train
    for (const json& r : out["results"]) {
        SCOPED_TRACE(r.dump());
        const auto reps = r["tok_s_reps"].get<std::vector<double>>();
        ASSERT_EQ(reps.size(), 3u);
        EXPECT_DOUBLE_EQ(r["tok_s"]["median"].get<double>(), median(reps));
        const json& p = r["probes"];
        ASSERT_GE(p.size(), 2u);
        EXPECT_EQ(p.front()["before"], 0);
        EXPECT_EQ(p.back()["before"], 3);
        const bool decode = r["workload"] == "decode";
        const char* key = decode ? "read" : "sgemm";
        std::vector<double> fractions, limits;
        for (int i = 0; i < 3; ++i) {
            double before = 0, after = 0;  // the last probe before repetition i, the first after
            for (const json& q : p) {
                if (q["before"].get<int>() <= i) before = q[key].get<double>();
                if (q["before"].get<int>() > i && after == 0) after = q[key].get<double>();
            }
            ASSERT_GT(before, 0);
            ASSERT_GT(after, 0);
            const double x = std::max(before, after);
            double limit = 0;
            if (decode) {
                const double B = double(r["batch"].get<int>());
                limit = std::min(
                    B * x * 1e9 / r["bytes_per_token"].get<double>(),
                    lim["sgemm_gflops"].get<double>() * 1e9 / r["flops_per_token"].get<double>());
            } else {
                limit = x * 1e9 / r["flops_per_token"].get<double>();
            }
            limits.push_back(limit);
            fractions.push_back(reps[size_t(i)] / limit);
        }
        EXPECT_NEAR(r["fraction"].get<double>(), median(fractions), 1e-12 * median(fractions));
        EXPECT_NEAR(r["limit_tok_s"].get<double>(), median(limits), 1e-9 * median(limits));
        EXPECT_EQ(r["limits_measured"], "adjacent");
        if (decode && r["batch"] == 2) {
            const auto one = r["batch1_tok_s_reps"].get<std::vector<double>>();
            ASSERT_EQ(one.size(), 3u);
            std::vector<double> x;
            for (size_t i = 0; i < 3; ++i) x.push_back(reps[i] / one[i]);
            EXPECT_NEAR(r["x_batch1"].get<double>(), median(x), 1e-12 * median(x));
        } else {
            EXPECT_FALSE(r.contains("batch1_tok_s_reps"));
        }
    }
}

// --min-time: prefill and decode repeat past --reps until that many seconds have passed (an S
// prefill takes milliseconds: hundreds of repetitions), with a probe of the limit about every
// second between them; --min-time 0 keeps --reps exactly; out-of-range values are refused.
TEST(CliBench, ShortRepetitionsRepeatForTheMinimumTime) {
    const json floor = bench_json("--only prefill --prompt-prefill 32 --reps 2 --min-time 1.5");
    ASSERT_EQ(floor["results"].size(), 1u);
    const json& r = floor["results"][0];
    const auto reps = r["tok_s_reps"].get<std::vector<double>>();
    // More than --reps (a 32-token prefill of S takes milliseconds, even on a loaded machine), and
    // no repetition started after the floor had passed: the ones before the last took < 1.5 s.
    ASSERT_GT(reps.size(), 2u);
    double before_last = 0;
    for (size_t i = 0; i + 1 < reps.size(); ++i) before_last += 32.0 / reps[i];
    EXPECT_LT(before_last, 1.5);
    const json& p = r["probes"];
    ASSERT_GE(p.size(), 3u);  // before, at least one a second in, after
    EXPECT_EQ(p.front()["before"], 0);
    EXPECT_EQ(p.back()["before"].get<size_t>(), reps.size());
    const json exact = bench_json("--only prefill --prompt-prefill 32 --reps 3 --min-time 0");
    EXPECT_EQ(exact["results"][0]["tok_s_reps"].size(), 3u);
    cli_test::expect_error("bench --config S --min-time 4000", "--min-time");
}

// --limits start: one measurement at the start of the run for every workload, no probes.
TEST(CliBench, LimitsAtTheStartAreMeasuredOnce) {
    const json out = bench_json(
        "--only train --limits start --reps 2 --train-batch 2 "
        "--train-seq 16");
    ASSERT_EQ(out["results"].size(), 1u);
    const json& r = out["results"][0];
    EXPECT_FALSE(r.contains("probes"));
    EXPECT_EQ(r["limits_measured"], "run start");
    const double limit =
        out["limits"]["sgemm_gflops"].get<double>() * 1e9 / r["flops_per_token"].get<double>();
    EXPECT_NEAR(r["limit_tok_s"].get<double>(), limit, 1e-9 * limit);
    EXPECT_DOUBLE_EQ(r["fraction"].get<double>(), r["fraction_run_start"].get<double>());
    cli_test::expect_error("bench --config S --limits nearby", "--limits");
    cli_test::expect_error("bench --probe write", "unknown limit 'write' (read, sgemm or bf16)");
}

// pldr bench --only product: the real commands, each in its own process, timed whole with its
// peak RSS: pldr train (with validation and the final checkpoint), pldr generate with 1 and with
// `--batch` prompts (the ratio per round is batch x t(1) / t(batch)), and pldr serve under a
// bounded load (every request answered; tokens counted from the responses' usage).
TEST(CliBench, ProductRunsTheCommandsWhole) {
    const std::string tok =
        std::string(PLDR_SOURCE_DIR) + "/models/pldr-sotu-small/tokenizer.model";
    const auto r = cli_test::run(
        "bench --config S --context 64 --output json --only product --rounds 2 --batch 3 "
        "--prompt-decode 5 --n-new 6 --train-batch 2 --train-seq 16 --tokenizer " +
        tok);
    ASSERT_EQ(r.code, 0) << r.err;
    const json j = json::parse(r.out);
    ASSERT_EQ(j["product"].size(), 4u) << r.out;
    const json& rows = j["product"];
    EXPECT_EQ(rows[0]["workload"], "pldr train");
    EXPECT_NE(rows[0]["command"].get<std::string>().find("--eval-every 2"), std::string::npos);
    EXPECT_EQ(rows[0]["tokens"].get<double>(), 2 * 2 * 16);
    EXPECT_EQ(rows[1]["workload"], "pldr generate 1");
    EXPECT_EQ(rows[2]["workload"], "pldr generate 3");
    for (size_t i = 0; i < 3; ++i) {
        ASSERT_EQ(rows[i]["seconds"]["rounds"].size(), 2u);
        EXPECT_GT(rows[i]["seconds"]["min"].get<double>(), 0);
        EXPECT_GT(rows[i]["peak_rss_mib"]["min"].get<double>(), 5);  // a process, not a thread
    }
    for (size_t k = 0; k < 2; ++k)
        EXPECT_DOUBLE_EQ(rows[2]["x_single"]["rounds"][k].get<double>(),
                         3 * rows[1]["seconds"]["rounds"][k].get<double>() /
                             rows[2]["seconds"]["rounds"][k].get<double>());
    EXPECT_EQ(rows[3]["workload"], "pldr serve");
    // 3 clients x 2 requests x 6 tokens per round (no EOS stop in 6 greedy tokens is not
    // guaranteed, so at most).
    for (const json& t : rows[3]["tokens_per_s"]["rounds"]) EXPECT_GT(t.get<double>(), 0);
    EXPECT_GT(rows[3]["requests_per_s"]["min"].get<double>(), 0);
    // Without a tokenizer, serve is skipped with a note; a wrong name is an error.
    const auto s = cli_test::run("bench --config S --context 64 --only cmd-serve --rounds 1");
    ASSERT_EQ(s.code, 0) << s.err;
    EXPECT_NE(s.out.find("pldr serve skipped"), std::string::npos) << s.out;
    cli_test::expect_error("bench --config S --only cmd-nothing",
                           "is not train, generate or serve");
}
