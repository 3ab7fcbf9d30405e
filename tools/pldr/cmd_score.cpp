// pldr score MODEL_DIR --requests FILE.jsonl [--mode block|sequential|cached] [--top-logprobs N]
// [--out FILE.jsonl]:
// lm-eval style log-likelihood requests, one JSON object per line, scored in order.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common.h"
#include "options_cli.h"

namespace pldr::cli {

namespace {

struct ScoreArgs {
    std::string dir, requests, out, tokenizer;
    api::ScoreOptions so;  // the flags of PLDR_SCORE_OPTIONS (pldr/options.h)
    bool force = false;
    ModelOptions mo;
};

int run_score(const ScoreArgs& a) {
    const api::ScoreOptions& so = a.so;
    if (!a.out.empty())  // the output rule (docs/errors.md "Outputs"); none: standard output
        api::Inputs()
            .dir(a.dir)
            .file(a.requests)
            .file(a.tokenizer)
            .check_file(a.out, "--out", a.force);
    const std::string tp = a.tokenizer.empty() ? a.dir + "/tokenizer.model" : a.tokenizer;
    const bool have_tok = api::file_exists(tp);
    const api::Model m = a.mo.open(a.dir, have_tok ? tp : "");
    std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> reqs;
    for (const api::ScoreRequest& raw :
         api::parse_score_requests(api::read_file(a.requests), a.requests)) {
        std::pair<std::vector<int64_t>, std::vector<int64_t>> r;
        if (raw.has_ids) {
            r = {raw.context_ids, raw.continuation_ids};
        } else {
            require(have_tok, "text requests need a tokenizer: ", tp,
                    " not found (give --tokenizer, or use context_ids/continuation_ids)");
            r = m.encode_request(raw.context, raw.continuation);
        }
        require(!r.second.empty(), a.requests, ":", raw.line, ": empty continuation");
        reqs.push_back(std::move(r));
    }
    require(!reqs.empty(), a.requests, ": no requests");
    std::vector<api::ScoreResult> res;
    try {
        res = m.score_batch(reqs, so);
    } catch (const pldr::Error& e) {
        fail(a.requests, ": ", e.what());
    }
    std::string outs;
    for (const auto& r : res) {
        nlohmann::ordered_json j;
        j["logprob"] = r.logprob;
        j["is_greedy"] = r.is_greedy;
        j["token_logprobs"] = r.token_logprobs;
        if (so.top_logprobs > 0) {
            auto top = nlohmann::ordered_json::array();
            for (const auto& alts : r.top) {
                auto row = nlohmann::ordered_json::array();
                for (const auto& t : alts) row.push_back({t.id, t.logprob});
                top.push_back(row);
            }
            j["top"] = top;
        }
        outs += j.dump() + "\n";
    }
    if (a.out.empty())
        std::fputs(outs.c_str(), stdout);
    else
        api::write_file_atomic(a.out, outs);
    std::fprintf(stderr, "scored %zu requests (%s mode, %s)\n", res.size(), api::name_of(so.mode),
                 api::name_of(m.info().dtype));
    return 0;
}

}  // namespace

void add_score(CLI::App& app) {
    auto a = std::make_shared<ScoreArgs>();
    auto* cmd = app.add_subcommand("score", "log-likelihood of (context, continuation) requests");
    cmd->add_option("MODEL_DIR", a->dir, "model directory")->required();
    cmd->add_option("--requests", a->requests, "JSONL: {context, continuation} or token ids")
        ->required();
    add_option_flags(cmd, a->so);
    cmd->add_option("--out", a->out, "output JSONL (default stdout)")->check(output_path());
    add_force(cmd, &a->force);
    cmd->add_option("--tokenizer", a->tokenizer,
                    "SentencePiece model (default MODEL_DIR/tokenizer.model)");
    a->mo.add_to(cmd);
    cmd->callback([a]() { return run_score(*a); });
}

}  // namespace pldr::cli
