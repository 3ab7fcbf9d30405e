// Shared helpers of the golden-fixture tests.
//  - Discovery: every fixture set under PLDR_GOLDEN_DIR (default: the project's tests/golden),
//    by format alone: single-step sets (<name>.json with "files" and "config"), trajectories
//    (trajectory/<name>.json) and eval sets (eval/<name>.json). No fixture name, count, shape or
//    data file appears in test code: each test reads them from the fixture's json and files
//    (the eval items' data files from items.<task>_source, see EvalFixture). A missing folder,
//    an unparsable or unrecognised json, or a missing file (a named data file included) is an
//    error that fails every golden test; the default set must match its manifest.json. A kind
//    of fixture that a set lacks (and its manifest does not list) skips its tests, saying so.
//  - Comparison: float64 against the fixture's float64 tensors under a fixed tolerance; float32
//    against the same exact tensors under an allowance derived from the fixture's measured
//    conditioning (f32_sensitivity), so that it holds on every BLAS kernel.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "io/model_load.h"
#include "io/safetensors.h"
#include "model/model.h"

namespace golden {

namespace fs = std::filesystem;

inline std::string default_dir() {
    return std::string(PLDR_SOURCE_DIR) + "/tests/golden";
}
inline std::string dir() {
    const char* e = std::getenv("PLDR_GOLDEN_DIR");
    return (e && *e) ? std::string(e) : default_dir();
}
// True when the set under test is the project's own (which must be complete), false for an
// opt-in external set given by PLDR_GOLDEN_DIR.
inline bool is_default_dir() {
    std::error_code ec;
    return fs::equivalent(dir(), default_dir(), ec);
}
inline bool verbose() {
    return std::getenv("PLDR_GOLDEN_VERBOSE") != nullptr;
}

// A single-step set: <name>.json + <files[dtype]> + (optional) models/<name>.<dtype>/.
struct Fixture {
    std::string name;
    nlohmann::json side;
    std::string path(const std::string& dtype) const {
        return dir() + "/" + side["files"][dtype].get<std::string>();
    }
    // The fixture's model_dirs.<dtype> where it names one, else models/<name>.<dtype> (optional).
    std::string model_dir(const std::string& dtype) const {
        if (side.contains("model_dirs") && side["model_dirs"].contains(dtype))
            return dir() + "/" + side["model_dirs"][dtype].get<std::string>();
        return dir() + "/models/" + name + "." + dtype;
    }
    bool learned_g() const { return side["config"]["kind"] != "G"; }
    bool dag() const { return side["config"]["kind"] == "dag"; }
};

// A training trajectory: trajectory/<name>.json naming its files and model directories.
struct Trajectory {
    std::string name;
    nlohmann::json side;
    std::string path(const std::string& dtype) const {
        return dir() + "/trajectory/" + side["files"][dtype].get<std::string>();
    }
    std::string model_dir(const std::string& dtype) const {
        return dir() + "/trajectory/" + side["model_dirs"][dtype].get<std::string>();
    }
};

// The data files named by an eval fixture's items.<task>_source: the words of the text that end
// in `ext` (".json", ".jsonl", ".lst"), e.g. "mc_task.heldout.json" or
// "piqa valid.jsonl + valid-labels.lst".
inline std::vector<std::string> source_names(const std::string& source, const std::string& ext) {
    std::vector<std::string> out;
    std::string w;
    for (size_t i = 0; i <= source.size(); ++i) {
        const char c = i < source.size() ? source[i] : ' ';
        if (c == ' ' || c == '\t' || c == '+' || c == ',') {
            if (w.size() > ext.size() && w.compare(w.size() - ext.size(), ext.size(), ext) == 0)
                out.push_back(w);
            w.clear();
        } else {
            w.push_back(c);
        }
    }
    return out;
}

// Where a data file that a fixture names lives: beside the fixture (eval/<name>, a set may
// carry its own data), else the project's copy of the original files, data/eval/<subdir>/ by
// file name (data/README.md: the TruthfulQA dev and held-out halves, PIQA validation). Every
// name is resolved by this one rule, whichever file it names. Empty when neither exists.
inline std::string resolve_data_file(const std::string& name, const std::string& subdir) {
    const std::string beside = dir() + "/eval/" + name;
    if (fs::is_regular_file(beside)) return beside;
    const std::string project = std::string(PLDR_SOURCE_DIR) + "/data/eval/" + subdir + "/" +
                                fs::path(name).filename().string();
    if (fs::is_regular_file(project)) return project;
    return "";
}

// A benchmark-scoring set: eval/<name>.json with its model directory and tokenizer. Its items
// come from the data files that items.truthfulqa_source and items.piqa_source name, at the
// indices items.truthfulqa_indices and items.piqa_indices (either may be absent or empty: that
// task is not in the fixture).
struct EvalFixture {
    std::string name;
    nlohmann::json side;
    std::string truthfulqa_file;          // resolved; empty when the fixture has no such items
    std::string piqa_jsonl, piqa_labels;  // resolved; empty when the fixture has no such items
    std::string model_dir() const {
        return dir() + "/eval/" + side["model"]["dir"].get<std::string>();
    }
    std::string tokenizer() const {
        return dir() + "/eval/" + side["tokenizer"]["file"].get<std::string>();
    }
    // items.<key> (a list of indices into the data file); empty when absent.
    std::vector<size_t> indices(const char* key) const {
        if (!side.contains("items") || !side["items"].contains(key)) return {};
        return side["items"][key].get<std::vector<size_t>>();
    }
    // tasks.<task> (one entry per item); null when absent.
    const nlohmann::json& task(const char* t) const {
        static const nlohmann::json none;
        return side.contains("tasks") && side["tasks"].contains(t) ? side["tasks"][t] : none;
    }
};

struct Set {
    std::vector<Fixture> steps;
    std::vector<Trajectory> trajectories;
    std::vector<EvalFixture> evals;
    std::vector<std::string> model_dirs;  // every model directory the set names, relative
    std::vector<std::string> errors;      // discovery errors: each fails every golden test
    nlohmann::json manifest;              // manifest.json (null when absent)
};

namespace detail {

inline std::vector<fs::path> jsons_in(const std::string& d) {
    std::vector<fs::path> out;
    if (!fs::is_directory(d)) return out;
    for (const auto& e : fs::directory_iterator(d))
        if (e.is_regular_file() && e.path().extension() == ".json") out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
}

inline bool parse(const fs::path& p, nlohmann::json* j, std::vector<std::string>* errors) {
    std::ifstream f(p);
    *j = nlohmann::json::parse(f, nullptr, false);
    if (j->is_discarded() || !j->is_object()) {
        errors->push_back(p.string() + ": not a valid JSON object");
        return false;
    }
    return true;
}

inline void need_file(const std::string& p, const std::string& who,
                      std::vector<std::string>* errors) {
    if (!fs::is_regular_file(p)) errors->push_back(who + ": names " + p + ", which is missing");
}

inline void need_model_dir(const std::string& p, const std::string& who, Set* s) {
    if (!fs::is_regular_file(p + "/config.json"))
        s->errors.push_back(who + ": model directory " + p + " is missing or has no config.json");
    s->model_dirs.push_back(fs::relative(p, dir()).lexically_normal().string());
}

inline bool has_dtypes(const nlohmann::json& j, const char* key) {
    return j.contains(key) && j[key].is_object() && j[key].contains("f32") &&
           j[key].contains("f64") && j[key]["f32"].is_string() && j[key]["f64"].is_string();
}

// Resolves the data files of an eval fixture's items (resolve_data_file); a source that names
// no file, or one that exists in neither place, is an error.
inline void resolve_sources(const std::string& who, EvalFixture* e,
                            std::vector<std::string>* errors) {
    const nlohmann::json items = e->side.contains("items") ? e->side["items"] : nlohmann::json();
    auto source = [&](const char* key) {
        return items.contains(key) && items[key].is_string() ? items[key].get<std::string>()
                                                             : std::string();
    };
    auto one = [&](const std::string& src, const char* ext, const char* subdir) -> std::string {
        const auto names = source_names(src, ext);
        if (names.size() != 1) {
            errors->push_back(who + ": cannot tell its " + ext + " data file from the source \"" +
                              src + "\"");
            return "";
        }
        const std::string p = resolve_data_file(names[0], subdir);
        if (p.empty())
            errors->push_back(who + ": names the data file " + names[0] + ", which is neither in " +
                              dir() + "/eval nor in the project's data/eval/" + subdir);
        return p;
    };
    for (const char* key : {"truthfulqa_indices", "piqa_indices"}) {
        if (!items.contains(key)) continue;
        bool ok = items[key].is_array();
        if (ok)
            for (const auto& v : items[key]) ok = ok && v.is_number_unsigned();
        if (!ok) {
            errors->push_back(who + ": items." + key + " is not a list of item indices");
            e->side["items"].erase(key);
        }
    }
    if (!e->indices("truthfulqa_indices").empty())
        e->truthfulqa_file = one(source("truthfulqa_source"), ".json", "truthfulqa");
    if (!e->indices("piqa_indices").empty()) {
        e->piqa_jsonl = one(source("piqa_source"), ".jsonl", "piqa");
        e->piqa_labels = one(source("piqa_source"), ".lst", "piqa");
    }
}

inline Set discover() {
    Set s;
    const std::string d = dir();
    if (!fs::is_directory(d)) {
        s.errors.push_back("PLDR_GOLDEN_DIR=" + d + " is not a directory");
        return s;
    }
    for (const auto& p : jsons_in(d)) {
        nlohmann::json j;
        if (!parse(p, &j, &s.errors)) continue;
        if (p.filename() == "manifest.json") {
            s.manifest = j;
            continue;
        }
        if (!has_dtypes(j, "files") || !j.contains("config")) {
            s.errors.push_back(p.string() +
                               ": not a single-step fixture (no files.f32/f64 or config)");
            continue;
        }
        Fixture fx{p.stem().string(), j};
        for (const char* dt : {"f32", "f64"}) need_file(fx.path(dt), p.string(), &s.errors);
        for (const char* dt : {"f32", "f64"})
            if (fs::exists(fx.model_dir(dt))) need_model_dir(fx.model_dir(dt), p.string(), &s);
        s.steps.push_back(fx);
    }
    for (const auto& p : jsons_in(d + "/trajectory")) {
        nlohmann::json j;
        if (!parse(p, &j, &s.errors)) continue;
        if (!has_dtypes(j, "files") || !has_dtypes(j, "model_dirs") || !j.contains("hyperparams")) {
            s.errors.push_back(p.string() + ": not a trajectory fixture");
            continue;
        }
        Trajectory t{p.stem().string(), j};
        for (const char* dt : {"f32", "f64"}) {
            need_file(t.path(dt), p.string(), &s.errors);
            need_model_dir(t.model_dir(dt), p.string(), &s);
        }
        s.trajectories.push_back(t);
    }
    for (const auto& p : jsons_in(d + "/eval")) {
        nlohmann::json j;
        if (!parse(p, &j, &s.errors)) continue;
        if (j.value("format", "") != "pldr-eval-golden-1" || !j.contains("requests") ||
            !j.contains("model") || !j["model"].contains("dir") || !j.contains("tokenizer")) {
            s.errors.push_back(p.string() + ": not an eval fixture (format pldr-eval-golden-1)");
            continue;
        }
        EvalFixture e{p.stem().string(), j, "", "", ""};
        need_model_dir(e.model_dir(), p.string(), &s);
        need_file(e.tokenizer(), p.string(), &s.errors);
        resolve_sources(p.string(), &e, &s.errors);
        s.evals.push_back(e);
    }
    std::sort(s.model_dirs.begin(), s.model_dirs.end());
    if (is_default_dir() && s.manifest.is_null())
        s.errors.push_back(d + "/manifest.json is missing (the default set must list itself)");
    return s;
}

}  // namespace detail

// The set under PLDR_GOLDEN_DIR, discovered once per process.
inline const Set& set() {
    static const Set s = detail::discover();
    return s;
}

enum class Use { RUN, FAIL, SKIP };

// The manifest's lists for a kind of fixture: "single-step", "trajectory", "eval", "model
// directory", "single-step or trajectory", or "golden" (any of the first three).
inline std::vector<const char*> manifest_keys(const std::string& kind) {
    if (kind == "single-step") return {"single_step"};
    if (kind == "trajectory") return {"trajectory"};
    if (kind == "eval") return {"eval"};
    if (kind == "model directory") return {"model_dirs"};
    if (kind == "single-step or trajectory") return {"single_step", "trajectory"};
    return {"single_step", "trajectory", "eval"};
}

// Whether a test over `n` fixtures of `kind` can run: discovery errors fail it. A set without
// fixtures of that kind skips it, saying so, unless its manifest lists some (then they are
// missing: a failure). The default set must have a manifest (discovery), so a fixture removed
// from it fails; a set that has the kind always runs the test.
inline Use usable(size_t n, const char* kind) {
    const Set& s = set();
    if (!s.errors.empty()) {
        for (const auto& e : s.errors) ADD_FAILURE() << "golden fixtures: " << e;
        return Use::FAIL;
    }
    if (n > 0) return Use::RUN;
    for (const char* key : manifest_keys(kind))
        if (s.manifest.is_object() && s.manifest.contains(key) && s.manifest[key].is_array() &&
            !s.manifest[key].empty()) {
            ADD_FAILURE() << "golden fixtures: " << dir() << "/manifest.json lists "
                          << s.manifest[key].size() << " under " << key << ", none found";
            return Use::FAIL;
        }
    std::printf("[golden] %s has no %s fixtures: this test is skipped\n", dir().c_str(), kind);
    return Use::SKIP;
}

// Begins a golden test over one kind of fixture: `GOLDEN_USE(golden::set().steps, "single-step")`.
#define GOLDEN_USE(list, kind)                                                       \
    do {                                                                             \
        const golden::Use use_ = golden::usable((list).size(), kind);                \
        if (use_ == golden::Use::SKIP)                                               \
            GTEST_SKIP() << "the golden set " << golden::dir() << " has no " << kind \
                         << " fixtures";                                             \
        if (use_ == golden::Use::FAIL) return;                                       \
    } while (0)

// Every fixture of the set, of any kind (for tests over all of them).
inline std::vector<std::string> all_fixtures() {
    std::vector<std::string> out;
    for (const auto& f : set().steps) out.push_back(f.name);
    for (const auto& f : set().trajectories) out.push_back(f.name);
    for (const auto& f : set().evals) out.push_back(f.name);
    return out;
}

// The model config a single-step fixture describes: its config block, and d_model and dff from
// its results where it records them (else the reference's d = H·dk, dff = floor(d·8/3)).
inline pldr::Config config_of(const nlohmann::json& c, const nlohmann::json& results = {}) {
    pldr::Config cfg;
    cfg.num_layers = c["num_layers"];
    cfg.num_heads = c["num_heads"];
    cfg.head_dim = c["dk"];
    const nlohmann::json r = results.contains("f64") ? results["f64"] : nlohmann::json();
    cfg.hidden_size =
        r.contains("d_model") ? r["d_model"].get<int64_t>() : cfg.num_heads * cfg.head_dim;
    cfg.intermediate_size =
        r.contains("dff") ? r["dff"].get<int64_t>() : int64_t(double(cfg.hidden_size) * 4 * 2 / 3);
    cfg.A_dff = c["A_dff"];
    cfg.num_reslayerA = c["num_reslayerA"];
    cfg.num_denseA = c["num_denseA"];
    cfg.vocab_size = c["vocab"];
    cfg.max_position = c["max_seq_len"];
    // Fixed-G fixtures carry their G as fixed.G_LM.layer{i}; model_of() installs it.
    cfg.g_type = c["kind"] == "G" ? pldr::GType::IDENTITY : pldr::GType::LEARNED;
    return cfg;
}

// Builds the fixture's model in compute type T from its param.* (and fixed.G_LM.layer*)
// tensors. The RoPE table is the model's own (torch's, bit for bit: GoldenRope checks it).
template <typename T>
pldr::Model<T> model_of(const Fixture& fx, const pldr::SafetensorsFile& f) {
    pldr::Model<T> m(config_of(fx.side["config"], fx.side.value("results", nlohmann::json())));
    pldr::fill_params(m, f, "param.");
    if (!m.cfg.learned_g()) {
        const int64_t per = m.cfg.num_heads * m.cfg.head_dim * m.cfg.head_dim;
        for (int64_t l = 0; l < m.cfg.num_layers; ++l) {
            auto g = f.read<T>("fixed.G_LM.layer" + std::to_string(l));
            std::copy(g.data.begin(), g.data.end(), m.G_fixed.begin() + l * per);
        }
    }
    return m;
}

// max|a−b| / max|b| (0/0 = 0).
template <typename A, typename B>
double rel_err(const A* a, const B* b, int64_t n) {
    double md = 0, mr = 0;
    for (int64_t i = 0; i < n; ++i) {
        md = std::max(md, std::abs(double(a[i]) - double(b[i])));
        mr = std::max(mr, std::abs(double(b[i])));
    }
    return mr == 0 ? md : md / mr;
}

// ---- Named quantities and their comparison ------------------------------------------------

// One value a golden test checks: a tensor of the fixture (by name), or a scalar.
struct Quantity {
    std::string name;
    std::vector<double> v;
};
using Quantities = std::vector<Quantity>;

template <typename T>
void add(Quantities& q, const std::string& name, const T* p, int64_t n) {
    q.push_back({name, std::vector<double>(p, p + n)});
}

struct Row {
    std::string name;
    double err = 0, allowed = 0, sigma = 0;
};

// The outcome of comparing a set of quantities with their references.
struct Report {
    std::string what;  // e.g. "b_small_v510.f32 forward"
    std::vector<Row> rows;
    int failures() const {
        int n = 0;
        for (const auto& r : rows) n += !(r.err <= r.allowed);
        return n;
    }
    // Records every failing row as a test failure.
    void expect_pass() const {
        for (const auto& r : rows)
            EXPECT_LE(r.err, r.allowed) << what << " " << r.name << " (relative error; float32 "
                                        << "sensitivity " << r.sigma << ")";
        if (verbose())
            for (const auto& r : rows)
                std::printf("%s %-40s err %.3g allowed %.3g sigma %.3g ratio %.3g\n", what.c_str(),
                            r.name.c_str(), r.err, r.allowed, r.sigma,
                            r.sigma > 0 ? r.err / r.sigma : 0.0);
    }
    double worst() const {
        double w = 0;
        for (const auto& r : rows) w = std::max(w, r.err);
        return w;
    }
};

// Compares float64 quantities with `ref(name)` under one relative tolerance.
inline Report compare_f64(const std::string& what, const Quantities& ours,
                          const std::function<std::vector<double>(const std::string&)>& ref,
                          double tol) {
    Report r{what, {}};
    for (const auto& q : ours) {
        const auto want = ref(q.name);
        if (want.size() != q.v.size()) {
            r.rows.push_back({q.name + " (size " + std::to_string(q.v.size()) + " vs " +
                                  std::to_string(want.size()) + ")",
                              1, 0, 0});
            continue;
        }
        r.rows.push_back({q.name, rel_err(q.v.data(), want.data(), int64_t(q.v.size())), tol, 0});
    }
    return r;
}

// ---- float32 allowances from measured conditioning -----------------------------------------
//
// A float32 evaluation rounds every input and weight by up to 2^-24 relative, and every
// intermediate result again. f32_sensitivity measures, in float64, how far each checked
// quantity moves when every parameter (and fixed G) of the exact model is scaled by
// (1 + δ), δ uniform in ±2^-24, over kTrials independent draws: σ = the largest relative move
// (max|Δ| / max|ref|). It is a property of the fixture, not of the BLAS kernel that runs.
//
// The allowance is max(floor, kSigmaFactor·σ). kSigmaFactor covers the rounding of the
// intermediates that the perturbation of the inputs does not model. It comes from
// measurement: the ratio (our float32 error / σ) over every single-step and eval fixture,
// quantity and OpenBLAS core type that runs on an AVX2 machine (Haswell, Zen, Sandybridge,
// Nehalem, Prescott, Core2, Atom; the kernels differ by up to 7× in their error on b_small's
// A_P) peaked at kWorstMeasuredRatio (a_tiny, a metric-learner bias gradient); the factor is 4×
// that. The floors cover the well-conditioned quantities, whose σ is tiny: with the factor
// applied, the largest error left to the floor was 6.8e-7 for forward quantities, losses and
// logprobs (floor 1e-5) and 1.9e-5 for gradients (floor 1e-4), relative to the tensor's max.
constexpr int kTrials = 6;
constexpr double kWorstMeasuredRatio = 5;  // measured 4.6
constexpr double kSigmaFactor = 4 * kWorstMeasuredRatio;
constexpr double kFloorForward = 1e-5;
constexpr double kFloorGrad = 1e-4;

using Eval64 = std::function<Quantities(const pldr::Model<double>&)>;

// σ per quantity name (see above).
inline std::map<std::string, double> f32_sensitivity(const pldr::Model<double>& exact,
                                                     const Eval64& eval,
                                                     double eps = std::ldexp(1.0, -24),
                                                     int trials = kTrials) {
    const Quantities base = eval(exact);
    std::map<std::string, double> sigma;
    for (const auto& q : base) sigma[q.name] = 0;
    std::mt19937_64 rng(20261201);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (int t = 0; t < trials; ++t) {
        pldr::Model<double> m = exact;
        for (auto& p : m.params) p *= 1 + eps * u(rng);
        for (auto& g : m.G_fixed) g *= 1 + eps * u(rng);
        const Quantities moved = eval(m);
        for (size_t i = 0; i < base.size(); ++i) {
            const auto& a = moved[i].v;
            const auto& b = base[i].v;
            if (a.size() != b.size()) continue;
            sigma[base[i].name] =
                std::max(sigma[base[i].name], rel_err(a.data(), b.data(), int64_t(b.size())));
        }
    }
    return sigma;
}

// Compares float32 quantities with the exact references `ref(name)` under the allowance
// max(floor, factor·σ).
inline Report compare_f32(const std::string& what, const Quantities& ours,
                          const std::function<std::vector<double>(const std::string&)>& ref,
                          const std::map<std::string, double>& sigma, double floor,
                          double factor = kSigmaFactor) {
    Report r{what, {}};
    for (const auto& q : ours) {
        const auto want = ref(q.name);
        const auto s = sigma.find(q.name);
        const double sg = s == sigma.end() ? 0 : s->second;
        if (want.size() != q.v.size()) {
            r.rows.push_back({q.name + " (size mismatch)", 1, 0, sg});
            continue;
        }
        r.rows.push_back({q.name, rel_err(q.v.data(), want.data(), int64_t(q.v.size())),
                          std::max(floor, factor * sg), sg});
    }
    return r;
}

// The fixture tensor `name` as doubles, from an open file.
inline std::function<std::vector<double>(const std::string&)> tensors_of(
    const pldr::SafetensorsFile& f) {
    return [&f](const std::string& name) {
        if (!f.has(name)) return std::vector<double>{};
        const auto d = f.read<double>(name).data;
        return std::vector<double>(d.begin(), d.end());
    };
}

}  // namespace golden
