// Linear layers over packed weights: the bf16 and q8_0 formats, the portable scalar kernel, the
// run-time choice of the AVX2 kernel (qlinear_avx2.cpp), the threading over output rows and the
// GEMM path of the prefill. See ops/qlinear.h and ops/linear.h.
#include "ops/qlinear.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/blas.h"
#include "core/error.h"
#include "core/gemm_bf16.h"

namespace pldr {

namespace qlinear {

uint16_t bf16_round(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // to nearest, ties to even (overflow rounds to ±inf)
    return uint16_t(u >> 16);
}

void q8_quantize_row(const float* w, int64_t I, int8_t* q, float* scale) {
    for (int64_t blk = 0, i0 = 0; i0 < I; ++blk, i0 += kQ8Block) {
        const int64_t i1 = std::min(I, i0 + kQ8Block);
        float amax = 0;
        for (int64_t i = i0; i < i1; ++i) amax = std::max(amax, std::fabs(w[i]));
        const float s = amax / 127.0f;
        scale[blk] = s;
        for (int64_t i = i0; i < i1; ++i) {
            const float r = s > 0 ? std::round(w[i] / s) : 0.0f;
            q[i] = int8_t(std::min(127.0f, std::max(-127.0f, r)));
        }
    }
}

void dequantize_rows(const LinearWeight<float>& W, int64_t I, int64_t o0, int64_t o1, float* out) {
    const int64_t nb = q8_blocks(I);
    for (int64_t o = o0; o < o1; ++o) {
        float* r = out + (o - o0) * I;
        if (W.format == WeightFormat::BF16) {
            const uint16_t* w = W.bf16 + o * I;
            for (int64_t i = 0; i < I; ++i) r[i] = bf16_value(w[i]);
        } else if (W.format == WeightFormat::Q8_0) {
            const int8_t* q = W.q8 + o * I;
            const float* s = W.q8_scale + o * nb;
            for (int64_t blk = 0; blk < nb; ++blk) {  // block by block: the loop vectorizes
                const float sc = s[blk];
                const int64_t i1 = std::min(I, (blk + 1) * kQ8Block);
                for (int64_t i = blk * kQ8Block; i < i1; ++i) r[i] = q8_value(q[i], sc);
            }
        } else {
            std::copy(W.dense + o * I, W.dense + (o + 1) * I, r);
        }
    }
}

bool cpu_has_avx2() {
#if defined(__x86_64__) || defined(__i386__)
    static const bool has = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }();
    return has;
#else
    return false;
#endif
}

namespace {

std::atomic<int> g_isa{-1};  // -1: not chosen yet

Isa default_isa() {
    const char* e = std::getenv("PLDR_KERNELS");
    if (e && std::string(e) == "scalar") return Isa::SCALAR;
    return cpu_has_avx2() ? Isa::AVX2 : Isa::SCALAR;
}

}  // namespace

Isa isa() {
    int v = g_isa.load(std::memory_order_relaxed);
    if (v < 0) {
        v = int(default_isa());
        g_isa.store(v, std::memory_order_relaxed);
    }
    return Isa(v);
}

void set_isa(Isa i) {
    PLDR_REQUIRE(i != Isa::AVX2 || cpu_has_avx2(),
                 "the AVX2 kernels need a CPU with AVX2 and FMA; this one has not");
    g_isa.store(int(i), std::memory_order_relaxed);
}

const char* isa_name(Isa i) {
    return i == Isa::AVX2 ? "avx2" : "scalar";
}

void rows_scalar(float* out, const float* in, const LinearWeight<float>& W, const float* b,
                 int64_t N, int64_t I, int64_t O, int64_t o0, int64_t o1) {
    std::vector<float> row(static_cast<size_t>(I));
    for (int64_t o = o0; o < o1; ++o) {
        dequantize_rows(W, I, o, o + 1, row.data());  // the row once, for every n
        for (int64_t n = 0; n < N; ++n) {
            const float* x = in + n * I;
            float s = 0;
            for (int64_t i = 0; i < I; ++i) s += row[size_t(i)] * x[i];
            out[n * O + o] = b ? s + b[o] : s;
        }
    }
}

#if !(defined(__x86_64__) || defined(__i386__))
void rows_avx2(float*, const float*, const LinearWeight<float>&, const float*, int64_t, int64_t,
               int64_t, int64_t, int64_t) {
    fail("the AVX2 kernels exist on x86 only");
}
#endif

namespace {

// Output rows per task of the parallel loop: a few KB of weights, so that the tasks of a thread
// form one contiguous stream.
constexpr int64_t kRowsPerTask = 32;
// Rows of W dequantized at a time on the GEMM path: about 4 MB of float32.
constexpr int64_t kGemmBlockFloats = int64_t(1) << 20;

void packed_forward(float* out, const float* in, const LinearWeight<float>& W, const float* b,
                    int64_t N, int64_t I, int64_t O) {
    if (N <= kMaxRows) {
        const bool avx2 = isa() == Isa::AVX2;
        const int64_t tasks = (O + kRowsPerTask - 1) / kRowsPerTask;
        // Bandwidth-bound like a matrix-vector product: threads from the BLAS threshold on, and
        // never a nested team (batched generation calls this from its own parallel loop).
        const bool par = N * O * I * 8 >= kBlasParallelWork && tasks > 1 && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (par)
        for (int64_t t = 0; t < tasks; ++t) {
            const int64_t o0 = t * kRowsPerTask, o1 = std::min(O, o0 + kRowsPerTask);
            if (avx2)
                rows_avx2(out, in, W, b, N, I, O, o0, o1);
            else
                rows_scalar(out, in, W, b, N, I, O, o0, o1);
        }
        return;
    }
    if (b) {
        for (int64_t n = 0; n < N; ++n) std::copy(b, b + O, out + n * O);
    }
    // Prefill over bf16 weights on a CPU with bf16 products (core/gemm_bf16.h): the inputs
    // rounded to bf16, one product over the packed weights as stored, float32 accumulation.
    if (W.format == WeightFormat::BF16 && bf16::available()) {
        static thread_local std::vector<uint16_t> xb;
        if (xb.size() < size_t(N * I)) xb.resize(size_t(N * I));
        bf16::round_to_bf16(in, N * I, xb.data());
        bf16::gemm(false, true, N, O, I, 1.0f, xb.data(), I, W.bf16, I, b ? 1.0f : 0.0f, out, O);
        return;
    }
    // Otherwise float32 blocks of rows of W, each through the GEMM.
    const int64_t R = std::min(O, std::max<int64_t>(kRowsPerTask, kGemmBlockFloats / I));
    // Reused across calls (a prefill makes one per linear layer): no fresh pages to fault in.
    static thread_local std::vector<float> Wf;
    if (Wf.size() < size_t(R * I)) Wf.resize(size_t(R * I));
    float* wf = Wf.data();  // this thread's buffer, also for the team below
    for (int64_t o0 = 0; o0 < O; o0 += R) {
        const int64_t r = std::min(R, O - o0);
        const int64_t tasks = (r + kRowsPerTask - 1) / kRowsPerTask;
        const bool par = r * I * 8 >= kBlasParallelWork && tasks > 1 && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (par)
        for (int64_t t = 0; t < tasks; ++t) {
            const int64_t a = o0 + t * kRowsPerTask, z = std::min(o0 + r, a + kRowsPerTask);
            dequantize_rows(W, I, a, z, wf + (a - o0) * I);
        }
        gemm(false, true, N, r, I, 1.0f, in, I, wf, I, b ? 1.0f : 0.0f, out + o0, O);
    }
}

}  // namespace

}  // namespace qlinear

template <typename T>
void linear_forward(T* out, const T* in, const LinearWeight<T>& W, const T* b, int64_t N, int64_t I,
                    int64_t O) {
    if (W.format == WeightFormat::DENSE) {
        linear_forward(out, in, W.dense, b, N, I, O);
        return;
    }
    if constexpr (std::is_same_v<T, float>) {
        qlinear::packed_forward(out, in, W, b, N, I, O);
    } else {
        PLDR_CHECK(!"packed weights in a float64 model");
    }
}

template void linear_forward<float>(float*, const float*, const LinearWeight<float>&, const float*,
                                    int64_t, int64_t, int64_t);
template void linear_forward<double>(double*, const double*, const LinearWeight<double>&,
                                     const double*, int64_t, int64_t, int64_t);

}  // namespace pldr
