// `pldr serve`: an OpenAI-compatible HTTP server over the serving engine (docs: README "serve").
// The options and the entry point are declared in the public header include/pldr/serve.hpp.
#pragma once
#include "pldr/serve.hpp"
