// The slot scheduler of `pldr serve`: a bounded queue of jobs, K slots (each a sequence with its
// own KV- and G-cache), and one thread that admits jobs between decode steps (continuous
// batching), prefills them, samples, and runs the decode steps of every active slot together
// (Engine::decode_batch). Handlers wait on a job's events; a cancelled job frees its slot at the
// next step.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "serve/engine.h"

namespace pldr::serve {

// A piece of generated output: the text it adds (after stop-string hold-back) and the tokens
// sampled since the previous event.
struct JobEvent {
    std::string text;
    std::vector<TokenLogprob> tokens;
};

struct Job {
    // Request (set before submit; read-only afterwards).
    std::vector<int64_t> prompt;
    SamplingParams sp;
    int64_t max_tokens = 16;
    int64_t top_n = 0;  // alternatives kept per token (logprobs)
    bool echo = false;  // prompt log-probabilities wanted
    bool stop_at_eos = true;
    std::vector<std::string> stop;

    // Output, under mu.
    std::mutex mu;
    std::condition_variable cv;
    std::deque<JobEvent> events;  // not yet taken by the handler
    bool done = false;
    std::string finish_reason, error;
    std::vector<TokenLogprob> prompt_lp;  // entry i-1 for prompt token i (echo)
    std::vector<TokenLogprob> gen;        // every generated token (kept when stopped)
    std::string text;                     // the final generated text (stop string removed)
    std::atomic<bool> cancelled{false};

    // Scheduler state.
    Slot* slot = nullptr;
    std::string all;     // decoded text of gen so far
    size_t emitted = 0;  // bytes of `all` already sent as events
    bool ready = false;  // the slot holds logits to sample from
    std::chrono::steady_clock::time_point t_submit, t_first;

    // Waits up to `ms` for an event or the end; returns true when something changed.
    bool wait(int ms);
    // Waits up to `ms` for the end; returns done.
    bool wait_done(int ms);
};

struct SchedulerStats {
    int64_t queue = 0, active = 0, slots = 0;
    int64_t prompt_tokens = 0, generated_tokens = 0, decode_steps = 0, batched_tokens = 0;
    int64_t jobs_done = 0, jobs_failed = 0, jobs_cancelled = 0;
    double tokens_per_s = 0;  // generated tokens over the last 10 s
};

class Scheduler {
  public:
    Scheduler(const Engine& e, int64_t slots, int64_t max_queue);
    ~Scheduler();
    // Queues every job of one request, or none when the queue would overflow (returns false).
    bool submit(const std::vector<std::shared_ptr<Job>>& jobs);
    // True when no job is queued or running.
    bool idle() const;
    SchedulerStats stats() const;
    // Finishes the running and queued jobs, then stops the thread.
    void shutdown();

  private:
    void loop();
    void prefill(Job& j);
    void sample_and_emit(Job& j);
    void finish(Job& j, const std::string& reason, const std::string& error = {});

    const Engine& e_;
    int64_t max_queue_;
    std::vector<std::unique_ptr<Slot>> slots_;
    std::vector<Slot*> free_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::shared_ptr<Job>> pending_;
    std::vector<std::shared_ptr<Job>> active_;
    bool stop_ = false;
    SchedulerStats st_;
    std::deque<std::pair<std::chrono::steady_clock::time_point, int64_t>> recent_;
    std::thread th_;
};

}  // namespace pldr::serve
