// The Server of `pldr serve` (server.cpp: routes, the endpoints but completions, metrics, the
// run and its drain; completions.cpp: the completion endpoints).
#pragma once
#include <httplib.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "serve/engine.h"
#include "serve/http_json.h"
#include "serve/scheduler.h"
#include "serve/server.h"

namespace pldr::serve {

// One completions request in flight: its jobs, what the stream has sent of each, and how the
// response is shaped.
struct Completion {
    std::vector<std::shared_ptr<Job>> jobs;
    std::vector<bool> started, ended, spoke;      // spoke: chat content other than spaces sent
    std::vector<int64_t> last_tok, sent;          // streamed logprobs: previous token, text length
    std::vector<std::vector<TokenLogprob>> held;  // streamed logprobs: tokens whose text is held
    std::vector<int64_t> text_sent;               // streamed: bytes of generated text sent
    std::string id, model;
    int64_t created = 0, n = 1;  // n: choices per prompt (jobs are prompt-major)
    bool chat = false, echo = false, want_lp = false;

    void cancel_all() {
        for (auto& j : jobs) j->cancelled = true;
    }
    // prompt_tokens counts each prompt once, whatever n (as OpenAI does).
    json usage() const {
        int64_t p = 0, c = 0;
        for (size_t i = 0; i < jobs.size(); ++i) {
            if (int64_t(i) % n == 0) p += int64_t(jobs[i]->prompt.size());
            c += int64_t(jobs[i]->gen.size());
        }
        return json{{"prompt_tokens", p}, {"completion_tokens", c}, {"total_tokens", p + c}};
    }
};

class Server {
  public:
    Server(const std::string& dir, const ServeOptions& o)
        : o_(o),
          e_(dir, o.ctx, o.mode == "cached" ? EchoMode::CACHED : EchoMode::BLOCK, o.tokenizer,
             o.device),
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
    std::vector<int64_t> prompt_ids(const std::string& text) const;
    std::vector<std::string> parse_stop(const json& b) const;
    std::vector<std::shared_ptr<Job>> make_jobs(const json& b, const std::vector<Prompt>& prompts,
                                                const std::vector<std::string>& extra_stop,
                                                int64_t* n_out, bool chat) const;
    void submit(const std::vector<std::shared_ptr<Job>>& jobs);

    // /v1/completions and /v1/chat/completions (completions.cpp): the request's prompts and
    // jobs, then the whole response or its stream.
    void completions(const httplib::Request& req, httplib::Response& res, bool chat);
    std::vector<Prompt> request_prompts(const json& b, bool chat,
                                        std::vector<std::string>* extra_stop) const;
    void respond_whole(httplib::Response& res, const std::shared_ptr<Completion>& c);
    json whole_body(const Completion& c) const;
    void respond_stream(httplib::Response& res, const std::shared_ptr<Completion>& c);
    bool stream_job(Completion& c, size_t i, const std::function<bool(const json&)>& send,
                    bool* any) const;
    json chunk(const Completion& c, size_t i, json delta_or_text, json lp, json finish) const;
    std::string echo_text(const Job& j) const;
    json stream_logprobs(Completion& c, size_t i, const JobEvent& ev, bool last) const;
    json choice_logprobs(const Job& j, bool echo, int64_t base = 0, int64_t limit = -1) const;
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

}  // namespace pldr::serve
