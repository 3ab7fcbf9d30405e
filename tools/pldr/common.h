// Shared helpers of the pldr subcommands: option parsing and model loading through the public
// API (include/pldr/), the only part of the library the tool sees.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "pldr/files.hpp"
#include "pldr/pldr.hpp"

namespace pldr::cli {

namespace api = pldr::api;

// A message from any streamable parts; fail() throws it as pldr::Error (the tool prints
// "pldr: error: <message>", exit 1); require() fails unless cond holds.
template <typename... A>
std::string msg(const A&... a) {
    std::ostringstream os;
    (os << ... << a);
    return os.str();
}
template <typename... A>
[[noreturn]] void fail(const A&... a) {
    throw pldr::Error(msg(a...));
}
template <typename... A>
void require(bool cond, const A&... a) {
    if (!cond) fail(a...);
}

// "5,17,3" → {5, 17, 3}; a clear error on anything else.
std::vector<int64_t> parse_ids(const std::string& s, const std::string& what);
// Several --tokens rows of equal length → a [B,S] row-major batch.
std::vector<int64_t> rows_to_batch(const std::vector<std::string>& rows, int64_t* B, int64_t* S);
// "c_A,c_Ap,c_G" → DAG coefficients (each finite and >= 0); a clear error on anything else.
api::DagCoefficients parse_dag(const std::string& s);

// The output rule on the command line (api::Inputs, docs/errors.md "Outputs"): every output
// option checks its value with output_path() (an output given as "" is refused while parsing,
// even an optional one), and every writing command takes --force, which lets it write into an
// existing model directory or training checkpoint.
const CLI::Validator& output_path();
void add_force(CLI::App* cmd, bool* force);

// Options every model-running subcommand takes: the flags of PLDR_LOAD_OPTIONS (pldr/options.h)
// and --numerics reference|exact (the CLI's spelling of reference_numerics).
struct ModelOptions {
    api::LoadOptions load;
    std::string numerics = "reference";
    void add_to(CLI::App* app);
    // Loads through the public API (tokenizer: "" = MODEL_DIR/tokenizer.model when present).
    api::Model open(const std::string& dir, const std::string& tokenizer = "") const;
};

void add_inspect(CLI::App& app);
void add_dump(CLI::App& app);
void add_grad(CLI::App& app);
void add_generate(CLI::App& app);
void add_collapse(CLI::App& app);
void add_score(CLI::App& app);
void add_eval(CLI::App& app);
void add_tokenizer(CLI::App& app);
void add_prepare(CLI::App& app);
void add_train(CLI::App& app);
void add_plot(CLI::App& app);
void add_bench(CLI::App& app);
void add_perplexity(CLI::App& app);
void add_audit(CLI::App& app);
void add_serve(CLI::App& app);
void add_convert(CLI::App& app);

}  // namespace pldr::cli
