// report.html: one self-contained page, inline CSS and inline SVG drawn here (see report.h).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "audit/report.h"

namespace pldr::audit {

namespace {

using json = nlohmann::ordered_json;

std::string fmt(const char* f, double v) {
    char b[64];
    std::snprintf(b, sizeof b, f, v);
    return b;
}
std::string g3(double v) {
    return std::isnan(v) ? "—" : fmt("%.3g", v);
}

std::string esc(const std::string& s) {
    std::string o;
    for (char c : s) {
        if (c == '<')
            o += "&lt;";
        else if (c == '>')
            o += "&gt;";
        else if (c == '&')
            o += "&amp;";
        else if (c == '"')
            o += "&quot;";
        else
            o += c;
    }
    return o;
}

// Diverging colour: blue (−1) – white (0) – red (+1).
std::string colour(double t) {
    t = std::clamp(t, -1.0, 1.0);
    int r = 255, g = 255, b = 255;
    if (t >= 0) {
        g = b = int(255 * (1 - t));
    } else {
        r = g = int(255 * (1 + t));
    }
    char buf[16];
    std::snprintf(buf, sizeof buf, "#%02x%02x%02x", r, g, b);
    return buf;
}

// A dk×dk heatmap, block-averaged down to at most 32×32 cells, scaled by max|x|.
std::string heatmap(const double* M, int64_t D, const std::string& title) {
    const int64_t f = (D + 31) / 32, n = (D + f - 1) / f;
    const double px = 120.0 / double(n);
    double mx = 0, lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < D * D; ++i) {
        mx = std::max(mx, std::abs(M[i]));
        lo = std::min(lo, M[i]);
        hi = std::max(hi, M[i]);
    }
    std::string s = "<figure class=hm><svg width=124 height=124 viewBox='-2 -2 124 124'>";
    for (int64_t bi = 0; bi < n; ++bi)
        for (int64_t bj = 0; bj < n; ++bj) {
            double sum = 0;
            int cnt = 0;
            for (int64_t i = bi * f; i < std::min(D, (bi + 1) * f); ++i)
                for (int64_t j = bj * f; j < std::min(D, (bj + 1) * f); ++j)
                    sum += M[i * D + j], ++cnt;
            const double v = cnt ? sum / cnt : 0;
            s += "<rect x='" + fmt("%.2f", double(bj) * px) + "' y='" +
                 fmt("%.2f", double(bi) * px) + "' width='" + fmt("%.2f", px + 0.05) +
                 "' height='" + fmt("%.2f", px + 0.05) + "' fill='" + colour(mx > 0 ? v / mx : 0) +
                 "'/>";
        }
    s += "<rect x=0 y=0 width=120 height=120 fill=none stroke='#888'/></svg><figcaption>" +
         esc(title) + "<br>[" + g3(lo) + ", " + g3(hi) + "]</figcaption></figure>";
    return s;
}

const char* kLayerColours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                               "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

// eps_G (log10) over the decode steps, one line per (prompt, layer); zeros drawn on the floor.
std::string eps_plot(const AuditReport& r) {
    const double W = 640, H = 300, L = 60, B = 40, T = 20, R = 120;
    double lo = INFINITY, hi = -INFINITY;
    int64_t steps = 0;
    for (const auto& p : r.eps)
        for (const auto& s : p) {
            steps = std::max(steps, s.step);
            for (double e : s.eps_G)
                if (e > 0) lo = std::min(lo, std::log10(e)), hi = std::max(hi, std::log10(e));
        }
    const bool allzero = !std::isfinite(lo);
    if (allzero) lo = -17, hi = -16;
    lo = std::floor(lo) - 1;  // the floor row holds exact zeros
    hi = std::ceil(hi);
    if (hi <= lo) hi = lo + 1;
    auto X = [&](double st) {
        return L + (W - L - R) * (steps > 1 ? (st - 1) / double(steps - 1) : 0.5);
    };
    auto Y = [&](double e) {
        return T + (H - T - B) * (1 - ((e > 0 ? std::log10(e) : lo) - lo) / (hi - lo));
    };
    std::string s = "<svg width=" + fmt("%.0f", W) + " height=" + fmt("%.0f", H) + " class=plot>";
    s += "<rect x=" + fmt("%.0f", L) + " y=" + fmt("%.0f", T) + " width=" + fmt("%.0f", W - L - R) +
         " height=" + fmt("%.0f", H - T - B) + " fill=#fafafa stroke=#999 />";
    for (double k = lo; k <= hi; k += std::max(1.0, std::floor((hi - lo) / 6))) {
        const double y = T + (H - T - B) * (1 - (k - lo) / (hi - lo));
        s += "<line x1=" + fmt("%.0f", L) + " x2=" + fmt("%.0f", W - R) + " y1=" + fmt("%.1f", y) +
             " y2=" + fmt("%.1f", y) + " stroke=#e0e0e0 />";
        s += "<text x=" + fmt("%.0f", L - 4) + " y=" + fmt("%.1f", y + 4) + " text-anchor=end>" +
             (k == lo ? std::string("0") : "1e" + fmt("%.0f", k)) + "</text>";
    }
    for (int64_t st = 1; st <= steps; st += std::max<int64_t>(1, steps / 8))
        s += "<text x=" + fmt("%.1f", X(double(st))) + " y=" + fmt("%.0f", H - B + 16) +
             " text-anchor=middle>" + std::to_string(st) + "</text>";
    s += "<text x=" + fmt("%.0f", (W - R + L) / 2) + " y=" + fmt("%.0f", H - 4) +
         " text-anchor=middle>decode step t</text>";
    for (size_t p = 0; p < r.eps.size(); ++p)
        for (int64_t l = 0; l < r.layers; ++l) {
            std::string pts;
            for (const auto& st : r.eps[p])
                pts += fmt("%.1f", X(double(st.step))) + "," + fmt("%.1f", Y(st.eps_G[size_t(l)])) +
                       " ";
            s += "<polyline fill=none stroke-width=1.5 stroke='" +
                 std::string(kLayerColours[l % 10]) + "' points='" + pts + "'/>";
        }
    for (int64_t l = 0; l < r.layers; ++l)
        s += "<text x=" + fmt("%.0f", W - R + 10) + " y=" + fmt("%.0f", T + 14 + 16 * double(l)) +
             " fill='" + kLayerColours[l % 10] + "'>layer " + std::to_string(l) + "</text>";
    if (allzero)
        s += "<text x=" + fmt("%.0f", L + 10) + " y=" + fmt("%.0f", T + 20) +
             ">eps_G = 0 at every step (bitwise)</text>";
    return s + "</svg>";
}

// Histogram of log10|gap| (exact zeros counted in their own bar).
std::string histogram(const std::vector<double>& v, const std::string& title) {
    const double W = 420, H = 220, L = 40, B = 36, T = 24, R = 10;
    int zeros = 0;
    double lo = INFINITY, hi = -INFINITY;
    for (double x : v) {
        if (x <= 0) {
            ++zeros;
            continue;
        }
        lo = std::min(lo, std::log10(x));
        hi = std::max(hi, std::log10(x));
    }
    const int nb = 16;
    if (!std::isfinite(lo)) lo = -16, hi = -15;
    lo = std::floor(lo);
    hi = std::max(std::ceil(hi), lo + 1);
    std::vector<int> bins(nb + 1, 0);
    bins[0] = zeros;
    for (double x : v)
        if (x > 0) bins[size_t(1 + std::min(nb - 1, int((std::log10(x) - lo) / (hi - lo) * nb)))]++;
    const int top = std::max(1, *std::max_element(bins.begin(), bins.end()));
    const double bw = (W - L - R) / (nb + 1);
    std::string s = "<svg width=" + fmt("%.0f", W) + " height=" + fmt("%.0f", H) + " class=plot>";
    s += "<text x=" + fmt("%.0f", L) + " y=14>" + esc(title) + " (n=" + std::to_string(v.size()) +
         ")</text>";
    for (int b = 0; b <= nb; ++b) {
        const double h = (H - T - B) * bins[size_t(b)] / top;
        s += "<rect x=" + fmt("%.1f", L + b * bw) + " y=" + fmt("%.1f", H - B - h) +
             " width=" + fmt("%.1f", bw - 1) + " height=" + fmt("%.1f", h) + " fill='" +
             (b == 0 ? "#999" : "#4c78a8") + "'><title>" + std::to_string(bins[size_t(b)]) +
             "</title></rect>";
    }
    s += "<line x1=" + fmt("%.0f", L) + " x2=" + fmt("%.0f", W - R) + " y1=" + fmt("%.0f", H - B) +
         " y2=" + fmt("%.0f", H - B) + " stroke=#333 />";
    s += "<text x=" + fmt("%.1f", L + bw / 2) + " y=" + fmt("%.0f", H - B + 14) +
         " text-anchor=middle>0</text>";
    s += "<text x=" + fmt("%.1f", L + bw) + " y=" + fmt("%.0f", H - B + 14) + ">1e" +
         fmt("%.0f", lo) + "</text><text x=" + fmt("%.0f", W - R) +
         " y=" + fmt("%.0f", H - B + 14) + " text-anchor=end>1e" + fmt("%.0f", hi) + "</text>";
    s += "<text x=" + fmt("%.0f", L - 4) + " y=" + fmt("%.0f", T + 8) + " text-anchor=end>" +
         std::to_string(top) + "</text>";
    s += "<text x=" + fmt("%.0f", (W + L) / 2) + " y=" + fmt("%.0f", H - 4) +
         " text-anchor=middle>|block − sequential| (log scale)</text>";
    return s + "</svg>";
}

std::string row(std::initializer_list<std::string> cells, const char* tag = "td") {
    std::string s = "<tr>";
    for (const auto& c : cells) s += std::string("<") + tag + ">" + c + "</" + tag + ">";
    return s + "</tr>";
}

}  // namespace

std::string report_html(const AuditReport& r) {
    const json j = report_json(r);
    const json& pp = j["paper"];
    std::string h =
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>pldr audit</title><style>"
        "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1340px}"
        "h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}"
        "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;"
        "text-align:right;font-variant-numeric:tabular-nums}th{background:#f0f0f0}"
        "td:first-child,th:first-child{text-align:left}.hm{display:inline-block;margin:4px;"
        "text-align:center;font-size:11px}.plot text{font-size:11px}.flag{background:#fde2e2;"
        "border:1px solid #e99;padding:8px;font-weight:bold}.ok{background:#e5f5e0;border:1px "
        "solid #9c9;padding:8px}.layer{margin:6px 0}.muted{color:#777}.note{background:#fff4d6;"
        "border:1px solid #e0b84d;padding:8px}</style></head><body>";
    h += "<h1>PLDR-LLM collapse audit</h1><p>model <b>" + esc(r.model_dir) + "</b> — " +
         esc(r.variant) + ", " + std::to_string(r.params) +
         " parameters, L=" + std::to_string(r.layers) + " H=" + std::to_string(r.heads) +
         " dk=" + std::to_string(r.head_dim) + " V=" + std::to_string(r.vocab) + "; compute " +
         r.dtype + "; " + std::to_string(r.prompts.size()) + " prompts; " + fmt("%.1f", r.seconds) +
         " s</p>";
    h += std::string("<p class=") + (r.quantized ? "note" : "muted") + ">" + esc(r.weights_text()) +
         "</p>";
    if (r.has_loss)
        h += std::string("<p class=") + (r.loss.degenerate ? "flag" : "ok") + ">loss on " +
             esc(r.loss_source) + ": " + fmt("%.4f", r.loss.loss) +
             " nats/token vs unigram entropy " + fmt("%.4f", r.loss.unigram_entropy) + " (" +
             std::to_string(r.loss.tokens) + " tokens)" +
             (r.loss.degenerate ? std::string(" — ") + kDegenerateNote : "") + "</p>";

    h += "<h2>G_LM heatmaps (prompt 0 prefill)</h2><p class=muted>one square per head, "
         "blue–white–red scaled by max|G| of the head; dk&gt;32 is block-averaged</p>";
    for (size_t l = 0; l < r.g_heat.size(); ++l) {
        h += "<div class=layer><b>layer " + std::to_string(l) + "</b><br>";
        const auto& G = r.g_heat[l];
        const int64_t D = G.shape[1];
        for (int64_t hh = 0; hh < G.shape[0]; ++hh)
            h += heatmap(G.ptr() + hh * D * D, D, "head " + std::to_string(hh));
        h += "</div>";
    }

    const json& e = j["eps_G"];
    h += "<h2>eps_G over the decode steps (cached vs uncached G_LM)</h2>" + eps_plot(r);
    h += "<table>" + row({"quantity", "ours", "paper (§8.2)"}, "th");
    h += row({"max eps_G", g3(e["max_eps_G"].get<double>()), "0 (bitwise)"});
    h += row({"max |ΔG|", g3(e["max_abs_dG"].get<double>()), "0"});
    h += row({"max dlogit", g3(e["max_dlogit"].get<double>()), "2.3e-5 – 3.6e-5 per prompt"});
    h += row({"min margin", e["min_margin"].is_null() ? "—" : g3(e["min_margin"].get<double>()),
              "0.005985"});
    h += row({"2·dlogit &lt; margin at every step",
              e["criterion_all_steps"].get<bool>() ? "yes" : "no", "—"});
    h += row({"argmax agreement", fmt("%.3f", e["argmax_agreement"].get<double>()), "100%"});
    h += "</table>";

    h += "<h2>Order parameters (relative fluctuation)</h2><table>" +
         row({"quantity", "continuations RMS", "continuations signed", "prompts RMS",
              "prompts signed", "paper RMS", "paper signed"},
             "th");
    for (int q = 0; q < 4; ++q) {
        const char* n = kQuantities[size_t(q)];
        auto cell = [&](const OrderTable& t, int form, bool have) {
            return have && t.present[size_t(q)] ? g3(t.max(q, form)) : std::string("—");
        };
        h += row({n, cell(r.cont_max, 0, true), cell(r.cont_max, 1, true),
                  cell(r.prompts_max, 0, r.prompt_pairs > 0),
                  cell(r.prompts_max, 1, r.prompt_pairs > 0),
                  g3(pp["order_rms_max"][n].get<double>()),
                  g3(pp["order_signed_max"][n].get<double>())});
    }
    h += "</table><p class=muted>max over layers; continuations: seeds " +
         std::to_string(r.cfg.seed1) + "/" + std::to_string(r.cfg.seed2) + ", " +
         std::to_string(r.cfg.cont_len) + " tokens, max over prompts; prompts: max over " +
         std::to_string(r.prompt_pairs) + " pairs</p>";

    const json& b = j["block_vs_sequential"];
    h += "<h2>Block vs sequential scoring</h2><div>" +
         histogram(r.gaps.token_gaps, "per-token |Δ logprob|") +
         histogram(r.gaps.cand_gaps, "per-candidate |Δ logprob|");
    if (!r.gaps.mc2_gaps.empty()) h += histogram(r.gaps.mc2_gaps, "TruthfulQA-MC2 per-item |Δ|");
    h += "</div><table>" + row({"quantity", "ours", "paper (§8.2)"}, "th");
    h += row(
        {"max per-token gap", g3(b["max_token_gap"].get<double>()), "2.39e-5 (Wikitext, 110M-5)"});
    h += row({"max per-candidate gap", g3(b["max_candidate_gap"].get<double>()), "—"});
    if (!b["truthfulqa_mc2"].is_null())
        h += row({"TruthfulQA-MC2 max per-item gap (" + std::to_string(r.gaps.mc2_gaps.size()) +
                      " items)",
                  g3(b["truthfulqa_mc2"]["max_gap"].get<double>()),
                  "3.69e-7 (110M-5), 4.67e-5 (110M-1)"});
    h += "</table>";

    const json& sp = j["spectral"]["summary"];
    auto sm = [&](const char* k) {
        const json& x = sp[k];
        if (x["count"].get<int64_t>() == 0) return std::string("—");
        return g3(x["min"].get<double>()) + " / " + g3(x["median"].get<double>()) + " / " +
               g3(x["max"].get<double>());
    };
    h += "<h2>Numerical rank and DAG values</h2><table>" +
         row({"quantity (min / median / max)", "ours", "paper (§8.2)"}, "th");
    h += row({"rank A (tol 64·eps_f32·s1)", sm("rank_A"), "1 in all 560 instances"});
    h += row({"rank A_LM", sm("rank_A_LM"), "median 62.5, range 1–64"});
    h += row({"rank G_LM", sm("rank_G_LM"), "—"});
    h += row({"DAG A_LM", sm("dag_A_LM"), "0 / 3.56e-10 / 6.11e-5"});
    h += row({"DAG A_P", sm("dag_A_P"), "62.7 / 1119.6 / 41461"});
    h += row({"DAG G_LM", sm("dag_G_LM"), "4.88 / 1268.5 / 28173"});
    h += "</table>";

    h += "<h2>Identity and absorption (spec §7)</h2><table>" +
         row({"check", "max relative residual"}, "th");
    h += row({"PLGA at G_LM = I vs plain SDPA (logits)", g3(r.sdpa_identity)});
    h += row({"constant G* folded into Wq, bq (scores, float64, no RoPE)", g3(r.absorption)});
    h += "</table>";

    h += "<h2>Padding sensitivity (spec §4.5)</h2><table>" +
         row({"prompt", "pads", "max |ΔG_LM| per layer", "max |Δ logit| (last real row)"}, "th");
    for (size_t i = 0; i < r.padding.size(); ++i) {
        std::string gs;
        for (double x : r.padding[i].max_dG) gs += (gs.empty() ? "" : ", ") + g3(x);
        h += row(
            {std::to_string(i), std::to_string(r.padding[i].pad), gs, g3(r.padding[i].max_dlogit)});
    }
    h += "</table><p class=muted>paper: " + pp["padding_4_pads"].get<std::string>() + "</p>";

    h += "<h2>Loss vs unigram entropy</h2>";
    if (r.has_loss)
        h += "<table>" +
             row({"source", "tokens", "loss (nats/token)", "unigram entropy", "ratio", "verdict"},
                 "th") +
             row({esc(r.loss_source), std::to_string(r.loss.tokens), fmt("%.4f", r.loss.loss),
                  fmt("%.4f", r.loss.unigram_entropy),
                  fmt("%.3f", r.loss.loss / r.loss.unigram_entropy),
                  r.loss.degenerate ? kDegenerateNote : "uses its context"}) +
             "</table>";
    else
        h += "<p class=muted>no held-out text</p>";

    h += "<h2>Prompts</h2><table>" + row({"#", "text", "tokens"}, "th");
    for (size_t i = 0; i < r.prompts.size(); ++i)
        h += row(
            {std::to_string(i), esc(r.prompts[i].text), std::to_string(r.prompts[i].ids.size())});
    h += "</table></body></html>\n";
    return h;
}

}  // namespace pldr::audit
