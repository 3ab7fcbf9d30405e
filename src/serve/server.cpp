// `pldr serve` (see server.h): HTTP routes, request validation, JSON and SSE responses,
// metrics, and the SIGTERM drain. Model work goes through Engine and Scheduler only.
#include "serve/server.h"

#include <httplib.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "serve/engine.h"
#include "serve/page.h"
#include "serve/scheduler.h"

namespace pldr::serve {

using json = nlohmann::ordered_json;

namespace {

// A request the server refuses: HTTP status, OpenAI error type, one-line message.
struct HttpError {
    int status;
    std::string type, message;
};

[[noreturn]] void bad(const std::string& msg) {
    throw HttpError{400, "invalid_request_error", msg};
}

// The JSON text of a response. Bytes that are not UTF-8 become U+FFFD instead of throwing
// (nlohmann's default): a request's bytes quoted in a JSON parse error, a path, a decoded text.
std::string dump(const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string error_body(const std::string& type, const std::string& msg) {
    json j;
    j["error"] = {{"message", msg}, {"type", type}};
    return dump(j);
}

const char* type_for(int status) {
    switch (status) {
        case 404:
            return "not_found_error";
        case 405:
            return "method_not_allowed";
        case 413:
            return "request_too_large";
        case 429:
            return "rate_limit_error";
        case 503:
            return "unavailable_error";
        default:
            return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

// The body of an error response that no handler filled (no route, body too large).
void fill_error(const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string msg = res.status == 404   ? "no route for " + req.method + " " + req.path
                      : res.status == 413 ? "request body is larger than the limit (--max-body)"
                      : res.status == 405 ? "method " + req.method + " not allowed on " + req.path
                                          : "bad request";
    res.set_content(error_body(type_for(res.status), msg), "application/json");
}

// ---- field readers (each names the field and the value it got) ----

std::string brief(const json& v) {
    std::string s = v.dump();
    if (s.size() <= 40) return s;
    size_t n = 37;  // not inside a UTF-8 sequence
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
    return s.substr(0, n) + "...";
}

bool get_bool(const json& b, const char* k, bool def) {
    if (!b.contains(k) || b[k].is_null()) return def;
    if (!b[k].is_boolean())
        bad(std::string("'") + k + "' must be a boolean (got " + brief(b[k]) + ")");
    return b[k].get<bool>();
}

double get_num(const json& b, const char* k, double def, double lo, double hi,
               bool lo_open = false) {
    if (!b.contains(k) || b[k].is_null()) return def;
    if (!b[k].is_number())
        bad(std::string("'") + k + "' must be a number (got " + brief(b[k]) + ")");
    const double v = b[k].get<double>();
    if (!std::isfinite(v) || v < lo || v > hi || (lo_open && v == lo))
        bad(std::string("'") + k + "' must be in " + (lo_open ? "(" : "[") + json(lo).dump() +
            ", " + json(hi).dump() + "] (got " + brief(b[k]) + ")");
    return v;
}

int64_t get_int(const json& b, const char* k, int64_t def, int64_t lo, int64_t hi) {
    if (!b.contains(k) || b[k].is_null()) return def;
    const json& v = b[k];
    if (!v.is_number_integer() &&
        !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() &&
          std::abs(v.get<double>()) < 9e15))
        bad(std::string("'") + k + "' must be an integer (got " + brief(v) + ")");
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
        bad(std::string("'") + k + "' is out of range (got " + brief(v) + ")");
    const int64_t x = v.is_number_float() ? int64_t(v.get<double>()) : v.get<int64_t>();
    if (x < lo || x > hi)
        bad(std::string("'") + k + "' must be in [" + std::to_string(lo) + ", " +
            std::to_string(hi) + "] (got " + brief(v) + ")");
    return x;
}

// The JSON fields of an option set (the rows of pldr/options.h with PLDR_OPT_JSON), each read
// with its type and checked against its declared range; absent or null fields keep the value.
class JsonOptions {
  public:
    explicit JsonOptions(const json& body) : b_(body) {}
    template <typename T>
    void operator()(const api::OptionSpec& s, T& v) const {
        if constexpr (api::is_option_set<T>::value) {
            api::for_each_option(v, *this);
        } else if (s.on(PLDR_OPT_JSON) && b_.contains(s.name) && !b_[s.name].is_null()) {
            read(s, v);
            try {
                if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>)
                    api::check_option_value(s, v, std::string("'") + s.name + "'");
            } catch (const pldr::Error& e) {
                bad(e.what());
            }
        }
    }

  private:
    void read(const api::OptionSpec& s, bool& v) const { v = get_bool(b_, s.name, v); }
    void read(const api::OptionSpec& s, double& v) const {
        v = get_num(b_, s.name, v, -HUGE_VAL, HUGE_VAL);
    }
    void read(const api::OptionSpec& s, int64_t& v) const {
        v = get_int(b_, s.name, v, INT64_MIN, INT64_MAX);
    }
    // A seed: any integer of int64 or uint64 (a negative one wraps, as C's conversion does).
    void read(const api::OptionSpec& s, uint64_t& v) const {
        const json& x = b_[s.name];
        v = x.is_number_unsigned() ? x.get<uint64_t>()
                                   : uint64_t(get_int(b_, s.name, 0, INT64_MIN, INT64_MAX));
    }
    template <typename T>
    void read(const api::OptionSpec& s, T&) const {
        bad(std::string("'") + s.name + "' is not a request field");  // no such row is JSON
    }
    const json& b_;
};

std::vector<int64_t> id_list(const json& a, const Engine& e, const char* what) {
    std::vector<int64_t> ids;
    for (const auto& x : a) {
        if (!x.is_number_integer())
            bad(std::string(what) + " must hold integer token ids (got " + brief(x) + ")");
        const int64_t id = x.is_number_unsigned() && x.get<uint64_t>() > uint64_t(INT64_MAX)
                               ? -1
                               : x.get<int64_t>();
        if (id < 0 || id >= e.vocab_size())
            bad(std::string(what) + ": token id " + x.dump() + " is outside the vocabulary [0, " +
                std::to_string(e.vocab_size()) + ")");
        ids.push_back(id);
    }
    return ids;
}

}  // namespace

// ---- the server ----

class Server {
  public:
    Server(const std::string& dir, const ServeOptions& o)
        : o_(o),
          e_(dir, o.ctx, o.mode == "cached" ? EchoMode::CACHED : EchoMode::BLOCK, o.tokenizer),
          sched_(e_, o.parallel, o.queue) {
        max_tokens_ = o.max_tokens > 0 ? std::min(o.max_tokens, e_.ctx()) : e_.ctx();
        routes_ = make_routes();
    }

    int run();
    LocalResponse local(const std::string& method, const std::string& path,
                        const std::string& body);

  private:
    using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
    struct Route {
        const char* method;  // GET or POST
        const char* path;
        Handler f;
    };
    std::vector<Route> make_routes();
    void count(const httplib::Request& req, const httplib::Response& res);

    struct Prompt {
        std::vector<int64_t> ids;
    };
    std::vector<Prompt> parse_prompts(const json& p) const;
    std::vector<std::string> parse_stop(const json& b) const;
    std::vector<std::shared_ptr<Job>> make_jobs(const json& b, const std::vector<Prompt>& prompts,
                                                const std::vector<std::string>& extra_stop,
                                                int64_t* n_out, bool chat) const;
    void submit(const std::vector<std::shared_ptr<Job>>& jobs);

    void completions(const httplib::Request& req, httplib::Response& res, bool chat);
    json choice_logprobs(const Job& j, bool echo, int64_t base = 0) const;
    std::string key_of(int64_t id) const;
    void tokenize(const httplib::Request& req, httplib::Response& res);
    void detokenize(const httplib::Request& req, httplib::Response& res);
    void deductive(const httplib::Request& req, httplib::Response& res);
    std::string metrics() const;
    json body_of(const httplib::Request& req) const;
    void guard(httplib::Response& res, const std::function<void()>& f);

    ServeOptions o_;
    Engine e_;
    Scheduler sched_;
    int64_t max_tokens_ = 0;
    httplib::Server svr_;
    std::vector<Route> routes_;
    std::atomic<bool> draining_{false};
    std::atomic<int> deductive_busy_{0};
    std::atomic<int64_t> next_id_{1};
    mutable std::mutex mmu_;
    std::map<std::string, int64_t> requests_;  // "path code" → count
};

json Server::body_of(const httplib::Request& req) const {
    json b;
    try {
        b = json::parse(req.body);
    } catch (const json::exception& ex) {
        std::string m = ex.what();
        const size_t p = m.find("] ");
        bad("request body is not valid JSON: " + (p == std::string::npos ? m : m.substr(p + 2)));
    }
    if (!b.is_object()) bad("request body must be a JSON object");
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

std::vector<Server::Prompt> Server::parse_prompts(const json& p) const {
    std::vector<Prompt> out;
    auto from_text = [&](const std::string& s) {
        Prompt q;
        q.ids = e_.tokenize(s);
        if (q.ids.empty()) q.ids = {e_.eos_id()};  // "" starts from EOS, as the reference
        return q;
    };
    if (p.is_null()) bad("'prompt' is required");
    if (p.is_string()) {
        out.push_back(from_text(p.get<std::string>()));
    } else if (p.is_array()) {
        if (p.empty()) bad("'prompt' must not be an empty list");
        if (p[0].is_number()) {
            Prompt q;
            q.ids = id_list(p, e_, "'prompt'");
            out.push_back(q);
        } else {
            for (const auto& x : p) {
                if (x.is_string()) {
                    out.push_back(from_text(x.get<std::string>()));
                } else if (x.is_array()) {
                    if (x.empty()) bad("'prompt' holds an empty token list");
                    Prompt q;
                    q.ids = id_list(x, e_, "'prompt'");
                    out.push_back(q);
                } else {
                    bad("'prompt' must be a string, a list of strings, a list of token ids or a "
                        "list of token-id lists (got an element " +
                        brief(x) + ")");
                }
            }
        }
    } else {
        bad("'prompt' must be a string, a list of strings or token ids (got " + brief(p) + ")");
    }
    if (out.size() > 1024)
        bad("'prompt' holds " + std::to_string(out.size()) + " prompts (at most 1024)");
    for (const auto& q : out)
        if (int64_t(q.ids.size()) > e_.ctx())
            bad("prompt of " + std::to_string(q.ids.size()) +
                " tokens is longer than the context (" + std::to_string(e_.ctx()) + " tokens)");
    return out;
}

std::vector<std::string> Server::parse_stop(const json& b) const {
    std::vector<std::string> stop;
    if (!b.contains("stop") || b["stop"].is_null()) return stop;
    const json& s = b["stop"];
    auto one = [&](const json& x) {
        if (!x.is_string())
            bad("'stop' must be a string or a list of strings (got " + brief(x) + ")");
        const std::string v = x.get<std::string>();
        if (v.empty()) return;  // harnesses may append an empty EOS text; nothing to match
        if (v.size() > 256) bad("'stop' strings must be at most 256 bytes");
        stop.push_back(v);
    };
    if (s.is_array()) {
        if (s.size() > 16)
            bad("'stop' holds " + std::to_string(s.size()) + " strings (at most 16)");
        for (const auto& x : s) one(x);
    } else {
        one(s);
    }
    return stop;
}

std::vector<std::shared_ptr<Job>> Server::make_jobs(const json& b,
                                                    const std::vector<Prompt>& prompts,
                                                    const std::vector<std::string>& extra_stop,
                                                    int64_t* n_out, bool chat) const {
    const int64_t max_tokens = get_int(
        b, chat && b.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens",
        chat ? std::min<int64_t>(256, max_tokens_) : 16, 0, max_tokens_);
    api::SamplingOptions sp;
    sp.top_p_hf = true;  // OpenAI clients mean the Hugging Face rule
    api::for_each_option(sp, JsonOptions(b));
    const uint64_t seed = sp.seed;
    const int64_t n = get_int(b, "n", 1, 1, o_.max_n);
    int64_t top_n = 0;
    bool want_lp = false;
    if (!chat) {
        want_lp = b.contains("logprobs") && !b["logprobs"].is_null();
        top_n = get_int(b, "logprobs", 0, 0, 20);
    }
    const bool echo = !chat && get_bool(b, "echo", false);
    const bool ignore_eos = get_bool(b, "ignore_eos", false);
    std::vector<std::string> stop = parse_stop(b);
    stop.insert(stop.end(), extra_stop.begin(), extra_stop.end());
    if (chat && b.contains("logprobs") && !b["logprobs"].is_null() && !b["logprobs"].is_boolean())
        bad("'logprobs' must be a boolean for chat completions");
    if (!echo && max_tokens == 0) bad("'max_tokens' is 0 without 'echo': nothing to return");
    std::vector<std::shared_ptr<Job>> jobs;
    for (const auto& p : prompts)
        for (int64_t k = 0; k < n; ++k) {
            auto j = std::make_shared<Job>();
            j->prompt = p.ids;
            j->sp = sp;
            j->sp.seed = seed + uint64_t(k);
            j->max_tokens = max_tokens;
            j->top_n = want_lp ? std::max<int64_t>(top_n, 1) : 0;
            j->echo = echo && want_lp;
            j->stop = stop;
            j->stop_at_eos = !ignore_eos;
            jobs.push_back(j);
        }
    *n_out = n;
    return jobs;
}

void Server::submit(const std::vector<std::shared_ptr<Job>>& jobs) {
    if (int64_t(jobs.size()) > o_.queue)
        bad("the request makes " + std::to_string(jobs.size()) +
            " jobs (prompts x n), more than the queue holds (" + std::to_string(o_.queue) +
            ", --queue)");
    if (!sched_.submit(jobs))
        throw HttpError{draining_ ? 503 : 429, draining_ ? "unavailable_error" : "rate_limit_error",
                        draining_ ? "the server is shutting down"
                                  : "the queue is full (" + std::to_string(o_.queue) +
                                        " jobs waiting for a slot); retry later"};
}

// The key of an alternative in top_logprobs: its piece with the word marker as a space.
std::string Server::key_of(int64_t id) const {
    return e_.piece_text(id);
}

json Server::choice_logprobs(const Job& j, bool echo, int64_t base) const {
    // Each token's text in context: with echo, from the start of the prompt; otherwise after
    // the last prompt token (so that a generated token keeps its leading space), with offsets
    // into the generated text from `base` on.
    std::vector<int64_t> ids;
    if (echo)
        ids = j.prompt;
    else if (!j.prompt.empty())
        ids = {j.prompt.back()};
    for (const auto& g : j.gen) ids.push_back(g.id);
    std::vector<std::string> pieces;
    std::vector<int64_t> offsets;
    e_.pieces(ids, &pieces, &offsets);
    if (!echo && !j.prompt.empty() && !pieces.empty()) {
        const int64_t skip = int64_t(pieces[0].size());
        pieces.erase(pieces.begin());
        offsets.erase(offsets.begin());
        for (auto& o : offsets) o = o - skip + base;
    }
    json lp;
    lp["tokens"] = pieces;
    json tl = json::array(), top = json::array();
    auto add = [&](const TokenLogprob& t) {
        tl.push_back(t.logprob);
        json d = json::object();
        for (const auto& [id, v] : t.top) {
            if (!d.contains(key_of(id))) d[key_of(id)] = v;
        }
        top.push_back(d);
    };
    if (echo) {
        tl.push_back(nullptr);
        top.push_back(nullptr);
        for (const auto& t : j.prompt_lp) add(t);
    }
    for (const auto& t : j.gen) add(t);
    lp["token_logprobs"] = tl;
    lp["top_logprobs"] = top;
    lp["text_offset"] = offsets;
    return lp;
}

void Server::completions(const httplib::Request& req, httplib::Response& res, bool chat) {
    const json b = body_of(req);
    std::vector<Prompt> prompts;
    std::vector<std::string> extra_stop;
    if (chat) {
        if (!b.contains("messages") || !b["messages"].is_array() || b["messages"].empty())
            bad("'messages' must be a non-empty list of {role, content}");
        std::string text;
        for (const auto& m : b["messages"]) {
            if (!m.is_object() || !m.contains("role") || !m["role"].is_string() ||
                !m.contains("content") || !m["content"].is_string())
                bad("each message must be an object with string 'role' and 'content' (got " +
                    brief(m) + ")");
            const std::string role = m["role"].get<std::string>();
            std::string name;
            if (role == "system")
                name = "System";
            else if (role == "user")
                name = "User";
            else if (role == "assistant")
                name = "Assistant";
            else
                bad("message role must be system, user or assistant (got '" + role + "')");
            text += name + ": " + m["content"].get<std::string>() + "\n";
        }
        text += "Assistant:";
        prompts = parse_prompts(json(text));
        extra_stop = {"\nUser:", "\nSystem:"};
    } else {
        if (!b.contains("prompt")) bad("'prompt' is required");
        prompts = parse_prompts(b["prompt"]);
    }
    int64_t n = 1;
    auto jobs = make_jobs(b, prompts, extra_stop, &n, chat);
    const bool stream = get_bool(b, "stream", false);
    const bool echo = !chat && get_bool(b, "echo", false);
    const bool want_lp = !chat && b.contains("logprobs") && !b["logprobs"].is_null();
    submit(jobs);

    struct State {
        std::vector<std::shared_ptr<Job>> jobs;
        std::vector<bool> started, ended;
        std::vector<int64_t> last_tok, sent;  // streamed logprobs: previous token, text length
        bool sent_done = false;
    };
    auto st = std::make_shared<State>();
    st->jobs = jobs;
    st->started.assign(jobs.size(), false);
    st->ended.assign(jobs.size(), false);
    st->last_tok.assign(jobs.size(), -1);
    st->sent.assign(jobs.size(), 0);
    const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_++);
    const int64_t created = int64_t(std::time(nullptr));
    const std::string model = e_.model_name();
    auto cancel_all = [st] {
        for (auto& j : st->jobs) j->cancelled = true;
    };
    auto usage = [st]() {
        int64_t p = 0, c = 0;
        for (auto& j : st->jobs) {
            p += int64_t(j->prompt.size());
            c += int64_t(j->gen.size());
        }
        return json{{"prompt_tokens", p}, {"completion_tokens", c}, {"total_tokens", p + c}};
    };

    if (!stream) {
        res.set_chunked_content_provider(
            "application/json",
            [this, st, id, created, model, chat, echo, want_lp, usage, cancel_all](
                size_t, httplib::DataSink& sink) {
                for (;;) {
                    size_t k = 0;
                    while (k < st->jobs.size()) {
                        std::lock_guard<std::mutex> lk(st->jobs[k]->mu);
                        if (!st->jobs[k]->done) break;
                        ++k;
                    }
                    if (k == st->jobs.size()) break;
                    st->jobs[k]->wait_done(250);
                    // A space every 250 ms (JSON allows leading whitespace): a client that has
                    // gone away makes the write fail, and its jobs are cancelled.
                    if (!sink.write(" ", 1)) {
                        cancel_all();
                        return false;
                    }
                }
                json out;
                for (auto& j : st->jobs)
                    if (!j->error.empty()) {
                        out = json::parse(error_body("server_error", j->error));
                        break;
                    }
                if (out.is_null()) {
                    out["id"] = id;
                    out["object"] = chat ? "chat.completion" : "text_completion";
                    out["created"] = created;
                    out["model"] = model;
                    json choices = json::array();
                    for (size_t i = 0; i < st->jobs.size(); ++i) {
                        const Job& j = *st->jobs[i];
                        json c;
                        c["index"] = i;
                        if (chat) {
                            const size_t sp = j.text.find_first_not_of(' ');
                            c["message"] = {
                                {"role", "assistant"},
                                {"content", sp == std::string::npos ? "" : j.text.substr(sp)}};
                        } else {
                            std::string text = j.text;
                            if (echo) {
                                std::vector<std::string> ps;
                                std::vector<int64_t> os;
                                e_.pieces(j.prompt, &ps, &os);
                                std::string pt;
                                for (const auto& s : ps) pt += s;
                                text = pt + text;
                            }
                            c["text"] = text;
                            c["logprobs"] = want_lp ? choice_logprobs(j, echo) : json(nullptr);
                        }
                        c["finish_reason"] = j.finish_reason;
                        choices.push_back(c);
                    }
                    out["choices"] = choices;
                    out["usage"] = usage();
                }
                const std::string s = dump(out);
                if (!sink.write(s.data(), s.size())) return false;
                sink.done();
                return true;
            },
            [cancel_all](bool ok) {
                if (!ok) cancel_all();
            });
        return;
    }

    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, st, id, created, model, chat, echo, want_lp, usage, cancel_all](
            size_t, httplib::DataSink& sink) {
            auto send = [&](const json& j) {
                const std::string s = "data: " + dump(j) + "\n\n";
                return sink.write(s.data(), s.size());
            };
            auto chunk = [&](size_t i, json delta_or_text, json lp, json finish) {
                json c;
                c["id"] = id;
                c["object"] = chat ? "chat.completion.chunk" : "text_completion";
                c["created"] = created;
                c["model"] = model;
                json ch;
                ch["index"] = i;
                if (chat)
                    ch["delta"] = delta_or_text;
                else {
                    ch["text"] = delta_or_text;
                    ch["logprobs"] = lp;
                }
                ch["finish_reason"] = finish;
                c["choices"] = json::array({ch});
                return c;
            };
            int idle = 0;
            for (;;) {
                bool any = false, all_done = true;
                for (size_t i = 0; i < st->jobs.size(); ++i) {
                    Job& j = *st->jobs[i];
                    std::deque<JobEvent> evs;
                    bool done;
                    {
                        std::lock_guard<std::mutex> lk(j.mu);
                        evs.swap(j.events);
                        done = j.done;
                    }
                    if (!st->started[i] && (!evs.empty() || done)) {
                        st->started[i] = true;
                        if (chat) {
                            if (!send(chunk(i, json{{"role", "assistant"}, {"content", ""}},
                                            nullptr, nullptr)))
                                return cancel_all(), false;
                        } else if (echo) {
                            std::vector<std::string> ps;
                            std::vector<int64_t> os;
                            e_.pieces(j.prompt, &ps, &os);
                            std::string pt;
                            for (const auto& s : ps) pt += s;
                            json lp = nullptr;
                            if (want_lp) {
                                Job tmp;
                                tmp.prompt = j.prompt;
                                {
                                    std::lock_guard<std::mutex> lk(j.mu);
                                    tmp.prompt_lp = j.prompt_lp;
                                }
                                lp = choice_logprobs(tmp, true);
                            }
                            if (!send(chunk(i, pt, lp, nullptr))) return cancel_all(), false;
                        }
                    }
                    for (auto& ev : evs) {
                        any = true;
                        json lp = nullptr;
                        if (want_lp && !ev.tokens.empty()) {
                            // In context: after the previous token (the prompt's last one first).
                            Job tmp;
                            tmp.prompt = {st->last_tok[i] >= 0 ? st->last_tok[i] : j.prompt.back()};
                            tmp.gen = ev.tokens;
                            lp = choice_logprobs(tmp, false, st->sent[i]);
                            st->last_tok[i] = ev.tokens.back().id;
                            for (const auto& t : lp["tokens"])
                                st->sent[i] += int64_t(t.get<std::string>().size());
                        }
                        if (ev.text.empty() && lp.is_null()) continue;
                        json d = chat ? json{{"content", ev.text}} : json(ev.text);
                        if (!send(chunk(i, d, lp, nullptr))) return cancel_all(), false;
                    }
                    if (done && !st->ended[i]) {
                        st->ended[i] = true;
                        any = true;
                        if (!j.error.empty()) {
                            json e = json::parse(error_body("server_error", j.error));
                            if (!send(e)) return cancel_all(), false;
                        } else if (!send(chunk(i, chat ? json::object() : json(""), nullptr,
                                               j.finish_reason))) {
                            return cancel_all(), false;
                        }
                    }
                    all_done = all_done && st->ended[i];
                }
                if (all_done) break;
                if (!any) {
                    // Wait on a job that has not ended (an ended one is done: its wait returns at
                    // once, and the loop would spin), and count only those as news.
                    size_t w = 0;
                    while (st->ended[w]) ++w;  // one exists: not all_done
                    st->jobs[w]->wait(100);
                    for (size_t i = 0; i < st->jobs.size(); ++i) {
                        if (st->ended[i]) continue;
                        std::lock_guard<std::mutex> lk(st->jobs[i]->mu);
                        if (!st->jobs[i]->events.empty() || st->jobs[i]->done) {
                            idle = 0;
                            break;
                        }
                    }
                    if (++idle % 10 == 0) {
                        const char* ping = ": ping\n\n";
                        if (!sink.write(ping, 8)) return cancel_all(), false;
                    }
                }
            }
            json u;
            u["id"] = id;
            u["object"] = chat ? "chat.completion.chunk" : "text_completion";
            u["created"] = created;
            u["model"] = model;
            u["choices"] = json::array();
            u["usage"] = usage();
            if (!send(u)) return false;
            const char* fin = "data: [DONE]\n\n";
            if (!sink.write(fin, std::strlen(fin))) return false;
            sink.done();
            return true;
        },
        [cancel_all](bool ok) {
            if (!ok) cancel_all();
        });
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
        ids = e_.tokenize(b["prompt"].get<std::string>());
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
    res.set_content(dump(out), "application/json");
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
    svr_.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
    svr_.set_payload_max_length(size_t(o_.max_body));
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
        PLDR_REQUIRE(port > 0, "cannot listen on ", o_.host, " (any port)");
    } else {
        PLDR_REQUIRE(svr_.bind_to_port(o_.host.c_str(), port), "cannot listen on ", o_.host, ":",
                     port, " (address in use, or not an address of this machine)");
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
    PLDR_REQUIRE(ok || draining_, "the HTTP server stopped unexpectedly");
    std::fprintf(stderr, "pldr serve: stopped\n");
    return 0;
}

namespace {

void check_options(const ServeOptions& o) {
    PLDR_REQUIRE(o.mode == "block" || o.mode == "cached", "mode must be block or cached (got '",
                 o.mode, "')");
    for_each_option(o, api::OptionRangeCheck{});
    api::check_device(o.device);
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
