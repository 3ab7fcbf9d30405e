// Line plots (see plot.h).
#include "plot.h"

#include <png.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "common.h"

namespace pldr {

namespace {

// 5×7 glyphs, one byte per row, bit 4 = leftmost column; other characters are drawn as a box.
struct Glyph {
    char c;
    uint8_t rows[7];
};
constexpr Glyph kFont[] = {
    {'0', {14, 17, 19, 21, 25, 17, 14}}, {'1', {4, 12, 4, 4, 4, 4, 14}},
    {'2', {14, 17, 1, 2, 4, 8, 31}},     {'3', {31, 2, 4, 2, 1, 17, 14}},
    {'4', {2, 6, 10, 18, 31, 2, 2}},     {'5', {31, 16, 30, 1, 1, 17, 14}},
    {'6', {6, 8, 16, 30, 17, 17, 14}},   {'7', {31, 1, 2, 4, 8, 8, 8}},
    {'8', {14, 17, 17, 14, 17, 17, 14}}, {'9', {14, 17, 17, 15, 1, 2, 12}},
    {'.', {0, 0, 0, 0, 0, 12, 12}},      {'-', {0, 0, 0, 31, 0, 0, 0}},
    {'+', {0, 4, 4, 31, 4, 4, 0}},       {'_', {0, 0, 0, 0, 0, 0, 31}},
    {'/', {1, 2, 2, 4, 8, 8, 16}},       {':', {0, 12, 12, 0, 12, 12, 0}},
    {'(', {2, 4, 8, 8, 8, 4, 2}},        {')', {8, 4, 2, 2, 2, 4, 8}},
    {'=', {0, 0, 31, 0, 31, 0, 0}},      {',', {0, 0, 0, 0, 12, 4, 8}},
    {'a', {0, 0, 14, 1, 15, 17, 15}},    {'b', {16, 16, 22, 25, 17, 17, 30}},
    {'c', {0, 0, 14, 16, 16, 17, 14}},   {'d', {1, 1, 13, 19, 17, 17, 15}},
    {'e', {0, 0, 14, 17, 31, 16, 14}},   {'f', {6, 9, 8, 28, 8, 8, 8}},
    {'g', {0, 15, 17, 17, 15, 1, 14}},   {'h', {16, 16, 22, 25, 17, 17, 17}},
    {'i', {4, 0, 12, 4, 4, 4, 14}},      {'j', {2, 0, 6, 2, 2, 18, 12}},
    {'k', {16, 16, 18, 20, 24, 20, 18}}, {'l', {12, 4, 4, 4, 4, 4, 14}},
    {'m', {0, 0, 26, 21, 21, 17, 17}},   {'n', {0, 0, 22, 25, 17, 17, 17}},
    {'o', {0, 0, 14, 17, 17, 17, 14}},   {'p', {0, 0, 30, 17, 17, 30, 16}},
    {'q', {0, 0, 13, 19, 15, 1, 1}},     {'r', {0, 0, 22, 25, 16, 16, 16}},
    {'s', {0, 0, 14, 16, 14, 1, 30}},    {'t', {8, 8, 28, 8, 8, 9, 6}},
    {'u', {0, 0, 17, 17, 17, 19, 13}},   {'v', {0, 0, 17, 17, 17, 10, 4}},
    {'w', {0, 0, 17, 17, 21, 21, 10}},   {'x', {0, 0, 17, 10, 4, 10, 17}},
    {'y', {0, 0, 17, 17, 15, 1, 14}},    {'z', {0, 0, 31, 2, 4, 8, 31}},
    {'A', {14, 17, 17, 31, 17, 17, 17}}, {'B', {30, 17, 17, 30, 17, 17, 30}},
    {'C', {14, 17, 16, 16, 16, 17, 14}}, {'D', {30, 17, 17, 17, 17, 17, 30}},
    {'E', {31, 16, 16, 30, 16, 16, 31}}, {'F', {31, 16, 16, 30, 16, 16, 16}},
    {'G', {14, 17, 16, 23, 17, 17, 15}}, {'H', {17, 17, 17, 31, 17, 17, 17}},
    {'I', {14, 4, 4, 4, 4, 4, 14}},      {'J', {7, 2, 2, 2, 2, 18, 12}},
    {'K', {17, 18, 20, 24, 20, 18, 17}}, {'L', {16, 16, 16, 16, 16, 16, 31}},
    {'M', {17, 27, 21, 21, 17, 17, 17}}, {'N', {17, 17, 25, 21, 19, 17, 17}},
    {'O', {14, 17, 17, 17, 17, 17, 14}}, {'P', {30, 17, 17, 30, 16, 16, 16}},
    {'Q', {14, 17, 17, 17, 21, 18, 13}}, {'R', {30, 17, 17, 30, 20, 18, 17}},
    {'S', {15, 16, 16, 14, 1, 1, 30}},   {'T', {31, 4, 4, 4, 4, 4, 4}},
    {'U', {17, 17, 17, 17, 17, 17, 14}}, {'V', {17, 17, 17, 17, 17, 10, 4}},
    {'W', {17, 17, 17, 21, 21, 21, 10}}, {'X', {17, 17, 10, 4, 10, 17, 17}},
    {'Y', {17, 17, 10, 4, 4, 4, 4}},     {'Z', {31, 1, 2, 4, 8, 16, 31}},
};
constexpr uint8_t kBox[7] = {31, 17, 17, 17, 17, 17, 31};

const uint8_t* glyph(char c) {
    for (const Glyph& g : kFont)
        if (g.c == c) return g.rows;
    return kBox;
}

std::string fmt_tick(double v) {
    char b[32];
    if (v != 0 && (std::fabs(v) >= 1e6 || std::fabs(v) < 1e-3))
        std::snprintf(b, sizeof b, "%.3g", v);
    else
        std::snprintf(b, sizeof b, "%.6g", v);
    return b;
}

// The spec with log10 taken of the values of its logarithmic axes (values <= 0 left out).
PlotSpec logged(const PlotSpec& s) {
    PlotSpec t = s;
    auto lg = [](std::vector<double>& v) {
        for (double& x : v) x = x > 0 ? std::log10(x) : NAN;
    };
    for (PlotSeries& se : t.series) {
        if (s.log_x) lg(se.x);
        if (s.log_y) lg(se.y);
    }
    return t;
}

// Ticks of a logarithmic axis over [lo, hi] (log10 units): whole decades, at most about 7;
// over less than two decades also 2 and 5 times each.
std::vector<double> decade_ticks(double lo, double hi) {
    const double a = std::ceil(lo - 1e-9), b = std::floor(hi + 1e-9);
    const double step = std::max(1.0, std::ceil((b - a) / 6));
    std::vector<double> t;
    if (b - a >= 2) {
        for (double v = a; v <= b + 1e-9; v += step) t.push_back(v);
        return t;
    }
    for (double d = std::floor(lo); d <= hi; d += 1)
        for (double m : {1.0, 2.0, 5.0}) {
            const double v = d + std::log10(m);
            if (v >= lo - 1e-9 && v <= hi + 1e-9) t.push_back(v);
        }
    return t;
}

// Layout shared by both renderers (of the logged spec).
struct Frame {
    int W = 0, H = 0, left = 78, right = 24, top = 44, bottom = 58;
    double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
    bool log_x = false, log_y = false;
    std::vector<double> xt, yt;
    std::string xtick(double v) const { return fmt_tick(log_x ? std::pow(10.0, v) : v); }
    std::string ytick(double v) const { return fmt_tick(log_y ? std::pow(10.0, v) : v); }
    double px(double x) const { return left + (x - x0) / (x1 - x0) * (W - left - right); }
    double py(double y) const { return H - bottom - (y - y0) / (y1 - y0) * (H - top - bottom); }
};

Frame make_frame(const PlotSpec& s) {
    cli::require(s.width >= 200 && s.height >= 150 && s.width <= 8000 && s.height <= 8000,
                 "plot size must be within 200x150 .. 8000x8000");
    Frame f;
    f.W = s.width, f.H = s.height;
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    for (const PlotSeries& se : s.series) {
        cli::require(se.x.size() == se.y.size(), "plot series '", se.label,
                     "': x and y differ in length");
        for (size_t i = 0; i < se.x.size(); ++i)
            if (std::isfinite(se.x[i]) && std::isfinite(se.y[i])) {
                xlo = std::min(xlo, se.x[i]), xhi = std::max(xhi, se.x[i]);
                ylo = std::min(ylo, se.y[i]), yhi = std::max(yhi, se.y[i]);
            }
    }
    cli::require(std::isfinite(xlo), "nothing to plot (no finite points)");
    if (xhi == xlo) xhi = xlo + 1;
    if (yhi == ylo) yhi = ylo + 1;
    const double pad = 0.04 * (yhi - ylo);
    ylo -= pad, yhi += pad;
    f.log_x = s.log_x, f.log_y = s.log_y;
    f.xt = s.log_x ? decade_ticks(xlo, xhi) : nice_ticks(xlo, xhi);
    f.yt = s.log_y ? decade_ticks(ylo, yhi) : nice_ticks(ylo, yhi);
    f.x0 = xlo, f.x1 = xhi, f.y0 = ylo, f.y1 = yhi;
    auto inside = [](std::vector<double>& t, double lo, double hi) {
        t.erase(std::remove_if(t.begin(), t.end(),
                               [&](double v) {
                                   return v < lo - 1e-9 * (hi - lo) || v > hi + 1e-9 * (hi - lo);
                               }),
                t.end());
    };
    inside(f.xt, xlo, xhi);
    inside(f.yt, ylo, yhi);
    return f;
}

struct Raster {
    int W, H;
    std::vector<uint8_t> px;
    Raster(int w, int h) : W(w), H(h), px(size_t(w) * size_t(h) * 3, 255) {}
    void set(int x, int y, uint32_t rgb) {
        if (x < 0 || y < 0 || x >= W || y >= H) return;
        uint8_t* p = &px[(size_t(y) * size_t(W) + size_t(x)) * 3];
        p[0] = uint8_t(rgb >> 16), p[1] = uint8_t(rgb >> 8), p[2] = uint8_t(rgb);
    }
    void line(double xa, double ya, double xb, double yb, uint32_t rgb, int thick,
              bool dashed = false) {
        const int n = int(std::max(std::fabs(xb - xa), std::fabs(yb - ya))) + 1;
        for (int i = 0; i <= n; ++i) {
            if (dashed && (i / 6) % 2 == 1) continue;
            const double t = double(i) / n;
            const int x = int(std::lround(xa + t * (xb - xa))),
                      y = int(std::lround(ya + t * (yb - ya)));
            for (int dx = 0; dx < thick; ++dx)
                for (int dy = 0; dy < thick; ++dy) set(x + dx - thick / 2, y + dy - thick / 2, rgb);
        }
    }
    // Text at (x, y) = top-left, scale 2 (10×14 pixels per glyph, 12 advance).
    void text(int x, int y, const std::string& s, uint32_t rgb, int scale = 2) {
        for (char c : s) {
            if (c != ' ') {
                const uint8_t* g = glyph(c);
                for (int r = 0; r < 7; ++r)
                    for (int col = 0; col < 5; ++col)
                        if (g[r] & (16 >> col))
                            for (int a = 0; a < scale; ++a)
                                for (int b = 0; b < scale; ++b)
                                    set(x + col * scale + a, y + r * scale + b, rgb);
            }
            x += 6 * scale;
        }
    }
    static int text_width(const std::string& s, int scale = 2) { return int(s.size()) * 6 * scale; }
};

std::string xml_escape(const std::string& s) {
    std::string o;
    for (char c : s) {
        if (c == '&')
            o += "&amp;";
        else if (c == '<')
            o += "&lt;";
        else if (c == '>')
            o += "&gt;";
        else if (c == '"')
            o += "&quot;";
        else
            o += c;
    }
    return o;
}

std::string hex_color(uint32_t rgb) {
    char b[8];
    std::snprintf(b, sizeof b, "#%06x", rgb & 0xffffff);
    return b;
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target) {
    cli::require(std::isfinite(lo) && std::isfinite(hi) && hi > lo && target >= 2,
                 "nice_ticks: bad range");
    const double raw = (hi - lo) / target;
    const double mag = std::pow(10.0, std::floor(std::log10(raw)));
    double step = mag;
    for (double m : {1.0, 2.0, 5.0, 10.0})
        if (m * mag >= raw) {
            step = m * mag;
            break;
        }
    std::vector<double> t;
    for (double v = std::ceil(lo / step) * step; v <= hi + 1e-9 * step; v += step)
        t.push_back(std::fabs(v) < 1e-12 * step ? 0.0 : v);
    return t;
}

std::vector<uint8_t> plot_raster(const PlotSpec& spec) {
    const PlotSpec s = logged(spec);
    const Frame f = make_frame(s);
    Raster r(s.width, s.height);
    const uint32_t grid = 0xe6e6e6, axis = 0x333333, ink = 0x222222;
    const int L = f.left, R = f.W - f.right, T = f.top, B = f.H - f.bottom;
    for (double v : f.yt) {
        const double y = f.py(v);
        r.line(L, y, R, y, grid, 1);
        const std::string t = f.ytick(v);
        r.text(L - 8 - Raster::text_width(t), int(y) - 7, t, ink);
    }
    for (double v : f.xt) {
        const double x = f.px(v);
        r.line(x, T, x, B, grid, 1);
        const std::string t = f.xtick(v);
        r.text(int(x) - Raster::text_width(t) / 2, B + 8, t, ink);
    }
    r.line(L, B, R, B, axis, 1);
    r.line(L, T, L, B, axis, 1);
    r.text((L + R) / 2 - Raster::text_width(s.xlabel) / 2, B + 30, s.xlabel, ink);
    r.text(6, T - 24, s.ylabel, ink);
    r.text((L + R) / 2 - Raster::text_width(s.title) / 2, 10, s.title, ink);
    for (const PlotSeries& se : s.series) {
        bool have = false;
        double lx = 0, ly = 0;
        for (size_t i = 0; i < se.x.size(); ++i) {
            if (!std::isfinite(se.x[i]) || !std::isfinite(se.y[i])) continue;
            const double x = f.px(se.x[i]), y = f.py(se.y[i]);
            if (have) r.line(lx, ly, x, y, se.rgb, 2, se.dashed);
            if (se.x.size() < 60) r.line(x - 2, y, x + 2, y, se.rgb, 3);  // visible points
            lx = x, ly = y, have = true;
        }
    }
    int ly = T + 8;
    for (const PlotSeries& se : s.series) {
        const int w = Raster::text_width(se.label);
        r.line(R - w - 44, ly + 7, R - w - 14, ly + 7, se.rgb, 3, se.dashed);
        r.text(R - w - 6, ly, se.label, ink);
        ly += 20;
    }
    return r.px;
}

void write_plot_png(const PlotSpec& spec, const std::string& path) {
    const std::vector<uint8_t> px = plot_raster(spec);
    png_image img;
    std::memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    img.width = png_uint_32(spec.width);
    img.height = png_uint_32(spec.height);
    img.format = PNG_FORMAT_RGB;
    png_alloc_size_t n = 0;
    cli::require(png_image_write_get_memory_size(img, n, 0, px.data(), 0, nullptr) != 0,
                 "cannot encode the PNG: ", img.message);
    std::string bytes(size_t(n), '\0');
    cli::require(png_image_write_to_memory(&img, bytes.data(), &n, 0, px.data(), 0, nullptr) != 0,
                 "cannot encode the PNG: ", img.message);
    bytes.resize(size_t(n));
    api::write_file_atomic(path, bytes);
}

std::string plot_svg(const PlotSpec& spec) {
    const PlotSpec s = logged(spec);
    const Frame f = make_frame(s);
    const int L = f.left, R = f.W - f.right, T = f.top, B = f.H - f.bottom;
    std::ostringstream o;
    o.precision(6);
    o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << f.W << "\" height=\"" << f.H
      << "\" viewBox=\"0 0 " << f.W << " " << f.H << "\" font-family=\"sans-serif\" "
      << "font-size=\"13\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    o << "<text x=\"" << (L + R) / 2 << "\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">"
      << xml_escape(s.title) << "</text>\n";
    for (double v : f.yt)
        o << "<line x1=\"" << L << "\" x2=\"" << R << "\" y1=\"" << f.py(v) << "\" y2=\"" << f.py(v)
          << "\" stroke=\"#e6e6e6\"/><text x=\"" << L - 6 << "\" y=\"" << f.py(v) + 4
          << "\" text-anchor=\"end\">" << f.ytick(v) << "</text>\n";
    for (double v : f.xt)
        o << "<line x1=\"" << f.px(v) << "\" x2=\"" << f.px(v) << "\" y1=\"" << T << "\" y2=\"" << B
          << "\" stroke=\"#e6e6e6\"/><text x=\"" << f.px(v) << "\" y=\"" << B + 18
          << "\" text-anchor=\"middle\">" << f.xtick(v) << "</text>\n";
    o << "<path d=\"M" << L << " " << T << " L" << L << " " << B << " L" << R << " " << B
      << "\" fill=\"none\" stroke=\"#333333\"/>\n";
    o << "<text x=\"" << (L + R) / 2 << "\" y=\"" << B + 42 << "\" text-anchor=\"middle\">"
      << xml_escape(s.xlabel) << "</text>\n";
    o << "<text x=\"16\" y=\"" << (T + B) / 2
      << "\" text-anchor=\"middle\" transform=\"rotate(-90 16 " << (T + B) / 2 << ")\">"
      << xml_escape(s.ylabel) << "</text>\n";
    int ly = T + 14;
    for (const PlotSeries& se : s.series) {
        std::ostringstream d;
        d.precision(7);
        bool first = true;
        for (size_t i = 0; i < se.x.size(); ++i) {
            if (!std::isfinite(se.x[i]) || !std::isfinite(se.y[i])) continue;
            d << (first ? "M" : " L") << f.px(se.x[i]) << " " << f.py(se.y[i]);
            first = false;
        }
        if (first) continue;
        o << "<path d=\"" << d.str() << "\" fill=\"none\" stroke=\"" << hex_color(se.rgb)
          << "\" stroke-width=\"1.8\"" << (se.dashed ? " stroke-dasharray=\"6 4\"" : "")
          << "><title>" << xml_escape(se.label) << "</title></path>\n";
        o << "<line x1=\"" << R - 210 << "\" x2=\"" << R - 180 << "\" y1=\"" << ly - 4 << "\" y2=\""
          << ly - 4 << "\" stroke=\"" << hex_color(se.rgb) << "\" stroke-width=\"3\""
          << (se.dashed ? " stroke-dasharray=\"6 4\"" : "") << "/><text x=\"" << R - 172
          << "\" y=\"" << ly << "\">" << xml_escape(se.label) << "</text>\n";
        ly += 18;
    }
    o << "</svg>\n";
    return o.str();
}

void write_plot(const PlotSpec& spec, const std::string& path) {
    auto ends = [&](const char* e) {
        const size_t n = std::strlen(e);
        if (path.size() < n) return false;
        std::string tail = path.substr(path.size() - n);
        for (char& c : tail) c = char(std::tolower(static_cast<unsigned char>(c)));
        return tail == e;
    };
    if (ends(".png"))
        write_plot_png(spec, path);
    else if (ends(".svg"))
        api::write_file_atomic(path, plot_svg(spec));
    else
        cli::fail(path, ": the plot file must end in .png or .svg");
}

std::vector<double> cli::moving_average(const std::vector<double>& y, int64_t window) {
    if (window <= 1) return y;
    std::vector<double> out(y.size());
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) {
        s += y[i];
        if (i >= size_t(window)) s -= y[i - size_t(window)];
        out[i] = s / double(std::min<size_t>(i + 1, size_t(window)));
    }
    return out;
}

namespace cli {

PlotSpec audit_axes(const std::string& title) {
    PlotSpec spec;
    spec.title = title;
    spec.xlabel = "tokens seen";
    spec.ylabel = "value";
    spec.log_x = spec.log_y = true;
    return spec;
}

void add_audit_curves(PlotSpec& spec, const std::vector<AuditCurve>& curves,
                      const std::string& prefix, bool dashed) {
    constexpr uint32_t kColors[] = {0xd62728, 0x1f77b4, 0x17becf, 0x2ca02c, 0x9467bd, 0xff7f0e};
    size_t k = 0;
    for (const AuditCurve& c : curves) {
        PlotSeries s;
        s.x = c.x;
        s.y = c.y;
        s.rgb = kColors[k++ % (sizeof kColors / sizeof kColors[0])];
        s.dashed = dashed;
        s.label = prefix + c.label;
        spec.series.push_back(std::move(s));
    }
}

}  // namespace cli

}  // namespace pldr
