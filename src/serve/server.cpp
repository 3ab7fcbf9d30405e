// `pldr serve` (see server.h): HTTP routes, request validation, JSON responses, metrics, and the
// SIGTERM drain; the completion endpoints are in completions.cpp. Model work goes through Engine
// and Scheduler only.
#if __has_include(<malloc.h>)
#include <malloc.h>  // malloc_trim, where the C library is glibc
#endif
#include <pthread.h>
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <set>

#include "serve/conn_queue.h"
#include "serve/page.h"
#include "serve/server_impl.h"

namespace pldr::serve {

// The threads that connections may take beyond --threads (ConnQueue): the cap on connections
// served at once.
constexpr size_t kExtraConnThreads = 256;

namespace {

// The names of an option set's JSON fields (the rows with PLDR_OPT_JSON).
struct JsonNames {
    std::set<std::string>* out;
    template <typename T>
    void operator()(const api::OptionSpec& s, T& v) const {
        if constexpr (api::is_option_set<T>::value)
            api::for_each_option(v, *this);
        else if (s.on(PLDR_OPT_JSON))
            out->insert(s.name);
    }
};

// The request fields each POST route reads; any other is refused with a 400 that names it, as
// OpenAI refuses an unknown parameter (a field the server would ignore, such as logit_bias or
// response_format, must not look honoured). The completions also take the JSON fields of the
// sampling options' table. `user` (an end-user id OpenAI keeps for abuse reports) and
// `stream_options` (include_usage: every stream ends with its usage anyway) change nothing and
// are accepted.
const std::set<std::string>& fields_of(const std::string& path) {
    static const std::map<std::string, std::set<std::string>> fields = [] {
        std::set<std::string> sampling;
        api::SamplingOptions sp;
        api::for_each_option(sp, JsonNames{&sampling});
        std::set<std::string> cmpl = {"model",      "prompt", "max_tokens",    "n",
                                      "logprobs",   "echo",   "stop",          "stream",
                                      "ignore_eos", "user",   "stream_options"};
        std::set<std::string> chat = {
            "model",  "messages",   "max_tokens", "max_completion_tokens", "n", "logprobs", "stop",
            "stream", "ignore_eos", "user",       "stream_options"};
        cmpl.insert(sampling.begin(), sampling.end());
        chat.insert(sampling.begin(), sampling.end());
        return std::map<std::string, std::set<std::string>>{
            {"/v1/completions", cmpl},
            {"/v1/chat/completions", chat},
            {"/tokenize", {"model", "prompt", "content", "text", "with_pieces"}},
            {"/detokenize", {"model", "tokens"}},
            {"/v1/deductive", {"model", "prompt", "prefix", "prefix_len"}}};
    }();
    static const std::set<std::string> none;
    const auto it = fields.find(path);
    return it == fields.end() ? none : it->second;
}

}  // namespace

// A POST body: JSON, with "Content-Type: application/json" (or no type), nested at most
// kMaxJsonDepth deep, an object of the route's fields only, for the served model (or none named).
json Server::body_of(const httplib::Request& req) const {
    const std::string type = req.get_header_value("Content-Type");
    if (!type.empty() && type.rfind("application/json", 0) != 0)
        throw HttpError{415, "invalid_request_error",
                        "Content-Type must be application/json (got '" + cut(type, 40) + "')"};
    check_depth(req.body);
    json b;
    try {
        b = json::parse(req.body);
    } catch (const json::exception& ex) {
        std::string m = ex.what();
        const size_t p = m.find("] ");
        // The parser quotes the token it last read, which may be a whole megabyte string.
        bad("request body is not valid JSON: " +
            cut(p == std::string::npos ? m : m.substr(p + 2), 160));
    }
    if (!b.is_object()) bad("request body must be a JSON object");
    const std::set<std::string>& fields = fields_of(req.path);
    for (const auto& [k, v] : b.items())
        if (!fields.count(k))
            bad("unrecognized request argument '" + cut(k, 40) + "' (" + req.path +
                " of pldr serve does not implement it)");
    if (b.contains("model") && !b["model"].is_null()) {
        if (!b["model"].is_string())
            bad("'model' must be a string (got " + brief(b["model"]) + ")");
        if (b["model"].get<std::string>() != e_.model_name())
            throw HttpError{404, "invalid_request_error",
                            "the model '" + cut(b["model"].get<std::string>(), 40) +
                                "' does not exist (this server serves '" + e_.model_name() + "')"};
    }
    return b;
}

void Server::guard(httplib::Response& res, const std::function<void()>& f) {
    try {
        if (draining_) throw HttpError{503, "unavailable_error", "the server is shutting down"};
        f();
    } catch (const HttpError& h) {
        res.status = h.status;
        res.set_content(error_body(h.type, h.message), "application/json");
    } catch (const Error& ex) {  // a bad value found by the library (ids, sampling options)
        res.status = 400;
        res.set_content(error_body("invalid_request_error", ex.what()), "application/json");
    } catch (const std::exception& ex) {
        res.status = 500;
        res.set_content(error_body("server_error", ex.what()), "application/json");
    }
}

void Server::tokenize(const httplib::Request& req, httplib::Response& res) {
    const json b = body_of(req);
    const char* key = b.contains("prompt") ? "prompt" : b.contains("content") ? "content" : "text";
    if (!b.contains(key) || !b[key].is_string()) bad("'prompt' must be a string");
    const std::string text = b[key].get<std::string>();
    std::vector<int64_t> ids;
    // The special pieces alone map to their ids (lm-eval's remote tokenizer reads EOS this way).
    if (text == e_.piece(e_.eos_id()))
        ids = {e_.eos_id()};
    else if (e_.bos_id() >= 0 && text == e_.piece(e_.bos_id()))
        ids = {e_.bos_id()};
    else
        ids = e_.tokenize(text);
    json out;
    out["tokens"] = ids;
    out["count"] = ids.size();
    out["max_model_len"] = e_.ctx();
    if (get_bool(b, "with_pieces", false)) {
        std::vector<std::string> ps;
        std::vector<int64_t> os;
        e_.pieces(ids, &ps, &os);
        out["pieces"] = ps;
        out["offsets"] = os;
    }
    res.set_content(dump(out), "application/json");
}

void Server::detokenize(const httplib::Request& req, httplib::Response& res) {
    const json b = body_of(req);
    if (!b.contains("tokens") || !b["tokens"].is_array())
        bad("'tokens' must be a list of token ids");
    const auto ids = id_list(b["tokens"], e_, "'tokens'");
    res.set_content(dump(json{{"prompt", e_.detokenize(ids)}}), "application/json");
}

void Server::deductive(const httplib::Request& req, httplib::Response& res) {
    const json b = body_of(req);
    std::vector<int64_t> ids;
    if (!b.contains("prompt")) bad("'prompt' is required");
    if (b["prompt"].is_string()) {
        ids = prompt_ids(b["prompt"].get<std::string>());
        if (ids.empty()) ids = {e_.eos_id()};
    } else if (b["prompt"].is_array() && !b["prompt"].empty()) {
        ids = id_list(b["prompt"], e_, "'prompt'");
    } else {
        bad("'prompt' must be a string or a non-empty list of token ids");
    }
    if (int64_t(ids.size()) > e_.ctx())
        bad("prompt of " + std::to_string(ids.size()) + " tokens is longer than the context (" +
            std::to_string(e_.ctx()) + " tokens)");
    int64_t prefix_len = 0;
    if (b.contains("prefix") && !b["prefix"].is_null()) {
        if (!b["prefix"].is_string()) bad("'prefix' must be a string");
        prefix_len = std::min<int64_t>(int64_t(e_.tokenize(b["prefix"].get<std::string>()).size()),
                                       int64_t(ids.size()));
    }
    prefix_len = get_int(b, "prefix_len", prefix_len, 0, int64_t(ids.size()));
    if (prefix_len > 0 && int64_t(ids.size()) - prefix_len > 512)
        bad("eps_G is computed for at most 512 tokens after the prefix (got " +
            std::to_string(int64_t(ids.size()) - prefix_len) + ")");
    int expect = 0;
    if (!deductive_busy_.compare_exchange_strong(expect, 1))
        throw HttpError{429, "rate_limit_error",
                        "a /v1/deductive request is already running; retry later"};
    struct Release {
        std::atomic<int>& b;
        ~Release() { b = 0; }
    } rel{deductive_busy_};
    const Deductive d = e_.deductive(ids, prefix_len);
    const int64_t D = d.head_dim;
    auto heads = [&](const std::vector<std::vector<double>>& q) {
        json layers = json::array();
        for (const auto& l : q) {
            if (l.empty()) {
                layers.push_back(nullptr);
                continue;
            }
            json hs = json::array();
            for (int64_t h = 0; h < d.heads; ++h) {
                json rows = json::array();
                for (int64_t i = 0; i < D; ++i)
                    rows.push_back(std::vector<double>(l.begin() + (h * D + i) * D,
                                                       l.begin() + (h * D + i + 1) * D));
                hs.push_back(rows);
            }
            layers.push_back(hs);
        }
        return layers;
    };
    json out;
    out["model"] = e_.model_name();
    out["layers"] = d.layers;
    out["heads"] = d.heads;
    out["head_dim"] = d.head_dim;
    out["tokens"] = d.tokens;
    out["prefix_len"] = d.prefix_len;
    out["A"] = heads(d.A);
    out["A_LM"] = heads(d.A_LM);
    out["A_P"] = heads(d.A_P);
    out["G_LM"] = heads(d.G);
    out["eps_G"] = d.eps_G;
    // Uncompressed, whatever the client accepts: cpp-httplib compresses only the exact type
    // "application/json", and its brotli (quality 11) took 3.6 s on a 1.3 MB answer that goes out
    // in 0.08 s as it is, so the page could not draw G_LM live.
    res.set_content(dump(out), "application/json; charset=utf-8");
}

std::string Server::metrics() const {
    const SchedulerStats s = sched_.stats();
    std::string m;
    auto line = [&](const char* name, const char* type, const char* help, double v) {
        m += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
             name + " " + json(v).dump() + "\n";
    };
    m += "# HELP pldr_requests_total HTTP requests by path and status.\n# TYPE pldr_requests_total "
         "counter\n";
    {
        std::lock_guard<std::mutex> lk(mmu_);
        for (const auto& [k, v] : requests_) {
            const size_t sp = k.rfind(' ');
            m += "pldr_requests_total{path=\"" + k.substr(0, sp) + "\",code=\"" + k.substr(sp + 1) +
                 "\"} " + std::to_string(v) + "\n";
        }
    }
    line("pldr_prompt_tokens_total", "counter", "Prompt tokens prefilled.",
         double(s.prompt_tokens));
    line("pldr_generated_tokens_total", "counter", "Tokens generated.", double(s.generated_tokens));
    line("pldr_tokens_per_second", "gauge", "Tokens generated per second over the last 10 s.",
         s.tokens_per_s);
    line("pldr_decode_steps_total", "counter", "Batched decode steps.", double(s.decode_steps));
    line("pldr_decode_batched_tokens_total", "counter", "Slot decodes run in batched steps.",
         double(s.batched_tokens));
    line("pldr_queue_depth", "gauge", "Jobs waiting for a slot.", double(s.queue));
    line("pldr_active_slots", "gauge", "Slots running a job.", double(s.active));
    line("pldr_slots", "gauge", "Slots (--parallel).", double(s.slots));
    line("pldr_jobs_finished_total", "counter", "Jobs finished normally.", double(s.jobs_done));
    line("pldr_jobs_failed_total", "counter", "Jobs that failed.", double(s.jobs_failed));
    line("pldr_jobs_cancelled_total", "counter", "Jobs cancelled by a client that went away.",
         double(s.jobs_cancelled));
    return m;
}

void Server::count(const httplib::Request& req, const httplib::Response& res) {
#ifdef __GLIBC__
    // After a large body or answer (this runs once the response is written), give the freed
    // memory back: glibc keeps it in the arena of the thread that served it, one arena per
    // thread, and 20 refused 1 MB prompts left about 1 GB of RSS behind.
    if (req.body.size() >= (size_t(256) << 10) || res.body.size() >= (size_t(1) << 20))
        malloc_trim(0);
#endif
    std::lock_guard<std::mutex> lk(mmu_);
    // Known routes only (a client's path must not add label values or break the format).
    static const char* const known[] = {
        "/v1/completions", "/v1/chat/completions", "/v1/models", "/v1/deductive", "/tokenize",
        "/detokenize",     "/tokenizer_info",      "/health",    "/metrics",      "/"};
    std::string p = "other";
    for (const char* k : known)
        if (req.path == k) p = k;
    ++requests_[p + " " + std::to_string(res.status)];
}

std::vector<Server::Route> Server::make_routes() {
    std::vector<Route> r;
    auto post = [&](const char* path, Handler f) {
        r.push_back({"POST", path, [this, f](const httplib::Request& q, httplib::Response& s) {
                         guard(s, [&] { f(q, s); });
                     }});
    };
    post("/v1/completions", [this](const auto& q, auto& s) { completions(q, s, false); });
    post("/v1/chat/completions", [this](const auto& q, auto& s) { completions(q, s, true); });
    post("/tokenize", [this](const auto& q, auto& s) { tokenize(q, s); });
    post("/detokenize", [this](const auto& q, auto& s) { detokenize(q, s); });
    post("/v1/deductive", [this](const auto& q, auto& s) { deductive(q, s); });
    r.push_back({"GET", "/v1/models", [this](const httplib::Request&, httplib::Response& s) {
                     json m = {{"id", e_.model_name()},
                               {"object", "model"},
                               {"created", 0},
                               {"owned_by", "pldr"},
                               {"max_model_len", e_.ctx()}};
                     s.set_content(dump(json{{"object", "list"}, {"data", json::array({m})}}),
                                   "application/json");
                 }});
    r.push_back({"GET", "/tokenizer_info", [this](const httplib::Request&, httplib::Response& s) {
                     json j;
                     j["eos_token"] = e_.piece(e_.eos_id());
                     j["bos_token"] =
                         e_.bos_id() >= 0 ? json(e_.piece(e_.bos_id())) : json(nullptr);
                     j["pad_token"] =
                         e_.pad_id() >= 0 ? json(e_.piece(e_.pad_id())) : json(nullptr);
                     j["model_max_length"] = e_.ctx();
                     s.set_content(dump(j), "application/json");
                 }});
    r.push_back({"GET", "/health", [this](const httplib::Request&, httplib::Response& s) {
                     if (draining_) {
                         s.status = 503;
                         s.set_content(
                             error_body("unavailable_error", "the server is shutting down"),
                             "application/json");
                         return;
                     }
                     s.set_content(R"({"status":"ok"})", "application/json");
                 }});
    r.push_back({"GET", "/metrics", [this](const httplib::Request&, httplib::Response& s) {
                     s.set_content(metrics(), "text/plain; version=0.0.4");
                 }});
    r.push_back({"GET", "/", [](const httplib::Request&, httplib::Response& s) {
                     s.set_content(page_html(), "text/html; charset=utf-8");
                 }});
    return r;
}

// One request without a socket, as cpp-httplib 0.11 serves it: the body limit (413), the exact
// route of the method (GET's for HEAD, without the body; 404 without one, 400 for a method it
// does not know), an exception out of a handler as 500, the error handler for every status >= 400,
// then the chunked content provider called until it calls done() (or fails), and its releaser with
// the outcome.
LocalResponse Server::local(const std::string& method, const std::string& path,
                            const std::string& body) {
    httplib::Request req;
    req.method = method;
    req.path = path;
    req.body = body;
    req.set_header("Content-Type", "application/json");
    httplib::Response res;
    if (body.size() > size_t(o_.max_body)) {
        res.status = 413;
    } else {
        const Route* route = nullptr;
        const bool head = method == "HEAD";  // a GET route without its body
        for (const auto& r : routes_)
            if ((method == r.method || (head && std::string(r.method) == "GET")) && path == r.path)
                route = &r;
        if (route) {
            try {
                route->f(req, res);
            } catch (const std::exception&) {
                res.status = 500;
            }
            if (res.status == -1) res.status = 200;
        } else {
            static const char* const methods[] = {"GET",    "HEAD",    "POST", "PUT",
                                                  "DELETE", "OPTIONS", "PATCH"};
            bool known = false;
            for (const char* m : methods) known = known || method == m;
            res.status = known ? 404 : 400;
        }
    }
    if (res.status >= 400) fill_error(req, res);
    LocalResponse out;
    out.status = res.status;
    out.content_type = res.get_header_value("Content-Type");
    if (req.method == "HEAD") {
        out.body.clear();
    } else if (res.content_provider_) {
        bool over = false;
        httplib::DataSink sink;
        sink.write = [&](const char* d, size_t n) {
            out.body.append(d, n);
            return true;
        };
        sink.done = [&] { over = true; };
        sink.is_writable = [] { return true; };
        bool ok = true;
        while (ok && !over) ok = res.content_provider_(out.body.size(), 0, sink);
        res.content_provider_success_ = ok;  // the releaser runs in ~Response
    } else {
        out.body = res.body;
    }
    count(req, res);
    return out;
}

int Server::run() {
    const int threads = int(o_.threads > 0 ? o_.threads : o_.parallel + o_.queue + 4);
    // The connections: --threads workers, and up to 256 more while slow clients hold them (a
    // client that stalls for 5 s mid-request, or 2 s between keep-alive requests, lets go).
    svr_.new_task_queue = [threads] {
        return new ConnQueue(size_t(threads), size_t(threads) + kExtraConnThreads);
    };
    svr_.set_payload_max_length(size_t(o_.max_body));
    svr_.set_read_timeout(5);
    svr_.set_keep_alive_timeout(2);
    svr_.set_error_handler(
        [](const httplib::Request& req, httplib::Response& res) { fill_error(req, res); });
    svr_.set_logger(
        [this](const httplib::Request& req, const httplib::Response& res) { count(req, res); });
    for (const auto& r : routes_) {
        if (std::string(r.method) == "POST")
            svr_.Post(r.path, r.f);
        else
            svr_.Get(r.path, r.f);
    }

    int port = int(o_.port);
    if (port == 0) {
        port = svr_.bind_to_any_port(o_.host.c_str());
        require(port > 0, "cannot listen on ", o_.host, " (any port)");
    } else {
        require(svr_.bind_to_port(o_.host.c_str(), port), "cannot listen on ", o_.host, ":",
                std::to_string(port), " (address in use, or not an address of this machine)");
    }
    std::printf("pldr serve: %s on http://%s:%d (%lld slots, context %lld, echo %s)\n",
                e_.model_name().c_str(), o_.host.c_str(), port, (long long)o_.parallel,
                (long long)e_.ctx(), o_.mode.c_str());
    std::fflush(stdout);

    // SIGTERM / SIGINT: stop taking requests, finish the running and queued jobs, then stop.
    std::atomic<bool> over{false};
    std::thread sig([this, &over] {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        int s = 0;
        sigwait(&set, &s);
        if (over) return;
        draining_ = true;
        std::fprintf(stderr, "pldr serve: %s, draining\n", s == SIGTERM ? "SIGTERM" : "SIGINT");
        while (!sched_.idle()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let responses flush
        svr_.stop();
    });
    const bool ok = svr_.listen_after_bind();
    over = true;
    if (!draining_) ::kill(::getpid(), SIGTERM);  // wake the signal thread
    sig.join();
    sched_.shutdown();
    require(ok || draining_, "the HTTP server stopped unexpectedly");
    std::fprintf(stderr, "pldr serve: stopped\n");
    return 0;
}

namespace {

void check_options(const ServeOptions& o) {
    for_each_option(o, api::OptionRangeCheck{});
    api::check_device(o.device);  // (the model loads there; Engine)
}

}  // namespace

LocalServer::LocalServer(const std::string& model_dir, const ServeOptions& o) {
    check_options(o);
    s_ = std::make_unique<Server>(model_dir, o);
}

LocalServer::~LocalServer() = default;

LocalResponse LocalServer::handle(const std::string& method, const std::string& path,
                                  const std::string& body) {
    return s_->local(method, path, body);
}

int run_server(const std::string& model_dir, const ServeOptions& o) {
    check_options(o);
    // Block the stop signals in every thread (the signal thread waits for them) and ignore
    // SIGPIPE (a client that goes away is seen as a failed write).
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    ::signal(SIGPIPE, SIG_IGN);
    Server s(model_dir, o);
    return s.run();
}

}  // namespace pldr::serve
