// Device time per phase (profile.h): CUDA event pairs, resolved in batches.
#include "cuda/profile.h"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "cuda/common.cuh"

namespace pldr::cuda {

namespace {

struct Pending {
    int slot;
    int device;  // where a and b were made
    cudaEvent_t a, b;
};

struct State {
    std::mutex mu;
    // Read without the lock (every Phase asks, on or off); set from PLDR_CUDA_PROFILE at first.
    std::atomic<bool> enabled{[] {
        const char* v = std::getenv("PLDR_CUDA_PROFILE");
        return v && std::string(v) == "1";
    }()};
    int level = 0;
    int64_t generation = 0;  // a reset's: phases open across it are dropped
    std::map<std::string, int> index;
    std::vector<PhaseTime> table;
    std::vector<Pending> pending;
    std::map<int, std::vector<cudaEvent_t>> pool;  // per device (an event records on its own)
};

State& state() {
    static State s;
    return s;
}

constexpr size_t kMaxPending = 4096;

// An event of the current device from the pool, or a new one; null where the runtime fails
// (its error cleared, so that no later launch check reports it).
cudaEvent_t take_event(State& st, int device) {
    std::vector<cudaEvent_t>& pool = st.pool[device];
    if (!pool.empty()) {
        const cudaEvent_t e = pool.back();
        pool.pop_back();
        return e;
    }
    cudaEvent_t e = nullptr;
    if (cudaEventCreate(&e) != cudaSuccess) {
        (void)cudaGetLastError();
        return nullptr;
    }
    return e;
}

// Waits for each pending end event and adds its phase's time (st.mu held). Each entry is taken
// off the list before it is read, so that a failure leaves none to be counted twice.
void resolve(State& st) {
    std::vector<Pending> todo;
    todo.swap(st.pending);
    for (size_t i = 0; i < todo.size(); ++i) {
        const Pending& p = todo[i];
        float ms = 0;
        const bool ok = cudaEventSynchronize(p.b) == cudaSuccess &&
                        cudaEventElapsedTime(&ms, p.a, p.b) == cudaSuccess;
        if (ok) {
            PhaseTime& t = st.table[size_t(p.slot)];
            t.calls += 1;
            t.ms += double(ms);
        }
        st.pool[p.device].push_back(p.a);
        st.pool[p.device].push_back(p.b);
        if (!ok) {  // the device's error: the rest are dropped, the error reported
            const cudaError_t e = cudaGetLastError();
            for (size_t j = i + 1; j < todo.size(); ++j) {
                st.pool[todo[j].device].push_back(todo[j].a);
                st.pool[todo[j].device].push_back(todo[j].b);
            }
            throw_cuda("cudaEventSynchronize / cudaEventElapsedTime (profile)", e);
        }
    }
}

bool capturing(Stream s) {
    cudaStreamCaptureStatus c = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(s, &c) != cudaSuccess) {
        (void)cudaGetLastError();
        return true;  // (unknown: no events)
    }
    return c != cudaStreamCaptureStatusNone;
}

}  // namespace

bool profile_on() {
    return state().enabled.load(std::memory_order_relaxed);
}

void profile_enable(bool on) {
    state().enabled.store(on, std::memory_order_relaxed);
}

Phase::Phase(const char* name, Stream s) {
    if (!profile_on() || capturing(s)) return;
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) {  // (a timer never fails a pass)
        (void)cudaGetLastError();
        return;
    }
    State& st = state();
    std::lock_guard<std::mutex> lock(st.mu);
    const cudaEvent_t a = take_event(st, device);
    if (!a) return;
    if (cudaEventRecord(a, s) != cudaSuccess) {
        (void)cudaGetLastError();
        st.pool[device].push_back(a);
        return;
    }
    const auto [it, added] = st.index.emplace(name, int(st.table.size()));
    if (added) st.table.push_back({name, st.level, 0, 0.0});
    slot_ = it->second;
    device_ = device;
    generation_ = st.generation;
    start_ = a;
    s_ = s;
    ++st.level;
}

Phase::~Phase() {
    if (slot_ < 0) return;
    State& st = state();
    std::lock_guard<std::mutex> lock(st.mu);
    --st.level;
    const cudaEvent_t a = static_cast<cudaEvent_t>(start_);
    std::vector<cudaEvent_t>& pool = st.pool[device_];
    if (generation_ != st.generation) {  // the table was reset while this phase ran
        pool.push_back(a);
        return;
    }
    // (a destructor does not throw: a failure here drops this phase's time, its error cleared)
    const cudaEvent_t b = take_event(st, device_);
    if (!b) {
        pool.push_back(a);
        return;
    }
    if (cudaEventRecord(b, s_) != cudaSuccess) {
        (void)cudaGetLastError();
        pool.push_back(a);
        pool.push_back(b);
        return;
    }
    st.pending.push_back({slot_, device_, a, b});
    if (st.pending.size() >= kMaxPending) {
        try {
            resolve(st);
        } catch (...) {  // (the pass that follows meets the device's error itself)
        }
    }
}

std::vector<PhaseTime> profile_take(bool reset) {
    State& st = state();
    std::lock_guard<std::mutex> lock(st.mu);
    resolve(st);
    std::vector<PhaseTime> out = st.table;
    if (reset) {
        st.table.clear();
        st.index.clear();
        ++st.generation;
    }
    return out;
}

}  // namespace pldr::cuda
