// An inference session (batch 1) that owns the KV-cache and the G-cache (spec §4.1).
// The prefill runs the prompt through the full PLGA forward (causal + padding mask) and keeps,
// per layer, the rotated K, V, the metric A and the operator (A_LM, A_P, G_LM). Each decode step
// feeds one token at position T (the cached length) and reuses them:
//   kvg  — KV-cache + G-cache: the metric learner and the PLGA operator are skipped;
//   kv   — KV-cache only: G_LM is recomputed from the frozen A (the same values, for checks);
//   none — no cache: the whole growing sequence is recomputed every step, A and G included.
// Fixed-G models use the same session with their constant G. A session can also start from a
// saved G-cache (GCache): every call, the prefill included, then runs with that fixed operator.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/forward.h"
#include "model/plga_attention.h"  // DecodeSeq

namespace pldr {

enum class CacheMode { KVG, KV, NONE };
CacheMode cache_mode_from_name(const std::string& s);  // "kvg" | "kv" | "none"
const char* cache_mode_name(CacheMode m);

// The operator cache of one layer, batch 1: each [H,D,D]. A_P may be empty.
template <typename T>
struct GCacheLayer {
    Tensor<T> A, A_LM, A_P, G;
};
template <typename T>
using GCache = std::vector<GCacheLayer<T>>;

template <typename T>
class Session;

// One decode step for several sessions of the same model, in one forward pass: appends ids[i]
// to *ss[i] and sets its logits as ss[i]->decode(ids[i]) would. The embedding, the projections,
// the FFN, the LayerNorms and the head run over the B new tokens as [B,d] matrix products (each
// weight read once per step); the attention runs per sequence against its own KV-cache with its
// own operator (kvg: its G-cache; kv: G recomputed from its frozen A; a preset G-cache; a fixed
// G), so sessions of different modes and lengths mix. Sessions in mode none fall back to their
// own decode (they rerun the whole sequence), as does a batch of one. The results equal
// one-at-a-time decoding up to the rounding of a matrix product against a matrix-vector one.
// Throws pldr::Error, before any session changes, unless ss and ids have the same size and the
// sessions are distinct, non-null, of one model, prefilled, not full, with ids in the
// vocabulary. keep_activations: each session's last() then holds its own slice of the step
// (B = S = 1, E over its own keys, the operator it used, as after decode); without it, last()
// of a batched session is left empty (saves copying the operators when nobody reads them).
template <typename T>
void decode_step(const std::vector<Session<T>*>& ss, const std::vector<int64_t>& ids,
                 bool keep_activations = true);

template <typename T>
class Session {
  public:
    // max_len: capacity of the KV-cache (default and upper bound: max_position_embeddings).
    Session(const Model<T>& m, CacheMode mode, int64_t max_len = 0);

    // Starts the sequence with `ids` (≥ 1 token) and returns the logits [V] of its last position.
    const std::vector<T>& prefill(const std::vector<int64_t>& ids);
    // Appends one token and returns the logits [V] of the new last position.
    const std::vector<T>& decode(int64_t id);
    // Forgets the sequence (and the computed caches; a preset G-cache stays).
    void reset();

    // Runs every later call with this fixed operator (spec §3.4 bypass mode); its shapes must
    // match the model (throws pldr::Error). Must be called before prefill.
    void set_g_cache(const GCache<T>& g);
    // The operator cache after the prefill (or the preset one).
    const GCache<T>& g_cache() const { return g_; }
    // Rotated keys and values so far, each [T,H,D] for layer l.
    Tensor<T> keys(int64_t l) const;
    Tensor<T> values(int64_t l) const;

    // The logits [V] of the last position after the last call (prefill, decode, decode_step).
    const std::vector<T>& logits() const { return logits_; }
    const std::vector<int64_t>& tokens() const { return ids_; }
    int64_t length() const { return int64_t(ids_.size()); }
    int64_t capacity() const { return max_len_; }
    CacheMode mode() const { return mode_; }
    const Model<T>& model() const { return m_; }
    // The activations of the last call (its deductive outputs, for audits).
    const Activations<T>& last() const { return acts_; }
    // Off: prefill and decode keep two layers' activation buffers, reused from layer to layer,
    // without the metric learner's internals (the peak memory of a prefill no longer grows with
    // the layer count), and last() holds nothing to read. For callers that read only the logits
    // (generation, benchmarks). On by default.
    void keep_activations(bool on) { keep_acts_ = on; }
    bool keeps_activations() const { return keep_acts_; }
    // On, with keep_activations off, in mode kvg: the prefill keeps G_LM alone in the G-cache,
    // the only part a decode step reads (A, A_LM and A_P, the deductive outputs, are 3/4 of
    // it: 3.4 MB a sequence at 110M, memory a fresh session faults in), and g_cache() holds
    // G_LM alone. For callers that never read the cache (generation, benchmarks). Off by
    // default; set before the prefill.
    void keep_g_only(bool on) { g_only_ = on; }

  private:
    friend void decode_step<T>(const std::vector<Session<T>*>&, const std::vector<int64_t>&, bool);
    void run(const int64_t* ids, int64_t S, bool first);
    void run_uncached();
    // The frozen operator of layer l (A always; A_LM, A_P and G with a preset G-cache or in
    // mode kvg), as pointers into g_ (null where empty).
    DecodeSeq<T> frozen_operator(int64_t l) const;
    // decode_step over sessions that all hold a KV-cache (already checked; ≥ 2 of them).
    static void run_batched(const std::vector<Session<T>*>& ss, const std::vector<int64_t>& ids,
                            bool keep_activations);

    const Model<T>& m_;
    CacheMode mode_;
    int64_t max_len_;
    bool preset_g_ = false;
    bool keep_acts_ = true;
    bool g_only_ = false;
    std::vector<int64_t> ids_;
    std::vector<Storage<T>> K_, V_;  // per layer [max_len, H, D]; rows ≥ length() unset
    GCache<T> g_;
    Activations<T> acts_;
    std::vector<T> logits_;
};

// A session of one sequence on a device (the CUDA backend: cuda_model/session.h, through the
// API): its caches there, the logits of its last position back on the host after each call.
// Generation (infer/generate.h) and scoring (infer/score.h) run their sequences on it where the
// model is on a device, and keep their own logic (sampling, texts, stopping, log-probabilities),
// so every backend generates and scores alike.
template <typename T>
class DeviceDecoder {
  public:
    virtual ~DeviceDecoder() = default;
    virtual const std::vector<T>& prefill(const std::vector<int64_t>& ids) = 0;
    virtual const std::vector<T>& decode(int64_t id) = 0;
    virtual const std::vector<T>& logits() const = 0;
    // A preset G-cache (Session::set_g_cache: before the prefill; every call then runs with
    // its G_LM). By default a decoder takes none.
    virtual void set_g_cache(const GCache<T>&) {
        fail("a preset G-cache does not run on this device's sessions");
    }
    // The operator cache (Session::g_cache): the preset one, or the prefill's.
    virtual GCache<T> g_cache() const { fail("this device's sessions keep no G-cache"); }
    // Appends ids[i] to group[i] for each i (this decoder among them, all made by one
    // DeviceDecoders): one batched step where the backend has it (the CUDA one does), else each
    // decodes alone.
    virtual void decode_group(const std::vector<DeviceDecoder*>& group,
                              const std::vector<int64_t>& ids) {
        for (size_t i = 0; i < group.size(); ++i) group[i]->decode(ids[i]);
    }
};
// Makes a sequence's decoder: its cache mode and capacity (at most the context).
template <typename T>
using DeviceDecoders = std::function<std::unique_ptr<DeviceDecoder<T>>(CacheMode, int64_t)>;

// A preset G-cache's checks against the model (Session::set_g_cache's, and every backend's):
// one layer per model layer, each G_LM [H,dk,dk], and A, A_LM of that shape for a learned G.
template <typename T>
void check_g_cache(const GCache<T>& g, const Config& c);

// G-cache files (safetensors): gcache.layer{i}.{A,A_LM,G_LM[,A_P]} [H,dk,dk], metadata with
// the model shape; load checks the shapes against the model.
template <typename T>
void save_g_cache(const GCache<T>& g, const Config& c, const std::string& path);
template <typename T>
GCache<T> load_g_cache(const std::string& path, const Config& c);

}  // namespace pldr
