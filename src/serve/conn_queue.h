// The task queue of `pldr serve`'s HTTP connections: a pool that starts with the worker threads of
// --threads and grows by one thread whenever a connection arrives while none is idle, up to a cap;
// past the cap, connections wait for a thread. cpp-httplib's fixed pool let 80 half-open
// connections (a client that sends half a request, one per thread) hold every worker until each
// read timed out, so /health did not answer meanwhile; now slow clients take threads of their own
// (each released by the read timeout), and the cap bounds the threads they can take.
#pragma once
#include <httplib.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pldr::serve {

class ConnQueue : public httplib::TaskQueue {
  public:
    // `base` threads now, at most `cap` (>= base) once connections have needed them.
    ConnQueue(size_t base, size_t cap) : cap_(cap < base ? base : cap) {
        std::lock_guard<std::mutex> lk(mu_);
        for (size_t i = 0; i < base; ++i) spawn();
    }
    ~ConnQueue() override = default;

    void enqueue(std::function<void()> fn) override {
        {
            std::lock_guard<std::mutex> lk(mu_);
            jobs_.push_back(std::move(fn));
            if (idle_ < jobs_.size() && threads_.size() < cap_) spawn();
        }
        cv_.notify_one();
    }

    void shutdown() override {
        {
            std::lock_guard<std::mutex> lk(mu_);
            stop_ = true;
        }
        cv_.notify_all();
        for (auto& t : threads_) t.join();  // no spawn after stop_: the vector is final
    }

    size_t threads() {
        std::lock_guard<std::mutex> lk(mu_);
        return threads_.size();
    }

  private:
    void spawn() {  // under mu_
        ++idle_;
        threads_.emplace_back([this] { work(); });
    }

    void work() {
        std::unique_lock<std::mutex> lk(mu_);
        for (;;) {
            cv_.wait(lk, [this] { return stop_ || !jobs_.empty(); });
            if (jobs_.empty()) return;  // stopping, and every connection taken was served
            std::function<void()> fn = std::move(jobs_.front());
            jobs_.pop_front();
            --idle_;
            lk.unlock();
            fn();
            lk.lock();
            ++idle_;
        }
    }

    const size_t cap_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> jobs_;
    std::vector<std::thread> threads_;
    size_t idle_ = 0;
    bool stop_ = false;
};

}  // namespace pldr::serve
