// Device time per phase (profile.h): CUDA event pairs, resolved in batches.
#include "cuda/profile.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "cuda/common.cuh"

namespace pldr::cuda {

namespace {

struct Pending {
    int slot;
    cudaEvent_t a, b;
};

struct State {
    std::mutex mu;
    int enabled = -1;  // -1: read PLDR_CUDA_PROFILE on first use
    int level = 0;
    int64_t generation = 0;  // a reset's: phases open across it are dropped
    std::map<std::string, int> index;
    std::vector<PhaseTime> table;
    std::vector<Pending> pending;
    std::vector<cudaEvent_t> pool;
};

State& state() {
    static State s;
    return s;
}

constexpr size_t kMaxPending = 4096;

cudaEvent_t take_event(State& st) {
    if (!st.pool.empty()) {
        const cudaEvent_t e = st.pool.back();
        st.pool.pop_back();
        return e;
    }
    cudaEvent_t e = nullptr;
    PLDR_CUDA_CALL(cudaEventCreate(&e));
    return e;
}

// Waits for each pending end event and adds its phase's time (st.mu held).
void resolve(State& st) {
    for (const Pending& p : st.pending) {
        PLDR_CUDA_CALL(cudaEventSynchronize(p.b));
        float ms = 0;
        PLDR_CUDA_CALL(cudaEventElapsedTime(&ms, p.a, p.b));
        PhaseTime& t = st.table[size_t(p.slot)];
        t.calls += 1;
        t.ms += double(ms);
        st.pool.push_back(p.a);
        st.pool.push_back(p.b);
    }
    st.pending.clear();
}

bool capturing(Stream s) {
    cudaStreamCaptureStatus c = cudaStreamCaptureStatusNone;
    return cudaStreamIsCapturing(s, &c) != cudaSuccess || c != cudaStreamCaptureStatusNone;
}

}  // namespace

bool profile_on() {
    State& st = state();
    std::lock_guard<std::mutex> lock(st.mu);
    if (st.enabled < 0) {
        const char* v = std::getenv("PLDR_CUDA_PROFILE");
        st.enabled = v && std::string(v) == "1" ? 1 : 0;
    }
    return st.enabled == 1;
}

void profile_enable(bool on) {
    State& st = state();
    std::lock_guard<std::mutex> lock(st.mu);
    st.enabled = on ? 1 : 0;
}

Phase::Phase(const char* name, Stream s) {
    if (!profile_on() || capturing(s)) return;
    State& st = state();
    std::lock_guard<std::mutex> lock(st.mu);
    const auto [it, added] = st.index.emplace(name, int(st.table.size()));
    if (added) st.table.push_back({name, st.level, 0, 0.0});
    cudaEvent_t a = take_event(st);
    PLDR_CUDA_CALL(cudaEventRecord(a, s));
    slot_ = it->second;
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
    if (generation_ != st.generation) {  // the table was reset while this phase ran
        st.pool.push_back(a);
        return;
    }
    // (a destructor does not throw: a failure here drops this phase's time)
    cudaEvent_t b = nullptr;
    if (!st.pool.empty()) {
        b = st.pool.back();
        st.pool.pop_back();
    } else if (cudaEventCreate(&b) != cudaSuccess) {
        st.pool.push_back(a);
        return;
    }
    if (cudaEventRecord(b, s_) != cudaSuccess) {
        st.pool.push_back(a);
        st.pool.push_back(b);
        return;
    }
    st.pending.push_back({slot_, a, b});
    if (st.pending.size() >= kMaxPending) {
        try {
            resolve(st);
        } catch (...) {  // the pass that follows reports the device's error itself
            st.pending.clear();
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
