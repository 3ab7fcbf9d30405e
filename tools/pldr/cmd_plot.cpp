// pldr plot METRICS.jsonl... --out FILE.png|svg: training and validation loss against the step.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "common.h"
#include "plot.h"

namespace pldr::cli {

namespace {

struct PlotArgs {
    std::vector<std::string> files, labels;
    std::string out, title = "loss", audit_out;
    int64_t smooth = 0;
    int width = 900, height = 560;
    std::vector<std::string> hlines;  // "VALUE" or "VALUE:LABEL"
    bool force = false;
};

// (train, valid) colours per file.
constexpr uint32_t kColors[][2] = {{0x9ecae1, 0x08519c},
                                   {0xfdae6b, 0xd94801},
                                   {0xa1d99b, 0x238b45},
                                   {0xfc9272, 0xcb181d},
                                   {0xbcbddc, 0x54278f}};

std::string default_label(const std::string& f) {
    const std::filesystem::path p(f);
    const std::string parent = p.parent_path().filename().string();
    return parent.empty() || parent == "." ? p.stem().string() : parent;
}

// The collapse curves of every file, log-log against tokens seen (a curve's points at 0 tokens
// or 0 are left out by the log axes).
PlotSpec audit_plot(const PlotArgs& a) {
    PlotSpec spec = audit_axes(a.title == "loss" ? "collapse measurements" : a.title);
    spec.width = a.width, spec.height = a.height;
    for (size_t i = 0; i < a.files.size(); ++i) {
        const auto curves = api::read_audit_curves(a.files[i]);
        require(!curves.empty(), a.files[i], ": no audit lines (train with --audit-every N)");
        const std::string name = a.labels.empty() ? default_label(a.files[i]) : a.labels[i];
        std::vector<AuditCurve> cs;
        for (const api::LossCurve& c : curves) cs.push_back({c.label, c.x, c.y});
        add_audit_curves(spec, cs, a.files.size() > 1 || !a.labels.empty() ? name + " " : "",
                         i % 2 == 1);
    }
    return spec;
}

}  // namespace

void add_plot(CLI::App& app) {
    auto a = std::make_shared<PlotArgs>();
    auto* cmd = app.add_subcommand("plot", "plot the loss curves of metrics files (PNG or SVG)");
    cmd->add_option("METRICS", a->files, "metrics .jsonl files written by pldr train")->required();
    cmd->add_option("--out", a->out, "output .png or .svg")->required()->check(output_path());
    add_force(cmd, &a->force);
    cmd->add_option("--label", a->labels, "a label per metrics file (default: its folder)");
    cmd->add_option("--title", a->title, "plot title")->capture_default_str();
    cmd->add_option("--smooth", a->smooth,
                    "moving-average window for the training loss (0 = steps/50)");
    cmd->add_option("--hline", a->hlines,
                    "a horizontal reference line VALUE[:LABEL], e.g. 6.29:unigram entropy");
    cmd->add_option("--audit-out", a->audit_out,
                    "also the collapse curves of the files' audit lines (pldr train "
                    "--audit-every) against tokens seen, log-log, as .png or .svg")
        ->check(output_path());
    cmd->add_option("--width", a->width)->capture_default_str();
    cmd->add_option("--height", a->height)->capture_default_str();
    cmd->callback([a]() {
        require(a->labels.empty() || a->labels.size() == a->files.size(),
                "give one --label "
                "per metrics file (",
                a->files.size(), "), or none");
        {
            api::Inputs in;
            for (const auto& f : a->files) in.file(f);
            in.check_file(a->out, "--out", a->force);
            if (!a->audit_out.empty()) in.check_file(a->audit_out, "--audit-out", a->force);
        }
        PlotSpec spec;
        spec.title = a->title;
        spec.width = a->width, spec.height = a->height;
        for (size_t i = 0; i < a->files.size(); ++i) {
            const auto curves = api::read_loss_curves(a->files[i]);
            const std::string name = a->labels.empty() ? default_label(a->files[i]) : a->labels[i];
            const auto& col = kColors[i % (sizeof kColors / sizeof kColors[0])];
            for (const api::LossCurve& c : curves) {
                PlotSeries s;
                const bool train = c.label == "train";
                const int64_t w =
                    a->smooth > 0 ? a->smooth : std::max<int64_t>(1, int64_t(c.x.size()) / 50);
                s.x = c.x;
                s.y = train ? moving_average(c.y, w) : c.y;
                s.rgb = col[train ? 0 : 1];
                s.dashed = false;
                s.label = (a->files.size() > 1 || !a->labels.empty() ? name + " " : "") +
                          (train ? "train" : "valid");
                spec.series.push_back(std::move(s));
            }
        }
        double x0 = INFINITY, x1 = -INFINITY;
        for (const PlotSeries& s : spec.series)
            for (double x : s.x) x0 = std::min(x0, x), x1 = std::max(x1, x);
        for (const std::string& h : a->hlines) {
            const size_t colon = h.find(':');
            const std::string v = h.substr(0, colon);
            char* end = nullptr;
            const double y = std::strtod(v.c_str(), &end);
            require(!v.empty() && end && *end == '\0' && std::isfinite(y), "--hline: '", v,
                    "' is not a number");
            PlotSeries s;
            s.x = {x0, x1};
            s.y = {y, y};
            s.rgb = 0x888888;
            s.dashed = true;
            s.label = colon == std::string::npos ? v : h.substr(colon + 1);
            spec.series.push_back(std::move(s));
        }
        write_plot(spec, a->out);
        std::printf("wrote %s\n", a->out.c_str());
        if (!a->audit_out.empty()) {
            write_plot(audit_plot(*a), a->audit_out);
            std::printf("wrote %s\n", a->audit_out.c_str());
        }
        return 0;
    });
}

}  // namespace pldr::cli
