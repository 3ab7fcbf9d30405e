// Output of `pldr audit`: audit.json (every number), report.html (self-contained: inline CSS and
// inline SVG plots drawn here, no external resources) and a short stdout summary.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "audit/runner.h"

namespace pldr::audit {

nlohmann::ordered_json report_json(const AuditReport& r);
// The collapse curves' point of a report (its "curve_point"; what `pldr train --audit-every`
// writes under "audit" in metrics.jsonl): eps_G and max|ΔG| over the decode steps, the order
// parameters across continuations and across prompts, the block-vs-sequential gaps and the
// numerical ranks, each the max (or the summary) over prompts, layers and heads.
nlohmann::ordered_json curve_point(const nlohmann::ordered_json& report);
// The paper's values (spec §8.2), printed beside ours.
nlohmann::ordered_json paper_values();
std::string report_html(const AuditReport& r);
std::string report_summary(const AuditReport& r);

// The note attached to a degenerate (context-blind) model.
inline constexpr const char* kDegenerateNote =
    "context-blind: cached/uncached agreement is trivial, not collapse";

}  // namespace pldr::audit
