// Fuzz target: config.json. A config that parses must write back and parse to the same config
// (a wrong round trip aborts), and its tensor count must be computable without building names.
#include "fuzz_util.h"
#include "io/config_json.h"
#include "io/param_names.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace pldr;
    const std::string text(reinterpret_cast<const char*>(data), size);
    return fuzz::guarded([&] {
        const Config c = config_from_json(text, "fuzz/config.json");
        const std::string back = config_to_json(c);
        const Config c2 = config_from_json(back, "fuzz/config.json (written back)");
        if (config_to_json(c2) != back) {
            std::fprintf(stderr, "config round trip differs\n");
            std::abort();
        }
        const double n = expected_tensor_count(c);
        if (!(n >= 1)) std::abort();
    });
}
