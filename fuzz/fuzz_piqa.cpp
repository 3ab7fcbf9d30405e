// Fuzz target: the PIQA task files: the input is the JSONL items, then (after kSep) the labels.
#include "fuzz_util.h"
#include "infer/tasks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace pldr;
    const auto parts = fuzz::split_parts({reinterpret_cast<const char*>(data), size}, 2);
    const std::string j = fuzz::write_bytes("valid.jsonl", parts[0]);
    const std::string l = fuzz::write_bytes("valid-labels.lst", parts.size() > 1 ? parts[1] : "");
    return fuzz::guarded([&] { (void)load_piqa(j, l); });
}
