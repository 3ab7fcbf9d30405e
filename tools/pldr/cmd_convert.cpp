// pldr convert MODEL_DIR --dtype f32|bf16|q8 --out DIR: the model directory with its linear
// weights (q, k, v, o, FFN, LM head) stored as float32, bfloat16 or q8_0 (int8 blocks of 32 with
// a float32 scale); everything else float32 (api::convert_model, docs/formats.md).
#include <cstdio>

#include "common.h"

namespace pldr::cli {

namespace {

struct ConvertArgs {
    std::string dir, out, dtype;
    bool force = false;
};

int run_convert(const ConvertArgs& a) {
    {
        api::Inputs in;
        in.dir(a.dir);
        in.check_dir(a.out, "--out", {"config.json", "model.safetensors", "tokenizer.model"},
                     a.force);
    }
    const api::ConvertResult r = api::convert_model(a.dir, a.out, a.dtype, a.force);
    std::printf("converted %s → %s: linear weights %s", a.dir.c_str(), a.out.c_str(),
                r.dtype.c_str());
    if (r.packed_tensors > 0)
        std::printf(" (%lld tensors, %lld weights, %.2f bytes per weight)",
                    (long long)r.packed_tensors, (long long)r.packed_params,
                    double(r.packed_bytes) / double(r.packed_params));
    std::printf("; tensors %.2f MB → %.2f MB\n", double(r.bytes_in) / 1e6,
                double(r.bytes_out) / 1e6);
    return 0;
}

}  // namespace

void add_convert(CLI::App& app) {
    auto a = std::make_shared<ConvertArgs>();
    auto* cmd = app.add_subcommand(
        "convert", "write a model directory with its linear weights as f32, bf16 or q8 (q8_0)");
    cmd->add_option("MODEL_DIR", a->dir, "model directory")->required();
    cmd->add_option("--dtype", a->dtype,
                    "f32: every tensor float32; bf16: linear weights bfloat16; q8: linear weights "
                    "int8 in blocks of 32 with a float32 scale (q8_0)")
        ->required()
        ->check(CLI::IsMember({"f32", "bf16", "q8"}));
    cmd->add_option("--out", a->out, "output model directory")->required()->check(output_path());
    add_force(cmd, &a->force);
    cmd->callback([a]() { return run_convert(*a); });
}

}  // namespace pldr::cli
