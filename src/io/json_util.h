// JSON parsing shared by the io readers: nlohmann's parser plus a check that no object repeats
// a key (nlohmann would keep the last one silently).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace pldr {

// Parses `text`; on bad JSON or a duplicate key throws pldr::Error "<what>: malformed JSON: ..."
// or "<what>: duplicate key '<k>'".
nlohmann::ordered_json parse_json_strict(std::string_view text, const std::string& what);

}  // namespace pldr
