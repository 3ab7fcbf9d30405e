// What the GPU tests share: the skip without a device, device buffers, and the comparisons.
//
// Tolerances (docs/gpu.md). float64: max|gpu − cpu| ≤ 1e-12·max|cpu| (the bound; the
// kernels that do not give the CPU's bits differ only by CUDA's exp/log/pow against glibc's, a
// few ulp, or by the order of a sum). float32: measured conditioning. The float64 CPU op on the
// same (widened) inputs is the reference; the CPU's float32 op's own error against it,
// e_cpu = max|cpu32 − ref| / max|ref|, measures how much this op on these inputs amplifies
// float32 rounding; the GPU's float32 may be at most 4 times as far from the reference, plus 8
// ulp of float32 (2^-20) for an op whose CPU result happens to be exact. A kernel with a wrong
// formula or a lost term is off by far more (tests/gpu/ checks some of those by hand). bf16
// storage: the float32 allowance plus the output's own rounding, 2^-8 of max|ref| (half an ulp
// of bf16 is 2^-9 relative; twice that covers a value rounded at the top of its binade).
#pragma once
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gemm_bf16.h"
#include "cuda/device.h"
#include "cuda/kernels.h"

namespace gpu {

// GTEST_SKIP with the suite's one reason (CTest's SKIP_REGULAR_EXPRESSION looks for it).
inline bool have_device() {
    static const bool ok = pldr::cuda::device_count() > 0;
    return ok;
}
#define PLDR_REQUIRE_GPU() \
    if (!::gpu::have_device()) GTEST_SKIP() << "skipped: no CUDA device"

inline void check(cudaError_t e, const char* what) {
    ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e);
}

// A device array of n values; its constructor poisons it (0xFF bytes: NaN for floats) so that
// an element a kernel never writes fails the comparison.
template <class T>
class Buf {
  public:
    explicit Buf(size_t n) : n_(n) {
        if (cudaMalloc(reinterpret_cast<void**>(&p_), std::max<size_t>(n, 1) * sizeof(T)) !=
            cudaSuccess)
            throw pldr::Error("cudaMalloc failed");
        cudaMemset(p_, 0xFF, std::max<size_t>(n, 1) * sizeof(T));
    }
    explicit Buf(const std::vector<T>& v) : Buf(v.size()) { upload(v); }
    ~Buf() { cudaFree(p_); }
    Buf(const Buf&) = delete;
    Buf& operator=(const Buf&) = delete;
    T* get() const { return p_; }
    void upload(const std::vector<T>& v) {
        if (cudaMemcpy(p_, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice) != cudaSuccess)
            throw pldr::Error("cudaMemcpy to the device failed");
    }
    std::vector<T> download() const {
        std::vector<T> v(n_);
        if (cudaDeviceSynchronize() != cudaSuccess ||
            cudaMemcpy(v.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess)
            throw pldr::Error(std::string("CUDA: ") + cudaGetErrorString(cudaGetLastError()));
        return v;
    }

  private:
    T* p_ = nullptr;
    size_t n_;
};

using pldr::cuda::bf16;

inline std::vector<bf16> to_bf16(const std::vector<float>& x) {
    std::vector<uint16_t> b(x.size());
    pldr::bf16::round_to_bf16(x.data(), int64_t(x.size()), b.data());
    std::vector<bf16> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = bf16{b[i]};
    return r;
}
inline std::vector<float> widen(const std::vector<bf16>& x) {
    std::vector<float> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = float(x[i]);
    return r;
}
template <class T, class U>
std::vector<T> cast(const std::vector<U>& x) {
    return std::vector<T>(x.begin(), x.end());
}

template <class T>
bool same_bits(T a, T b) {
    return std::memcmp(&a, &b, sizeof a) == 0;
}
template <class T>
::testing::AssertionResult bits_equal(const std::vector<T>& got, const std::vector<T>& want) {
    if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
    for (size_t i = 0; i < got.size(); ++i)
        if (!same_bits(got[i], want[i]))
            return ::testing::AssertionFailure() << "element " << i << " of " << got.size() << ": "
                                                 << got[i] << " vs " << want[i];
    return ::testing::AssertionSuccess();
}
inline ::testing::AssertionResult bits_equal(const std::vector<bf16>& got,
                                             const std::vector<bf16>& want) {
    return bits_equal(widen(got), widen(want));
}

// max|a − b| / max|b|, NaN when any value is NaN on one side only, or when b is all 0 and a not.
template <class A, class B>
double rel_err(const std::vector<A>& a, const std::vector<B>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        const double x = double(a[i]), y = double(b[i]);
        if (std::isnan(x) != std::isnan(y)) return NAN;
        if (std::isnan(x)) continue;
        num = std::max(num, std::fabs(x - y));
        den = std::max(den, std::fabs(y));
    }
    return den > 0 ? num / den : (num > 0 ? NAN : 0.0);
}

inline ::testing::AssertionResult within(double err, double bound, const std::string& what) {
    if (err <= bound) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << what << ": relative error " << err << " over the allowance " << bound;
}
// float64 against the CPU's float64.
template <class T>
::testing::AssertionResult f64_close(const std::vector<T>& gpu, const std::vector<T>& cpu) {
    return within(rel_err(gpu, cpu), 1e-12, "float64");
}
// float32 against the float64 reference, given the CPU's float32 result (see the top).
inline double f32_allowance(const std::vector<float>& cpu32, const std::vector<double>& ref) {
    return 4 * rel_err(cpu32, ref) + std::ldexp(1.0, -20);
}
inline ::testing::AssertionResult f32_close(const std::vector<float>& gpu,
                                            const std::vector<float>& cpu32,
                                            const std::vector<double>& ref) {
    return within(rel_err(gpu, ref), f32_allowance(cpu32, ref), "float32");
}
inline ::testing::AssertionResult bf16_close(const std::vector<bf16>& gpu,
                                             const std::vector<float>& cpu32,
                                             const std::vector<double>& ref) {
    return within(rel_err(widen(gpu), ref), f32_allowance(cpu32, ref) + std::ldexp(1.0, -8),
                  "bf16");
}

}  // namespace gpu
