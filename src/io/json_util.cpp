// See json_util.h.
#include "io/json_util.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace pldr {

nlohmann::ordered_json parse_json_strict(std::string_view text, const std::string& what) {
    using J = nlohmann::ordered_json;
    std::vector<std::vector<std::string>> keys;  // the keys seen in each open object
    std::string dup;
    auto cb = [&](int /*depth*/, J::parse_event_t ev, J& parsed) {
        if (ev == J::parse_event_t::object_start) {
            keys.emplace_back();
        } else if (ev == J::parse_event_t::object_end) {
            if (!keys.empty()) keys.pop_back();
        } else if (ev == J::parse_event_t::key && !keys.empty()) {
            const std::string& k = parsed.get_ref<const std::string&>();
            auto& ks = keys.back();
            if (dup.empty() && std::find(ks.begin(), ks.end(), k) != ks.end()) dup = k;
            ks.push_back(k);
        }
        return true;
    };
    J j;
    try {
        j = J::parse(text.begin(), text.end(), cb);
    } catch (const std::exception& e) {
        fail(what, ": malformed JSON: ", e.what());
    }
    if (!dup.empty()) fail(what, ": duplicate key '", dup, "'");
    return j;
}

}  // namespace pldr
