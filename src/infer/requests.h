// JSONL inputs: lm-eval style score requests (pldr score --requests) and the line splitter shared
// by every JSONL reader (PIQA, requests), with a hard line-length limit.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace pldr {

// The longest JSONL line accepted (bytes, excluding the newline); longer lines are refused
// before they are parsed.
inline constexpr size_t kMaxJsonlLineBytes = size_t(16) << 20;
// The most token ids a single request may list (context + continuation); a model context is far
// shorter, this only bounds what is held before the model checks it.
inline constexpr size_t kMaxRequestIds = size_t(1) << 20;

// Calls f(line_number, line) for every line of `text` (1-based; a trailing '\r' removed); throws
// "<where>:<n>: line of N bytes exceeds the limit of ... bytes" for an over-long line.
void for_each_jsonl_line(std::string_view text, const std::string& where,
                         const std::function<void(int64_t, std::string_view)>& f);

// One request as written: token ids ({"context_ids", "continuation_ids"}) or text
// ({"context", "continuation"}).
struct RawScoreRequest {
    int64_t line = 0;
    bool has_ids = false;
    std::vector<int64_t> context_ids, continuation_ids;
    std::string context, continuation;
};

// Parses score requests. Blank lines are skipped; every other line must be a JSON object of one
// of the two forms (ids: arrays of non-negative integers; text: strings) with a non-empty
// continuation. Errors: "<where>:<line>: <problem>". At least one request is required.
std::vector<RawScoreRequest> parse_score_requests(std::string_view text, const std::string& where);

}  // namespace pldr
