// Shared helpers of the pldr subcommands: option parsing and compute-dtype dispatch.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fs.h"
#include "io/model_load.h"
#include "train/loss.h"

namespace pldr::cli {

// "5,17,3" → {5, 17, 3}; a clear error on anything else.
std::vector<int64_t> parse_ids(const std::string& s, const std::string& what);
// Several --tokens rows of equal length → a [B,S] row-major batch.
std::vector<int64_t> rows_to_batch(const std::vector<std::string>& rows, int64_t* B, int64_t* S);

// Options every model-running subcommand takes.
struct ModelOptions {
    std::string dtype = "f32";           // compute precision
    std::string numerics = "reference";  // reference | exact (float64 only)
    void add_to(CLI::App* app);
    template <typename T>
    Model<T> load(const std::string& dir) const {
        Model<T> m = load_model<T>(dir);
        m.set_reference_numerics(numerics == "reference");
        return m;
    }
};

// Calls f.template operator()<float>() or <double>() by dtype name.
template <typename F>
int with_dtype(const std::string& dtype, F&& f) {
    if (dtype == "f32") return f.template operator()<float>();
    if (dtype == "f64") return f.template operator()<double>();
    fail("--dtype must be f32 or f64 (got '", dtype, "')");
}

// "c_A,c_Ap,c_G" → DAG coefficients (each finite and >= 0); a clear error on anything else.
DagCoeffs parse_dag_coeffs(const std::string& s);

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
void add_perplexity(CLI::App& app);
void add_audit(CLI::App& app);
void add_serve(CLI::App& app);

}  // namespace pldr::cli
