// Packed (low-precision) linear weights for float32 inference: the bf16 and q8_0 number formats
// (ops/linear.h LinearWeight) and the kernels that dequantize them while streaming
// (qlinear.cpp: scalar code, dispatch, prefill; qlinear_avx2.cpp: the AVX2 kernels). Exposed
// for the packer (model/packed.h) and for the tests; the model calls linear_forward.
#pragma once
#include <cstdint>
#include <cstring>

#include "ops/linear.h"

namespace pldr::qlinear {

// bfloat16: float32 rounded to nearest, ties to even (a NaN stays a quiet NaN); exact widening.
uint16_t bf16_round(float x);
inline float bf16_value(uint16_t bits) {
    const uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// q8_0 of one row of I weights: for each block of 32 inputs (the last one may be shorter),
// scale = max|w| / 127 (float32) and q = round(w / scale) (half away from zero, clamped to
// ±127; 0 for an all-zero block). The weights must be finite. q [I], scale [q8_blocks(I)].
void q8_quantize_row(const float* w, int64_t I, int8_t* q, float* scale);
inline float q8_value(int8_t q, float scale) {
    return float(q) * scale;
}

// Rows [o0, o1) of W[O,I] as float32, out[(o − o0)·I + i].
void dequantize_rows(const LinearWeight<float>& W, int64_t I, int64_t o0, int64_t o1, float* out);

// The instruction set of the streaming kernels: AVX2 (with FMA) when the CPU has it, else the
// portable scalar code. PLDR_KERNELS=scalar in the environment forces the scalar code.
enum class Isa { SCALAR, AVX2 };
bool cpu_has_avx2();
Isa isa();
void set_isa(Isa i);  // tests; throws pldr::Error for AVX2 on a CPU without it
const char* isa_name(Isa i);

// The most rows (N) the streaming kernels take; linear_forward runs larger N as a GEMM.
inline constexpr int64_t kMaxRows = 16;

// out[n·O + o] = Σ_i in[n·I + i] · W[o][i] (+ b[o]) for o in [o0, o1) and every n < N ≤ kMaxRows,
// W packed (BF16 or Q8_0). One pass over the rows of W: each row is read once for all N rows.
void rows_scalar(float* out, const float* in, const LinearWeight<float>& W, const float* b,
                 int64_t N, int64_t I, int64_t O, int64_t o0, int64_t o1);
void rows_avx2(float* out, const float* in, const LinearWeight<float>& W, const float* b, int64_t N,
               int64_t I, int64_t O, int64_t o0, int64_t o1);

}  // namespace pldr::qlinear
