// Device names and CUDA device discovery (src/cuda/device.cpp). Compiled into the library with or
// without the CUDA backend (PLDR_CUDA): without it every CUDA query answers "not built", and
// nothing here ever aborts the process: a machine without a driver or a GPU has 0 devices, with
// the runtime's reason.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace pldr {

enum class DeviceKind { CPU, CUDA };

// A device named by the user: "cpu", "cuda" (= "cuda:0") or "cuda:N".
struct DeviceSpec {
    DeviceKind kind = DeviceKind::CPU;
    int index = 0;             // CUDA only
    std::string name() const;  // "cpu" or "cuda:N"
    bool operator==(const DeviceSpec&) const = default;
};

// The syntax alone: throws pldr::Error ("--device 'gpu': expected cpu, cuda or cuda:N") on
// anything else (N a decimal number below 2^31, no sign, no spaces).
DeviceSpec parse_device_name(const std::string& s);

namespace cuda {

// Whether this build has the CUDA backend (PLDR_CUDA=ON).
bool built();

// What the CUDA runtime sees: the device count, and when it is 0 the reason in one line
// ("cudaGetDeviceCount: cudaErrorNoDevice: no CUDA-capable device is detected"; without the
// backend, "CUDA support was not built (PLDR_CUDA=OFF)").
struct Probe {
    int count = 0;
    std::string reason;
};
Probe probe();
// probe().count: 0 on any error.
int device_count();

// One device's properties (index < device_count(), else pldr::Error).
struct DeviceInfo {
    std::string name;  // "NVIDIA H200"
    int cc_major = 0, cc_minor = 0;
    int multiprocessors = 0;
    int64_t memory_bytes = 0;
    int64_t l2_bytes = 0;
};
DeviceInfo device_info(int index);

}  // namespace cuda

// The device s names, checked against what this process can use: the syntax (as
// parse_device_name), then for CUDA the build and the visible devices. One line each:
//   "--device cuda: CUDA support was not built (PLDR_CUDA=OFF)"
//   "--device cuda: no CUDA device is visible (cudaGetDeviceCount: <reason>)"
//   "--device cuda:3: there is no CUDA device 3 (1 visible: cuda:0)"
// resolve_device takes the build and the probe as arguments (the tests run every branch);
// parse_device asks this process's runtime.
DeviceSpec resolve_device(const std::string& s, bool built, const cuda::Probe& probe);
DeviceSpec parse_device(const std::string& s);

// The devices this process can run on: "cpu", then "cuda:0", "cuda:1", ...
std::vector<std::string> available_devices();

}  // namespace pldr
