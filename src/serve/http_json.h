// The JSON side of `pldr serve`'s requests and responses: the refusal of a request (an HTTP
// status, an OpenAI error type, one line), the error bodies, and the field readers, each of which
// names the field and quotes at most a short prefix of the value it got. The option sets' JSON
// fields are read from their tables (JsonOptions).
#pragma once
#include <httplib.h>

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "pldr/pldr.hpp"
#include "serve/engine.h"

namespace pldr::serve {

using json = nlohmann::ordered_json;

// A request the server refuses: HTTP status, OpenAI error type, one-line message.
struct HttpError {
    int status;
    std::string type, message;
};

[[noreturn]] inline void bad(const std::string& msg) {
    throw HttpError{400, "invalid_request_error", msg};
}

// The JSON text of a response. Bytes that are not UTF-8 become U+FFFD instead of throwing
// (nlohmann's default): a request's bytes quoted in a JSON parse error, a path, a decoded text.
inline std::string dump(const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

inline std::string error_body(const std::string& type, const std::string& msg) {
    json j;
    j["error"] = {{"message", msg}, {"type", type}};
    return dump(j);
}

inline const char* type_for(int status) {
    switch (status) {
        case 404:
            return "not_found_error";
        case 405:
            return "method_not_allowed";
        case 413:
            return "request_too_large";
        case 429:
            return "rate_limit_error";
        case 503:
            return "unavailable_error";
        default:
            return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

// The body of an error response that no handler filled (no route, body too large).
inline void fill_error(const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string msg = res.status == 404   ? "no route for " + req.method + " " + req.path
                      : res.status == 413 ? "request body is larger than the limit (--max-body)"
                      : res.status == 405 ? "method " + req.method + " not allowed on " + req.path
                                          : "bad request";
    res.set_content(error_body(type_for(res.status), msg), "application/json");
}

// ---- field readers (each names the field and the value it got) ----

// The deepest nesting of arrays and objects that a request body may have. nlohmann's dump (and
// so every error message that quotes a value) recurses once per level: a body of 200 KB nested
// 100,000 deep once ended the server with SIGSEGV.
constexpr int kMaxJsonDepth = 64;

// Refuses a body that nests arrays and objects deeper than kMaxJsonDepth, before the parser sees
// it: counts '[' and '{' outside strings, in one pass with no recursion. (A closing bracket
// without an opening one is bad JSON, which the parser refuses at that byte.)
inline void check_depth(const std::string& body) {
    int depth = 0;
    bool in_string = false;
    for (size_t i = 0; i < body.size(); ++i) {
        const char c = body[i];
        if (in_string) {
            if (c == '\\')
                ++i;  // the escaped byte cannot end the string
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > kMaxJsonDepth)
                bad("request body nests arrays and objects deeper than " +
                    std::to_string(kMaxJsonDepth) + " levels");
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        }
    }
}

// At most n bytes of s, not cut inside a UTF-8 sequence, with "..." when cut.
inline std::string cut(const std::string& s, size_t n) {
    if (s.size() <= n) return s;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
    return s.substr(0, n) + "...";
}

// The start of a value's JSON text, built from at most the first few bytes of each string and
// the first few elements of each array or object, three levels deep at most: never the whole
// value (a megabyte string, a long list) and no deep recursion.
inline std::string brief_text(const json& v, int level) {
    if (v.is_string()) return dump(json(cut(v.get_ref<const std::string&>(), 40)));
    if (!v.is_array() && !v.is_object()) return dump(v);
    const bool arr = v.is_array();
    if (v.empty()) return arr ? "[]" : "{}";
    if (level >= 3) return arr ? "[...]" : "{...}";
    std::string s = arr ? "[" : "{";
    size_t k = 0;
    for (auto it = v.begin(); it != v.end(); ++it, ++k) {
        if (k == 4 || s.size() > 40) return s + ",...";
        if (k) s += ",";
        if (!arr) s += dump(json(cut(it.key(), 40))) + ":";
        s += brief_text(*it, level + 1);
    }
    return s + (arr ? "]" : "}");
}

inline std::string brief(const json& v) {
    const std::string s = brief_text(v, 0);
    return s.size() <= 40 ? s : cut(s, 37);
}

inline bool get_bool(const json& b, const char* k, bool def) {
    if (!b.contains(k) || b[k].is_null()) return def;
    if (!b[k].is_boolean())
        bad(std::string("'") + k + "' must be a boolean (got " + brief(b[k]) + ")");
    return b[k].get<bool>();
}

inline double get_num(const json& b, const char* k, double def, double lo, double hi,
                      bool lo_open = false) {
    if (!b.contains(k) || b[k].is_null()) return def;
    if (!b[k].is_number())
        bad(std::string("'") + k + "' must be a number (got " + brief(b[k]) + ")");
    const double v = b[k].get<double>();
    if (!std::isfinite(v) || v < lo || v > hi || (lo_open && v == lo))
        bad(std::string("'") + k + "' must be in " + (lo_open ? "(" : "[") + json(lo).dump() +
            ", " + json(hi).dump() + "] (got " + brief(b[k]) + ")");
    return v;
}

inline int64_t get_int(const json& b, const char* k, int64_t def, int64_t lo, int64_t hi) {
    if (!b.contains(k) || b[k].is_null()) return def;
    const json& v = b[k];
    if (!v.is_number_integer() &&
        !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() &&
          std::abs(v.get<double>()) < 9e15))
        bad(std::string("'") + k + "' must be an integer (got " + brief(v) + ")");
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
        bad(std::string("'") + k + "' is out of range (got " + brief(v) + ")");
    const int64_t x = v.is_number_float() ? int64_t(v.get<double>()) : v.get<int64_t>();
    if (x < lo || x > hi)
        bad(std::string("'") + k + "' must be in [" + std::to_string(lo) + ", " +
            std::to_string(hi) + "] (got " + brief(v) + ")");
    return x;
}

// The JSON fields of an option set (the rows of pldr/options.h with PLDR_OPT_JSON), each read
// with its type and checked against its declared range; absent or null fields keep the value.
class JsonOptions {
  public:
    explicit JsonOptions(const json& body) : b_(body) {}
    template <typename T>
    void operator()(const api::OptionSpec& s, T& v) const {
        if constexpr (api::is_option_set<T>::value) {
            api::for_each_option(v, *this);
        } else if (s.on(PLDR_OPT_JSON) && b_.contains(s.name) && !b_[s.name].is_null()) {
            read(s, v);
            try {
                if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>)
                    api::check_option_value(s, v, std::string("'") + s.name + "'");
            } catch (const pldr::Error& e) {
                bad(e.what());
            }
        }
    }

  private:
    void read(const api::OptionSpec& s, bool& v) const { v = get_bool(b_, s.name, v); }
    void read(const api::OptionSpec& s, double& v) const {
        v = get_num(b_, s.name, v, -HUGE_VAL, HUGE_VAL);
    }
    void read(const api::OptionSpec& s, int64_t& v) const {
        v = get_int(b_, s.name, v, INT64_MIN, INT64_MAX);
    }
    // A seed: any integer of int64 or uint64 (a negative one wraps, as C's conversion does).
    void read(const api::OptionSpec& s, uint64_t& v) const {
        const json& x = b_[s.name];
        v = x.is_number_unsigned() ? x.get<uint64_t>()
                                   : uint64_t(get_int(b_, s.name, 0, INT64_MIN, INT64_MAX));
    }
    template <typename T>
    void read(const api::OptionSpec& s, T&) const {
        bad(std::string("'") + s.name + "' is not a request field");  // no such row is JSON
    }
    const json& b_;
};

inline std::vector<int64_t> id_list(const json& a, const Engine& e, const char* what) {
    std::vector<int64_t> ids;
    for (const auto& x : a) {
        if (!x.is_number_integer())
            bad(std::string(what) + " must hold integer token ids (got " + brief(x) + ")");
        const int64_t id = x.is_number_unsigned() && x.get<uint64_t>() > uint64_t(INT64_MAX)
                               ? -1
                               : x.get<int64_t>();
        if (id < 0 || id >= e.vocab_size())
            bad(std::string(what) + ": token id " + x.dump() + " is outside the vocabulary [0, " +
                std::to_string(e.vocab_size()) + ")");
        ids.push_back(id);
    }
    return ids;
}

}  // namespace pldr::serve
