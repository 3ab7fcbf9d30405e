// pldr audit MODEL_DIR --out DIR: the paper's collapse measurements (spec §8.1) → DIR/audit.json
// (every number), DIR/report.html (self-contained, inline SVG) and a short summary on stdout.
// pldr audit --checkpoints CKPT... --out DIR: the same measurements on a series of checkpoints,
// as one report: DIR/audit.json (each checkpoint's), DIR/curves.jsonl (each one's curve point in
// the metrics files' "audit" lines, for pldr plot --audit-out) and DIR/curves.svg.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common.h"
#include "plot.h"

namespace pldr::cli {

namespace {

struct AuditArgs {
    std::string dir, out, prompts, text, tqa;
    std::vector<std::string> checkpoints;
    int64_t items = 5;
    bool force = false;
    api::AuditOptions opt;
    ModelOptions mo;
};

std::string trim(std::string s) {
    while (!s.empty() && (s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
    size_t i = 0;
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    return s.substr(i);
}

// The audit's options for the model in `dir` (its tokenizer reads text prompts).
api::AuditOptions audit_options(const AuditArgs& a, const std::string& dir, const api::Model& m,
                                std::string* tqa_used) {
    const std::string tok_path = dir + "/tokenizer.model";
    const bool tok = m.has_tokenizer();
    api::AuditOptions o = a.opt;
    if (!a.prompts.empty()) o.prompts = api::read_audit_prompts(a.prompts, tok, tok_path);
    if (!a.text.empty()) {
        const std::string body = api::read_file(a.text);
        std::string first = trim(body.substr(0, body.find('\n')));
        if (api::is_id_line(first) || !tok) {
            std::string flat;
            for (char c : body) flat += (c == '\n' || c == '\r') ? ',' : c;
            while (!flat.empty() && flat.back() == ',') flat.pop_back();
            std::string clean;
            for (size_t i = 0; i < flat.size(); ++i)
                if (!(flat[i] == ',' && i + 1 < flat.size() && flat[i + 1] == ','))
                    clean += flat[i];
            o.heldout_ids = parse_ids(clean, a.text);
        } else {
            o.heldout_text = body;
        }
        o.heldout_source = a.text;
    }
    std::string tqa = a.tqa;
    if (tqa.empty() && tok && api::file_exists("data/eval/truthfulqa/mc_task.dev.json"))
        tqa = "data/eval/truthfulqa/mc_task.dev.json";
    if (!tqa.empty() && a.items > 0) {
        require(tok, "--truthfulqa needs ", tok_path);
        o.truthfulqa = tqa;
        o.items = a.items;
    }
    *tqa_used = o.truthfulqa;
    return o;
}

int run_audit_cmd(const AuditArgs& a) {
    require(api::file_exists(a.dir + "/config.json"), "model directory ", a.dir, " not found");
    api::Inputs().dir(a.dir).file(a.prompts).file(a.text).file(a.tqa).check_dir(
        a.out, "--out", {"audit.json", "report.html"}, a.force);
    const api::Model m = a.mo.open(a.dir);
    std::string tqa;
    api::AuditOptions o = audit_options(a, a.dir, m, &tqa);
    o.out_dir = a.out;
    o.force = a.force;
    const api::AuditResult r = api::audit(m, o);
    std::fputs(r.summary.c_str(), stdout);
    if (!tqa.empty()) std::printf("  (TruthfulQA items from %s)\n", tqa.c_str());
    std::printf("wrote %s/audit.json and %s/report.html\n", a.out.c_str(), a.out.c_str());
    return 0;
}

// The G_LM order parameter (rms) across prompts of a curve point; NaN for a fixed-G model.
double order(const nlohmann::ordered_json& cp) {
    const auto& o = cp.at("order_prompts");
    return o.contains("G_LM") && o["G_LM"].contains("rms") && o["G_LM"]["rms"].is_number()
               ? o["G_LM"]["rms"].get<double>()
               : NAN;
}

// The series: each checkpoint audited as pldr audit would, in the order of tokens seen.
int run_audit_series(const AuditArgs& a) {
    using json = nlohmann::ordered_json;
    api::Inputs in;
    for (const std::string& d : a.checkpoints) {
        require(api::file_exists(d + "/config.json"), "--checkpoints: model directory ", d,
                " not found");
        in.dir(d);
    }
    in.file(a.prompts).file(a.text).file(a.tqa).check_dir(
        a.out, "--out", {"audit.json", "curves.jsonl", "curves.svg"}, a.force);
    struct Point {
        std::string dir;
        api::CheckpointProgress at;
    };
    std::vector<Point> pts;
    for (const std::string& d : a.checkpoints) pts.push_back({d, api::checkpoint_progress(d)});
    std::stable_sort(pts.begin(), pts.end(),
                     [](const Point& x, const Point& y) { return x.at.tokens < y.at.tokens; });
    json all = json::array();
    std::string lines;
    std::printf("%-40s %10s %12s %10s %10s %10s\n", "checkpoint", "step", "tokens", "eps_G",
                "G order", "block-seq");
    for (size_t i = 0; i < pts.size(); ++i) {
        const Point& p = pts[i];
        const api::Model m = a.mo.open(p.dir);
        std::string tqa;
        const api::AuditOptions o = audit_options(a, p.dir, m, &tqa);
        const api::AuditResult r = api::audit(m, o);
        json report = json::parse(r.json);
        const json cp = report.at("curve_point");
        // x of the curves: tokens seen; a plain model directory has none, its place in the list.
        const double x = p.at.tokens >= 0 ? p.at.tokens : double(i + 1);
        json line = {{"type", "audit"},
                     {"step", p.at.step},
                     {"tokens", x},
                     {"checkpoint", p.dir},
                     {"audit", cp}};
        lines += line.dump() + "\n";
        all.push_back({{"checkpoint", p.dir},
                       {"step", p.at.step},
                       {"tokens", p.at.tokens},
                       {"report", std::move(report)}});
        std::printf("%-40s %10lld %12.4g %10.3g %10.3g %10.3g\n", p.dir.c_str(),
                    (long long)p.at.step, p.at.tokens, cp.at("max_eps_G").get<double>(), order(cp),
                    cp.at("max_token_gap").get<double>());
    }
    std::filesystem::create_directories(a.out);
    api::write_file_atomic(a.out + "/audit.json", json{{"checkpoints", all}}.dump(1) + "\n");
    api::write_file_atomic(a.out + "/curves.jsonl", lines);
    PlotSpec spec = audit_axes("collapse measurements over checkpoints");
    std::vector<AuditCurve> cs;
    for (const api::LossCurve& c : api::read_audit_curves(a.out + "/curves.jsonl"))
        cs.push_back({c.label, c.x, c.y});
    add_audit_curves(spec, cs, "", false);
    write_plot(spec, a.out + "/curves.svg");
    std::printf("wrote %s/audit.json, %s/curves.jsonl and %s/curves.svg\n", a.out.c_str(),
                a.out.c_str(), a.out.c_str());
    return 0;
}

}  // namespace

void add_audit(CLI::App& app) {
    auto a = std::make_shared<AuditArgs>();
    auto* cmd = app.add_subcommand(
        "audit", "the paper's collapse measurements: audit.json and report.html (docs/audit.md)");
    cmd->add_option("MODEL_DIR", a->dir, "model directory");
    cmd->add_option("--checkpoints", a->checkpoints,
                    "audit these checkpoint (or model) directories instead, as one series: "
                    "audit.json, curves.jsonl and curves.svg against tokens seen");
    cmd->add_option("--out", a->out, "output directory (audit.json, report.html)")
        ->required()
        ->check(output_path());
    add_force(cmd, &a->force);
    cmd->add_option("--prompts", a->prompts,
                    "one prompt per line: text (needs tokenizer.model) or comma-separated ids; "
                    "default: a built-in set");
    cmd->add_option("--steps", a->opt.steps, "greedy decode steps for eps_G")
        ->capture_default_str();
    cmd->add_option("--cont-len", a->opt.cont_len, "sampled continuation length (seeds 100/101)")
        ->capture_default_str();
    cmd->add_option("--pad", a->opt.pad, "pad tokens appended for the padding check")
        ->capture_default_str();
    cmd->add_option("--text", a->text,
                    "held-out text for loss vs unigram entropy (or comma-separated ids)");
    cmd->add_option("--truthfulqa", a->tqa,
                    "TruthfulQA mc_task.json (default data/eval/truthfulqa/mc_task.dev.json when "
                    "present and the model has a tokenizer)");
    cmd->add_option("--items", a->items, "TruthfulQA-MC2 items scored block vs sequential")
        ->capture_default_str();
    a->mo.add_to(cmd);
    cmd->callback([a]() {
        require(a->opt.steps >= 1, "--steps must be >= 1");
        require(a->opt.cont_len >= 1, "--cont-len must be >= 1");
        require(a->opt.pad >= 0, "--pad must be >= 0");
        require(a->dir.empty() != a->checkpoints.empty(),
                "give a MODEL_DIR or --checkpoints DIR..., not both");
        return a->checkpoints.empty() ? run_audit_cmd(*a) : run_audit_series(*a);
    });
}

}  // namespace pldr::cli
