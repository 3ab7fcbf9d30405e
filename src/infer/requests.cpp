// JSONL inputs (see requests.h).
#include "infer/requests.h"

#include <cstdint>

#include "core/error.h"
#include "io/json_util.h"

namespace pldr {

void for_each_jsonl_line(std::string_view text, const std::string& where,
                         const std::function<void(int64_t, std::string_view)>& f) {
    int64_t n = 0;
    size_t i = 0;
    while (i < text.size()) {
        size_t j = text.find('\n', i);
        if (j == std::string_view::npos) j = text.size();
        ++n;
        std::string_view line = text.substr(i, j - i);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        PLDR_REQUIRE(line.size() <= kMaxJsonlLineBytes, where, ":", n, ": line of ", line.size(),
                     " bytes exceeds the limit of ", kMaxJsonlLineBytes, " bytes");
        f(n, line);
        i = j + 1;
    }
}

std::vector<RawScoreRequest> parse_score_requests(std::string_view text, const std::string& where) {
    std::vector<RawScoreRequest> out;
    for_each_jsonl_line(text, where, [&](int64_t ln, std::string_view line) {
        if (line.find_first_not_of(" \t") == std::string_view::npos) return;
        const std::string at = cat(where, ":", ln);
        const nlohmann::json j = parse_json_strict_map(line, at);
        PLDR_REQUIRE(j.is_object(), at, ": expected a JSON object");
        RawScoreRequest r;
        r.line = ln;
        if (j.contains("context_ids") || j.contains("continuation_ids")) {
            PLDR_REQUIRE(j.contains("context_ids") && j.contains("continuation_ids") &&
                             j["context_ids"].is_array() && j["continuation_ids"].is_array(),
                         at, ": needs context_ids and continuation_ids arrays");
            PLDR_REQUIRE(j["context_ids"].size() + j["continuation_ids"].size() <= kMaxRequestIds,
                         at, ": more than ", kMaxRequestIds, " token ids");
            r.has_ids = true;
            for (const char* k : {"context_ids", "continuation_ids"})
                for (const auto& x : j[k]) {
                    PLDR_REQUIRE(x.is_number_integer(), at, ": ", k, " must be integers");
                    PLDR_REQUIRE(x.is_number_unsigned() && x.get<uint64_t>() <= uint64_t(INT64_MAX),
                                 at, ": ", k, " must be non-negative token ids");
                    (std::string(k) == "context_ids" ? r.context_ids : r.continuation_ids)
                        .push_back(x.get<int64_t>());
                }
            PLDR_REQUIRE(!r.continuation_ids.empty(), at, ": empty continuation");
        } else {
            PLDR_REQUIRE(j.contains("context") && j.contains("continuation") &&
                             j["context"].is_string() && j["continuation"].is_string(),
                         at, ": needs \"context\" and \"continuation\" strings (or token ids)");
            r.context = j["context"].get<std::string>();
            r.continuation = j["continuation"].get<std::string>();
            PLDR_REQUIRE(!r.continuation.empty(), at, ": empty continuation");
        }
        out.push_back(std::move(r));
    });
    PLDR_REQUIRE(!out.empty(), where, ": no requests");
    return out;
}

}  // namespace pldr
