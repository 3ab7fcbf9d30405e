// Linear layers over packed weights: the bf16 and q8_0 formats, the q8_0 input quantizer, the
// portable scalar kernels (the q8_0 one is the reference of the decode semantics), the run-time
// choice of the AVX2 (qlinear_avx2.cpp) and AVX-512 VNNI (qlinear_avx512.cpp) kernels, the
// threading over output rows and the GEMM path of the prefill. See ops/qlinear.h and
// ops/linear.h.
#include "ops/qlinear.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/blas.h"
#include "core/error.h"
#include "core/gemm_bf16.h"
#include "core/onednn.h"
#include "core/parallel.h"

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

namespace {

// |x| as bits: for non-negative floats the order of the bits is the order of the values, and
// ±inf and NaN are above every finite value.
inline uint32_t abs_bits(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return u & 0x7fffffffu;
}
constexpr uint32_t kInfBits = 0x7f800000u;

}  // namespace

void q8_quantize_rows(const float* x, int64_t N, int64_t I, Q8Rows& out) {
    const int64_t nb = q8_blocks(I);
    out.N = N;
    out.I = I;
    out.blocks = (nb + kQ8Group - 1) / kQ8Group * kQ8Group;
    out.stride = out.blocks * kQ8Block;
    const size_t bytes = size_t(N * out.stride);
    // Sized once and reused (a decode step quantizes the inputs of every linear layer); the
    // padding is rewritten below, as the previous call may have had another I.
    if (out.q.size() < bytes) out.q.resize(bytes);
    if (out.scale.size() < size_t(N * out.blocks)) out.scale.resize(size_t(N * out.blocks));
    // Written so that the loops vectorize (no libm call, integer reductions): the same values as
    // q8_quantize_row, which the tests check.
    for (int64_t n = 0; n < N; ++n) {
        const float* xr = x + n * I;
        int8_t* q = out.q.data() + n * out.stride;
        float* sc = out.scale.data() + n * out.blocks;
        for (int64_t blk = 0; blk < nb; ++blk) {
            const int64_t i0 = blk * kQ8Block, i1 = std::min(I, i0 + kQ8Block);
            uint32_t m = 0;
            for (int64_t i = i0; i < i1; ++i) m = std::max(m, abs_bits(xr[i]));
            if (m >= kInfBits) {  // ±inf or NaN in the block
                sc[blk] = NAN;
                std::fill(q + i0, q + i1, int8_t(0));
                continue;
            }
            float amax;
            std::memcpy(&amax, &m, 4);
            const float s = amax / 127.0f;
            sc[blk] = s;
            if (!(s > 0)) {  // all zero (or so small that the scale is 0)
                std::fill(q + i0, q + i1, int8_t(0));
                continue;
            }
            for (int64_t i = i0; i < i1; ++i) {
                // round(v), half away from zero, for |v| ≤ 190.5 (< 2^22; the largest is reached
                // with a subnormal scale): to nearest even by the 1.5·2^23 shift, then a tie
                // moved away from zero (v − r is exact).
                const float v = xr[i] / s;
                float r = (v + 0x1.8p23f) - 0x1.8p23f;
                if (std::fabs(v - r) == 0.5f) r = v + std::copysign(0.5f, v);
                q[i] = int8_t(std::min(127.0f, std::max(-127.0f, r)));
            }
        }
        std::fill(q + I, q + out.stride, int8_t(0));
        std::fill(sc + nb, sc + out.blocks, 0.0f);
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

bool cpu_has_avx512vnni() {
#if defined(__x86_64__) || defined(__i386__)
    // libgcc's checks include the OS's support of the AVX-512 state (XGETBV).
    static const bool has = [] {
        __builtin_cpu_init();
        return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512vnni");
    }();
    return has;
#else
    return false;
#endif
}

bool cpu_has(Isa i) {
    switch (i) {
        case Isa::AVX512VNNI:
            return cpu_has_avx512vnni();
        case Isa::AVX2:
            return cpu_has_avx2();
        default:
            return true;
    }
}

Isa choose_isa(const char* kernels) {
    Isa cap = Isa::AVX512VNNI;
    if (kernels) {
        const std::string v = kernels;
        if (v == "scalar")
            cap = Isa::SCALAR;
        else if (v == "avx2")
            cap = Isa::AVX2;
    }
    for (Isa i : {Isa::AVX512VNNI, Isa::AVX2})
        if (int(i) <= int(cap) && cpu_has(i)) return i;
    return Isa::SCALAR;
}

namespace {

std::atomic<int> g_isa{-1};  // -1: not chosen yet

}  // namespace

Isa isa() {
    int v = g_isa.load(std::memory_order_relaxed);
    if (v < 0) {
        v = int(choose_isa(std::getenv("PLDR_KERNELS")));
        g_isa.store(v, std::memory_order_relaxed);
    }
    return Isa(v);
}

void set_isa(Isa i) {
    PLDR_REQUIRE(i != Isa::AVX2 || cpu_has_avx2(),
                 "the AVX2 kernels need a CPU with AVX2 and FMA; this one has not");
    PLDR_REQUIRE(i != Isa::AVX512VNNI || cpu_has_avx512vnni(),
                 "the AVX-512 VNNI kernels need a CPU with AVX-512 F, BW, VL and VNNI (and AVX2 "
                 "and FMA); this one has not");
    g_isa.store(int(i), std::memory_order_relaxed);
}

const char* isa_name(Isa i) {
    switch (i) {
        case Isa::AVX512VNNI:
            return "avx512vnni";
        case Isa::AVX2:
            return "avx2";
        default:
            return "scalar";
    }
}

void rows_bf16_scalar(float* out, const float* in, const LinearWeight<float>& W, const float* b,
                      int64_t N, int64_t I, int64_t O, int64_t o0, int64_t o1) {
    PLDR_CHECK(W.format == WeightFormat::BF16);
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

void rows_q8_scalar(float* out, const Q8Rows& x, const LinearWeight<float>& W, const float* b,
                    int64_t O, int64_t o0, int64_t o1) {
    PLDR_CHECK(W.format == WeightFormat::Q8_0);
    const int64_t I = x.I, nb = q8_blocks(I);
    for (int64_t o = o0; o < o1; ++o) {
        const int8_t* qw = W.q8 + o * I;
        const float* sw = W.q8_scale + o * nb;
        for (int64_t n = 0; n < x.N; ++n) {
            const int8_t* qx = x.qrow(n);
            const float* sx = x.srow(n);
            float a[kQ8Group] = {};
            for (int64_t blk = 0; blk < nb; ++blk) {
                const int64_t i1 = std::min(I, (blk + 1) * kQ8Block);
                int32_t isum = 0;
                for (int64_t i = blk * kQ8Block; i < i1; ++i) isum += int32_t(qw[i]) * qx[i];
                float& aj = a[blk % kQ8Group];
                aj = std::fma(float(isum), sw[blk] * sx[blk], aj);
            }
            const float s = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
            out[n * O + o] = b ? s + b[o] : s;
        }
    }
}

#if !(defined(__x86_64__) || defined(__i386__))
void rows_q8_avx2(float*, const Q8Rows&, const LinearWeight<float>&, const float*, int64_t, int64_t,
                  int64_t) {
    fail("the AVX2 kernels exist on x86 only");
}
void rows_q8_avx512(float*, const Q8Rows&, const LinearWeight<float>&, const float*, int64_t,
                    int64_t, int64_t) {
    fail("the AVX-512 kernels exist on x86 only");
}
#endif

void rows_q8(Isa i, float* out, const Q8Rows& x, const LinearWeight<float>& W, const float* b,
             int64_t O, int64_t o0, int64_t o1) {
    switch (i) {
        case Isa::AVX512VNNI:
            rows_q8_avx512(out, x, W, b, O, o0, o1);
            break;
        case Isa::AVX2:
            rows_q8_avx2(out, x, W, b, O, o0, o1);
            break;
        default:
            rows_q8_scalar(out, x, W, b, O, o0, o1);
            break;
    }
}

namespace {

// Output rows per task of the parallel loop: a few KB of weights, so that the tasks of a thread
// form one contiguous stream.
constexpr int64_t kRowsPerTask = 32;
// Rows of W dequantized at a time on the GEMM path: about 4 MB of float32.
constexpr int64_t kGemmBlockFloats = int64_t(1) << 20;

void packed_forward(float* out, const float* in, const LinearWeight<float>& W, const float* b,
                    int64_t N, int64_t I, int64_t O) {
    if (N <= kMaxRows) {
        const Isa k = isa();
        const int64_t tasks = (O + kRowsPerTask - 1) / kRowsPerTask;
        // Bandwidth-bound like a matrix-vector product: threads from the BLAS threshold on, and
        // never a nested team (batched generation calls this from its own parallel loop).
        const bool par = N * O * I * 8 >= kBlasParallelWork && tasks > 1 && !omp_in_parallel();
        if (W.format == WeightFormat::Q8_0) {
            // The inputs quantized once, by the calling thread, into its own buffer (read by the
            // team below; a nested caller has its own).
            static thread_local Q8Rows xq;
            q8_quantize_rows(in, N, I, xq);
            const Q8Rows& x = xq;
            // Each thread streams its own tasks in order, then helps with the rest of the other's.
            parallel_for_balanced(tasks, par, [&](int64_t t) {
                const int64_t o0 = t * kRowsPerTask, o1 = std::min(O, o0 + kRowsPerTask);
                rows_q8(k, out, x, W, b, O, o0, o1);
            });
            return;
        }
        // bf16: the float32 rows kernel with the weights widened as read (ops/dense_rows.cpp),
        // unless the scalar kernels are asked for.
        const DenseRowsJob job{out, nullptr, b, O, W.bf16};
        if (k != Isa::SCALAR && dense_rows_forward(&job, 1, in, N, I)) return;
        parallel_for(tasks, par, [&](int64_t t) {
            const int64_t o0 = t * kRowsPerTask, o1 = std::min(O, o0 + kRowsPerTask);
            rows_bf16_scalar(out, in, W, b, N, I, O, o0, o1);
        });
        return;
    }
    if (b) {
        fill_rows(out, b, N, O);
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
        parallel_for(tasks, par, [&](int64_t t) {
            const int64_t a = o0 + t * kRowsPerTask, z = std::min(o0 + r, a + kRowsPerTask);
            dequantize_rows(W, I, a, z, wf + (a - o0) * I);
        });
        gemm(false, true, N, r, I, 1.0f, in, I, wf, I, b ? 1.0f : 0.0f, out + o0, O);
    }
}

}  // namespace

}  // namespace qlinear

template <typename T>
void linear_forward(T* out, const T* in, const LinearWeight<T>& W, const T* b, int64_t N, int64_t I,
                    int64_t O) {
    if (W.format == WeightFormat::DENSE) {
        if constexpr (std::is_same_v<T, float>) {
            if (W.panels && !bf16::autocast_active()) {
                if (N <= kDenseRows) {
                    const DenseRowsJob job{out, nullptr, b, O, nullptr, W.panels};
                    if (dense_rows_forward(&job, 1, in, N, I)) return;
                } else if (onednn::matmul_panels(N, O, I, in, I, W.panels, out, O, b)) {
                    return;
                }
            }
        }
        linear_forward(out, in, W.dense, b, N, I, O);
        return;
    }
    if constexpr (std::is_same_v<T, float>) {
        qlinear::packed_forward(out, in, W, b, N, I, O);
    } else {
        PLDR_CHECK(!"packed weights in a float64 model");
    }
}

template <typename T>
bool linear_splits_rows(const LinearWeight<T>& W, int64_t N, int64_t I, int64_t O) {
    if constexpr (std::is_same_v<T, float>) {
        return W.format == WeightFormat::DENSE && W.panels && !bf16::autocast_active() &&
               N > kDenseRows && onednn::panels_split_rows(N, O, I);
    } else {
        (void)W, (void)N, (void)I, (void)O;
        return false;
    }
}

template <typename T>
void linear_forward_same_input(const T* in, int64_t N, int64_t I, const LinearOut<T>* outs,
                               int n_outs) {
    if constexpr (std::is_same_v<T, float>) {
        // Dense float32 and bf16 weights (the latter unless the scalar kernels are asked for).
        bool dense = n_outs <= 4 && !bf16::autocast_active();
        DenseRowsJob jobs[4];
        for (int j = 0; dense && j < n_outs; ++j) {
            const LinearOut<T>& o = outs[j];
            if (o.W.format == WeightFormat::DENSE)
                jobs[j] = DenseRowsJob{
                    o.out, o.W.panels ? nullptr : o.W.dense, o.b, o.O, nullptr, o.W.panels};
            else if (o.W.format == WeightFormat::BF16 && qlinear::isa() != qlinear::Isa::SCALAR)
                jobs[j] = DenseRowsJob{o.out, nullptr, o.b, o.O, o.W.bf16};
            else
                dense = false;
        }
        if (dense && dense_rows_forward(jobs, n_outs, in, N, I)) return;
    }
    for (int j = 0; j < n_outs; ++j)
        linear_forward(outs[j].out, in, outs[j].W, outs[j].b, N, I, outs[j].O);
}

template void linear_forward_same_input<float>(const float*, int64_t, int64_t,
                                               const LinearOut<float>*, int);
template void linear_forward_same_input<double>(const double*, int64_t, int64_t,
                                                const LinearOut<double>*, int);

template bool linear_splits_rows<float>(const LinearWeight<float>&, int64_t, int64_t, int64_t);
template bool linear_splits_rows<double>(const LinearWeight<double>&, int64_t, int64_t, int64_t);
template void linear_forward<float>(float*, const float*, const LinearWeight<float>&, const float*,
                                    int64_t, int64_t, int64_t);
template void linear_forward<double>(double*, const double*, const LinearWeight<double>&,
                                     const double*, int64_t, int64_t, int64_t);

}  // namespace pldr
