// pldr audit MODEL_DIR --out DIR: the paper's collapse measurements (spec §8.1) → DIR/audit.json
// (every number), DIR/report.html (self-contained, inline SVG) and a short summary on stdout.
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "audit/report.h"
#include "audit/runner.h"
#include "core/fs.h"
#include "io/tokenizer.h"
#include "legacy.h"

namespace pldr::cli {

namespace {

struct AuditArgs {
    std::string dir, out, prompts, text, tqa;
    int64_t items = 5;
    audit::AuditConfig cfg;
    ModelOptions mo;
};

bool is_id_line(const std::string& s) {
    bool digit = false;
    for (char c : s) {
        if (c >= '0' && c <= '9')
            digit = true;
        else if (c != ',' && c != ' ' && c != '\t' && c != '\r')
            return false;
    }
    return digit;
}

std::string trim(std::string s) {
    while (!s.empty() && (s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
    size_t i = 0;
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    return s.substr(i);
}

template <typename T>
int run_audit_cmd(const AuditArgs& a) {
    PLDR_REQUIRE(file_exists(a.dir + "/config.json"), "model directory ", a.dir, " not found");
    {
        InputSet in;
        in.add_dir(a.dir);
        in.add_file(a.prompts);
        in.add_file(a.text);
        in.add_file(a.tqa);
        require_dir_not_input(a.out, in, "--out", {"audit.json", "report.html"});
    }
    Model<T> m = a.mo.load<T>(a.dir);
    const std::string tok_path = a.dir + "/tokenizer.model";
    std::unique_ptr<Tokenizer> tok;
    if (file_exists(tok_path)) tok = std::make_unique<Tokenizer>(tok_path);

    audit::AuditInputs in;
    if (!a.prompts.empty()) {
        std::istringstream ss(read_file(a.prompts));
        std::string line;
        int64_t lineno = 0;
        while (std::getline(ss, line)) {
            ++lineno;
            line = trim(line);
            if (line.empty()) continue;
            audit::AuditPrompt p;
            if (is_id_line(line)) {
                p.ids = parse_ids(line, a.prompts + ":" + std::to_string(lineno));
            } else {
                PLDR_REQUIRE(tok, a.prompts, ":", lineno, ": a text prompt needs ", tok_path,
                             " (or give comma-separated token ids)");
                p.text = line;
                p.ids = tok->encode_prompt(line);
            }
            in.prompts.push_back(std::move(p));
        }
        PLDR_REQUIRE(!in.prompts.empty(), a.prompts, ": empty prompt set (no prompts in the file)");
    } else if (tok) {
        for (const auto& t : audit::default_text_prompts())
            in.prompts.push_back({t, tok->encode_prompt(t)});
    } else {
        for (const auto& ids : audit::default_id_prompts(m.cfg.vocab_size, m.cfg.pad_token_id))
            in.prompts.push_back({"", ids});
    }

    if (!a.text.empty()) {
        const std::string body = read_file(a.text);
        std::string first = trim(body.substr(0, body.find('\n')));
        if (is_id_line(first) || !tok) {
            std::string flat;
            for (char c : body) flat += (c == '\n' || c == '\r') ? ',' : c;
            while (!flat.empty() && flat.back() == ',') flat.pop_back();
            std::string clean;
            for (size_t i = 0; i < flat.size(); ++i)
                if (!(flat[i] == ',' && i + 1 < flat.size() && flat[i + 1] == ','))
                    clean += flat[i];
            in.heldout = parse_ids(clean, a.text);
        } else {
            in.heldout = tok->encode(body);
        }
        in.heldout_source = a.text;
    } else if (tok) {
        in.heldout = tok->encode(audit::default_heldout_text());
        in.heldout_source = "built-in paragraph";
    } else {
        for (const auto& p : in.prompts)
            in.heldout.insert(in.heldout.end(), p.ids.begin(), p.ids.end());
        in.heldout_source = "the prompts, concatenated";
    }
    if (int64_t(in.heldout.size()) > 4 * m.cfg.max_position)
        in.heldout.resize(size_t(4 * m.cfg.max_position));

    std::vector<McItem> mc1;
    std::string tqa = a.tqa;
    if (tqa.empty() && tok && file_exists("data/eval/truthfulqa/mc_task.dev.json"))
        tqa = "data/eval/truthfulqa/mc_task.dev.json";
    if (!tqa.empty() && a.items > 0) {
        PLDR_REQUIRE(tok, "--truthfulqa needs ", tok_path);
        load_truthfulqa(tqa, &mc1, &in.mc2);
        in.tok = tok.get();
        in.mc2_items = a.items;
    }

    audit::AuditReport r = audit::run_audit(m, in, a.cfg);
    r.model_dir = a.dir;
    std::filesystem::create_directories(a.out);
    write_file_atomic(a.out + "/audit.json", audit::report_json(r).dump(1) + "\n");
    write_file_atomic(a.out + "/report.html", audit::report_html(r));
    std::fputs(audit::report_summary(r).c_str(), stdout);
    if (!in.mc2.empty()) std::printf("  (TruthfulQA items from %s)\n", tqa.c_str());
    std::printf("wrote %s/audit.json and %s/report.html\n", a.out.c_str(), a.out.c_str());
    return 0;
}

}  // namespace

void add_audit(CLI::App& app) {
    auto a = std::make_shared<AuditArgs>();
    auto* cmd = app.add_subcommand(
        "audit", "the paper's collapse measurements: audit.json and report.html (docs/audit.md)");
    cmd->add_option("MODEL_DIR", a->dir, "model directory")->required();
    cmd->add_option("--out", a->out, "output directory (audit.json, report.html)")->required();
    cmd->add_option("--prompts", a->prompts,
                    "one prompt per line: text (needs tokenizer.model) or comma-separated ids; "
                    "default: a built-in set");
    cmd->add_option("--steps", a->cfg.steps, "greedy decode steps for eps_G")
        ->capture_default_str();
    cmd->add_option("--cont-len", a->cfg.cont_len, "sampled continuation length (seeds 100/101)")
        ->capture_default_str();
    cmd->add_option("--pad", a->cfg.pad, "pad tokens appended for the padding check")
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
        PLDR_REQUIRE(a->cfg.steps >= 1, "--steps must be >= 1");
        PLDR_REQUIRE(a->cfg.cont_len >= 1, "--cont-len must be >= 1");
        PLDR_REQUIRE(a->cfg.pad >= 0, "--pad must be >= 0");
        return with_dtype(a->mo.dtype, [&]<typename T>() { return run_audit_cmd<T>(*a); });
    });
}

}  // namespace pldr::cli
