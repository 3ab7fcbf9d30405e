// Device names and CUDA device discovery; see device.h. Built into the library whether or not
// the CUDA backend is (PLDR_WITH_CUDA is defined for this file alone when PLDR_CUDA=ON, with the
// toolkit's headers: the runtime API is plain C, so the host compiler builds it).
#include "cuda/device.h"

#include <cctype>
#include <climits>

#include "core/error.h"

#if defined(PLDR_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace pldr {

std::string DeviceSpec::name() const {
    return kind == DeviceKind::CPU ? "cpu" : "cuda:" + std::to_string(index);
}

DeviceSpec parse_device_name(const std::string& s) {
    if (s == "cpu") return {DeviceKind::CPU, 0};
    if (s == "cuda") return {DeviceKind::CUDA, 0};
    const std::string prefix = "cuda:";
    bool ok = s.size() > prefix.size() && s.size() <= prefix.size() + 10 &&
              s.compare(0, prefix.size(), prefix) == 0;
    int64_t n = 0;
    for (size_t i = prefix.size(); ok && i < s.size(); ++i) {
        ok = std::isdigit(static_cast<unsigned char>(s[i])) != 0;
        n = n * 10 + (s[i] - '0');
    }
    PLDR_REQUIRE(ok && n <= INT_MAX, "--device '", s, "': expected cpu, cuda or cuda:N");
    return {DeviceKind::CUDA, int(n)};
}

namespace cuda {

#if defined(PLDR_WITH_CUDA)

bool built() {
    return true;
}

Probe probe() {
    // cudaGetDeviceCount loads the driver (libcuda.so.1) on first use: without one it returns
    // cudaErrorInsufficientDriver, without a GPU cudaErrorNoDevice; neither aborts.
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();  // clear it, so that later runtime calls start clean
        // Without any driver the runtime says "driver version is insufficient"; say what it is.
        int driver = 0;
        const bool none = e == cudaErrorInsufficientDriver &&
                          cudaDriverGetVersion(&driver) == cudaSuccess && driver == 0;
        return {0, cat("cudaGetDeviceCount: ", cudaGetErrorName(e), ": ",
                       none ? "no CUDA driver is installed (libcuda.so.1 was not found)"
                            : cudaGetErrorString(e))};
    }
    if (n <= 0) return {0, "cudaGetDeviceCount: 0 devices"};
    return {n, ""};
}

DeviceInfo device_info(int index) {
    const Probe p = probe();
    PLDR_REQUIRE(index >= 0 && index < p.count, "there is no CUDA device ", index, " (", p.count,
                 " visible)");
    cudaDeviceProp prop{};
    const cudaError_t e = cudaGetDeviceProperties(&prop, index);
    PLDR_REQUIRE(e == cudaSuccess, "cudaGetDeviceProperties(", index, "): ", cudaGetErrorString(e));
    DeviceInfo d;
    d.name = prop.name;
    d.cc_major = prop.major;
    d.cc_minor = prop.minor;
    d.multiprocessors = prop.multiProcessorCount;
    d.memory_bytes = int64_t(prop.totalGlobalMem);
    d.l2_bytes = int64_t(prop.l2CacheSize);
    return d;
}

#else

bool built() {
    return false;
}

Probe probe() {
    return {0, "CUDA support was not built (PLDR_CUDA=OFF)"};
}

DeviceInfo device_info(int index) {
    fail("there is no CUDA device ", index, ": CUDA support was not built (PLDR_CUDA=OFF)");
}

#endif

int device_count() {
    return probe().count;
}

}  // namespace cuda

DeviceSpec resolve_device(const std::string& s, bool built, const cuda::Probe& probe) {
    const DeviceSpec d = parse_device_name(s);
    if (d.kind == DeviceKind::CPU) return d;
    PLDR_REQUIRE(built, "--device ", s, ": CUDA support was not built (PLDR_CUDA=OFF)");
    PLDR_REQUIRE(probe.count > 0, "--device ", s, ": no CUDA device is visible (", probe.reason,
                 ")");
    PLDR_REQUIRE(d.index < probe.count, "--device ", s, ": there is no CUDA device ", d.index, " (",
                 probe.count, " visible: ",
                 probe.count == 1 ? std::string("cuda:0") : cat("cuda:0 .. cuda:", probe.count - 1),
                 ")");
    return d;
}

DeviceSpec parse_device(const std::string& s) {
    const DeviceSpec d = parse_device_name(s);  // the syntax first, without touching the driver
    if (d.kind == DeviceKind::CPU) return d;
    return resolve_device(s, cuda::built(), cuda::probe());
}

std::vector<std::string> available_devices() {
    std::vector<std::string> v = {"cpu"};
    const int n = cuda::device_count();
    for (int i = 0; i < n; ++i) v.push_back("cuda:" + std::to_string(i));
    return v;
}

}  // namespace pldr
