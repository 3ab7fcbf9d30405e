// A decoding session on the GPU (src/cuda_model/session.cu): infer/session.h's Session for one
// sequence with its caches in device memory. The prefill runs the device forward over the prompt
// (causal and padding mask) and keeps, per layer, the rotated keys and values, the operator G
// (kvg) or the metric A (kv); each decode step feeds one token at position T and attends over the
// T + 1 cached keys without a mask, as the reference's decode steps:
//   kvg  — KV-cache + G-cache: the metric learner and the operator are skipped;
//   kv   — KV-cache: G recomputed from the frozen A by the operator each step;
//   none — no cache: the whole sequence through the forward again.
// Fixed-G models use their G. The logits of the last position come back to the host after each
// call, as Session::logits(). T = float or double.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "cuda_model/forward.h"
#include "infer/session.h"

namespace pldr::cuda {

template <class T>
class DeviceSession {
  public:
    // dm must outlive the session; max_len: the caches' capacity (default and upper bound:
    // max_position_embeddings).
    DeviceSession(DeviceModel<T>& dm, CacheMode mode, int64_t max_len = 0);
    ~DeviceSession();
    DeviceSession(const DeviceSession&) = delete;
    DeviceSession& operator=(const DeviceSession&) = delete;

    // Starts the sequence with ids (≥ 1 token); the logits [V] of its last position.
    const std::vector<T>& prefill(const std::vector<int64_t>& ids);
    // Appends one token; the logits [V] of the new last position.
    const std::vector<T>& decode(int64_t id);
    const std::vector<T>& logits() const;
    int64_t length() const;
    int64_t capacity() const;

    struct State;

  private:
    std::unique_ptr<State> st_;
};

}  // namespace pldr::cuda
