// pldr serve MODEL_DIR [--host H] [--port N] [--parallel K] [--ctx C] [--mode block|cached]:
// an OpenAI-compatible HTTP server (src/serve/, README "serve").
#include "common.h"
#include "options_cli.h"
#include "pldr/serve.hpp"

namespace pldr::cli {

void add_serve(CLI::App& app) {
    auto dir = std::make_shared<std::string>();
    auto o = std::make_shared<serve::ServeOptions>();
    auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with a G_LM page");
    cmd->add_option("MODEL_DIR", *dir, "model directory (with tokenizer.model)")->required();
    add_option_flags(cmd, *o);
    cmd->callback([dir, o]() { return serve::run_server(*dir, *o); });
}

}  // namespace pldr::cli
