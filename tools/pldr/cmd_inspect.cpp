// pldr inspect MODEL_DIR: the config, the parameter count by group and the tensor table.
#include <cstdio>
#include <map>

#include "io/config_json.h"
#include "io/model_dir.h"
#include "io/param_names.h"
#include "legacy.h"

namespace pldr::cli {

void add_inspect(CLI::App& app) {
    auto* cmd =
        app.add_subcommand("inspect", "show a model directory: config, parameters, tensors");
    auto dir = std::make_shared<std::string>();
    cmd->add_option("MODEL_DIR", *dir, "model directory (config.json + model.safetensors)")
        ->required();
    cmd->callback([dir]() {
        ModelFiles mf(*dir);
        check_params_against_file(mf);
        const Config& c = mf.config();
        std::printf("model directory: %s\n", mf.dir().c_str());
        std::printf("weights: %s%s\n", mf.weights_path().c_str(), mf.sharded() ? " (sharded)" : "");
        std::printf("tokenizer: %s\n",
                    mf.tokenizer_path().empty() ? "(none)" : mf.tokenizer_path().c_str());
        std::printf("variant: %s\n", c.learned_g() ? "PLDR-LLM v510 (learned G_LM)"
                                                   : (std::string("fixed G_LM (custom_G_type ") +
                                                      g_type_name(c.g_type) + ")")
                                                         .c_str());
        std::printf("\nconfig.json:\n%s\n", config_to_json(c).c_str());
        std::map<std::string, int64_t> groups;
        int64_t total = 0;
        for (const auto& p : expected_params(c)) {
            if (p.buffer) continue;
            groups[param_group(p.name)] += shape_numel(p.shape);
            total += shape_numel(p.shape);
        }
        std::printf("\nparameters by group:\n");
        for (const auto& [g, n] : groups)
            std::printf("  %-16s %14lld  %6.2f%%\n", g.c_str(), (long long)n,
                        100.0 * double(n) / double(total));
        std::printf("  %-16s %14lld\n", "total", (long long)total);
        std::printf("\ntensors:\n");
        for (const auto& name : mf.names()) {
            const TensorInfo& t = mf.info(name);
            std::printf("  %-64s %-5s %s\n", name.c_str(), dtype_name(t.dtype),
                        shape_str(t.shape).c_str());
        }
        return 0;
    });
}

}  // namespace pldr::cli
