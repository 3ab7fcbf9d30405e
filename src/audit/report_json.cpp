// audit.json and the stdout summary (see report.h).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "audit/report.h"

namespace pldr::audit {

namespace {

using json = nlohmann::ordered_json;

json summary_json(const Summary& s) {
    return {{"min", s.min}, {"median", s.median}, {"max", s.max}, {"count", s.count}};
}

json order_json(const OrderTable& t) {
    json layers = json::array();
    for (const auto& l : t.layers) {
        json o;
        for (int q = 0; q < 4; ++q)
            o[kQuantities[size_t(q)]] =
                t.present[size_t(q)]
                    ? json{{"rms", l[size_t(q)].rms}, {"signed", l[size_t(q)].signed_}}
                    : json(nullptr);
        layers.push_back(o);
    }
    json mx;
    for (int q = 0; q < 4; ++q)
        mx[kQuantities[size_t(q)]] = t.present[size_t(q)]
                                         ? json{{"rms", t.max(q, 0)}, {"signed", t.max(q, 1)}}
                                         : json(nullptr);
    return {{"layers", layers}, {"max", mx}};
}

std::string fmt_g(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", v);
    return b;
}

double vmax(const std::vector<double>& v) {
    return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
}
double vmean(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0.0 : s / double(v.size());
}

}  // namespace

json paper_values() {
    return {
        {"source", "spec §8.2 (MF audits, PLDR-LLM-v51-SOC-110M-5 unless stated)"},
        {"eps_G_max", 0.0},
        {"max_dlogit_per_prompt", {2.57e-5, 2.29e-5, 3.62e-5, 3.05e-5}},
        {"min_margin", 0.005985},
        {"order_rms_max", {{"A", 4.87e-9}, {"A_LM", 3.44e-9}, {"A_P", 8.61e-13}, {"G_LM", 0.0}}},
        {"order_signed_max", {{"A", 3.09e-8}, {"A_LM", 5.56e-9}, {"A_P", 3.30e-12}, {"G_LM", 0.0}}},
        {"rank_A", "1 in all 560 instances; s2/s1 max 1.33e-8 (random init: 63)"},
        {"rank_A_LM", "median 62.5, range 1-64"},
        {"dag_A_LM", {{"min", 0.0}, {"median", 3.56e-10}, {"max", 6.11e-5}}},
        {"dag_A_P", {{"min", 62.7}, {"median", 1119.6}, {"max", 41461.0}}},
        {"dag_G_LM", {{"min", 4.88}, {"median", 1268.5}, {"max", 28173.0}}},
        {"padding_4_pads", "110M-1: max dG 0.0125, dlogit 7.4e-5; 110M-5: dG 0, dlogit 8.6e-6"},
        {"truthfulqa_mc2_max_gap", {{"110M-5", 3.69e-7}, {"110M-1", 4.67e-5}}}};
}

json report_json(const AuditReport& r) {
    json j;
    j["format"] = "pldr-audit-1";
    j["model"] = {{"dir", r.model_dir},     {"variant", r.variant}, {"dtype", r.dtype},
                  {"params", r.params},     {"layers", r.layers},   {"heads", r.heads},
                  {"head_dim", r.head_dim}, {"vocab", r.vocab},     {"context", r.context}};
    j["model"]["weights"] = {{"stored", r.weights},
                             {"quantized", r.quantized},
                             {"method", r.quantized ? json(r.weights) : json(nullptr)},
                             {"packed", r.packed},
                             {"text", r.weights_text()}};
    j["config"] = {{"steps", r.cfg.steps},
                   {"continuation_length", r.cfg.cont_len},
                   {"seeds", {r.cfg.seed1, r.cfg.seed2}},
                   {"pad", r.cfg.pad}};
    json prompts = json::array();
    for (const auto& p : r.prompts) prompts.push_back({{"text", p.text}, {"ids", p.ids}});
    j["prompts"] = prompts;

    json per = json::array();
    double e_max = 0, dg_max = 0, dl_max = 0, m_min = INFINITY;
    bool crit = true;
    int64_t agree = 0, nsteps = 0;
    for (size_t i = 0; i < r.eps.size(); ++i) {
        json steps = json::array();
        for (const auto& s : r.eps[i]) {
            steps.push_back({{"step", s.step},
                             {"token", s.token},
                             {"eps_G", s.eps_G},
                             {"max_dG", s.max_dG},
                             {"dlogit", s.dlogit},
                             {"margin", s.margin},
                             {"criterion", s.criterion},
                             {"argmax_agree", s.argmax_agree}});
            e_max = std::max(e_max, vmax(s.eps_G));
            dg_max = std::max(dg_max, vmax(s.max_dG));
            dl_max = std::max(dl_max, s.dlogit);
            m_min = std::min(m_min, s.margin);
            crit = crit && s.criterion;
            agree += s.argmax_agree;
            ++nsteps;
        }
        per.push_back({{"prompt", i}, {"steps", steps}});
    }
    j["eps_G"] = {{"per_prompt", per},
                  {"max_eps_G", e_max},
                  {"max_abs_dG", dg_max},
                  {"max_dlogit", dl_max},
                  {"min_margin", nsteps ? json(m_min) : json(nullptr)},
                  {"criterion_all_steps", crit},
                  {"argmax_agreement", nsteps ? double(agree) / double(nsteps) : 1.0}};

    json conts = json::array();
    for (size_t i = 0; i < r.cont.size(); ++i) {
        json o = order_json(r.cont[i].table);
        conts.push_back({{"prompt", i},
                         {"cont1", r.cont[i].cont1},
                         {"cont2", r.cont[i].cont2},
                         {"layers", o["layers"]},
                         {"max", o["max"]}});
    }
    json across = order_json(r.prompts_max);
    across["pairs"] = r.prompt_pairs;
    j["order_parameter"] = {
        {"continuations", {{"per_prompt", conts}, {"max", order_json(r.cont_max)["max"]}}},
        {"prompts", across}};

    json bs = {{"requests", r.block_seq_requests},
               {"token_gaps", r.gaps.token_gaps},
               {"candidate_gaps", r.gaps.cand_gaps},
               {"max_token_gap", vmax(r.gaps.token_gaps)},
               {"max_candidate_gap", vmax(r.gaps.cand_gaps)}};
    if (!r.gaps.mc2_gaps.empty())
        bs["truthfulqa_mc2"] = {{"items", r.gaps.mc2_gaps.size()},
                                {"block", r.gaps.mc2_block},
                                {"sequential", r.gaps.mc2_seq},
                                {"gaps", r.gaps.mc2_gaps},
                                {"max_gap", vmax(r.gaps.mc2_gaps)},
                                {"mean_block", vmean(r.gaps.mc2_block)},
                                {"mean_sequential", vmean(r.gaps.mc2_seq)}};
    else
        bs["truthfulqa_mc2"] = nullptr;
    j["block_vs_sequential"] = bs;

    json inst = json::array();
    std::vector<double> rA, rL, rG, dL, dP, dG;
    for (const auto& s : r.spectral) {
        auto opt = [](int64_t v) { return v < 0 ? json(nullptr) : json(v); };
        auto optd = [](double v) { return std::isnan(v) ? json(nullptr) : json(v); };
        inst.push_back({{"prompt", s.prompt},
                        {"layer", s.layer},
                        {"head", s.head},
                        {"rank_A", opt(s.rank_A)},
                        {"rank_A_LM", opt(s.rank_A_LM)},
                        {"rank_G_LM", opt(s.rank_G)},
                        {"s2_over_s1_A", s.s2s1_A},
                        {"s2_over_s1_G_LM", s.s2s1_G},
                        {"dag_A_LM", optd(s.dag_A_LM)},
                        {"dag_A_P", optd(s.dag_A_P)},
                        {"dag_G_LM", optd(s.dag_G)}});
        if (s.rank_A >= 0) rA.push_back(double(s.rank_A));
        if (s.rank_A_LM >= 0) rL.push_back(double(s.rank_A_LM));
        rG.push_back(double(s.rank_G));
        if (!std::isnan(s.dag_A_LM)) dL.push_back(s.dag_A_LM);
        if (!std::isnan(s.dag_A_P)) dP.push_back(s.dag_A_P);
        if (!std::isnan(s.dag_G)) dG.push_back(s.dag_G);
    }
    j["spectral"] = {{"rank_tolerance", "64*eps_f32*s1"},
                     {"instances", inst},
                     {"summary",
                      {{"rank_A", summary_json(summarize(rA))},
                       {"rank_A_LM", summary_json(summarize(rL))},
                       {"rank_G_LM", summary_json(summarize(rG))},
                       {"dag_A_LM", summary_json(summarize(dL))},
                       {"dag_A_P", summary_json(summarize(dP))},
                       {"dag_G_LM", summary_json(summarize(dG))}}}};
    j["sdpa_identity_residual"] = r.sdpa_identity;
    j["absorption_residual"] = r.absorption;
    json pad = json::array();
    for (size_t i = 0; i < r.padding.size(); ++i)
        pad.push_back({{"prompt", i},
                       {"pad", r.padding[i].pad},
                       {"max_dG", r.padding[i].max_dG},
                       {"max_dlogit", r.padding[i].max_dlogit}});
    j["padding"] = pad;
    if (r.has_loss)
        j["loss_vs_unigram"] = {{"source", r.loss_source},
                                {"tokens", r.loss.tokens},
                                {"loss", r.loss.loss},
                                {"unigram_entropy", r.loss.unigram_entropy},
                                {"ratio", r.loss.loss / r.loss.unigram_entropy},
                                {"degenerate", r.loss.degenerate},
                                {"note", r.loss.degenerate ? kDegenerateNote : ""}};
    else
        j["loss_vs_unigram"] = nullptr;
    j["curve_point"] = curve_point(j);
    j["paper"] = paper_values();
    j["seconds"] = r.seconds;
    return j;
}

json curve_point(const json& r) {
    const json& e = r.at("eps_G");
    const json& o = r.at("order_parameter");
    const json& b = r.at("block_vs_sequential");
    const json& s = r.at("spectral").at("summary");
    return {{"prompts", r.at("prompts").size()},
            {"steps", r.at("config").at("steps")},
            {"continuation_length", r.at("config").at("continuation_length")},
            {"max_eps_G", e.at("max_eps_G")},
            {"max_abs_dG", e.at("max_abs_dG")},
            {"max_dlogit", e.at("max_dlogit")},
            {"argmax_agreement", e.at("argmax_agreement")},
            {"order_continuations", o.at("continuations").at("max")},
            {"order_prompts", o.at("prompts").at("max")},
            {"max_token_gap", b.at("max_token_gap")},
            {"max_candidate_gap", b.at("max_candidate_gap")},
            {"rank_A", s.at("rank_A")},
            {"rank_A_LM", s.at("rank_A_LM")},
            {"rank_G_LM", s.at("rank_G_LM")}};
}

std::string report_summary(const AuditReport& r) {
    const json j = report_json(r);
    std::string s;
    char buf[512];
    std::snprintf(buf, sizeof buf, "audit of %s: %s, %lld parameters, %s, %zu prompts\n",
                  r.model_dir.c_str(), r.variant.c_str(), (long long)r.params, r.dtype.c_str(),
                  r.prompts.size());
    s += buf;
    s += "  " + r.weights_text() + "\n";
    const json& e = j["eps_G"];
    std::snprintf(buf, sizeof buf,
                  "  eps_G over %lld greedy steps x %zu prompts: max %.3g (max|dG| %.3g); max "
                  "dlogit %.3g, 2*dlogit < margin at %s steps   [paper: 0 bitwise]\n",
                  (long long)r.cfg.steps, r.prompts.size(), e["max_eps_G"].get<double>(),
                  e["max_abs_dG"].get<double>(), e["max_dlogit"].get<double>(),
                  e["criterion_all_steps"].get<bool>() ? "all" : "NOT all");
    s += buf;
    auto ord = [&](const OrderTable& t, const char* what) {
        std::string line = std::string("  order parameter (RMS) ") + what + ":";
        for (int q = 0; q < 4; ++q) {
            if (!t.present[size_t(q)]) continue;
            std::snprintf(buf, sizeof buf, " %s %.3g", kQuantities[size_t(q)], t.max(q, 0));
            line += buf;
        }
        return line + "\n";
    };
    s += ord(r.cont_max, "across 2 continuations");
    if (r.prompt_pairs > 0) s += ord(r.prompts_max, "across prompts");
    s += "    [paper, across continuations: A 4.87e-9, A_LM 3.44e-9, A_P 8.61e-13, G_LM 0]\n";
    const json& b = j["block_vs_sequential"];
    std::snprintf(buf, sizeof buf,
                  "  block vs sequential: max |dlogprob| per token %.3g, per candidate %.3g",
                  b["max_token_gap"].get<double>(), b["max_candidate_gap"].get<double>());
    s += buf;
    if (!b["truthfulqa_mc2"].is_null()) {
        std::snprintf(buf, sizeof buf,
                      "; TruthfulQA-MC2 on %zu items: max gap %.3g (mean mc2 %.4f / %.4f)   "
                      "[paper: 3.69e-7]",
                      r.gaps.mc2_gaps.size(), b["truthfulqa_mc2"]["max_gap"].get<double>(),
                      b["truthfulqa_mc2"]["mean_block"].get<double>(),
                      b["truthfulqa_mc2"]["mean_sequential"].get<double>());
        s += buf;
    }
    s += "\n";
    const json& sp = j["spectral"]["summary"];
    auto med = [&](const char* k) {
        const json& x = sp[k];
        return x["count"].get<int64_t>() ? fmt_g(x["median"].get<double>()) : std::string("n/a");
    };
    std::snprintf(buf, sizeof buf,
                  "  SDPA identity residual %.3g, absorption residual %.3g; rank(A) median %s, "
                  "rank(G_LM) median %s (dk %lld)\n",
                  r.sdpa_identity, r.absorption, med("rank_A").c_str(), med("rank_G_LM").c_str(),
                  (long long)r.head_dim);
    s += buf;
    if (r.has_loss) {
        std::snprintf(buf, sizeof buf, "  loss %.4f vs unigram entropy %.4f nats/token%s%s\n",
                      r.loss.loss, r.loss.unigram_entropy, r.loss.degenerate ? " -- " : "",
                      r.loss.degenerate ? kDegenerateNote : "");
        s += buf;
    }
    return s;
}

}  // namespace pldr::audit
