// What the GPU test binary checks on any machine, with or without a GPU (CTest: gpu_tests_host):
// the backend knows every registered PLGA variant, refuses unknown ones in one line, and without
// a device every entry point throws pldr::Error instead of crashing.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cuda/gemm.h"
#include "cuda/limits.h"
#include "cuda_model/forward.h"
#include "gpu_util.h"
#include "numeric_cases.h"
#include "ops/plga_variants.h"

namespace {

namespace cu = pldr::cuda;

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const pldr::Error& e) {
        return e.what();
    }
    return "<no error>";
}

TEST(CudaHost, EveryRegisteredVariantHasAKernel) {
    for (const pldr::PositiveMap* pm : pldr::positive_maps())
        EXPECT_TRUE(cu::cuda_has_positive_map(pm->name))
            << "positive map '" << pm->name << "' has no CUDA kernel (src/cuda/plga.cu)";
    for (const pldr::Coupling* cp : pldr::couplings())
        EXPECT_TRUE(cu::cuda_has_coupling(cp->name))
            << "coupling '" << cp->name << "' has no CUDA kernel (src/cuda/plga.cu)";
    EXPECT_FALSE(cu::cuda_has_positive_map("relu"));
    EXPECT_FALSE(cu::cuda_has_coupling("exp"));
    const std::string e =
        error_of([] { cu::positive_map_forward<float>("relu", nullptr, nullptr, 4, nullptr); });
    EXPECT_EQ(e, "plga_positive_map 'relu' has no CUDA kernel");
    EXPECT_EQ(error_of([] {
                  cu::coupling_backward<double>("exp", nullptr, nullptr, nullptr, nullptr, nullptr,
                                                nullptr, 4, nullptr);
              }),
              "plga_coupling 'exp' has no CUDA kernel");
}

TEST(CudaHost, ArgumentsAreCheckedBeforeAnyLaunch) {
    EXPECT_NE(error_of([] {
                  cu::glu_gate<float>(nullptr, nullptr, nullptr, -1, nullptr);
              }).find("negative element count"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  cu::layernorm_forward<double>(nullptr, nullptr, nullptr, nullptr, nullptr,
                                                nullptr, 4, 0, 1e-5, nullptr);
              }).find("layernorm: bad shape"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  cu::clip_by_value<float>(nullptr, 4, -1.0f, nullptr);
              }).find("limit must be finite and >= 0"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  cu::adamw_update<float>(nullptr, nullptr, nullptr, nullptr, 4, 0, 1e-3,
                                          pldr::AdamWConfig{}, nullptr);
              }).find("step count must be >= 1"),
              std::string::npos);
    const std::vector<int64_t> pos = {0, 1, 40};
    EXPECT_EQ(error_of([&] { cu::rope_check_positions(pos.data(), 3, 32); }),
              "position 40 is outside the RoPE table (max_position_embeddings 32)");
    // Nothing to do is no launch: fine without a device too.
    EXPECT_NO_THROW(cu::glu_gate<float>(nullptr, nullptr, nullptr, 0, nullptr));
    EXPECT_EQ(cu::clip_by_value<double>(nullptr, 0, 1.0, nullptr), 0);
}

// Without a device (CI, our build machines): the first CUDA call of each kind fails in one line.
TEST(CudaHost, WithoutADeviceEveryEntryPointThrows) {
    if (gpu::have_device()) GTEST_SKIP() << "a device is visible: tests/gpu/ runs the kernels";
    std::vector<std::string> errors;
    errors.push_back(error_of([] { cu::glu_gate<float>(nullptr, nullptr, nullptr, 16, nullptr); }));
    float* const dummy = reinterpret_cast<float*>(uintptr_t(256));  // never dereferenced here
    errors.push_back(error_of([&] { cu::clip_by_value<float>(dummy, 16, 1.0f, nullptr); }));
    errors.push_back(error_of([] {
        pldr::RopeTable t;
        t.build(4, 8, 10000.0, pldr::RopeTableKind::TORCH);
        cu::DeviceRopeTable d(t);
    }));
    errors.push_back(error_of([] {
        pldr::RopeTable t;
        t.build(4, 8, 10000.0, pldr::RopeTableKind::FLOAT64);
        cu::DeviceRopeTable d(t);
    }));
    errors.push_back(error_of([] { cu::Gemm g; }));
    errors.push_back(error_of([] {
        const auto m = numeric::make_model(numeric::cases().front(), 1);
        cu::DeviceModel<double> dm(m);
    }));
    errors.push_back(error_of([] { cu::read_bandwidth_gbs(0, 1 << 20); }));
    errors.push_back(error_of([] { cu::gemm_gflops(0, "tf32", 256); }));
    for (const std::string& e : errors) {
        EXPECT_NE(e, "<no error>");
        EXPECT_EQ(e.find('\n'), std::string::npos) << e;
        EXPECT_TRUE(e.rfind("CUDA: ", 0) == 0 || e.rfind("cuBLASLt: ", 0) == 0) << e;
    }
}

}  // namespace
