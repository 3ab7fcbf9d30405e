// Fuzz target: a G-cache file (pldr generate --save-g-cache), loaded for a learned-G_LM model
// (tests/golden a_tiny_v510) and for a fixed-G_LM one (c_tiny_v510G_identity).
#include "fuzz_util.h"
#include "infer/session.h"
#include "io/config_json.h"

#ifndef PLDR_SOURCE_DIR
#error "PLDR_SOURCE_DIR must be defined"
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace pldr;
    static const Config learned =
        load_config(PLDR_SOURCE_DIR "/tests/golden/models/a_tiny_v510.f32/config.json");
    static const Config fixed =
        load_config(PLDR_SOURCE_DIR "/tests/golden/models/c_tiny_v510G_identity.f32/config.json");
    const std::string p =
        fuzz::write_bytes("g.safetensors", {reinterpret_cast<const char*>(data), size});
    fuzz::guarded([&] { (void)load_g_cache<float>(p, learned); });
    return fuzz::guarded([&] { (void)load_g_cache<double>(p, fixed); });
}
