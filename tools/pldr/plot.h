// Line plots (loss curves) as PNG (libpng, drawn on a raster with a built-in 5×7 font) or SVG
// (hand-written XML): axes with "nice" ticks, one polyline per series, a legend and a title.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace pldr {

struct PlotSeries {
    std::string label;
    std::vector<double> x, y;  // equal lengths; non-finite points are skipped
    uint32_t rgb = 0x1f77b4;   // 0xRRGGBB
    bool dashed = false;
};

struct PlotSpec {
    std::string title, xlabel = "step", ylabel = "loss";
    std::vector<PlotSeries> series;
    int width = 900, height = 560;
    // Logarithmic axes: log10 of the values is drawn (values <= 0 are left out), with ticks at
    // powers of ten.
    bool log_x = false, log_y = false;
};

// The SVG document text.
std::string plot_svg(const PlotSpec& spec);
// RGB pixels (width·height·3 bytes, row-major) of the raster rendering.
std::vector<uint8_t> plot_raster(const PlotSpec& spec);
// Writes a PNG (8-bit RGB) of plot_raster, atomically.
void write_plot_png(const PlotSpec& spec, const std::string& path);
// By extension: .png or .svg (anything else is an error).
void write_plot(const PlotSpec& spec, const std::string& path);

// "Nice" tick values covering [lo, hi] (about `target` of them, steps of 1, 2 or 5 × 10^k).
std::vector<double> nice_ticks(double lo, double hi, int target = 6);

namespace cli {
// Moving average over a trailing window of `window` points (window ≤ 1: unchanged).
// The collapse curves' axes: tokens seen against value, log-log (points at 0 are left out).
PlotSpec audit_axes(const std::string& title);
// One run's collapse curves (x, y, label each), in the curves' fixed colours; `prefix` goes
// before each label, `dashed` tells runs apart.
struct AuditCurve {
    std::string label;
    std::vector<double> x, y;
};
void add_audit_curves(PlotSpec& spec, const std::vector<AuditCurve>& curves,
                      const std::string& prefix, bool dashed);

std::vector<double> moving_average(const std::vector<double>& y, int64_t window);
}  // namespace cli

}  // namespace pldr
