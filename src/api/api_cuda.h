// The API's side of the CUDA backend (src/api/api_cuda.cpp): a loaded model's copy on a CUDA
// device, the jobs that run there, and the device's limits for pldr bench. Every function exists
// in every build; without the backend (PLDR_CUDA=OFF) each throws the one line of
// parse_device ("CUDA support was not built"), which Model::load and bench() reach first.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda/device.h"
#include "infer/generate.h"
#include "infer/score.h"
#include "model/activations.h"
#include "model/model.h"
#include "perf/workloads.h"
#include "pldr/bench.hpp"
#include "train/loss.h"
#include "train/step.h"

namespace pldr::api::gpu {

// The one line for a job that does not run on CUDA device d yet (Model::Impl::require_host,
// check_model_device): which jobs do, and what to do instead.
std::string not_yet(const DeviceSpec& d);

// A model's parameters uploaded to one CUDA device (cuda::DeviceModel of its precision). The
// host model must outlive it.
struct Copy;
std::shared_ptr<const Copy> upload(const ::pldr::Model<float>& m, const DeviceSpec& d);
std::shared_ptr<const Copy> upload(const ::pldr::Model<double>& m, const DeviceSpec& d);
// Bytes of device memory the copy's parameters take.
int64_t param_bytes(const Copy& c);

// The forward pass on the device, keeping every named tensor (KeepActs::ALL), as
// ::pldr::forward(m, ids, B, S, acts) does on the CPU. The copy's precision must be T's.
void forward(const Copy& c, const int64_t* ids, int64_t B, int64_t S,
             ::pldr::Activations<float>& acts);
void forward(const Copy& c, const int64_t* ids, int64_t B, int64_t S,
             ::pldr::Activations<double>& acts);

// The training objective and its gradient on the device (cuda::DeviceModel::loss_and_grads, as
// ::pldr::loss_and_grads on the CPU): tokens [B, S1], ACCUMULATES the gradient into grads (the
// model's layout), returns the CPU's LossResult. The copy's precision must be T's.
::pldr::LossResult loss_and_grads(const Copy& c, const int64_t* tokens, int64_t B, int64_t S1,
                                  const ::pldr::DagCoeffs& dag, float* grads);
::pldr::LossResult loss_and_grads(const Copy& c, const int64_t* tokens, int64_t B, int64_t S1,
                                  const ::pldr::DagCoeffs& dag, double* grads);

// Generation's sessions on the device (cuda::DeviceSession over the copy's model; each call
// under the copy's lock), for ::pldr::generate_batch. The copy's precision must be T's.
void decoders(const Copy& c, ::pldr::DeviceDecoders<float>& out);
void decoders(const Copy& c, ::pldr::DeviceDecoders<double>& out);

// Scoring's passes on the device (the forward's logits, and the sessions of decoders), for
// ::pldr::score_request and ::pldr::rolling_loglikelihood.
void scoring(const Copy& c, ::pldr::DeviceScoring<float>& out);
void scoring(const Copy& c, ::pldr::DeviceScoring<double>& out);

// pldr bench's decode on the device (cuda::DeviceSession): per repetition `batch` sessions, each
// prefilled with `prompt` random ids (perf::random_ids with perf's seeds, as the CPU's), then
// n_new greedy steps of all of them together (DeviceSession::decode_batch) timed: the batch's
// tokens/s (perf::run_decode's rules). batch1 not null: each repetition is a pair, batch 1 then
// `batch` (perf::run_decode_paired's), batch 1's figures appended there.
std::vector<double> run_decode(const ::pldr::Model<float>& m, const DeviceSpec& d,
                               ::pldr::CacheMode mode, int64_t batch, int64_t prompt, int64_t n_new,
                               int64_t context, int reps, int warmup, const perf::RepHook& hook,
                               double min_seconds, std::vector<double>* batch1 = nullptr);

// A Trainer's forward and backward on the device (cuda::make_step_backend): pldr train
// --device cuda. The model must outlive it.
std::shared_ptr<::pldr::StepBackend<float>> step_backend(::pldr::Model<float>& m,
                                                         const DeviceSpec& d);
std::shared_ptr<::pldr::StepBackend<double>> step_backend(::pldr::Model<double>& m,
                                                          const DeviceSpec& d);

// pldr bench's prefill on the device: `prompt` random ids (perf::random_ids, as the CPU's), the
// forward with the head over the last position; one tokens/s figure per timed repetition
// (perf::run_prefill's repetition rules: reps, warmup, the hook, the time floor).
std::vector<double> run_prefill(const ::pldr::Model<float>& m, const DeviceSpec& d, int64_t prompt,
                                int reps, int warmup, const perf::RepHook& hook, double min_seconds,
                                int64_t* param_bytes_out);

// The high-water mark of pldr's device arrays on the device (cuda::pool_peak_bytes); reset
// starts a new one.
int64_t pool_peak_bytes(const DeviceSpec& d, bool reset);

// The device time per phase of the model's passes since the last take (cuda/profile.h), when
// PLDR_CUDA_PROFILE=1; empty otherwise. reset: start a new table.
std::vector<BenchPhase> phase_times(const DeviceSpec& d, bool reset);

// The device's limits (cuda/limits.h): "read" (GB/s), "sgemm" (float32, TF32 off), "tf32" and
// "bf16" (GFLOP/s), and the line that names what was measured ("cuBLASLt on cuda:0 (NVIDIA
// H200)").
double limit(const std::string& which, const DeviceSpec& d);
std::string limit_source(const DeviceSpec& d);

}  // namespace pldr::api::gpu
