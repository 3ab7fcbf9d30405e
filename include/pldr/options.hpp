// The C++ side of the option tables (pldr/options.h): the struct members and a visitor over
// them. Each surface walks a set with for_each_option and handles each member by its type:
//   - the CLI adds a flag per member whose cli spelling is set (tools/pldr/options_cli.h);
//   - the Python module reads the keyword arguments (python/);
//   - the server reads the JSON fields of a request body (src/serve);
//   - check_options checks every number against its declared range.
// A surface never lists the members of a set itself, so a new row of a table reaches them all.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "pldr/error.hpp"
#include "pldr/options.h"

namespace pldr::api {

// One row of a table, as the visitor sees it.
struct OptionSpec {
    const char* name;   // the C++ member, the Python keyword and the JSON field
    const char* cli;    // the flag ("" = none)
    const char* help;   // one line
    const char* range;  // the interval of a number ("" = any value of the type)
    unsigned surfaces;  // PLDR_OPT_CLI | PLDR_OPT_PY | PLDR_OPT_JSON
    bool on(unsigned surface) const { return (surfaces & surface) != 0; }
};

// The interval of a range string such as "[0, inf)" or "(0, 1]".
struct OptionRange {
    double lo = -INFINITY, hi = INFINITY;
    bool lo_open = true, hi_open = true;
    bool contains(double v) const {
        return !std::isnan(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
    }
};
inline OptionRange parse_option_range(const std::string& r) {
    OptionRange o;
    const size_t comma = r.find(',');
    auto bad = [&]() { throw std::logic_error("pldr: malformed option range \"" + r + "\""); };
    if (r.size() < 5 || comma == std::string::npos || (r[0] != '[' && r[0] != '(') ||
        (r.back() != ']' && r.back() != ')'))
        bad();
    o.lo_open = r[0] == '(';
    o.hi_open = r.back() == ')';
    auto num = [&](std::string s) {
        s.erase(0, s.find_first_not_of(' '));
        s.erase(s.find_last_not_of(' ') + 1);
        if (s == "inf") return double(INFINITY);
        if (s == "-inf") return -double(INFINITY);
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || !end || *end != 0) bad();
        return v;
    };
    o.lo = num(r.substr(1, comma - 1));
    o.hi = num(r.substr(comma + 1, r.size() - comma - 2));
    return o;
}

// "must be in <range> (got <value>)" when the value lies outside the row's range, else "".
template <typename T>
std::string option_range_error(const OptionSpec& s, T v) {
    static_assert(std::is_arithmetic_v<T>, "ranges are for numbers");
    if (!*s.range || parse_option_range(s.range).contains(double(v))) return {};
    std::ostringstream os;
    os << "must be in " << s.range << " (got " << v << ")";
    return os.str();
}
// The choices of a string row: its range "a|b|c" ("" among them where a leading or trailing |
// or "||" says so); "must be one of a, b, c (got 'x')" when the value is none of them, else "".
inline std::string option_choice_error(const OptionSpec& s, const std::string& v) {
    if (!*s.range) return {};
    const std::string r = s.range;
    std::string list;
    for (size_t b = 0;;) {
        const size_t e = std::min(r.find('|', b), r.size());
        const std::string c = r.substr(b, e - b);
        if (c == v) return {};
        if (!c.empty()) list += (list.empty() ? "" : ", ") + c;
        if (e == r.size()) break;
        b = e + 1;
    }
    return "must be one of " + list + " (got '" + v + "')";
}
// Throws pldr::Error("<spelling> must be in <range> (got <value>)") unless the value lies in
// the row's range. spelling: how the surface names it ("temperature", "'top_k'").
template <typename T>
void check_option_value(const OptionSpec& s, const T& v, const std::string& spelling) {
    std::string e;
    if constexpr (std::is_same_v<T, std::string>)
        e = option_choice_error(s, v);
    else
        e = option_range_error(s, v);
    if (!e.empty()) throw Error(spelling + " " + e);
}

// Specialized for the structs whose members are a table's rows (nested sets are visited).
template <typename T>
struct is_option_set : std::false_type {};

// Checks every number of a set (and of its nested sets) against its range, naming the member.
struct OptionRangeCheck {
    template <typename T>
    void operator()(const OptionSpec& s, const T& v) const;
};

// The members of a struct declared by a table, one call v(spec, member) each, in table order.
#define PLDR_VISIT_OPTION(K, n, d, r, s, cli, help) \
    v(::pldr::api::OptionSpec{#n, cli, help, r, s}, o.n);
#define PLDR_DEFINE_OPTION_VISIT(Fn, TABLE) \
    template <typename O, typename V>       \
    void Fn(O& o, V&& v) {                  \
        TABLE(PLDR_VISIT_OPTION)            \
    }
// for_each_option over a struct whose members are the rows of a table (visit: one of the visit_*
// functions above), for the struct and for its const.
#define PLDR_FOR_EACH_OPTION(Type, visit)        \
    template <typename V>                        \
    void for_each_option(Type& o, V&& v) {       \
        ::pldr::api::visit(o, v);                \
    }                                            \
    template <typename V>                        \
    void for_each_option(const Type& o, V&& v) { \
        ::pldr::api::visit(o, v);                \
    }

PLDR_DEFINE_OPTION_VISIT(visit_load_options, PLDR_LOAD_OPTIONS)
PLDR_DEFINE_OPTION_VISIT(visit_sampling_options, PLDR_SAMPLING_OPTIONS)
PLDR_DEFINE_OPTION_VISIT(visit_generate_options, PLDR_GENERATE_OPTIONS)
PLDR_DEFINE_OPTION_VISIT(visit_score_options, PLDR_SCORE_OPTIONS)
PLDR_DEFINE_OPTION_VISIT(visit_train_options, PLDR_TRAIN_OPTIONS)
PLDR_DEFINE_OPTION_VISIT(visit_serve_options, PLDR_SERVE_OPTIONS)

// The struct members of a table: PLDR_SAMPLING_OPTIONS(PLDR_CXX_OPTION) declares them with
// their defaults.
#define PLDR_CXX_TYPE_F64 double
#define PLDR_CXX_TYPE_I64 int64_t
#define PLDR_CXX_TYPE_U64 uint64_t
#define PLDR_CXX_TYPE_BOOL bool
#define PLDR_CXX_TYPE_STR std::string
#define PLDR_CXX_TYPE_STRS std::vector<std::string>
#define PLDR_CXX_TYPE_CACHE CacheMode
#define PLDR_CXX_TYPE_SCORE ScoreMode
#define PLDR_CXX_TYPE_SAMPLING SamplingOptions
#define PLDR_CXX_TYPE_DTYPE DType
#define PLDR_CXX_TYPE_CLIP ClipMode
#define PLDR_CXX_TYPE_DAG DagCoefficients
#define PLDR_CXX_INIT_F64(d) d
#define PLDR_CXX_INIT_I64(d) d
#define PLDR_CXX_INIT_U64(d) d
#define PLDR_CXX_INIT_BOOL(d) (d) != 0
#define PLDR_CXX_INIT_STR(d) d
#define PLDR_CXX_INIT_STRS(d) \
    {}
#define PLDR_CXX_INIT_CACHE(d) cache_mode_from_name(d)
#define PLDR_CXX_INIT_SCORE(d) score_mode_from_name(d)
#define PLDR_CXX_INIT_SAMPLING(d) \
    {}
#define PLDR_CXX_INIT_DTYPE(d) dtype_from_name(d)
#define PLDR_CXX_INIT_CLIP(d) clip_mode_from_name(d)
#define PLDR_CXX_INIT_DAG(d) \
    {}
#define PLDR_CXX_OPTION(K, n, d, r, s, cli, help) PLDR_CXX_TYPE_##K n = PLDR_CXX_INIT_##K(d);

template <typename T>
void OptionRangeCheck::operator()(const OptionSpec& s, const T& v) const {
    if constexpr ((std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) ||
                  std::is_same_v<T, std::string>)
        check_option_value(s, v, s.name);
    else if constexpr (is_option_set<T>::value)
        for_each_option(v, *this);
}

// Throws for the first member outside its range.
template <typename O>
void check_options(const O& o) {
    for_each_option(o, OptionRangeCheck{});
}

}  // namespace pldr::api
