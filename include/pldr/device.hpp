// Devices of the pldr C++ API: where a model runs. "cpu" (the reference backend), "cuda" (the
// first visible NVIDIA GPU) or "cuda:N". The CUDA backend exists only in builds with PLDR_CUDA=ON
// (docs/gpu.md); on a machine without a driver or a GPU it sees no device, and asking for one is
// a pldr::Error, never a crash.
//
//   pldr::api::check_device("cuda");  // throws: "--device cuda: no CUDA device is visible (...)"
//   for (const std::string& d : pldr::api::devices()) std::cout << d << "\n";  // cpu, cuda:0, ...
#pragma once
#include <string>
#include <vector>

#include "pldr/error.hpp"

namespace pldr::api {

// Throws pldr::Error with one line unless `device` names a device this process can run on:
//   "--device 'gpu': expected cpu, cuda or cuda:N"
//   "--device cuda: CUDA support was not built (PLDR_CUDA=OFF)"
//   "--device cuda: no CUDA device is visible (cudaGetDeviceCount: <the runtime's reason>)"
//   "--device cuda:3: there is no CUDA device 3 (1 visible: cuda:0)"
void check_device(const std::string& device);
// Throws pldr::Error with one line unless every job (sessions, evaluation, audit, serving, ...)
// runs on `device`: check_device's errors first, then, for a CUDA device, which jobs the CUDA
// backend runs so far (the forward pass, the gradient, generation, scoring and perplexity,
// training steps, pldr bench's prefill, batch-1 decode and training) and that this one is not
// among them (docs/gpu.md). Commands whose job does not run on CUDA yet check their --device
// here; Model::load takes a CUDA device (check_device), and the model then refuses, in the same
// line, each job the backend does not run.
void check_model_device(const std::string& device);
// The devices this process can run on, each a name check_device accepts: "cpu" first, then
// "cuda:0", "cuda:1", ...
std::vector<std::string> devices();
// One line about a device of devices(): "cpu", or "cuda:0: NVIDIA H200, sm_90, 132 SMs,
// 139.8 GiB". Throws as check_device.
std::string describe_device(const std::string& device);
// Whether this build has the CUDA backend.
bool cuda_built();

}  // namespace pldr::api
