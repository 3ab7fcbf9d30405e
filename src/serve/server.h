// `pldr serve`: an OpenAI-compatible HTTP server over the serving engine (docs: README "serve").
// The options and the entry point are declared in the public header include/pldr/serve.hpp.
#pragma once
#include <memory>
#include <string>

#include "pldr/serve.hpp"

namespace pldr::serve {

class Server;

// One response of LocalServer::handle: the HTTP status, the Content-Type and the whole body (a
// chunked body, streamed or not, collected to its end).
struct LocalResponse {
    int status = 0;
    std::string content_type, body;
};

// The server without a socket (internal; the fuzz target fuzz/fuzz_serve_request.cpp): the model
// is loaded once, and each handle() runs one request through the same routes, validation, error
// responses, scheduler and content providers as `pldr serve`, driving a chunked body to its end.
// Options are checked as run_server checks them (pldr::Error). Requests may come one at a time.
class LocalServer {
  public:
    LocalServer(const std::string& model_dir, const ServeOptions& o);
    ~LocalServer();
    LocalServer(const LocalServer&) = delete;
    LocalServer& operator=(const LocalServer&) = delete;

    // METHOD PATH with BODY, as a client would send it (Content-Type: application/json). An
    // exception thrown while the body is produced (which `pldr serve` could not turn into a
    // response) propagates.
    LocalResponse handle(const std::string& method, const std::string& path,
                         const std::string& body);

  private:
    std::unique_ptr<Server> s_;
};

}  // namespace pldr::serve
