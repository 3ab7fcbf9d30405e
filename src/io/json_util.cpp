// See json_util.h.
#include "io/json_util.h"

#include <string>
#include <unordered_set>
#include <vector>

#include "core/error.h"

namespace pldr {

namespace {
struct TooDeep {};
}  // namespace

nlohmann::ordered_json parse_json_strict(std::string_view text, const std::string& what) {
    using J = nlohmann::ordered_json;
    std::vector<std::unordered_set<std::string>> keys;  // the keys seen in each open object
    std::string dup;
    auto cb = [&](int depth, J::parse_event_t ev, J& parsed) {
        if (depth > kMaxJsonDepth) throw TooDeep{};
        if (ev == J::parse_event_t::object_start) {
            keys.emplace_back();
        } else if (ev == J::parse_event_t::object_end) {
            if (!keys.empty()) keys.pop_back();
        } else if (ev == J::parse_event_t::key && !keys.empty()) {
            const std::string& k = parsed.get_ref<const std::string&>();
            if (!keys.back().insert(k).second && dup.empty()) dup = k;
        }
        return true;
    };
    J j;
    try {
        j = J::parse(text.begin(), text.end(), cb);
    } catch (const TooDeep&) {
        fail(what, ": malformed JSON: nested deeper than ", kMaxJsonDepth, " levels");
    } catch (const std::exception& e) {
        fail(what, ": malformed JSON: ", e.what());
    }
    if (!dup.empty()) fail(what, ": duplicate key '", dup, "'");
    return j;
}

std::string json_excerpt(const nlohmann::ordered_json& j, size_t max_chars) {
    std::string s = j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    if (s.size() > max_chars) s = s.substr(0, max_chars) + "...";
    return s;
}

}  // namespace pldr
