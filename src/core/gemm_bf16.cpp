// bf16 products through oneDNN's matmul primitive, the run-time choice and autocast. See
// core/gemm_bf16.h.
#include "core/gemm_bf16.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <unordered_map>
#include <vector>

#include "core/blas.h"
#include "core/error.h"
#include "core/onednn.h"
#include "core/parallel.h"

#ifdef PLDR_WITH_DNNL
#include <dnnl.hpp>
#endif

namespace pldr {

const char* precision_name(Precision p) {
    return p == Precision::BF16 ? "bf16" : "fp32";
}

Precision parse_precision(const std::string& s) {
    if (s == "fp32" || s == "f32") return Precision::FP32;
    if (s == "bf16") return Precision::BF16;
    fail("unknown precision '", s, "' (expected fp32 or bf16)");
}

namespace bf16 {

namespace {

std::atomic<bool> g_forced{false};

bool env_forces_fallback() {
    static const bool on = [] {
        const char* e = std::getenv("PLDR_FORCE_FP32");
        return e && *e && std::string(e) != "0";
    }();
    return on;
}

#ifdef PLDR_WITH_DNNL
// The CPU's (oneDNN's effective) instruction set has the bf16 dot products: AVX512-BF16, or AMX.
bool cpu_has_bf16() {
    static const bool has = [] {
        try {
            const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
            const auto need = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
            return (isa & need) == need;
        } catch (const dnnl::error&) {
            return false;
        }
    }();
    return has;
}

#endif

// The float32 product of bf16 operands (exact widening), for a problem oneDNN has no native
// kernel for.
void gemm_widened(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
                  int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    auto widen = [](const uint16_t* x, int64_t n) {
        std::vector<float> f(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) f[size_t(i)] = std::bit_cast<float>(uint32_t(x[i]) << 16);
        return f;
    };
    const auto a = widen(A, ((ta ? K : M) - 1) * lda + (ta ? M : K));
    const auto b = widen(B, ((tb ? N : K) - 1) * ldb + (tb ? K : N));
    pldr::gemm(ta, tb, M, N, K, alpha, a.data(), lda, b.data(), ldb, beta, C, ldc);
}

// Autocast state of this thread: the scope depth and the weights rounded in this scope.
// The buffers outlive the scope (a training step reuses them: no fresh pages every step); an
// entry is valid only in the scope generation that rounded it.
struct Rounded {
    std::vector<uint16_t> bits;
    uint64_t generation = 0;
};
struct AutocastState {
    bool enabled = false;  // the innermost scope's choice
    int depth = 0;         // live scopes that enabled bf16 (the weight cache lives while > 0)
    uint64_t generation = 1;
    std::unordered_map<const float*, Rounded> weights;
};
thread_local AutocastState t_cast;
thread_local std::vector<uint16_t> t_a, t_b;  // rounded activations, reused across calls

// The elements a row-major matrix of `rows` × `cols` with leading dimension ld spans.
int64_t span(int64_t rows, int64_t cols, int64_t ld) {
    return rows > 0 && cols > 0 ? (rows - 1) * ld + cols : 0;
}

const uint16_t* rounded(const float* x, int64_t n, bool weight, std::vector<uint16_t>& scratch) {
    if (weight && t_cast.enabled) {
        Rounded& w = t_cast.weights[x];
        if (w.generation != t_cast.generation || int64_t(w.bits.size()) != n) {
            w.bits.resize(size_t(n));
            round_to_bf16(x, n, w.bits.data());
            w.generation = t_cast.generation;
        }
        return w.bits.data();
    }
    if (int64_t(scratch.size()) < n) scratch.resize(size_t(n));
    round_to_bf16(x, n, scratch.data());
    return scratch.data();
}

}  // namespace

bool available() {
#ifdef PLDR_WITH_DNNL
    return !g_forced.load(std::memory_order_relaxed) && !env_forces_fallback() && cpu_has_bf16();
#else
    return false;
#endif
}

std::string unavailable_reason() {
#ifdef PLDR_WITH_DNNL
    if (g_forced.load(std::memory_order_relaxed)) return "fallback forced";
    if (env_forces_fallback()) return "PLDR_FORCE_FP32 is set";
    if (!cpu_has_bf16()) return "the CPU has neither AVX512-BF16 nor AMX-BF16";
    return "";
#else
    return "built without oneDNN";
#endif
}

std::string backend_name() {
#ifdef PLDR_WITH_DNNL
    if (available()) return "onednn " + onednn::isa();
#endif
    return "fp32 (" + unavailable_reason() + ")";
}

void force_fallback(bool on) {
    g_forced.store(on, std::memory_order_relaxed);
}

void round_to_bf16(const float* x, int64_t n, uint16_t* out) {
    parallel_for(n, n >= (int64_t(1) << 18), [&](int64_t i) {
        const uint32_t u = std::bit_cast<uint32_t>(x[i]);
        const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        const uint32_t q = (u >> 16) | 0x40u;  // quiet NaN
        out[i] = uint16_t((u & 0x7fffffffu) > 0x7f800000u ? q : r);
    });
}

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
          int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    PLDR_CHECK(available());
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {  // an empty sum: C = beta·C
        for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n)
                C[m * ldc + n] = beta == 0 ? 0.0f : beta * C[m * ldc + n];
        return;
    }
    blas_call(M * N * K, [&] {
        if (!onednn::matmul(onednn::Type::BF16, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C,
                            ldc))  // oneDNN has only its reference kernel for it: widen
            gemm_widened(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    });
}

void gemm_f32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
              int64_t lda, bool a_weight, const float* B, int64_t ldb, bool b_weight, float beta,
              float* C, int64_t ldc) {
    const uint16_t* a = rounded(A, span(ta ? K : M, ta ? M : K, lda), a_weight, t_a);
    const uint16_t* b = rounded(B, span(tb ? N : K, tb ? K : N, ldb), b_weight, t_b);
    gemm(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, C, ldc);
}

bool autocast_active() {
    return t_cast.enabled;
}

}  // namespace bf16

Bf16Autocast::Bf16Autocast(Precision p)
    : on_(p == Precision::BF16 && bf16::available()), was_(bf16::t_cast.enabled) {
    if (on_) ++bf16::t_cast.depth;
    bf16::t_cast.enabled = on_;
}

Bf16Autocast::~Bf16Autocast() {
    bf16::t_cast.enabled = was_;
    if (on_ && --bf16::t_cast.depth == 0) ++bf16::t_cast.generation;  // the weights may move now
}

}  // namespace pldr
