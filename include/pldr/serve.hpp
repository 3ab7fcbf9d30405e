// pldr serve: an OpenAI-compatible HTTP server over a model directory (README "serve").
// Part of the public surface of the pldr tool; its implementation (src/serve/) is the private
// library pldr_serve.
#pragma once
#include <cstdint>
#include <string>

namespace pldr::serve {

struct ServeOptions {
    std::string host = "127.0.0.1";
    int port = 8080;             // 0 = any free port (printed on stdout)
    int64_t parallel = 4;        // slots
    int64_t ctx = 0;             // context limit (0 = max_position_embeddings)
    std::string mode = "block";  // echo log-probabilities: block | cached
    int64_t queue = 64;          // jobs waiting for a slot before 429
    int64_t max_body = 1 << 20;  // request body limit in bytes (413 above)
    int64_t max_tokens = 0;      // limit of max_tokens per request (0 = the context)
    int64_t max_n = 8;           // limit of n per request
    int threads = 0;             // HTTP worker threads (0 = parallel + queue + 4)
    std::string tokenizer;       // SentencePiece model (default MODEL_DIR/tokenizer.model)
};

// Serves until SIGTERM or SIGINT, then drains the slots and returns 0. Throws pldr::Error on bad
// options, a model that does not load, or an address it cannot listen on.
int run_server(const std::string& model_dir, const ServeOptions& o);

}  // namespace pldr::serve
