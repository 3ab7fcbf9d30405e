// pldr serve MODEL_DIR [--host H] [--port N] [--parallel K] [--ctx C] [--mode block|cached]:
// an OpenAI-compatible HTTP server (src/serve/, README "serve").
#include "common.h"
#include "pldr/serve.hpp"

namespace pldr::cli {

void add_serve(CLI::App& app) {
    auto dir = std::make_shared<std::string>();
    auto o = std::make_shared<serve::ServeOptions>();
    auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with a G_LM page");
    cmd->add_option("MODEL_DIR", *dir, "model directory (with tokenizer.model)")->required();
    cmd->add_option("--host", o->host, "address to listen on")->capture_default_str();
    cmd->add_option("--port", o->port, "port (0 = any free port)")->capture_default_str();
    cmd->add_option("--parallel", o->parallel, "slots: sequences decoded together")
        ->capture_default_str();
    cmd->add_option("--ctx", o->ctx, "context limit (0 = max_position_embeddings)")
        ->capture_default_str();
    cmd->add_option("--mode", o->mode, "echo log-probabilities: block (= pldr score) or cached")
        ->check(CLI::IsMember({"block", "cached"}))
        ->capture_default_str();
    cmd->add_option("--queue", o->queue, "jobs that may wait for a slot (then 429)")
        ->capture_default_str();
    cmd->add_option("--max-body", o->max_body, "request body limit in bytes (then 413)")
        ->capture_default_str();
    cmd->add_option("--max-tokens", o->max_tokens, "limit of max_tokens (0 = the context)")
        ->capture_default_str();
    cmd->add_option("--max-n", o->max_n, "limit of n (choices per prompt)")->capture_default_str();
    cmd->add_option("--tokenizer", o->tokenizer,
                    "SentencePiece model (default MODEL_DIR/tokenizer.model)");
    cmd->add_option("--threads", o->threads, "HTTP worker threads (0 = parallel + queue + 4)")
        ->capture_default_str();
    cmd->callback([dir, o]() { return serve::run_server(*dir, *o); });
}

}  // namespace pldr::cli
