// The benchmark workloads of `pldr bench` and bench/ (bench/README.md), float32:
//   prefill — one prompt of P tokens through a fresh session (batch 1), tokens/s;
//   decode  — N new tokens after a P-token prompt, B sequences stepped together, per cache mode,
//             aggregate tokens/s (B·N over the decode time; the prefills are not timed);
//   train   — one full training step (forward, masked CE, DAG metrics, backward, clip, AdamW)
//             on a batch B × S of random token ids, tokens/s.
// The shapes S, M and 110M are PERF-TARGETS.md's; their weights are random (init_weights).
// The FLOP and byte counts that turn tokens/s into fractions of the machine limits
// (perf/limits.h) are defined here, once.
#pragma once
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/gemm_bf16.h"
#include "infer/session.h"
#include "model/model.h"
#include "train/step.h"

namespace pldr::perf {

struct BenchShape {
    const char* name;
    int64_t L, H, dk, A_dff, R, N, V;
};
const std::vector<BenchShape>& bench_shapes();
// The config of a named shape (throws pldr::Error naming the known ones), a learned-G v510
// model with max_position_embeddings = context.
Config bench_config(const std::string& name, int64_t context = 1024);

// Matrix-product FLOPs (multiply-add = 2) of a forward over B × S tokens with the head applied to
// `head_rows` rows; element-wise work is not counted. Per layer, n = B·S, d = H·D, F = dff:
//   projections    2·n·(4·d² + 3·d·F)                    (q, k, v, o; SwiGLU w1, w2, w3)
//   attention      2·B·H·(S·D² + 2·S²·D)                  (Q·G; Q·G·Kᵀ; E·V over all S² pairs)
//   metric learner 2·B·H·(S·D² + R·N·3·D²·A_dff + 2·D³)   (learned G only)
// plus the head 2·head_rows·d·V.
double forward_flops(const Config& c, int64_t B, int64_t S, int64_t head_rows);
// One training step: the backward costs twice the forward (d input and d weight per product).
double train_step_flops(const Config& c, int64_t B, int64_t S);
// Bytes a decode step must read per sequence at batch 1: every weight except the embedding
// table (one row of it is read), in float32, and the packed weights (bf16, q8_0) in their size.
double decode_bytes_per_token(const Model<float>& m);

struct Stats {
    double median = 0, min = 0, max = 0, mean = 0, stddev = 0;
    int n = 0;
};
Stats stats_of(std::vector<double> v);

// Random token ids in [4, V) (no special ids), reproducible from `seed`.
std::vector<int64_t> random_ids(int64_t n, int64_t V, uint64_t seed);

// Called as (i, reps) before each timed repetition i = 0, 1, … (0: before the warm-up ones) and
// as (n, n) after the last, the n-th, outside the timing: `pldr bench` measures the machine's
// limit there, so that each repetition is compared with the limit measured next to it. reps is
// the planned count, or kOpenReps while a time floor (min_seconds) decides when to stop.
using RepHook = std::function<void(int i, int reps)>;
inline constexpr int kOpenReps = std::numeric_limits<int>::max();
// The most timed repetitions a time floor runs.
inline constexpr int kMaxReps = 100000;

// The repetition rule of every workload (the CPU's below, the GPU's prefill in api/api_cuda.cpp):
// `warmup` untimed calls of `one`, then `reps` timed ones, and more until min_seconds have
// passed since the first (at most kMaxReps); hook(i, planned) before timed repetition i (i = 0:
// before the warm-up) and hook(n, n) after the last. `one` runs one repetition and returns its
// tokens/s; the result is those figures in order.
std::vector<double> timed_reps(int reps, int warmup, double min_seconds, const RepHook& hook,
                               const std::function<double()>& one);

// Each returns one tokens/s figure per timed repetition (after `warmup` untimed ones): `reps` of
// them, and more while fewer than min_seconds of wall time have passed since the first began
// (at most kMaxReps: a floor of a few seconds makes a median of short repetitions span the
// moments of a machine whose speed drifts).
std::vector<double> run_prefill(const Model<float>& m, int64_t prompt, int64_t context, int reps,
                                int warmup = 1, const RepHook& hook = {}, double min_seconds = 0);
std::vector<double> run_decode(const Model<float>& m, CacheMode mode, int64_t batch, int64_t prompt,
                               int64_t n_new, int64_t context, int reps, int warmup = 1,
                               const RepHook& hook = {}, double min_seconds = 0);
// Decode at `batch` with one batch-1 repetition just before each (same cache mode, prompt and
// n_new), so that the ratio of a pair compares the same moments of a machine whose speed drifts.
// The hook brackets each pair.
struct PairedDecode {
    std::vector<double> batched, batch1;  // tokens/s per timed pair
};
PairedDecode run_decode_paired(const Model<float>& m, CacheMode mode, int64_t batch, int64_t prompt,
                               int64_t n_new, int64_t context, int reps, int warmup = 1,
                               const RepHook& hook = {}, double min_seconds = 0);
// Trains `m` in place; *last_loss gets the last step's loss.
// precision BF16: mixed precision (TrainConfig::precision); recompute: TrainConfig::recompute;
// backend: where the steps run (train/step.h; null: the CPU).
std::vector<double> run_train(Model<float>& m, int64_t B, int64_t S, int reps, int warmup,
                              double* last_loss, Precision precision = Precision::FP32,
                              Recompute recompute = Recompute::SELECTIVE, const RepHook& hook = {},
                              std::shared_ptr<StepBackend<float>> backend = nullptr);

}  // namespace pldr::perf
