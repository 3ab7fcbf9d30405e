// Fuzz target: one HTTP request to `pldr serve`, without a socket (serve::LocalServer runs the
// server's own routes, validation, scheduler and content providers). Input: the first line is
// `METHOD PATH` (e.g. `POST /v1/completions`), the rest is the request body. The server is made
// once over the eval fixture model (tests/golden/eval/models/eval_v510_s2024, the model of the
// serve tests) with small limits so that each request stays cheap: context 64, max_tokens 16,
// n 2, 2 slots, 4 queued jobs, bodies up to 1,000,064 bytes (a seed nests arrays 10^6 deep).
//
// A crash: any exception out of handle() (an exception `pldr serve` could not turn into a
// response), a status other than 200, 400, 404 or 413 (requests come one at a time, so neither
// 429 (queue full, deductive busy) nor 503 (draining) can happen, and 5xx is a bug), an error
// that is not a JSON object with string error.message and error.type, a 200 JSON body that is not
// a JSON object or holds an error (a job failed after validation let it through), piece offsets
// (/tokenize `offsets`, logprobs `text_offset`) that go back, or an event stream that is not
// `data: <JSON object>` events and pings ending with `data: [DONE]`.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "serve/server.h"

#ifndef PLDR_SOURCE_DIR
#error "PLDR_SOURCE_DIR must be defined"
#endif

namespace {

using json = nlohmann::json;

[[noreturn]] void fail(const char* what, const std::string& route,
                       const pldr::serve::LocalResponse& r) {
    std::fprintf(
        stderr, "serve_request: %s\n  request: %s\n  status %d, %s, body (%zu bytes): %.2000s\n",
        what, route.c_str(), r.status, r.content_type.c_str(), r.body.size(), r.body.c_str());
    std::abort();
}

bool is_json_error(const std::string& body) {
    const json j = json::parse(body, nullptr, false);
    return j.is_object() && j.size() == 1 && j.contains("error") && j["error"].is_object() &&
           j["error"].contains("message") && j["error"]["message"].is_string() &&
           !j["error"]["message"].get<std::string>().empty() && j["error"].contains("type") &&
           j["error"]["type"].is_string();
}

// Byte offsets of pieces into their text (/tokenize `offsets`, logprobs `text_offset`): one per
// piece, from 0 on, never going back.
bool offsets_ok(const json& offsets, const json& pieces) {
    if (!offsets.is_array() || !pieces.is_array() || offsets.size() != pieces.size()) return false;
    int64_t last = 0;
    for (const auto& o : offsets) {
        if (!o.is_number_integer() || o.get<int64_t>() < last) return false;
        last = o.get<int64_t>();
    }
    return true;
}

// A 200 JSON body: an object without "error"; a completion has choices that all finished; piece
// offsets never go back.
void check_json(const std::string& route, const pldr::serve::LocalResponse& r) {
    const json j = json::parse(r.body, nullptr, false);
    if (!j.is_object()) fail("200 body is not a JSON object", route, r);
    if (j.contains("error")) fail("200 body is an error (a job failed)", route, r);
    if (j.contains("offsets") && !offsets_ok(j["offsets"], j["pieces"]))
        fail("/tokenize offsets go back", route, r);
    if (j.contains("choices")) {
        if (!j["choices"].is_array() || j["choices"].empty()) fail("no choices", route, r);
        for (const auto& c : j["choices"]) {
            if (!c.contains("finish_reason") || !c["finish_reason"].is_string() ||
                (c["finish_reason"] != "stop" && c["finish_reason"] != "length"))
                fail("a choice without finish_reason stop or length", route, r);
            if (c.contains("logprobs") && c["logprobs"].is_object() &&
                !offsets_ok(c["logprobs"]["text_offset"], c["logprobs"]["tokens"]))
                fail("logprobs text_offset go back", route, r);
        }
    }
}

// An event stream: `data: <JSON object>` events (no error) and `: ping` comments, then
// `data: [DONE]` as the last event.
void check_stream(const std::string& route, const pldr::serve::LocalResponse& r) {
    std::string_view b = r.body;
    bool done = false;
    while (!b.empty()) {
        const size_t e = b.find("\n\n");
        if (e == std::string_view::npos) fail("event stream: an unterminated event", route, r);
        const std::string_view ev = b.substr(0, e);
        b.remove_prefix(e + 2);
        if (done) fail("event stream: an event after [DONE]", route, r);
        if (ev == ": ping") continue;
        if (ev.substr(0, 6) != "data: ") fail("event stream: an event without data:", route, r);
        const std::string_view d = ev.substr(6);
        if (d == "[DONE]") {
            done = true;
            continue;
        }
        const json j = json::parse(d, nullptr, false);
        if (!j.is_object()) fail("event stream: data that is not a JSON object", route, r);
        if (j.contains("error")) fail("event stream: an error event (a job failed)", route, r);
    }
    if (!done) fail("event stream: no data: [DONE] at the end", route, r);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace pldr;
    static serve::LocalServer* server = [] {
        serve::ServeOptions o;
        o.ctx = 64;
        o.max_tokens = 16;
        o.max_n = 2;
        o.parallel = 2;
        o.queue = 4;
        o.max_body = 1000064;
        // Reachable for the process's life (its scheduler thread stops at exit).
        return new serve::LocalServer(PLDR_SOURCE_DIR "/tests/golden/eval/models/eval_v510_s2024",
                                      o);
    }();
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    const size_t nl = in.find('\n');
    const std::string line(in.substr(0, nl));
    const std::string body(nl == std::string_view::npos ? std::string_view() : in.substr(nl + 1));
    const size_t sp = line.find(' ');
    const std::string method = line.substr(0, sp);
    const std::string path = sp == std::string::npos ? std::string() : line.substr(sp + 1);

    serve::LocalResponse r;
    try {
        r = server->handle(method, path, body);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "serve_request: exception out of the server: %s\n  request: %s\n",
                     e.what(), line.c_str());
        std::abort();
    }
    static const bool verbose = std::getenv("PLDR_FUZZ_VERBOSE") != nullptr;
    if (verbose)
        std::fprintf(stderr, "%s: %d %s, %zu bytes: %.300s\n", line.c_str(), r.status,
                     r.content_type.c_str(), r.body.size(), r.body.c_str());
    const bool is_json = r.content_type.rfind("application/json", 0) == 0;
    if (method == "HEAD") {  // no body to check
        if (r.status != 200 && r.status != 400 && r.status != 404 && r.status != 413)
            fail("unexpected status", line, r);
    } else if (r.status == 200) {
        if (is_json)
            check_json(line, r);
        else if (r.content_type == "text/event-stream")
            check_stream(line, r);
        else if (r.body.empty())
            fail("empty 200 body", line, r);
    } else if (r.status == 400 || r.status == 404 || r.status == 413) {
        if (!is_json || !is_json_error(r.body)) fail("error without a JSON error body", line, r);
    } else {
        fail("unexpected status", line, r);
    }
    return 0;
}
