// Fuzz target: a whole model directory, sharded or not. The input is split into parts
// (fuzz_util.h kSep): config.json, then model.safetensors.index.json (an empty part: none, and
// then the next part is model.safetensors), then up to three shards s1/s2/s3.safetensors.
// The directory is opened, checked against the config and loaded as `pldr` does.
#include <filesystem>

#include "fuzz_util.h"
#include "io/model_dir.h"
#include "io/model_load.h"
#include "io/param_names.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace pldr;
    namespace fs = std::filesystem;
    const auto parts = fuzz::split_parts({reinterpret_cast<const char*>(data), size}, 5);
    const std::string dir = fuzz::scratch() + "/model";
    std::error_code ec;
    fs::remove_all(dir, ec);
    fs::create_directories(dir);
    fuzz::write_bytes("model/config.json", parts[0]);
    if (parts.size() > 1) {
        if (!parts[1].empty()) {
            fuzz::write_bytes("model/model.safetensors.index.json", parts[1]);
            for (size_t i = 2; i < parts.size(); ++i)
                fuzz::write_bytes("model/s" + std::to_string(i - 1) + ".safetensors", parts[i]);
        } else if (parts.size() > 2) {
            fuzz::write_bytes("model/model.safetensors", parts[2]);
        }
    }
    return fuzz::guarded([&] {
        ModelFiles mf(dir);
        (void)param_problems(mf);
        Model<float> m = load_model<float>(dir);
        (void)m;
    });
}
