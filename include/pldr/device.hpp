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
// Throws pldr::Error with one line unless models (loading, generation, scoring, training,
// benchmarks, serving) run on `device`: check_device's errors first, then, for a CUDA device, that
// the CUDA backend runs its kernels but not yet the models (docs/gpu.md). Every command that runs
// a model takes --device and checks it here.
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
