// The public API's devices (include/pldr/device.hpp) over src/cuda/device.h.
#include <cstdio>

#include "api/api_cuda.h"
#include "core/error.h"
#include "cuda/device.h"
#include "pldr/device.hpp"

namespace pldr::api {

void check_device(const std::string& device) {
    ::pldr::parse_device(device);
}

void check_model_device(const std::string& device) {
    const DeviceSpec d = ::pldr::parse_device(device);
    PLDR_REQUIRE(d.kind == DeviceKind::CPU, gpu::not_yet(d));
}

std::vector<std::string> devices() {
    return ::pldr::available_devices();
}

std::string describe_device(const std::string& device) {
    const DeviceSpec d = ::pldr::parse_device(device);
    if (d.kind == DeviceKind::CPU) return "cpu";
    const cuda::DeviceInfo i = cuda::device_info(d.index);
    char mem[32];
    std::snprintf(mem, sizeof mem, "%.1f GiB", double(i.memory_bytes) / double(1ull << 30));
    return d.name() + ": " + i.name + ", sm_" + std::to_string(i.cc_major) +
           std::to_string(i.cc_minor) + ", " + std::to_string(i.multiprocessors) + " SMs, " + mem;
}

bool cuda_built() {
    return cuda::built();
}

}  // namespace pldr::api
