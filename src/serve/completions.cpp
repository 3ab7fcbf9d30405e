// The completion endpoints of `pldr serve` (/v1/completions, /v1/chat/completions): the
// request's prompts and jobs, the whole response, and the stream of server-sent events.
#include <cstring>
#include <ctime>
#include <deque>

#include "serve/server_impl.h"

namespace pldr::serve {

// The ids of a prompt text, or a 400 as soon as they cannot fit the context. A long text is
// tokenized first up to its last space before 16 bytes per context token: SentencePiece pieces do
// not cross a space, so those ids begin the whole text's ids, and more of them than the context
// refuses the text unread. A 1 MB prompt took 2-3.4 s to refuse when it was tokenized whole.
std::vector<int64_t> Server::prompt_ids(const std::string& text) const {
    const size_t head = size_t(e_.ctx()) * 16 + 1024;
    const size_t cut = text.size() > 2 * head ? text.rfind(' ', head) : std::string::npos;
    if (cut != std::string::npos && cut > 0) {
        const size_t n = e_.tokenize(text.substr(0, cut)).size();
        if (int64_t(n) > e_.ctx())
            bad("prompt of more than " + std::to_string(n) + " tokens (in its first " +
                std::to_string(cut) + " of " + std::to_string(text.size()) +
                " bytes) is longer than the context (" + std::to_string(e_.ctx()) + " tokens)");
    }
    return e_.tokenize(text);
}

std::vector<Server::Prompt> Server::parse_prompts(const json& p) const {
    std::vector<Prompt> out;
    auto from_text = [&](const std::string& s) {
        Prompt q;
        q.ids = prompt_ids(s);
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
    if (chat && get_bool(b, "logprobs", false))
        bad("'logprobs' is not implemented for chat completions (use /v1/completions)");
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

json Server::choice_logprobs(const Job& j, bool echo, int64_t base, int64_t limit) const {
    // Each token's text in context: with echo, from the start of the prompt; otherwise after
    // the last prompt token (so that a generated token keeps its leading space), with offsets
    // into the generated text from `base` on. A limit (>= 0, the byte where a stop string cut the
    // text, an offset like the others) drops the generated tokens that start there or later.
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
    size_t n_gen = j.gen.size();
    const size_t first_gen = echo ? j.prompt.size() : 0;  // index of the first generated token
    if (limit >= 0)
        for (size_t g = 0; g < j.gen.size(); ++g)
            if (first_gen + g < offsets.size() && offsets[first_gen + g] >= limit) {
                n_gen = g;
                pieces.resize(first_gen + g);
                offsets.resize(first_gen + g);
                lp["tokens"] = pieces;
                break;
            }
    for (size_t g = 0; g < n_gen; ++g) add(j.gen[g]);
    lp["token_logprobs"] = tl;
    lp["top_logprobs"] = top;
    lp["text_offset"] = offsets;
    return lp;
}

// The prompts of a request: the chat messages in the reference's template (and the stop strings
// that end the assistant's turn), or the completion's prompt.
std::vector<Server::Prompt> Server::request_prompts(const json& b, bool chat,
                                                    std::vector<std::string>* extra_stop) const {
    if (!chat) {
        if (!b.contains("prompt")) bad("'prompt' is required");
        return parse_prompts(b["prompt"]);
    }
    if (!b.contains("messages") || !b["messages"].is_array() || b["messages"].empty())
        bad("'messages' must be a non-empty list of {role, content}");
    std::string text;
    for (const auto& m : b["messages"]) {
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string() ||
            !m.contains("content") || !m["content"].is_string())
            bad("each message must be an object with string 'role' and 'content' (got " + brief(m) +
                ")");
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
    *extra_stop = {"\nUser:", "\nSystem:"};
    return parse_prompts(json(text));
}

void Server::completions(const httplib::Request& req, httplib::Response& res, bool chat) {
    const json b = body_of(req);
    std::vector<std::string> extra_stop;
    const std::vector<Prompt> prompts = request_prompts(b, chat, &extra_stop);
    auto c = std::make_shared<Completion>();
    c->jobs = make_jobs(b, prompts, extra_stop, &c->n, chat);
    const bool stream = get_bool(b, "stream", false);
    c->chat = chat;
    c->echo = !chat && get_bool(b, "echo", false);
    c->want_lp = !chat && b.contains("logprobs") && !b["logprobs"].is_null();
    submit(c->jobs);
    const size_t n = c->jobs.size();
    c->started.assign(n, false);
    c->ended.assign(n, false);
    c->spoke.assign(n, false);
    c->last_tok.assign(n, -1);
    c->sent.assign(n, 0);
    c->held.assign(n, {});
    c->text_sent.assign(n, 0);
    c->id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_++);
    c->created = int64_t(std::time(nullptr));
    c->model = e_.model_name();
    if (stream)
        respond_stream(res, c);
    else
        respond_whole(res, c);
}

// The text of a prompt as its tokens decode (what echo puts before the completion).
std::string Server::echo_text(const Job& j) const {
    std::vector<std::string> ps;
    std::vector<int64_t> os;
    e_.pieces(j.prompt, &ps, &os);
    std::string pt;
    for (const auto& s : ps) pt += s;
    return pt;
}

// The whole response once every job is done; a space every 250 ms until then (JSON allows
// leading whitespace): a client that has gone away makes the write fail, and its jobs are
// cancelled.
void Server::respond_whole(httplib::Response& res, const std::shared_ptr<Completion>& c) {
    res.set_chunked_content_provider(
        "application/json",
        [this, c](size_t, httplib::DataSink& sink) {
            for (;;) {
                size_t k = 0;
                while (k < c->jobs.size()) {
                    std::lock_guard<std::mutex> lk(c->jobs[k]->mu);
                    if (!c->jobs[k]->done) break;
                    ++k;
                }
                if (k == c->jobs.size()) break;
                c->jobs[k]->wait_done(250);
                if (!sink.write(" ", 1)) {
                    c->cancel_all();
                    return false;
                }
            }
            const std::string s = dump(whole_body(*c));
            if (!sink.write(s.data(), s.size())) return false;
            sink.done();
            return true;
        },
        [c](bool ok) {
            if (!ok) c->cancel_all();
        });
}

json Server::whole_body(const Completion& c) const {
    for (auto& j : c.jobs)
        if (!j->error.empty()) return json::parse(error_body("server_error", j->error));
    json out;
    out["id"] = c.id;
    out["object"] = c.chat ? "chat.completion" : "text_completion";
    out["created"] = c.created;
    out["model"] = c.model;
    json choices = json::array();
    for (size_t i = 0; i < c.jobs.size(); ++i) {
        const Job& j = *c.jobs[i];
        json ch;
        ch["index"] = i;
        if (c.chat) {
            const size_t sp = j.text.find_first_not_of(' ');
            ch["message"] = {{"role", "assistant"},
                             {"content", sp == std::string::npos ? "" : j.text.substr(sp)}};
        } else {
            // The tokens end where a stop string cut the text (not at EOS, whose piece is empty).
            const bool eos = j.stop_at_eos && !j.gen.empty() && j.gen.back().id == e_.eos_id();
            const std::string echoed = c.echo ? echo_text(j) : std::string();
            const int64_t limit = j.finish_reason == "stop" && !eos
                                      ? int64_t(echoed.size() + j.text.size())
                                      : int64_t(-1);
            ch["text"] = echoed + j.text;
            ch["logprobs"] = c.want_lp ? choice_logprobs(j, c.echo, 0, limit) : json(nullptr);
        }
        ch["finish_reason"] = j.finish_reason;
        choices.push_back(ch);
    }
    out["choices"] = choices;
    out["usage"] = c.usage();
    return out;
}

json Server::chunk(const Completion& c, size_t i, json delta_or_text, json lp, json finish) const {
    json k;
    k["id"] = c.id;
    k["object"] = c.chat ? "chat.completion.chunk" : "text_completion";
    k["created"] = c.created;
    k["model"] = c.model;
    json ch;
    ch["index"] = i;
    if (c.chat) {
        ch["delta"] = delta_or_text;
    } else {
        ch["text"] = delta_or_text;
        ch["logprobs"] = lp;
    }
    ch["finish_reason"] = finish;
    k["choices"] = json::array({ch});
    return k;
}

// The logprobs of job i's tokens whose text has been sent, with this event's text (null when
// none): a token is held while its text is held back for a possible stop string, and dropped when
// a stop string cut the text before it (as the whole response does). At the job's last event,
// ended otherwise (length, EOS), every held token goes.
json Server::stream_logprobs(Completion& c, size_t i, const JobEvent& ev, bool last) const {
    const Job& j = *c.jobs[i];
    auto& held = c.held[i];
    held.insert(held.end(), ev.tokens.begin(), ev.tokens.end());
    c.text_sent[i] += int64_t(ev.text.size());
    if (held.empty()) return nullptr;
    // In context: after the previous token (the prompt's last one first).
    Job tmp;
    tmp.prompt = {c.last_tok[i] >= 0 ? c.last_tok[i] : j.prompt.back()};
    tmp.gen = held;
    json lp = choice_logprobs(tmp, false, c.sent[i]);
    // The job's end (read once it is done: the scheduler writes it until then).
    auto by_stop_string = [&] {
        return j.finish_reason == "stop" &&
               !(j.stop_at_eos && !j.gen.empty() && j.gen.back().id == e_.eos_id());
    };
    size_t k = 0;  // the held tokens that start in the text sent
    if (last && !by_stop_string())
        k = held.size();
    else
        while (k < held.size() && lp["text_offset"][k].get<int64_t>() < c.text_sent[i]) ++k;
    if (k < held.size()) {
        tmp.gen.assign(held.begin(), held.begin() + int64_t(k));
        lp = k ? choice_logprobs(tmp, false, c.sent[i]) : json();
    }
    if (k == 0) {
        if (last) held.clear();
        return nullptr;
    }
    c.last_tok[i] = held[k - 1].id;
    for (const auto& t : lp["tokens"]) c.sent[i] += int64_t(t.get<std::string>().size());
    held.erase(held.begin(), last ? held.end() : held.begin() + int64_t(k));
    return lp;
}

// Sends what job i has produced since the last call: its first chunk (the chat role, or the
// echoed prompt), its text and logprobs, and its end. False when a write failed.
bool Server::stream_job(Completion& c, size_t i, const std::function<bool(const json&)>& send,
                        bool* any) const {
    Job& j = *c.jobs[i];
    std::deque<JobEvent> evs;
    bool done;
    {
        std::lock_guard<std::mutex> lk(j.mu);
        evs.swap(j.events);
        done = j.done;
    }
    if (!c.started[i] && (!evs.empty() || done)) {
        c.started[i] = true;
        if (c.chat) {
            if (!send(chunk(c, i, json{{"role", "assistant"}, {"content", ""}}, nullptr, nullptr)))
                return false;
        } else if (c.echo) {
            json lp = nullptr;
            if (c.want_lp) {
                Job tmp;
                tmp.prompt = j.prompt;
                {
                    std::lock_guard<std::mutex> lk(j.mu);
                    tmp.prompt_lp = j.prompt_lp;
                }
                lp = choice_logprobs(tmp, true);
            }
            if (!send(chunk(c, i, echo_text(j), lp, nullptr))) return false;
        }
    }
    for (auto& ev : evs) {
        *any = true;
        const json lp = c.want_lp ? stream_logprobs(c, i, ev, done && &ev == &evs.back()) : json();
        std::string text = ev.text;
        if (c.chat && !c.spoke[i]) {
            // As the whole response does: the assistant's reply starts at its first non-space.
            const size_t sp = text.find_first_not_of(' ');
            text = sp == std::string::npos ? "" : text.substr(sp);
            c.spoke[i] = !text.empty();
        }
        if (text.empty() && lp.is_null()) continue;
        json d = c.chat ? json{{"content", text}} : json(text);
        if (!send(chunk(c, i, d, lp, nullptr))) return false;
    }
    if (done && !c.ended[i]) {
        c.ended[i] = true;
        *any = true;
        if (!j.error.empty()) return send(json::parse(error_body("server_error", j.error)));
        return send(chunk(c, i, c.chat ? json::object() : json(""), nullptr, j.finish_reason));
    }
    return true;
}

// Server-sent events as the jobs produce them, a comment line every second of silence (a client
// that has gone away makes the write fail, and its jobs are cancelled), then the usage and
// [DONE].
void Server::respond_stream(httplib::Response& res, const std::shared_ptr<Completion>& c) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, c](size_t, httplib::DataSink& sink) {
            auto send = [&](const json& j) {
                const std::string s = "data: " + dump(j) + "\n\n";
                return sink.write(s.data(), s.size());
            };
            int idle = 0;
            for (;;) {
                bool any = false, all_done = true;
                for (size_t i = 0; i < c->jobs.size(); ++i) {
                    if (!stream_job(*c, i, send, &any)) return c->cancel_all(), false;
                    all_done = all_done && c->ended[i];
                }
                if (all_done) break;
                if (any) continue;
                // Wait on a job that has not ended (an ended one is done: its wait returns at
                // once, and the loop would spin), and count only those as news.
                size_t w = 0;
                while (c->ended[w]) ++w;  // one exists: not all_done
                c->jobs[w]->wait(100);
                for (size_t i = 0; i < c->jobs.size(); ++i) {
                    if (c->ended[i]) continue;
                    std::lock_guard<std::mutex> lk(c->jobs[i]->mu);
                    if (!c->jobs[i]->events.empty() || c->jobs[i]->done) {
                        idle = 0;
                        break;
                    }
                }
                if (++idle % 10 == 0) {
                    const char* ping = ": ping\n\n";
                    if (!sink.write(ping, 8)) return c->cancel_all(), false;
                }
            }
            json u;
            u["id"] = c->id;
            u["object"] = c->chat ? "chat.completion.chunk" : "text_completion";
            u["created"] = c->created;
            u["model"] = c->model;
            u["choices"] = json::array();
            u["usage"] = c->usage();
            if (!send(u)) return false;
            const char* fin = "data: [DONE]\n\n";
            if (!sink.write(fin, std::strlen(fin))) return false;
            sink.done();
            return true;
        },
        [c](bool ok) {
            if (!ok) c->cancel_all();
        });
}

}  // namespace pldr::serve
