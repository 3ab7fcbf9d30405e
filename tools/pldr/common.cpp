// Shared helpers of the pldr subcommands (see common.h).
#include "common.h"

#include "options_cli.h"

#include <cmath>
#include <cstdlib>

namespace pldr::cli {

std::vector<int64_t> parse_ids(const std::string& s, const std::string& what) {
    return api::parse_ids(s, what);
}

std::vector<int64_t> rows_to_batch(const std::vector<std::string>& rows, int64_t* B, int64_t* S) {
    require(!rows.empty(), "--tokens is required");
    std::vector<int64_t> out;
    *S = -1;
    for (const auto& r : rows) {
        auto ids = parse_ids(r, "--tokens");
        if (*S < 0) *S = int64_t(ids.size());
        require(int64_t(ids.size()) == *S, "--tokens rows must have equal lengths (", *S, " vs ",
                ids.size(), ")");
        out.insert(out.end(), ids.begin(), ids.end());
    }
    *B = int64_t(rows.size());
    return out;
}

api::DagCoefficients parse_dag(const std::string& s) {
    std::vector<double> v;
    size_t i = 0;
    while (i <= s.size()) {
        size_t j = s.find(',', i);
        if (j == std::string::npos) j = s.size();
        const std::string tok = s.substr(i, j - i);
        char* end = nullptr;
        const double x = std::strtod(tok.c_str(), &end);
        require(!tok.empty() && end && *end == '\0' && std::isfinite(x), "--dag: '", tok,
                "' is not a number");
        v.push_back(x);
        i = j + 1;
    }
    require(v.size() == 3, "--dag takes three coefficients c_A,c_Ap,c_G (got ", v.size(), ")");
    require(v[0] >= 0 && v[1] >= 0 && v[2] >= 0, "--dag coefficients must be >= 0 (got ", s, ")");
    return {v[0], v[1], v[2]};
}

const CLI::Validator& output_path() {
    static const CLI::Validator v(
        [](std::string& s) {
            return s.empty() ? std::string(
                                   "is empty: give an output path (an empty one would "
                                   "write into the current directory)")
                             : std::string();
        },
        "PATH");
    return v;
}

void add_force(CLI::App* cmd, bool* force) {
    cmd->add_flag("--force", *force,
                  "write into an existing model directory or training checkpoint (replacing "
                  "its files); never into an input");
}

api::Model ModelOptions::open(const std::string& dir, const std::string& tokenizer) const {
    api::LoadOptions o = load;
    o.reference_numerics = numerics == "reference";
    o.tokenizer = tokenizer;
    return api::Model::load(dir, o);
}

void ModelOptions::add_to(CLI::App* app) {
    add_option_flags(app, load);
    app->add_option("--numerics", numerics,
                    "reference: emulate the reference's float32 RoPE/sqrt islands inside float64 "
                    "(golden parity); exact: pure float64")
        ->check(CLI::IsMember({"reference", "exact"}))
        ->capture_default_str();
}

}  // namespace pldr::cli
