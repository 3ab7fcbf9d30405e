// JSON parsing shared by the io readers: nlohmann's parser plus a check that no object repeats
// a key (nlohmann would keep the last one silently), a nesting limit, and (for the
// insertion-ordered type) a key-count limit per object, so that hostile input can neither
// exhaust the stack nor make parsing quadratic.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace pldr {

// The deepest nesting any pldr file format needs is 3; deeper input is refused before it can
// exhaust the stack of a recursive consumer (dump, comparison).
inline constexpr int kMaxJsonDepth = 64;
// nlohmann::ordered_json inserts each key with a linear search of its object: an object with n
// keys costs n²/2 comparisons. Ordered parses are for small files whose key order matters
// (config.json, TruthfulQA targets); they refuse larger objects.
inline constexpr size_t kMaxOrderedJsonObjectKeys = 4096;

// Parses `text` keeping key order; on bad JSON, a duplicate key, nesting deeper than
// kMaxJsonDepth or an object with more than kMaxOrderedJsonObjectKeys keys throws pldr::Error
// "<what>: malformed JSON: ...", "<what>: duplicate key '<k>'" or "<what>: an object with more
// than ... keys".
nlohmann::ordered_json parse_json_strict(std::string_view text, const std::string& what);
// The same checks, keys sorted (std::map: linear-logarithmic whatever the object size), and at
// most `max_top_level_keys` keys in a top-level object (the parse stops there). For large
// inputs: safetensors headers, sharded indexes, JSONL lines.
nlohmann::json parse_json_strict_map(std::string_view text, const std::string& what,
                                     size_t max_top_level_keys = size_t(-1));

// A JSON value as text for an error message, cut to `max_chars`.
std::string json_excerpt(const nlohmann::ordered_json& j, size_t max_chars = 80);
std::string json_excerpt(const nlohmann::json& j, size_t max_chars = 80);

}  // namespace pldr
