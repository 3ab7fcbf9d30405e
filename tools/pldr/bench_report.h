// The report of `pldr bench` (cmd_bench.cpp) over the workloads' JSON: each row's limit and
// fraction (bench/README.md, "pldr bench: what each figure means"), the ratios between rows, and
// the markdown table.
#pragma once
#include <nlohmann/json.hpp>

#include "pldr/bench.hpp"

namespace pldr::cli {

// To one workload's JSON, the tokens/s its limit allows and its fraction of it: against the
// limits measured around each repetition ("probes": the larger of the one before and the one
// after it, the median over the repetitions) where there are, else against `lim`, measured at
// the start of the run. Adds limit_tok_s, fraction, bound, limits_measured, and the start's
// limit_tok_s_run_start and fraction_run_start.
void add_limit_fractions(nlohmann::json& r, const api::BenchLimits& lim);

// Across the rows: x_batch1 (batched decode against batch 1: the median of the pairs that ran
// together, else the batch-1 row), x_fp32 (a low-precision row against its float32 twin) and
// x_selective (no or full recomputation against the selective plan).
void add_ratios(nlohmann::json& results);

// The markdown report of `out` ({"limits", "results"}); `adjacent`: the rows' limits were
// measured around their repetitions.
void print_report(const nlohmann::json& out, bool adjacent);

}  // namespace pldr::cli
