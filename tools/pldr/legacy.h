// The internal library for the commands not yet ported to the public API (inspect, collapse,
// tokenizer, prepare, train, plot, perplexity, serve). tests/check_cli_includes.sh lists them;
// a command that moves to include/pldr/ drops this header and leaves that list.
#pragma once
#include "common.h"
#include "core/error.h"
#include "core/fs.h"
#include "io/model_load.h"
#include "serve/server.h"
#include "train/loss.h"

namespace pldr::cli {

template <typename T>
auto ModelOptions::load(const std::string& dir) const {
    Model<T> m = load_model<T>(dir);
    m.set_reference_numerics(numerics == "reference");
    return m;
}

// Calls f.template operator()<float>() or <double>() by dtype name.
template <typename F>
int with_dtype(const std::string& dtype, F&& f) {
    if (dtype == "f32") return f.template operator()<float>();
    if (dtype == "f64") return f.template operator()<double>();
    fail("--dtype must be f32 or f64 (got '", dtype, "')");
}

inline DagCoeffs parse_dag_coeffs(const std::string& s) {
    const api::DagCoefficients d = parse_dag(s);
    return {d.A, d.Ap, d.G};
}

}  // namespace pldr::cli
