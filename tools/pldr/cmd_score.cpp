// pldr score MODEL_DIR --requests FILE.jsonl [--mode block|sequential|cached] [--out FILE.jsonl]:
// lm-eval style log-likelihood requests, one JSON object per line, scored in order.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common.h"
#include "core/fs.h"
#include "infer/requests.h"
#include "infer/score.h"
#include "io/tokenizer.h"

namespace pldr::cli {

namespace {

struct ScoreArgs {
    std::string dir, requests, out, mode = "block", tokenizer;
    ModelOptions mo;
};

template <typename T>
int run_score(const ScoreArgs& a) {
    const ScoreMode mode = score_mode_from_name(a.mode);
    {
        InputSet in;
        in.add_dir(a.dir);
        in.add_file(a.requests);
        in.add_file(a.tokenizer);
        require_not_input(a.out, in, "--out");
    }
    Model<T> m = a.mo.load<T>(a.dir);
    std::unique_ptr<Tokenizer> tok;
    auto need_tok = [&]() -> const Tokenizer& {
        if (!tok) {
            std::string p = a.tokenizer.empty() ? a.dir + "/tokenizer.model" : a.tokenizer;
            PLDR_REQUIRE(file_exists(p), "text requests need a tokenizer: ", p,
                         " not found (give --tokenizer, or use context_ids/continuation_ids)");
            tok = std::make_unique<Tokenizer>(p);
        }
        return *tok;
    };
    std::vector<ScoreRequest> reqs;
    for (const RawScoreRequest& raw : parse_score_requests(read_file(a.requests), a.requests)) {
        ScoreRequest r;
        if (raw.has_ids) {
            r.context = raw.context_ids;
            r.continuation = raw.continuation_ids;
        } else {
            r = encode_request(need_tok(), raw.context, raw.continuation, m.cfg.eos_token_id);
        }
        PLDR_REQUIRE(!r.continuation.empty(), a.requests, ":", raw.line, ": empty continuation");
        reqs.push_back(std::move(r));
    }
    PLDR_REQUIRE(!reqs.empty(), a.requests, ": no requests");
    std::vector<ScoreResult> res(reqs.size());
    std::string err;
    const int64_t n = int64_t(reqs.size());
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < n; ++i) {
        try {
            res[size_t(i)] = score_request(m, reqs[size_t(i)], mode);
        } catch (const Error& e) {
#pragma omp critical
            if (err.empty()) err = cat(a.requests, ": request ", i + 1, ": ", e.what());
        }
    }
    PLDR_REQUIRE(err.empty(), err);
    std::string outs;
    for (const auto& r : res) {
        nlohmann::ordered_json j;
        j["logprob"] = r.logprob;
        j["is_greedy"] = r.is_greedy;
        j["token_logprobs"] = r.token_logprobs;
        outs += j.dump() + "\n";
    }
    if (a.out.empty())
        std::fputs(outs.c_str(), stdout);
    else
        write_file_atomic(a.out, outs);
    std::fprintf(stderr, "scored %zu requests (%s mode, %s)\n", res.size(), a.mode.c_str(),
                 type_name<T>());
    return 0;
}

}  // namespace

void add_score(CLI::App& app) {
    auto a = std::make_shared<ScoreArgs>();
    auto* cmd = app.add_subcommand("score", "log-likelihood of (context, continuation) requests");
    cmd->add_option("MODEL_DIR", a->dir, "model directory")->required();
    cmd->add_option("--requests", a->requests, "JSONL: {context, continuation} or token ids")
        ->required();
    cmd->add_option("--mode", a->mode, "block, sequential or cached")
        ->check(CLI::IsMember({"block", "sequential", "cached"}))
        ->capture_default_str();
    cmd->add_option("--out", a->out, "output JSONL (default stdout)");
    cmd->add_option("--tokenizer", a->tokenizer,
                    "SentencePiece model (default MODEL_DIR/tokenizer.model)");
    a->mo.add_to(cmd);
    cmd->callback(
        [a]() { return with_dtype(a->mo.dtype, [&]<typename T>() { return run_score<T>(*a); }); });
}

}  // namespace pldr::cli
