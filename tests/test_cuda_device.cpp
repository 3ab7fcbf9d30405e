// Device names and CUDA discovery (src/cuda/device.h, include/pldr/device.hpp): every message of
// resolve_device from a given build and probe, and the real probe of this process, which on a
// machine without a GPU (or in a build without the backend) must answer 0 devices with a reason,
// never abort.
#include <gtest/gtest.h>

#include <cstdlib>

#include "cuda/device.h"
#include "error_util.h"
#include "pldr/device.hpp"

namespace {

using pldr::DeviceKind;
using pldr::DeviceSpec;

TEST(CudaDevice, NamesParse) {
    EXPECT_EQ(pldr::parse_device_name("cpu"), (DeviceSpec{DeviceKind::CPU, 0}));
    EXPECT_EQ(pldr::parse_device_name("cuda"), (DeviceSpec{DeviceKind::CUDA, 0}));
    EXPECT_EQ(pldr::parse_device_name("cuda:0"), (DeviceSpec{DeviceKind::CUDA, 0}));
    EXPECT_EQ(pldr::parse_device_name("cuda:7"), (DeviceSpec{DeviceKind::CUDA, 7}));
    EXPECT_EQ(pldr::parse_device_name("cuda:12"), (DeviceSpec{DeviceKind::CUDA, 12}));
    EXPECT_EQ(pldr::parse_device_name("cuda:2147483647").index, 2147483647);
    EXPECT_EQ(pldr::parse_device_name("cuda:3").name(), "cuda:3");
    EXPECT_EQ(pldr::parse_device_name("cpu").name(), "cpu");
    for (const char* bad :
         {"", "gpu", "CPU", "cuda:", "cuda:-1", "cuda:+1", "cuda: 1", "cuda:1 ", "cuda:1a",
          "cuda:0x1", "cuda:2147483648", "cuda:99999999999", "cuda1", "cpu:0", " cuda"}) {
        SCOPED_TRACE(bad);
        EXPECT_ERROR_HAS(pldr::parse_device_name(bad), "expected cpu, cuda or cuda:N");
        EXPECT_ERROR_HAS(pldr::parse_device_name(bad), std::string("'") + bad + "'");
    }
}

TEST(CudaDevice, ResolveReportsEachReasonInOneLine) {
    const pldr::cuda::Probe none{0, "cudaGetDeviceCount: cudaErrorNoDevice: no CUDA-capable"};
    const pldr::cuda::Probe one{1, ""}, three{3, ""};
    // The CPU needs neither the build nor a GPU.
    EXPECT_EQ(pldr::resolve_device("cpu", false, none).kind, DeviceKind::CPU);
    EXPECT_ERROR_HAS(pldr::resolve_device("cuda", false, three),
                     "--device cuda: CUDA support was not built (PLDR_CUDA=OFF)");
    EXPECT_ERROR_HAS(pldr::resolve_device("cuda:1", false, three),
                     "--device cuda:1: CUDA support was not built (PLDR_CUDA=OFF)");
    EXPECT_ERROR_HAS(pldr::resolve_device("cuda", true, none),
                     "--device cuda: no CUDA device is visible (cudaGetDeviceCount: "
                     "cudaErrorNoDevice: no CUDA-capable)");
    EXPECT_EQ(pldr::resolve_device("cuda", true, one), (DeviceSpec{DeviceKind::CUDA, 0}));
    EXPECT_EQ(pldr::resolve_device("cuda:0", true, one), (DeviceSpec{DeviceKind::CUDA, 0}));
    EXPECT_ERROR_HAS(pldr::resolve_device("cuda:1", true, one),
                     "--device cuda:1: there is no CUDA device 1 (1 visible: cuda:0)");
    EXPECT_EQ(pldr::resolve_device("cuda:2", true, three), (DeviceSpec{DeviceKind::CUDA, 2}));
    EXPECT_ERROR_HAS(pldr::resolve_device("cuda:3", true, three),
                     "there is no CUDA device 3 (3 visible: cuda:0 .. cuda:2)");
    // The syntax is checked before the build and the devices.
    EXPECT_ERROR_HAS(pldr::resolve_device("gpu", false, none), "expected cpu, cuda or cuda:N");
}

// This process's runtime, as the CLI will see it. On a machine without a GPU (CI, our build
// machines) this runs the real error path: cudaGetDeviceCount fails or finds none, and asking
// for cuda is one line that says why. On the GPU machine it finds the device instead.
TEST(CudaDevice, TheRealProbeNeverAborts) {
    const pldr::cuda::Probe p = pldr::cuda::probe();
    EXPECT_GE(p.count, 0);
    EXPECT_EQ(pldr::cuda::device_count(), p.count);
    EXPECT_EQ(pldr::cuda::built(), pldr::api::cuda_built());
    const std::vector<std::string> devs = pldr::api::devices();
    ASSERT_EQ(devs.size(), size_t(1 + p.count));
    EXPECT_EQ(devs[0], "cpu");
    EXPECT_NO_THROW(pldr::api::check_device("cpu"));
    EXPECT_EQ(pldr::api::describe_device("cpu"), "cpu");
    EXPECT_ERROR_HAS(pldr::api::check_device("tpu"),
                     "--device 'tpu': expected cpu, cuda or cuda:N");
    if (!pldr::cuda::built()) {
        EXPECT_EQ(p.count, 0);
        EXPECT_EQ(p.reason, "CUDA support was not built (PLDR_CUDA=OFF)");
        EXPECT_ERROR_HAS(pldr::api::check_device("cuda"),
                         "--device cuda: CUDA support was not built (PLDR_CUDA=OFF)");
        EXPECT_ERROR_HAS(pldr::cuda::device_info(0), "CUDA support was not built");
    } else if (p.count == 0) {
        EXPECT_NE(p.reason.find("cudaGetDeviceCount: "), std::string::npos) << p.reason;
        EXPECT_EQ(p.reason.find('\n'), std::string::npos) << p.reason;
        EXPECT_ERROR_HAS(pldr::api::check_device("cuda"),
                         "--device cuda: no CUDA device is visible (cudaGetDeviceCount: ");
        EXPECT_ERROR_HAS(pldr::api::check_device("cuda:1"), "no CUDA device is visible");
        EXPECT_ERROR_HAS(pldr::cuda::device_info(0), "there is no CUDA device 0 (0 visible)");
        // Asking again gives the same answer (the failed probe leaves nothing sticky behind).
        EXPECT_EQ(pldr::cuda::probe().reason, p.reason);
    } else {
        EXPECT_NO_THROW(pldr::api::check_device("cuda"));
        EXPECT_EQ(devs[1], "cuda:0");
        const pldr::cuda::DeviceInfo i = pldr::cuda::device_info(0);
        EXPECT_FALSE(i.name.empty());
        EXPECT_GT(i.memory_bytes, 0);
        EXPECT_NE(pldr::api::describe_device("cuda").find("cuda:0: " + i.name), std::string::npos);
        EXPECT_ERROR_HAS(pldr::api::check_device("cuda:" + std::to_string(p.count)),
                         "there is no CUDA device");
    }
}

}  // namespace
