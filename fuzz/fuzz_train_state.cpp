// Fuzz target: a checkpoint's train_state.safetensors, beside a fixed model written by a real
// `pldr train` run (fuzz/data/train_state_model): loaded as `pldr train --resume` does (state
// metadata, moments, stored options, data position).
#include <filesystem>

#include "core/fs.h"
#include "fuzz_util.h"
#include "train/checkpoint.h"
#include "train/trainer_loop.h"

#ifndef PLDR_SOURCE_DIR
#error "PLDR_SOURCE_DIR must be defined"
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace pldr;
    namespace fs = std::filesystem;
    static const std::string dir = [] {
        const std::string d = fuzz::scratch() + "/ckpt";
        fs::create_directories(d);
        for (const char* f : {"config.json", "model.safetensors"})
            fs::copy_file(fs::path(PLDR_SOURCE_DIR "/fuzz/data/train_state_model") / f,
                          fs::path(d) / f, fs::copy_options::overwrite_existing);
        return d;
    }();
    fuzz::write_bytes("ckpt/train_state.safetensors", {reinterpret_cast<const char*>(data), size});
    return fuzz::guarded([&] {
        const CheckpointInfo peek = read_checkpoint_info(dir);
        (void)peek;
        Model<float> m;
        AdamWState<float> opt;
        const CheckpointInfo ck = load_checkpoint<float>(dir, &m, &opt);
        TrainOptions o;
        apply_checkpoint_options(o, ck.options_json, dir);
        check_checkpoint_position(ck, o, dir);
    });
}
