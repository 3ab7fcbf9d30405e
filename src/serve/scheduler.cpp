// The slot scheduler (see scheduler.h).
#include "serve/scheduler.h"

#include <algorithm>

namespace pldr::serve {

using Clock = std::chrono::steady_clock;

bool Job::wait(int ms) {
    std::unique_lock<std::mutex> lk(mu);
    return cv.wait_for(lk, std::chrono::milliseconds(ms), [&] { return done || !events.empty(); });
}

bool Job::wait_done(int ms) {
    std::unique_lock<std::mutex> lk(mu);
    return cv.wait_for(lk, std::chrono::milliseconds(ms), [&] { return done; });
}

namespace {

// Bytes at the end of s that could begin a stop string (held back until known).
size_t hold_back(const std::string& s, const std::vector<std::string>& stops) {
    size_t hold = 0;
    for (const auto& st : stops)
        for (size_t k = std::min(st.size() - 1, s.size()); k > hold; --k)
            if (s.compare(s.size() - k, k, st, 0, k) == 0) {
                hold = k;
                break;
            }
    // A text that ends inside a character (byte pieces) decodes with a U+FFFD for each of its
    // bytes so far, which the next token's text replaces: hold them back.
    static const std::string kReplacement = "\xEF\xBF\xBD";
    while (s.size() - hold >= kReplacement.size() &&
           s.compare(s.size() - hold - kReplacement.size(), kReplacement.size(), kReplacement) == 0)
        hold += kReplacement.size();
    // Never split a UTF-8 sequence: hold back an incomplete trailing one.
    size_t i = s.size() - hold, back = 0;
    while (i > 0 && back < 4 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) {
        --i;
        ++back;
    }
    if (i > 0) {
        const unsigned char lead = static_cast<unsigned char>(s[i - 1]);
        const size_t need = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;
        if (need > back) hold += back + 1;
    }
    return std::min(hold, s.size());
}

}  // namespace

Scheduler::Scheduler(const Engine& e, int64_t slots, int64_t max_queue)
    : e_(e), max_queue_(max_queue) {
    require(slots >= 1 && slots <= 256, "--parallel must be in [1, 256], got ",
            std::to_string(slots));
    require(max_queue >= 1, "--queue must be >= 1, got ", std::to_string(max_queue));
    for (int64_t i = 0; i < slots; ++i) {
        slots_.push_back(e.new_slot());
        free_.push_back(slots_.back().get());
    }
    st_.slots = slots;
    th_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
    shutdown();
}

bool Scheduler::submit(const std::vector<std::shared_ptr<Job>>& jobs) {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_ || int64_t(pending_.size() + jobs.size()) > max_queue_) return false;
    for (const auto& j : jobs) {
        j->t_submit = Clock::now();
        pending_.push_back(j);
    }
    cv_.notify_all();
    return true;
}

bool Scheduler::idle() const {
    std::lock_guard<std::mutex> lk(mu_);
    return pending_.empty() && active_.empty();
}

SchedulerStats Scheduler::stats() const {
    std::lock_guard<std::mutex> lk(mu_);
    SchedulerStats s = st_;
    s.queue = int64_t(pending_.size());
    s.active = int64_t(active_.size());
    const auto now = Clock::now();
    int64_t n = 0;
    for (const auto& [t, k] : recent_)
        if (now - t <= std::chrono::seconds(10)) n += k;
    s.tokens_per_s = double(n) / 10.0;
    return s;
}

void Scheduler::shutdown() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
        cv_.notify_all();
    }
    if (th_.joinable()) th_.join();
}

void Scheduler::finish(Job& j, const std::string& reason, const std::string& error) {
    std::lock_guard<std::mutex> lk(j.mu);
    if (error.empty() && reason != "cancelled") {
        // Flush what was held back for a possible stop string.
        std::string rest = j.all.substr(std::min(j.emitted, j.all.size()));
        if (!rest.empty()) j.events.push_back({rest, {}});
        j.emitted = j.all.size();
    }
    j.text = j.all;
    j.finish_reason = reason;
    j.error = error;
    j.done = true;
    j.cv.notify_all();
}

void Scheduler::prefill(Job& j) {
    j.slot->prefill(j.prompt, j.sp);
    if (j.echo) j.prompt_lp = e_.prompt_logprobs(j.prompt, std::max<int64_t>(j.top_n, 1), j.slot);
    j.ready = true;
}

void Scheduler::sample_and_emit(Job& j) {
    TokenLogprob t = j.slot->sample(j.top_n);
    if (j.gen.empty()) j.t_first = Clock::now();
    j.gen.push_back(t);
    const bool eos = j.stop_at_eos && t.id == e_.eos_id();
    // The text the generated tokens add after the prompt: decoded after the last prompt token,
    // so that a leading space is kept (a decoded text drops the space of its first piece).
    std::vector<int64_t> ids;
    for (const auto& g : j.gen) ids.push_back(g.id);
    if (eos) ids.pop_back();
    j.all = e_.continuation_text({j.prompt.back()}, ids);
    // The first stop string found ends the text before it.
    size_t cut = std::string::npos;
    for (const auto& s : j.stop) {
        const size_t from = j.emitted > s.size() ? j.emitted - s.size() : 0;
        const size_t p = j.all.find(s, from);
        if (p != std::string::npos) cut = std::min(cut, p);
    }
    JobEvent ev;
    ev.tokens.push_back(t);
    std::string reason;
    if (cut != std::string::npos) {
        j.all.resize(cut);
        reason = "stop";
    } else if (eos) {
        reason = "stop";
    } else if (int64_t(j.gen.size()) >= j.max_tokens || j.slot->length() >= e_.ctx()) {
        reason = "length";
    }
    const size_t upto = reason.empty() ? j.all.size() - hold_back(j.all, j.stop) : j.all.size();
    if (upto > j.emitted) {
        ev.text = j.all.substr(j.emitted, upto - j.emitted);
        j.emitted = upto;
    }
    {
        std::lock_guard<std::mutex> lk(j.mu);
        j.events.push_back(std::move(ev));
        j.cv.notify_all();
    }
    {
        std::lock_guard<std::mutex> lk(mu_);
        st_.generated_tokens += 1;
        recent_.emplace_back(Clock::now(), 1);
        while (!recent_.empty() && Clock::now() - recent_.front().first > std::chrono::seconds(10))
            recent_.pop_front();
    }
    if (!reason.empty()) finish(j, reason);
    j.ready = false;
}

void Scheduler::loop() {
    std::vector<std::shared_ptr<Job>> fresh;
    for (;;) {
        fresh.clear();
        {
            std::unique_lock<std::mutex> lk(mu_);
            cv_.wait(lk, [&] {
                return !active_.empty() || (!pending_.empty() && !free_.empty()) ||
                       (stop_ && pending_.empty());
            });
            if (stop_ && pending_.empty() && active_.empty()) return;
            // Jobs join between steps while slots are free.
            while (!pending_.empty() && !free_.empty()) {
                auto j = pending_.front();
                pending_.pop_front();
                j->slot = free_.back();
                free_.pop_back();
                active_.push_back(j);
                fresh.push_back(j);
                st_.prompt_tokens += int64_t(j->prompt.size());
            }
        }
        // Prefill the new jobs (in parallel across jobs).
        const int64_t nf = int64_t(fresh.size());
        std::vector<std::string> errs(fresh.size());
#pragma omp parallel for schedule(dynamic, 1) if (nf > 1)
        for (int64_t i = 0; i < nf; ++i) {
            Job& j = *fresh[size_t(i)];
            if (j.cancelled) continue;
            try {
                prefill(j);
            } catch (const std::exception& ex) {
                errs[size_t(i)] = ex.what();
            }
        }
        for (int64_t i = 0; i < nf; ++i) {
            Job& j = *fresh[size_t(i)];
            if (!errs[size_t(i)].empty())
                finish(j, "error", errs[size_t(i)]);
            else if (!j.cancelled && j.max_tokens == 0)
                finish(j, "length");
        }
        // Sample one token for every active job that has logits; collect the decode step.
        std::vector<Slot*> step_slots;
        std::vector<int64_t> step_ids;
        std::vector<Job*> step_jobs;
        for (auto& jp : active_) {
            Job& j = *jp;
            if (j.done) continue;
            if (j.cancelled) {
                finish(j, "cancelled");
                continue;
            }
            if (!j.ready) continue;
            try {
                sample_and_emit(j);
            } catch (const std::exception& ex) {
                finish(j, "error", ex.what());
            }
            if (!j.done) {
                step_slots.push_back(j.slot);
                step_ids.push_back(j.gen.back().id);
                step_jobs.push_back(&j);
            }
        }
        if (!step_slots.empty()) {
            std::vector<std::string> errors;
            e_.decode_batch(step_slots, step_ids, &errors);
            for (size_t i = 0; i < step_jobs.size(); ++i) {
                if (!errors[i].empty())
                    finish(*step_jobs[i], "error", errors[i]);
                else
                    step_jobs[i]->ready = true;
            }
        }
        // Free the slots of finished jobs.
        std::lock_guard<std::mutex> lk(mu_);
        st_.decode_steps += step_slots.empty() ? 0 : 1;
        st_.batched_tokens += int64_t(step_slots.size());
        for (auto it = active_.begin(); it != active_.end();) {
            Job& j = **it;
            if (j.done) {
                if (!j.error.empty())
                    ++st_.jobs_failed;
                else if (j.finish_reason == "cancelled")
                    ++st_.jobs_cancelled;
                else
                    ++st_.jobs_done;
                j.slot->reset();
                free_.push_back(j.slot);
                j.slot = nullptr;
                it = active_.erase(it);
            } else {
                ++it;
            }
        }
    }
}

}  // namespace pldr::serve
