// pldr inspect MODEL_DIR: the config, the parameter count by group and the tensor table.
#include <cstdio>

#include "common.h"

namespace pldr::cli {

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) {
        if (i) r += ',';
        r += std::to_string(s[i]);
    }
    return r + "]";
}

}  // namespace

void add_inspect(CLI::App& app) {
    auto* cmd =
        app.add_subcommand("inspect", "show a model directory: config, parameters, tensors");
    auto dir = std::make_shared<std::string>();
    cmd->add_option("MODEL_DIR", *dir, "model directory (config.json + model.safetensors)")
        ->required();
    cmd->callback([dir]() {
        const api::ModelDirInfo mi = api::inspect_model_dir(*dir);
        std::printf("model directory: %s\n", mi.dir.c_str());
        std::printf("weights: %s%s\n", mi.weights_path.c_str(), mi.sharded ? " (sharded)" : "");
        std::printf("tokenizer: %s\n",
                    mi.tokenizer_path.empty() ? "(none)" : mi.tokenizer_path.c_str());
        std::printf("variant: %s\n",
                    mi.learned_g ? "PLDR-LLM v510 (learned G_LM)"
                                 : ("fixed G_LM (custom_G_type " + mi.g_type + ")").c_str());
        std::printf("\nconfig.json:\n%s\n", mi.config_json.c_str());
        std::printf("\nparameters by group:\n");
        for (const auto& [g, n] : mi.param_groups)
            std::printf("  %-16s %14lld  %6.2f%%\n", g.c_str(), (long long)n,
                        100.0 * double(n) / double(mi.num_params));
        std::printf("  %-16s %14lld\n", "total", (long long)mi.num_params);
        std::printf("\ntensors:\n");
        for (const auto& t : mi.tensors)
            std::printf("  %-64s %-5s %s\n", t.name.c_str(), t.dtype.c_str(),
                        shape_text(t.shape).c_str());
        return 0;
    });
}

}  // namespace pldr::cli
