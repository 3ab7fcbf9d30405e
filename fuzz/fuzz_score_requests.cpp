// Fuzz target: a JSONL file of score requests (pldr score --requests).
#include "fuzz_util.h"
#include "infer/requests.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace pldr;
    return fuzz::guarded([&] {
        auto r = parse_score_requests({reinterpret_cast<const char*>(data), size}, "fuzz.jsonl");
        for (const auto& q : r)
            if (q.has_ids ? q.continuation_ids.empty() : q.continuation.empty()) std::abort();
    });
}
