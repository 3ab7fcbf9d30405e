// Packed (low-precision) linear weights for float32 inference: the bf16 and q8_0 number formats
// (ops/linear.h LinearWeight) and the kernels that stream them for up to kMaxRows input rows
// (qlinear.cpp: scalar code, the q8_0 input quantizer, dispatch, prefill; qlinear_avx2.cpp: the
// AVX2 q8_0 kernel; qlinear_avx512.cpp: the AVX-512 VNNI one; bf16 weights on x86 go through the
// float32 rows kernel, ops/dense_rows.cpp, which widens them as it reads them). Exposed for the
// packer (model/packed.h) and for the tests; the model calls linear_forward.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

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

// The instruction set of the streaming kernels, the best the CPU has: AVX512VNNI (AVX-512 F, BW,
// VL and VNNI, with AVX2 and FMA), else AVX2 (with FMA), else the portable scalar code.
// PLDR_KERNELS=scalar|avx2|avx512vnni in the environment caps the choice (a name the CPU lacks
// gives the best one below it). The bf16 kernels are AVX2 code under AVX512VNNI too.
enum class Isa { SCALAR, AVX2, AVX512VNNI };
bool cpu_has_avx2();
bool cpu_has_avx512vnni();
bool cpu_has(Isa i);
// The choice for a value of PLDR_KERNELS (null: unset; an unknown name: no cap).
Isa choose_isa(const char* kernels);
Isa isa();
void set_isa(Isa i);  // tests; throws pldr::Error for an instruction set the CPU lacks
const char* isa_name(Isa i);

// The most rows (N) the streaming kernels take; linear_forward runs larger N as a GEMM.
inline constexpr int64_t kMaxRows = 16;

// ---- bf16 weights, float32 inputs
// out[n·O + o] = Σ_i in[n·I + i] · W[o][i] (+ b[o]) for o in [o0, o1) and every n < N ≤ kMaxRows,
// W packed as BF16. One pass over the rows of W: each row is read once for all N rows. The
// portable code; with AVX2, dense_rows_forward over a bf16 job (DenseRowsJob::Wb).
void rows_bf16_scalar(float* out, const float* in, const LinearWeight<float>& W, const float* b,
                      int64_t N, int64_t I, int64_t O, int64_t o0, int64_t o1);

// ---- q8_0 weights, q8_0 inputs (the decode semantics of docs/formats.md, as llama.cpp's Q8_0)
// The N input rows quantized once per product, block by block exactly like a weight row
// (q8_quantize_row): per block of 32 inputs (the last one of a row may be shorter),
// scale = max|x| / 127 and q = round(x / scale), half away from zero, within ±127, 0 for an
// all-zero block; a block holding a non-finite input gets scale NaN (and q = 0), so that the
// products it enters are NaN. Stored padded for the vector kernels: `blocks` = q8_blocks(I)
// rounded up to a multiple of kQ8Group, `stride` = 32·blocks bytes per row, zeros past I (q) and
// past q8_blocks(I) (scales). The inputs are never −128, so the vector kernels negate them
// exactly; the weights may be (a legal stored value), and are only ever taken as |q_w| ≤ 128.
inline constexpr int64_t kQ8Group = 8;  // blocks per float32 accumulator vector (8 lanes)
struct Q8Rows {
    int64_t N = 0, I = 0, blocks = 0, stride = 0;
    std::vector<int8_t> q;     // [N, stride]
    std::vector<float> scale;  // [N, blocks]
    const int8_t* qrow(int64_t n) const { return q.data() + n * stride; }
    const float* srow(int64_t n) const { return scale.data() + n * blocks; }
};
void q8_quantize_rows(const float* x, int64_t N, int64_t I, Q8Rows& out);

// out[n·O + o] = Σ_blk float(isum) · (scale_w · scale_x) (+ b[o]) for o in [o0, o1) and every
// input row n < x.N ≤ kMaxRows, where isum = Σ_{i in blk} q_w[o][i] · q_x[n][i] is the exact
// int32 dot product of block blk (|isum| ≤ 32·128·127, so float(isum) is exact) and W is Q8_0.
// The float32 sum has one fixed order on every instruction set, so all give the same bits: 8
// partial sums, a_j over the blocks blk ≡ j (mod 8) in increasing order, each step
// a_j = fma(float(isum), scale_w · scale_x, a_j) (the scale product rounded to float32 first);
// then ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)); then + b[o].
void rows_q8_scalar(float* out, const Q8Rows& x, const LinearWeight<float>& W, const float* b,
                    int64_t O, int64_t o0, int64_t o1);
void rows_q8_avx2(float* out, const Q8Rows& x, const LinearWeight<float>& W, const float* b,
                  int64_t O, int64_t o0, int64_t o1);
void rows_q8_avx512(float* out, const Q8Rows& x, const LinearWeight<float>& W, const float* b,
                    int64_t O, int64_t o0, int64_t o1);
// The kernel of instruction set `i` (which the CPU must have).
void rows_q8(Isa i, float* out, const Q8Rows& x, const LinearWeight<float>& W, const float* b,
             int64_t O, int64_t o0, int64_t o1);

}  // namespace pldr::qlinear
