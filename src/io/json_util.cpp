// See json_util.h.
#include "io/json_util.h"

#include <string>
#include <unordered_set>
#include <vector>

#include "core/error.h"

namespace pldr {

namespace {

struct TooDeep {};
struct TooManyKeys {};

// The shared strict parse: duplicate keys (a hash set per open object), nesting depth, and for
// the insertion-ordered type (whose objects are vectors searched linearly on every insertion)
// a per-object key limit that keeps parsing linear in the input.
template <typename J>
J parse_strict(std::string_view text, const std::string& what, size_t max_keys,
               size_t max_top_keys) {
    std::vector<std::unordered_set<std::string>> keys;  // the keys seen in each open object
    std::string dup;
    auto cb = [&](int depth, typename J::parse_event_t ev, J& parsed) {
        // depth: 0 for the top-level value's own events, +1 inside each container.
        if (depth >= kMaxJsonDepth) throw TooDeep{};
        if (ev == J::parse_event_t::object_start) {
            keys.emplace_back();
        } else if (ev == J::parse_event_t::object_end) {
            if (!keys.empty()) keys.pop_back();
        } else if (ev == J::parse_event_t::key && !keys.empty()) {
            const std::string& k = parsed.template get_ref<const std::string&>();
            if (!keys.back().insert(k).second && dup.empty()) dup = k;
            if (keys.back().size() > (keys.size() == 1 ? max_top_keys : max_keys))
                throw TooManyKeys{};
        }
        return true;
    };
    J j;
    try {
        j = J::parse(text.begin(), text.end(), cb);
    } catch (const TooDeep&) {
        fail(what, ": malformed JSON: nested deeper than ", kMaxJsonDepth, " levels");
    } catch (const TooManyKeys&) {
        fail(what, ": an object with more than ", keys.size() <= 1 ? max_top_keys : max_keys,
             " keys");
    } catch (const std::exception& e) {
        fail(what, ": malformed JSON: ", e.what());
    }
    if (!dup.empty()) fail(what, ": duplicate key '", dup, "'");
    return j;
}

}  // namespace

nlohmann::ordered_json parse_json_strict(std::string_view text, const std::string& what) {
    return parse_strict<nlohmann::ordered_json>(text, what, kMaxOrderedJsonObjectKeys,
                                                kMaxOrderedJsonObjectKeys);
}

nlohmann::json parse_json_strict_map(std::string_view text, const std::string& what,
                                     size_t max_top_level_keys) {
    return parse_strict<nlohmann::json>(text, what, size_t(-1), max_top_level_keys);
}

std::string json_excerpt(const nlohmann::ordered_json& j, size_t max_chars) {
    std::string s = j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    if (s.size() > max_chars) s = s.substr(0, max_chars) + "...";
    return s;
}

std::string json_excerpt(const nlohmann::json& j, size_t max_chars) {
    std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (s.size() > max_chars) s = s.substr(0, max_chars) + "...";
    return s;
}

}  // namespace pldr
