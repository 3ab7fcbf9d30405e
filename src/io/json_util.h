// JSON parsing shared by the io readers: nlohmann's parser plus a check that no object repeats
// a key (nlohmann would keep the last one silently) and a nesting limit (hostile input).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace pldr {

// The deepest nesting any pldr file format needs is 3; deeper input is refused before it can
// exhaust the stack of a recursive consumer (dump, comparison).
inline constexpr int kMaxJsonDepth = 64;

// Parses `text`; on bad JSON, a duplicate key or nesting deeper than kMaxJsonDepth throws
// pldr::Error "<what>: malformed JSON: ..." or "<what>: duplicate key '<k>'".
nlohmann::ordered_json parse_json_strict(std::string_view text, const std::string& what);

// A JSON value as text for an error message, cut to `max_chars`.
std::string json_excerpt(const nlohmann::ordered_json& j, size_t max_chars = 80);

}  // namespace pldr
