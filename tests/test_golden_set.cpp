// The golden set itself and what runs on it:
//  - the discovered set equals the folder's manifest (the default set must have one);
//  - the reference's RoPE table is rebuilt bit for bit (every fixture's rope.cache);
//  - a copy of the set under other names and in another make-up (one trajectory, TruthfulQA items
//    of the other data file) runs every golden test unchanged: the tests follow the fixture;
//  - the float32 checks catch real changes (a mutation check on every parameter tensor);
//  - `pldr dump`, `grad` and `score` on every model directory of the set, with --dtype f64
//    --numerics reference, reproduce the fixtures.
#include <unistd.h>

#include <chrono>
#include <map>
#include <set>

#include "cli_util.h"
#include "golden_checks.h"
#include "infer/score.h"
#include "io/tokenizer.h"

namespace {

namespace fs = std::filesystem;

std::vector<std::string> names_of(const nlohmann::json& j) {
    return j.is_array() ? j.get<std::vector<std::string>>() : std::vector<std::string>{};
}

TEST(GoldenSet, MatchesManifest) {
    GOLDEN_USE(golden::all_fixtures(), "golden");
    const auto& s = golden::set();
    if (s.manifest.is_null())  // (the default set must have one: a discovery error)
        GTEST_SKIP() << golden::dir() << " has no manifest.json: its " << s.steps.size() << "/"
                     << s.trajectories.size() << "/" << s.evals.size()
                     << " fixtures run unchecked against one";
    std::vector<std::string> steps, traj, evals;
    for (const auto& f : s.steps) steps.push_back(f.name);
    for (const auto& f : s.trajectories) traj.push_back(f.name);
    for (const auto& f : s.evals) evals.push_back(f.name);
    EXPECT_EQ(steps, names_of(s.manifest["single_step"]));
    EXPECT_EQ(traj, names_of(s.manifest["trajectory"]));
    EXPECT_EQ(evals, names_of(s.manifest["eval"]));
    EXPECT_EQ(s.model_dirs, names_of(s.manifest["model_dirs"]));
    for (const auto& d : s.model_dirs)
        EXPECT_NO_THROW(pldr::load_model<double>(golden::dir() + "/" + d)) << d;
}

// --numerics reference builds torch's float32 table: equal to every rope.cache bit for bit.
TEST(GoldenRope, TableEqualsEveryRopeCacheBitForBit) {
    std::vector<std::string> with_rope;  // the kinds whose files carry rope.cache
    for (const auto& fx : golden::set().steps) with_rope.push_back(fx.name);
    for (const auto& t : golden::set().trajectories) with_rope.push_back(t.name);
    GOLDEN_USE(with_rope, "single-step or trajectory");
    std::vector<std::pair<std::string, pldr::Config>> files;
    for (const auto& fx : golden::set().steps)
        for (const char* dt : {"f32", "f64"})
            files.push_back(
                {fx.path(dt),
                 golden::config_of(fx.side["config"], fx.side.value("results", nlohmann::json()))});
    for (const auto& t : golden::set().trajectories)
        for (const char* dt : {"f32", "f64"})
            files.push_back({t.path(dt), pldr::load_model<float>(t.model_dir(dt)).cfg});
    int checked = 0;
    for (const auto& [path, cfg] : files) {
        pldr::SafetensorsFile f(path);
        if (!f.has("rope.cache")) continue;
        const auto rc = f.read<double>("rope.cache");  // [max_pos, dk/2, 2], float32 values
        for (int ref : {1, 0}) {
            pldr::Model<double> m(cfg);
            m.set_reference_numerics(ref);
            ASSERT_EQ(rc.numel(), 2 * int64_t(m.rope.cos.size())) << path;
            int64_t differ = 0;
            for (size_t i = 0; i < m.rope.cos.size(); ++i)
                differ += (float(rc[int64_t(2 * i)]) != m.rope.cos[i]) +
                          (float(rc[int64_t(2 * i + 1)]) != m.rope.sin[i]);
            if (ref) {
                EXPECT_EQ(differ, 0) << path;
            } else if (m.rope.max_pos >= 64) {  // exact: float64, so not torch's
                EXPECT_GT(differ, 0) << path;
            }
        }
        ++checked;
    }
    EXPECT_GT(checked, 0);
}

// ---- the set under other names, in another make-up -----------------------------------------
//
// The golden tests take everything from the fixture (names, counts, shapes, data files, item
// indices). GoldenSet.RenamedCopyRunsEveryGoldenTest builds a copy of the set that differs from
// it in each of these, runs every golden test on it in a child process (PLDR_GOLDEN_DIR), and
// requires each to run and pass:
//  - every fixture under a new name;
//  - one trajectory (the first), the others dropped;
//  - each eval fixture's TruthfulQA items taken from the other TruthfulQA file of data/eval (the
//    held-out half when the fixture reads the dev half, and the reverse), fewer of them, at other
//    indices (below). Its PIQA items and their requests stay the reference's.
// Then two copies that misname their TruthfulQA items (the original file, and the positions
// 0…n−1 instead of the indices) must fail GoldenEval.TaskMetricsFromTheOriginalDataFiles: a test
// that reads another file than the fixture names, or ignores its indices, cannot pass.

using ojson = nlohmann::ordered_json;

void write_json(const std::string& p, const nlohmann::json& j) {
    std::ofstream(p) << j.dump(1);
}

// The TruthfulQA data files of the project (data/eval/truthfulqa/*.json), sorted.
std::vector<std::string> truthfulqa_files() {
    std::vector<std::string> out;
    const std::string d = std::string(PLDR_SOURCE_DIR) + "/data/eval/truthfulqa";
    for (const auto& e : fs::directory_iterator(d))
        if (e.is_regular_file() && e.path().extension() == ".json")
            out.push_back(e.path().string());
    std::sort(out.begin(), out.end());
    return out;
}

// The TruthfulQA file that the copy of a fixture reading `current` takes its items from: another
// one of the project's, the held-out half where there is a choice. Empty when there is none.
std::string other_truthfulqa(const std::string& current) {
    std::string pick;
    for (const auto& f : truthfulqa_files()) {
        if (fs::path(f).filename() == fs::path(current).filename()) continue;
        if (pick.empty() || f.find("heldout") != std::string::npos) pick = f;
    }
    return pick;
}

// Index of the first largest value.
size_t first_max(const std::vector<double>& v) {
    size_t b = 0;
    for (size_t i = 1; i < v.size(); ++i)
        if (v[i] > v[b]) b = i;
    return b;
}

// The switched eval fixture (see the section comment). Items: half as many as the fixture has
// (at least one), at indices counted down from the end of the other file in steps of two, so
// that neither the original file, its indices, nor positions 0…n−1 name them. Requests follow the
// fixture's own harness block (the TruthfulQA preamble, "\n\nQ: " + question + "\nA:", the target
// delimiter, choices in the file's key order), checked first against the fixture's own entries.
// Their expected values are the eval model's, computed here by this library in float64 and
// float32, after the same model reproduced the fixture's first requests from the reference (ids
// exactly, log-probabilities within 1e-9): no reference value exists for other items, and what the
// child run tests with them is the golden tests (that they read the items the fixture names), not
// the numerics, which GoldenEval checks against the reference. The metrics (MC1 accuracy, MC2's
// normalised mass) are computed here from their definitions, not by infer/tasks.
void switch_truthfulqa(const golden::EvalFixture& e, const std::string& other,
                       nlohmann::json* out) {
    const nlohmann::json& j0 = e.side;
    nlohmann::json j = j0;
    const auto& h = j0["harness"];
    const std::string pre = h["truthfulqa_preamble"], delim = h.value("target_delimiter", " ");
    auto context_of = [&](const std::string& q) { return pre + "\n\nQ: " + q + "\nA:"; };
    std::vector<const char*> tasks;
    for (const char* t : {"truthfulqa_mc1", "truthfulqa_mc2"}) {
        if (!e.task(t).is_array() || e.task(t).empty()) continue;
        tasks.push_back(t);
        for (const auto& en : e.task(t))
            if (en.contains("question")) {
                ASSERT_EQ(context_of(en["question"].get<std::string>()),
                          en["context"].get<std::string>())
                    << e.name << " " << t << ": the harness rule does not give its context";
            }
    }
    // The model that computes the expected values reproduces the reference's first requests.
    pldr::Tokenizer tok(e.tokenizer());
    const auto m64 = pldr::load_model<double>(e.model_dir());
    const auto m32 = pldr::load_model<float>(e.model_dir());
    const int64_t eos = m64.cfg.eos_token_id;
    for (size_t k = 0; k < std::min<size_t>(4, j0["requests"].size()); ++k) {
        const auto& r = j0["requests"][k];
        const auto req = pldr::encode_request(tok, r["context"].get<std::string>(),
                                              r["continuation"].get<std::string>(), eos);
        ASSERT_EQ(req.context, r["context_ids"].get<std::vector<int64_t>>()) << e.name;
        ASSERT_EQ(req.continuation, r["continuation_ids"].get<std::vector<int64_t>>()) << e.name;
        ASSERT_EQ(int64_t(req.context.size()), r["ctxlen"].get<int64_t>()) << e.name;
        const auto s = pldr::score_request(m64, req, pldr::ScoreMode::BLOCK);
        const auto want = r["f64"]["logprobs"].get<std::vector<double>>();
        ASSERT_EQ(s.token_logprobs.size(), want.size()) << e.name;
        ASSERT_LE(golden::rel_err(s.token_logprobs.data(), want.data(), int64_t(want.size())), 1e-9)
            << e.name << " request " << r["id"];
    }
    // The items.
    ojson data;
    {
        std::ifstream f(other);
        data = ojson::parse(f);
    }
    const size_t n = std::max<size_t>(1, (e.indices("truthfulqa_indices").size() + 1) / 2);
    ASSERT_TRUE(data.is_array() && data.size() >= 2 * n) << other;
    std::vector<size_t> idx;
    for (size_t i = 0; i < n; ++i) idx.push_back(data.size() - 1 - 2 * i);
    // The requests: the new TruthfulQA ones, then the fixture's PIQA ones (renumbered).
    nlohmann::json requests = nlohmann::json::array();
    std::map<std::pair<std::string, std::string>, nlohmann::json> scored;  // per unique pair
    auto request = [&](const char* task, size_t doc, size_t choice, const std::string& ctx,
                       const std::string& cont) {
        auto& v = scored[{ctx, cont}];
        if (v.is_null()) {
            const auto req = pldr::encode_request(tok, ctx, cont, eos);
            v["context_ids"] = req.context;
            v["continuation_ids"] = req.continuation;
            v["ctxlen"] = int64_t(req.context.size());
            v["n_input_tokens"] = int64_t(req.context.size() + req.continuation.size()) - 1;
            for (const char* prec : {"f32", "f64"}) {
                const auto s = prec == std::string("f64")
                                   ? pldr::score_request(m64, req, pldr::ScoreMode::BLOCK)
                                   : pldr::score_request(m32, req, pldr::ScoreMode::BLOCK);
                double ll = 0;  // left to right, in double (the harness)
                for (double x : s.token_logprobs) ll += x;
                v[prec] = {{"logprobs", s.token_logprobs},
                           {"ll", ll},
                           {"is_greedy", s.argmax_ids == req.continuation},
                           {"argmax_ids", s.argmax_ids}};
            }
        }
        nlohmann::json r = v;
        r["id"] = requests.size();
        r["task"] = task;
        r["doc_index"] = doc;
        r["choice_index"] = choice;
        r["context"] = ctx;
        r["continuation"] = cont;
        requests.push_back(r);
        return r;
    };
    nlohmann::json means = j0["means"];
    for (const char* t : tasks) {
        const bool mc2 = std::string(t) == "truthfulqa_mc2";
        nlohmann::json entries = nlohmann::json::array();
        std::map<std::string, double> sum;
        for (size_t i : idx) {
            const auto& item = data[i];
            const std::string q = item["question"].get<std::string>(), ctx = context_of(q);
            nlohmann::json en = {{"doc_index", i}, {"question", q}, {"context", ctx}};
            std::vector<std::string> choices;
            std::vector<int> labels;
            const auto& targets = item[mc2 ? "mc2_targets" : "mc1_targets"];
            for (auto c = targets.begin(); c != targets.end(); ++c) {  // in the file's key order
                choices.push_back(c.key());
                labels.push_back(c.value().get<int>());
            }
            en["choices"] = choices;
            en["labels"] = labels;
            en["gold"] = std::find(labels.begin(), labels.end(), 1) - labels.begin();
            std::map<std::string, std::vector<double>> lls;
            std::map<std::string, std::vector<bool>> greedy;
            for (size_t c = 0; c < choices.size(); ++c) {
                const auto r = request(t, i, c, ctx, delim + choices[c]);
                en["request_ids"].push_back(r["id"]);
                for (const char* prec : {"f32", "f64"}) {
                    lls[prec].push_back(r[prec]["ll"].get<double>());
                    greedy[prec].push_back(r[prec]["is_greedy"].get<bool>());
                }
            }
            for (const char* prec : {"f32", "f64"}) {
                const auto& v = lls[prec];
                nlohmann::json res = {{"lls", v}, {"is_greedy", greedy[prec]}};
                double acc;
                if (mc2) {  // labels 1…1 then 0…0: the mass on the true ones (max-shifted)
                    size_t split = 0;
                    while (split < labels.size() && labels[split] == 1) ++split;
                    const double mx = v[first_max(v)];
                    double tru = 0, all = 0;
                    for (size_t c = 0; c < v.size(); ++c) {
                        all += std::exp(v[c] - mx);
                        if (c < split) tru += std::exp(v[c] - mx);
                    }
                    acc = tru / all;
                    res["split_idx"] = split;
                } else {
                    res["pred"] = first_max(v);
                    acc = double(int64_t(first_max(v)) == en["gold"].get<int64_t>());
                }
                res["acc"] = acc;
                sum[prec] += acc;
                en["results"][prec] = res;
            }
            entries.push_back(en);
        }
        j["tasks"][t] = entries;
        for (const char* prec : {"f32", "f64"}) means[prec][t]["acc"] = sum[prec] / double(n);
    }
    if (e.task("piqa").is_array()) {
        nlohmann::json piqa = e.task("piqa");
        for (auto& en : piqa) {
            nlohmann::json ids = nlohmann::json::array();
            for (const auto& id : en["request_ids"]) {
                nlohmann::json r = j0["requests"][id.get<size_t>()];
                EXPECT_EQ(r["id"], id) << e.name << ": requests are not listed by id";
                r["id"] = requests.size();
                ids.push_back(r["id"]);
                requests.push_back(r);
            }
            en["request_ids"] = ids;
        }
        j["tasks"]["piqa"] = piqa;
    }
    std::set<std::pair<std::string, std::string>> unique;
    for (const auto& r : requests)
        unique.insert({r["context"].get<std::string>(), r["continuation"].get<std::string>()});
    j["requests"] = requests;
    j["means"] = means;
    j["stats"] = {{"num_requests", requests.size()}, {"num_unique_requests", unique.size()}};
    j["items"]["truthfulqa_source"] = fs::path(other).filename().string();
    j["items"]["truthfulqa_indices"] = idx;
    j["set"] = j0.value("set", "") + ", copied with TruthfulQA items of another file";
    j["notes"] = {
        "TruthfulQA items, requests and values written by GoldenSet.RenamedCopyRunsEvery"
        "GoldenTest (tests/test_golden_set.cpp) from " +
        fs::path(other).filename().string() + "; PIQA items and requests are the reference's."};
    *out = j;
}

// What the copy holds, for the checks of its run.
struct Copy {
    std::vector<std::string> needles;  // a line of the child's verbose output per fixture
    bool every_kind = true;            // single-step, trajectory and eval fixtures all present
    struct Switched {
        std::string json, file;  // the copied eval fixture, the TruthfulQA file it now reads
        nlohmann::json side;
        nlohmann::json original_source;  // the original fixture's items.truthfulqa_source
    };
    std::vector<Switched> switched;
};

void copy_renamed(const std::string& dst, Copy* c) {
    fs::create_directories(dst + "/models");
    fs::create_directories(dst + "/trajectory/models");
    fs::create_directories(dst + "/eval/models");
    nlohmann::json man;
    const auto& s = golden::set();
    int i = 0;
    for (const auto& fx : s.steps) {
        const std::string n = "renamed_step_" + std::to_string(i++);
        nlohmann::json j = fx.side;
        j.erase("model_dirs");
        for (const char* dt : {"f32", "f64"}) {
            j["files"][dt] = n + "." + dt + ".safetensors";
            fs::copy_file(fx.path(dt), dst + "/" + j["files"][dt].get<std::string>());
            if (fs::is_directory(fx.model_dir(dt))) {
                fs::copy(fx.model_dir(dt), dst + "/models/" + n + "." + dt);
                man["model_dirs"].push_back("models/" + n + "." + dt);
            }
            c->needles.push_back(n + "." + dt + " forward");
        }
        write_json(dst + "/" + n + ".json", j);
        man["single_step"].push_back(n);
    }
    // One trajectory: the first.
    for (const auto& t : std::vector<golden::Trajectory>(
             s.trajectories.begin(),
             s.trajectories.begin() + std::min<size_t>(1, s.trajectories.size()))) {
        const std::string n = "renamed_traj_0";
        nlohmann::json j = t.side;
        for (const char* dt : {"f32", "f64"}) {
            j["files"][dt] = n + "." + dt + ".safetensors";
            j["model_dirs"][dt] = "models/" + n + "." + dt;
            fs::copy_file(t.path(dt), dst + "/trajectory/" + j["files"][dt].get<std::string>());
            fs::copy(t.model_dir(dt), dst + "/trajectory/models/" + n + "." + dt);
            man["model_dirs"].push_back("trajectory/models/" + n + "." + dt);
            c->needles.push_back(n + "." + dt + " trajectory");
        }
        write_json(dst + "/trajectory/" + n + ".json", j);
        man["trajectory"].push_back(n);
    }
    i = 0;
    for (const auto& e : s.evals) {
        const std::string n = "renamed_eval_" + std::to_string(i++);
        nlohmann::json j = e.side;
        std::string other;
        if (!e.truthfulqa_file.empty()) {
            other = other_truthfulqa(e.truthfulqa_file);
            ASSERT_FALSE(other.empty()) << "no other TruthfulQA file than " << e.truthfulqa_file;
            switch_truthfulqa(e, other, &j);
            if (testing::Test::HasFatalFailure()) return;
        }
        j["model"]["dir"] = "models/" + n;
        j["tokenizer"]["file"] = "models/" + n + "/tokenizer.model";
        fs::copy(e.model_dir(), dst + "/eval/models/" + n);
        fs::copy_file(e.tokenizer(), dst + "/eval/models/" + n + "/tokenizer.model",
                      fs::copy_options::overwrite_existing);
        write_json(dst + "/eval/" + n + ".json", j);
        man["eval"].push_back(n);
        man["model_dirs"].push_back("eval/models/" + n);
        for (const char* dt : {"f32", "f64"}) c->needles.push_back(n + "." + dt + " eval");
        if (!other.empty())
            c->switched.push_back(
                {dst + "/eval/" + n + ".json", other, j, e.side["items"]["truthfulqa_source"]});
    }
    std::sort(man["model_dirs"].begin(), man["model_dirs"].end());
    write_json(dst + "/manifest.json", man);
    c->every_kind = !s.steps.empty() && !s.trajectories.empty() && !s.evals.empty();
}

struct Child {
    bool passed = false;
    std::string log;
    nlohmann::json results;  // gtest's json report
    double seconds = 0;
};

// Runs the golden tests `filter` of this binary on the set in `dst`, in a child process (never
// sharded: the child runs every test even when this run is a shard).
Child run_child(const std::string& dst, const std::string& filter, const std::string& tag) {
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    Child c;
    if (n <= 0) return c;
    self[n] = 0;
    // The log and the report go beside the set, not into it (a json there would be a fixture).
    const std::string log = dst + "." + tag + ".log", report = dst + "." + tag + ".json";
    const std::string cmd =
        "env -u GTEST_TOTAL_SHARDS -u GTEST_SHARD_INDEX PLDR_GOLDEN_CHILD=1 PLDR_GOLDEN_VERBOSE=1 "
        "PLDR_GOLDEN_DIR=" +
        dst + " " + std::string(self) + " --gtest_filter='" + filter +
        "' --gtest_brief=1 --gtest_output=json:" + report + " >" + log + " 2>&1";
    const auto t0 = std::chrono::steady_clock::now();
    const int st = std::system(cmd.c_str());
    c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    c.passed = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    c.log = cli_test::slurp(log);
    c.results = nlohmann::json::parse(cli_test::slurp(report), nullptr, false);
    return c;
}

// The tests that read the golden set (golden::set()), but for the float32 mutation check
// (GoldenMutation), the command line on every model directory (GoldenCli), both left out for
// time, and this test.
constexpr const char* kSetTests =
    "GoldenEval.*:GoldenForward.*:GoldenGenerate.*:GoldenGrad.*:GoldenScore.*:GoldenSet.*:"
    "GoldenRope.*:GoldenTrajectory.*:AdamWGolden.*:DagGolden.*:LrSchedule.GoldenFixtureLrs:"
    "LrSchedule.MatchesTrajectoryLrBitForBit:NumericsExact.*:ConfigJson.ParsesEveryGoldenConfig:"
    "ModelDirGolden.*:-GoldenSet.RenamedCopy*";

// Every golden test (kSetTests), run on the copy, runs and passes, and checks the copied
// fixtures; then the misnamed copies fail.
TEST(GoldenSet, RenamedCopyRunsEveryGoldenTest) {
    GOLDEN_USE(golden::all_fixtures(), "golden");
    if (std::getenv("PLDR_GOLDEN_CHILD")) GTEST_SKIP() << "inside the renamed run itself";
    const std::string tmp = cli_test::tmp_dir("golden_renamed"), dst = tmp + "/set";
    Copy copy;
    copy_renamed(dst, &copy);
    ASSERT_FALSE(HasFatalFailure());
    const Child run = run_child(dst, kSetTests, "run");
    EXPECT_TRUE(run.passed) << run.log.substr(0, 4000);
    ASSERT_TRUE(run.results.is_object()) << "no test report: " << run.log.substr(0, 2000);
    int ran = 0;
    std::string skipped;
    for (const auto& suite : run.results["testsuites"])
        for (const auto& t : suite["testsuite"]) {
            const std::string name =
                suite["name"].get<std::string>() + "." + t["name"].get<std::string>();
            if (t["result"] == "SKIPPED") skipped += " " + name;
            if (t["result"] == "COMPLETED") ++ran;
            EXPECT_FALSE(t.contains("failures")) << name << " failed on the copy";
        }
    // A copy with every kind of fixture skips nothing.
    if (copy.every_kind) {
        EXPECT_TRUE(skipped.empty()) << "skipped on the copy:" << skipped;
    }
    EXPECT_GT(ran, 0);
    for (const auto& needle : copy.needles)
        EXPECT_NE(run.log.find(needle), std::string::npos) << "no check of " << needle;
    std::printf("[golden renamed] %d tests ran on the copy, skipped:%s (%.1f s)\n", ran,
                skipped.empty() ? " none" : skipped.c_str(), run.seconds);
    for (const auto& sw : copy.switched) {
        const std::string name = fs::path(sw.json).stem().string();
        // The copy's TruthfulQA items were read from the file it names.
        EXPECT_NE(run.log.find("[golden eval] " + name + ": "), std::string::npos);
        EXPECT_NE(run.log.find("truthfulqa items from " + sw.file), std::string::npos)
            << name << " did not read " << sw.file;
        // Misnamed: the original file, or positions for indices. Each must fail the item check.
        nlohmann::json wrong_file = sw.side, positions = sw.side;
        wrong_file["items"]["truthfulqa_source"] = sw.original_source;
        std::vector<size_t> pos(sw.side["items"]["truthfulqa_indices"].size());
        for (size_t k = 0; k < pos.size(); ++k) pos[k] = k;
        positions["items"]["truthfulqa_indices"] = pos;
        for (const auto& [what, j] : {std::pair{"the original file", wrong_file},
                                      std::pair{"positions for indices", positions}}) {
            write_json(sw.json, j);
            const Child bad =
                run_child(dst, "GoldenEval.TaskMetricsFromTheOriginalDataFiles", "misnamed");
            EXPECT_FALSE(bad.passed) << name << " with " << what << " passed";
            EXPECT_NE(bad.log.find("is not the data file's item"), std::string::npos)
                << name << " with " << what << ": " << bad.log.substr(0, 2000);
        }
        write_json(sw.json, sw.side);
    }
    fs::remove_all(tmp);
}

// ---- float32 mutation check ------------------------------------------------------------------
//
// A change to one parameter tensor of the float32 model (every element scaled by 1 + ε; a
// tensor of zeros gets ε·r, r in ±1 varying by element) must make the float32 golden checks
// (forward, loss and gradients) fail for ε = 1e-3, and so must zeroing it (for the coupling bias
// ba: dropping the term). Exception, by measurement: a change whose exact (float64) effect on every
// checked quantity stays below that quantity's float32 allowance cannot be seen by any float32
// check. Such changes (a few biases that a LayerNorm nearly cancels, e.g. the last metric-learner
// GLU's output bias) are counted and printed, and must stay a small minority. Verbose mode prints,
// per fixture, the smallest ε (on a 1e-3·10^(-k/2) grid) detected for every detectable tensor.
bool detected(const golden::F32Check& c, const pldr::Model<float>& m) {
    return c.forward(m).failures() + c.grads(m).failures() > 0;
}

template <typename T>
pldr::Model<T> mutate(const pldr::Model<T>& m, const pldr::ParamEntry& e, double eps, bool zero) {
    pldr::Model<T> x = m;
    T* p = x.params.data() + e.offset;
    bool all_zero = true;
    for (int64_t i = 0; i < e.numel; ++i) all_zero = all_zero && p[i] == 0;
    for (int64_t i = 0; i < e.numel; ++i)
        p[i] = zero       ? T(0)
               : all_zero ? T(eps * (double((i * 2654435761u) % 1001) / 500.0 -
                                     1))  // not constant:
                                          // a LayerNorm cancels that
                          : T(double(p[i]) * (1 + eps));
    return x;
}

// The exact effect of a change, in units of the float32 allowance: max over the checked
// quantities of (relative move of the float64 result) / allowance.
double exact_effect(const golden::F32Check& c, const pldr::Model<double>& mutated) {
    const auto base_f = golden::forward_quantities(c.m64, c.f64);
    const auto base_g = golden::grad_quantities(c.fx, c.m64, c.f64);
    const auto mf = golden::forward_quantities(mutated, c.f64);
    const auto mg = golden::grad_quantities(c.fx, mutated, c.f64);
    double worst = 0;
    auto scan = [&](const golden::Quantities& a, const golden::Quantities& b,
                    const std::map<std::string, double>& sigma, bool grads) {
        for (size_t i = 0; i < a.size(); ++i) {
            const bool g = a[i].name.rfind("grad.", 0) == 0;
            const double floor = g ? golden::kFloorGrad : golden::kFloorForward;
            const double allowed = std::max(floor, golden::kSigmaFactor * sigma.at(a[i].name));
            (void)grads;
            worst = std::max(
                worst,
                golden::rel_err(b[i].v.data(), a[i].v.data(), int64_t(a[i].v.size())) / allowed);
        }
    };
    scan(base_f, mf, c.sigma_fwd, false);
    scan(base_g, mg, c.sigma_grad, true);
    return worst;
}

TEST(GoldenMutation, Float32ChecksCatchOneTensorChanges) {
    GOLDEN_USE(golden::set().steps, "single-step");
    for (const auto& fx : golden::set().steps) {
        const golden::F32Check c(fx);
        const auto m = c.model();
        ASSERT_FALSE(detected(c, m)) << fx.name << ": the unmutated model must pass";
        double worst_smallest = 0;
        std::string worst_name, invisible;
        int n_invisible = 0, bias_checked = 0;
        for (const auto& e : m.layout.entries) {
            // ×(1 + 1e-3): detected, unless its exact effect is below float32 resolution (the
            // margin 2 keeps the borderline cases out of either claim).
            const double effect = exact_effect(c, mutate(c.m64, e, 1e-3, false));
            const bool seen = detected(c, mutate(m, e, 1e-3, false));
            if (effect >= 2) {
                EXPECT_TRUE(seen) << fx.name << " " << e.name << " ×(1+1e-3), exact effect "
                                  << effect << "× the allowance";
            } else if (!seen) {
                ++n_invisible;
                invisible += " " + e.name + " (" + std::to_string(effect) + ")";
            }
            bool all_zero = true;
            for (int64_t i = 0; i < e.numel; ++i)
                all_zero = all_zero && m.params[size_t(e.offset + i)] == 0;
            if (!all_zero) {
                EXPECT_TRUE(detected(c, mutate(m, e, 0, true)))
                    << fx.name << " " << e.name << " zeroed";
            }
            if (e.name.find("balst") != std::string::npos) ++bias_checked;
            if (!golden::verbose() || !seen) continue;
            double smallest = 1e-3;
            for (double eps = 1e-3 / std::sqrt(10.0); eps > 1e-8; eps /= std::sqrt(10.0)) {
                if (!detected(c, mutate(m, e, eps, false))) break;
                smallest = eps;
            }
            if (smallest > worst_smallest) worst_smallest = smallest, worst_name = e.name;
        }
        if (fx.learned_g()) {
            EXPECT_EQ(bias_checked, m.cfg.num_layers) << fx.name;  // ba dropped in every layer
        }
        const int n = int(m.layout.entries.size());
        EXPECT_LE(n_invisible * 10, n)
            << fx.name << ": too many changes below float32 resolution:" << invisible;
        std::printf(
            "[golden mutation] %s: %d of %d one-tensor changes by 1e-3 detected; below "
            "float32 resolution:%s\n",
            fx.name.c_str(), n - n_invisible, n, invisible.empty() ? " none" : invisible.c_str());
        if (golden::verbose())
            std::printf(
                "[golden mutation] %s: every detected tensor is detected from a relative "
                "change of %.3g (hardest: %s)\n",
                fx.name.c_str(), worst_smallest, worst_name.c_str());
    }
}

// ---- the command line on every model directory ----------------------------------------------

std::string join(const int64_t* p, int64_t n) {
    std::string s;
    for (int64_t i = 0; i < n; ++i) {
        if (i) s.push_back(',');
        s.append(std::to_string(p[i]));
    }
    return s;
}
// " --tokens row0 --tokens row1 …" for the rows of an id tensor [rows, cols] of the file.
std::string rows_as_tokens(const pldr::SafetensorsFile& f, const std::string& name,
                           int64_t first = 0) {
    const auto v = f.read_i64(name);
    const auto& sh = f.at(name).shape;
    const int64_t cols = sh.back(), rows = sh[sh.size() - 2];
    std::string s;
    for (int64_t r = 0; r < rows; ++r)
        s += " --tokens " + join(v.data() + (first * rows + r) * cols, cols);
    return s;
}

struct Worst {
    double fwd = 0, grad = 0, score = 0;
};

void expect_file_matches(const std::string& out, const pldr::SafetensorsFile& ref,
                         const std::string& prefix, double tol, double* worst,
                         const std::string& what) {
    pldr::SafetensorsFile f(out);
    int n = 0;
    for (const auto& t : f.tensors()) {
        if (t.name.rfind(prefix, 0) != 0 || !ref.has(t.name) || t.name == "fwd.input_ids" ||
            t.name == "fwd.targets" || t.name == "loss.accuracy" ||
            t.name.rfind("loss.dag", 0) == 0)
            continue;
        if (prefix == "loss." && t.name != "loss.value" && t.name != "loss.ce") continue;
        const auto a = f.read<double>(t.name), b = ref.read<double>(t.name);
        ASSERT_EQ(a.numel(), b.numel()) << what << " " << t.name;
        const double e = golden::rel_err(a.ptr(), b.ptr(), a.numel());
        EXPECT_LE(e, tol) << what << " " << t.name;
        *worst = std::max(*worst, e);
        ++n;
    }
    EXPECT_GT(n, 0) << what << ": no " << prefix << " tensor compared";
}

std::vector<double> cli_logprobs(const std::string& dir, const std::string& req_file,
                                 const std::string& mode, const std::string& what) {
    auto r = cli_test::run("score " + dir + " --requests " + req_file + " --mode " + mode +
                           " --dtype f64 --numerics reference");
    EXPECT_EQ(r.code, 0) << what << " " << r.err;
    std::vector<double> lp;
    std::istringstream in(r.out);
    std::string line;
    while (std::getline(in, line)) {
        auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.contains("token_logprobs")) continue;
        for (double v : j["token_logprobs"]) lp.push_back(v);
    }
    return lp;
}

TEST(GoldenCli, EveryModelDirectoryReproducesTheFixturesInFloat64) {
    GOLDEN_USE(golden::set().model_dirs, "model directory");
    const std::string tmp = cli_test::tmp_dir("golden_cli");
    const std::string num = " --dtype f64 --numerics reference";
    int dirs = 0;
    for (const auto& fx : golden::set().steps) {
        pldr::SafetensorsFile ref(fx.path("f64"));
        Worst w;
        for (const char* dt : {"f32", "f64"}) {
            const std::string dir = fx.model_dir(dt);
            if (!fs::is_directory(dir)) continue;
            const std::string what = fx.name + " " + dt + " dir";
            ++dirs;
            // dump: every forward tensor.
            auto r = cli_test::run("dump " + dir + rows_as_tokens(ref, "fwd.input_ids") + num +
                                   " --out " + tmp + "/d.safetensors");
            ASSERT_EQ(r.code, 0) << what << " " << r.err;
            expect_file_matches(tmp + "/d.safetensors", ref, "fwd.", 1e-12, &w.fwd, what);
            // grad: the loss and every gradient (a DAG set's coefficients are its training
            // hyperparameters, not numerics: they are passed).
            std::string dag;
            if (fx.dag()) {
                const auto c = golden::dag_of(fx);
                dag = " --dag " + std::to_string(c.A) + "," + std::to_string(c.Ap) + "," +
                      std::to_string(c.G);
            }
            r = cli_test::run("grad " + dir + rows_as_tokens(ref, "batch.tokens") + num + dag +
                              " --out " + tmp + "/g.safetensors");
            ASSERT_EQ(r.code, 0) << what << " " << r.err;
            expect_file_matches(tmp + "/g.safetensors", ref, "grad.", 1e-9, &w.grad, what);
            double lw = 0;  // loss.value carries the float32 DAG terms of the reference
            expect_file_matches(tmp + "/g.safetensors", ref, "loss.", fx.dag() ? 1e-7 : 1e-12, &lw,
                                what);
            w.fwd = std::max(w.fwd, fx.dag() ? 0 : lw);
            // score: block and cached against score.block / score.sequential.
            const auto ctx = ref.read_i64("score.context"),
                       cont = ref.read_i64("score.continuation");
            const std::string req = tmp + "/req.jsonl";
            std::ofstream(req) << "{\"context_ids\": [" << join(ctx.data(), int64_t(ctx.size()))
                               << "], \"continuation_ids\": ["
                               << join(cont.data(), int64_t(cont.size())) << "]}\n";
            for (auto [mode, name] : {std::pair{"block", "score.block.logprobs"},
                                      std::pair{"cached", "score.sequential.logprobs"}}) {
                const auto lp = cli_logprobs(dir, req, mode, what);
                const auto want = ref.read<double>(name);
                ASSERT_EQ(int64_t(lp.size()), want.numel()) << what << " " << mode;
                const double e = golden::rel_err(lp.data(), want.ptr(), want.numel());
                EXPECT_LE(e, 1e-12) << what << " score --mode " << mode;
                w.score = std::max(w.score, e);
            }
        }
        std::printf("[golden cli] %s: forward %.3g, gradients %.3g, logprobs %.3g\n",
                    fx.name.c_str(), w.fwd, w.grad, w.score);
    }
    // Trajectory model directories: the loss of the first step (batch 0, before any update).
    for (const auto& t : golden::set().trajectories) {
        pldr::SafetensorsFile f(t.path("f64"));
        const double want = f.read<double>("traj.loss")[0];
        double worst = 0;
        for (const char* dt : {"f32", "f64"}) {
            ++dirs;
            auto r = cli_test::run("grad " + t.model_dir(dt) + rows_as_tokens(f, "batches", 0) +
                                   num + " --out " + tmp + "/t.safetensors");
            ASSERT_EQ(r.code, 0) << t.name << " " << r.err;
            const double v =
                pldr::SafetensorsFile(tmp + "/t.safetensors").read<double>("loss.value")[0];
            const double e = std::abs(v - want) / std::abs(want);
            EXPECT_LE(e, 1e-12) << t.name << "." << dt << " loss of step 1";
            worst = std::max(worst, e);
        }
        std::printf("[golden cli] %s: loss of step 1 %.3g\n", t.name.c_str(), worst);
    }
    // Eval model directories: block scoring of the first unique requests, against the float64
    // reference under the eval bound (test_golden_eval.cpp: 1e-11, or a flip of the reference's
    // float32 rounding of q/k); the full set of requests runs in GoldenEval. The fixture holds the
    // harness's block logprobs only: --mode sequential and cached reuse the G_LM of the first
    // step (the reference's past_G_values; the single-step fixtures check them), 1.8e-5 and
    // 3.8e-5 away from block on this model.
    for (const auto& ev : golden::set().evals) {
        ++dirs;
        const std::string req = tmp + "/eval.jsonl";
        std::ofstream out(req);
        std::vector<double> want;
        std::set<std::string> seen;
        for (const auto& r : ev.side["requests"]) {
            std::string key = r["context"].get<std::string>();
            key.push_back('\x1f');
            key.append(r["continuation"].get<std::string>());
            if (!seen.insert(key).second) continue;
            if (seen.size() > 8) break;
            out << nlohmann::json{{"context_ids", r["context_ids"]},
                                  {"continuation_ids", r["continuation_ids"]}}
                       .dump()
                << "\n";
            for (double v : r["f64"]["logprobs"]) want.push_back(v);
        }
        out.close();
        const auto lp = cli_logprobs(ev.model_dir(), req, "block", ev.name);
        ASSERT_EQ(lp.size(), want.size()) << ev.name;
        const double e = golden::rel_err(lp.data(), want.data(), int64_t(want.size()));
        EXPECT_LE(e, 1e-9) << ev.name;
        std::printf("[golden cli] %s: logprobs %.3g\n", ev.name.c_str(), e);
    }
    if (golden::is_default_dir()) {
        EXPECT_EQ(dirs, int(golden::set().model_dirs.size()));
    }
    fs::remove_all(tmp);
}

}  // namespace
