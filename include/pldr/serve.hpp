// pldr serve: an OpenAI-compatible HTTP server over a model directory (README "serve").
// Part of the public surface of the pldr tool; its implementation (src/serve/) is the private
// library pldr_serve.
#pragma once
#include <cstdint>
#include <string>

#include "pldr/options.hpp"

namespace pldr::serve {

// The server's options: the rows of PLDR_SERVE_OPTIONS (pldr/options.h).
struct ServeOptions {
    PLDR_SERVE_OPTIONS(PLDR_CXX_OPTION)
};
PLDR_FOR_EACH_OPTION(ServeOptions, visit_serve_options)

// Serves until SIGTERM or SIGINT, then drains the slots and returns 0. Throws pldr::Error on bad
// options, a model that does not load, or an address it cannot listen on.
int run_server(const std::string& model_dir, const ServeOptions& o);

}  // namespace pldr::serve
