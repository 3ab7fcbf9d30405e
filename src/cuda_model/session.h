// A decoding session on the GPU (src/cuda_model/session.cu): infer/session.h's Session for one
// sequence with its caches in device memory. The prefill runs the device forward over the prompt
// (causal and padding mask) and keeps, per layer, the rotated keys and values, the operator G
// (kvg) or the metric A (kv); each decode step feeds one token at position T and attends over the
// T + 1 cached keys without a mask, as the reference's decode steps (several sessions of one
// model step together: decode_batch):
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

    // A preset G-cache (infer/session.h Session::set_g_cache, its checks and messages; before the
    // prefill): every layer's attention runs with its G_LM from the prefill on, in every cache
    // mode (the metric learner is skipped).
    void set_g_cache(const GCache<T>& g);
    // The operator cache (infer/session.h Session::g_cache): the preset one, or the prefill's (in
    // mode none its first pass's): per layer A, A_LM, A_P (learned G) and G_LM [H,D,D]; empty
    // before the prefill. Downloads them.
    GCache<T> g_cache() const;
    // Starts the sequence with ids (≥ 1 token); the logits [V] of its last position.
    const std::vector<T>& prefill(const std::vector<int64_t>& ids);
    // Appends one token; the logits [V] of the new last position (decode_batch of this one).
    const std::vector<T>& decode(int64_t id);
    // Appends ids[i] to ss[i] for every i in one step: the embedding, the projections, the FFN
    // and the head over all the rows at once (the weights read once for the batch), each
    // sequence's attention over its own caches and G in one kernel for all (decode_attention).
    // Sessions of cache mode none run their forward again, each on its own. Each session's
    // logits() hold its new row after. Refused in one line before anything changes: sizes that
    // differ, a session twice or of another DeviceModel, one not prefilled, an id outside the
    // vocabulary, a full context.
    static void decode_batch(const std::vector<DeviceSession*>& ss,
                             const std::vector<int64_t>& ids);
    const std::vector<T>& logits() const;
    int64_t length() const;
    int64_t capacity() const;

    struct State;

  private:
    std::unique_ptr<State> st_;
};

}  // namespace pldr::cuda
