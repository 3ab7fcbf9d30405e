// pldr audit MODEL_DIR --out DIR: the paper's collapse measurements (spec §8.1) → DIR/audit.json
// (every number), DIR/report.html (self-contained, inline SVG) and a short summary on stdout.
#include <cstdio>
#include <sstream>

#include "common.h"

namespace pldr::cli {

namespace {

struct AuditArgs {
    std::string dir, out, prompts, text, tqa;
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

int run_audit_cmd(const AuditArgs& a) {
    require(api::file_exists(a.dir + "/config.json"), "model directory ", a.dir, " not found");
    api::Inputs().dir(a.dir).file(a.prompts).file(a.text).file(a.tqa).check_dir(
        a.out, "--out", {"audit.json", "report.html"}, a.force);
    const api::Model m = a.mo.open(a.dir);
    const std::string tok_path = a.dir + "/tokenizer.model";
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
    o.out_dir = a.out;
    o.force = a.force;
    const api::AuditResult r = api::audit(m, o);
    std::fputs(r.summary.c_str(), stdout);
    if (!o.truthfulqa.empty()) std::printf("  (TruthfulQA items from %s)\n", tqa.c_str());
    std::printf("wrote %s/audit.json and %s/report.html\n", a.out.c_str(), a.out.c_str());
    return 0;
}

}  // namespace

void add_audit(CLI::App& app) {
    auto a = std::make_shared<AuditArgs>();
    auto* cmd = app.add_subcommand(
        "audit", "the paper's collapse measurements: audit.json and report.html (docs/audit.md)");
    cmd->add_option("MODEL_DIR", a->dir, "model directory")->required();
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
        return run_audit_cmd(*a);
    });
}

}  // namespace pldr::cli
