// Linear layer, forward and backward (src/ops/dense.cpp), and the forward over a weight in any
// storage format (dense, or packed bf16 / q8_0 for float32 inference: src/ops/qlinear.cpp).
#pragma once
#include <cstdint>

#include "core/parallel.h"

namespace pldr {

// ---- linear: out[N,O] = in[N,I] · W[O,I]ᵀ + b[O] (b may be null) --------------------------------
// float32 inside a Bf16Autocast scope (core/gemm_bf16.h): the products of the forward and the
// backward take bf16 operands and accumulate in float32 (mixed-precision training).
// Elements from which the bias passes (fill_rows, the bias gradient) run on every thread: the
// language-model head's [N,V] rows of a training step were a serial pass with the other thread
// idle.
inline constexpr int64_t kBiasParallelElems = int64_t(1) << 17;

// out[n, :] = b for N rows of O: the bias a product then accumulates into (beta = 1). One
// loop the compiler vectorizes, not a copy call per row: a metric-learner product has 896 rows
// of 170.
template <typename T>
inline void fill_rows(T* out, const T* b, int64_t N, int64_t O) {
    parallel_for(N, N * O >= kBiasParallelElems, [&](int64_t n) {
        T* o = out + n * O;
        for (int64_t j = 0; j < O; ++j) o[j] = b[j];
    });
}

template <typename T>
void linear_forward(T* out, const T* in, const T* W, const T* b, int64_t N, int64_t I, int64_t O);
// din[N,I] += dout·W (din may be null); dW[O,I] += doutᵀ·in; db[O] += Σ_n dout (db may be null).
// float32, 1 ≤ N ≤ kDenseRows, a CPU with AVX2 and FMA: one pass over W for all N rows
// (src/ops/dense_rows.cpp), the same bits for every row whatever N (batched decoding equals
// one-at-a-time). Returns false (nothing written) where it does not apply.
inline constexpr int64_t kDenseRows = 16;
bool dense_rows_forward(float* out, const float* in, const float* W, const float* b, int64_t N,
                        int64_t I, int64_t O);
// Up to 4 such products of the same input rows (out_j[N,O_j] = in·W_jᵀ + b_j) in one parallel
// region: the same bits as one call each, one fork and join for all (a decode step of a small
// model otherwise spends more on them than on its products). A job's W is float32 (W), or
// bfloat16 bits (Wb, with W null: WeightFormat::BF16 below), widened exactly as they are read.
struct DenseRowsJob {
    float* out;
    const float* W;
    const float* b;
    int64_t O;
    const uint16_t* Wb = nullptr;
    // Instead of W: the same weight in panels (below); then each output is one FMA chain over
    // the inputs in order, plus the bias (the same bits whatever N, as above, but not the bits
    // of a product over W: a model uses panels for all its weights or for none).
    const float* panels = nullptr;
};
bool dense_rows_forward(const DenseRowsJob* jobs, int n_jobs, const float* in, int64_t N,
                        int64_t I);
// The rows kernel runs on every thread from this many weights on (256 KB of float32: a 256×256
// projection); below it one thread streams W faster than a team forks and joins. It used the BLAS
// threshold (kBlasParallelWork / 8 weights), which left every product of a d = 256 model on one
// thread: M-config decode 1,167–1,259 → 1,491–1,564 tok/s with this and the jobs above.
inline constexpr int64_t kDenseRowsParallelWeights = int64_t(1) << 16;
template <typename T>
void linear_backward(T* din, T* dW, T* db, const T* dout, const T* in, const T* W, int64_t N,
                     int64_t I, int64_t O);

// ---- panels: a float32 weight W[O,I] laid out for inference -------------------------------------
// Blocks of kPanelWidth outputs, each holding its inputs in order, kPanelWidth weights per input:
// panel p, input i, lane j at (p·I₁₆ + i)·kPanelWidth + j = W[p·kPanelWidth + j][i], with I₁₆ = I
// rounded up to a multiple of kPanelDepth and zeros past O and I. It is oneDNN's blocked weight
// layout BA16a48b for the product in·W (K = I, N = O), which its kernels read as it lies (a
// prompt's products, core/onednn.h: matmul_panels), and what a decode step streams with the
// inputs broadcast (dense_rows_forward): one contiguous read of W, kPanelWidth outputs per
// vector of inputs, no sums across lanes. Measured against the tile kernel over W (AVX-512,
// 110M, 8 rows): 7.7–8.0 ms against 11.1–11.2 ms per pass of the decode matrices.
inline constexpr int64_t kPanelWidth = 48, kPanelDepth = 16;
constexpr int64_t panel_count(int64_t O) {
    return (O + kPanelWidth - 1) / kPanelWidth;
}
constexpr int64_t panel_floats(int64_t O, int64_t I) {
    return panel_count(O) * kPanelWidth * ((I + kPanelDepth - 1) / kPanelDepth * kPanelDepth);
}
// p[panel_floats(O, I)] = W[O,I] in panels.
void to_panels(const float* W, int64_t O, int64_t I, float* p);
// Whether this CPU runs products over panels: the decode kernel (AVX-512, unless PLDR_KERNELS
// asks for less) and oneDNN's (built, taking float32 products, on AVX-512).
bool panels_available();

// ---- a linear weight W[O,I] in any storage format
// ------------------------------------------------
//   DENSE — T values (the compute precision), the layout of the parameter buffer;
//   BF16  — bfloat16 bits, W[o][i] = float(bits << 16) (float32 inference only);
//   Q8_0  — int8 values q [O,I] and float32 scales [O, q8_blocks(I)], one per block of
//           kQ8Block consecutive inputs of a row (the last block of a row holds the I % 32
//           remaining inputs when I is not a multiple of 32): W[o][i] = float(q[o][i]) *
//           scale[o][i / 32], rounded to float (float32 inference only).
enum class WeightFormat : uint8_t { DENSE, BF16, Q8_0 };
inline constexpr int64_t kQ8Block = 32;
constexpr int64_t q8_blocks(int64_t I) {
    return (I + kQ8Block - 1) / kQ8Block;
}

template <typename T>
struct LinearWeight {
    WeightFormat format = WeightFormat::DENSE;
    const T* dense = nullptr;
    // DENSE, optional: the same weight in panels (above; a float32 model's inference copy,
    // model/packed.h: PanelWeights). Every product then reads them instead of `dense`.
    const float* panels = nullptr;
    const uint16_t* bf16 = nullptr;
    const int8_t* q8 = nullptr;
    const float* q8_scale = nullptr;
    LinearWeight() = default;
    explicit LinearWeight(const T* w) : dense(w) {}
};

// out[N,O] = in[N,I] · Wᵀ + b for W in any format. DENSE is exactly the linear_forward above.
// Packed weights (T = float only): for N ≤ 16 rows (decode, batched decode) one pass over W
// streams each weight block once for all rows (ops/qlinear.h: the best kernels the CPU has,
// AVX-512 VNNI, AVX2 or portable scalar code; bf16 through the float32 rows kernel above, the
// weights widened as read); bf16 multiplies float32 inputs, q8_0 quantizes the
// inputs per block of 32 too and sums exact int8 products (llama.cpp's Q8_0 semantics,
// docs/formats.md). Larger N (prefill) dequantizes blocks of rows of W into a float32 scratch
// and runs the GEMM on the float32 inputs, except BF16 where the CPU multiplies bf16
// (core/gemm_bf16.h): then the inputs are rounded to bf16 and one bf16 product runs over W.
template <typename T>
void linear_forward(T* out, const T* in, const LinearWeight<T>& W, const T* b, int64_t N, int64_t I,
                    int64_t O);

// Whether linear_forward(out, in, W, b, N, I, O) called outside a parallel region splits the N
// rows over the team, each thread t of T running rows [N·t/T, N·(t+1)/T) as a one-thread product
// (float32 panels small enough that each thread reads all of W: core/onednn.h,
// panels_split_rows). A caller may then run that share of the rows itself, inside a region of
// its own, for the same bits (model/plga_layer.cpp: a prompt's row-wise steps in one region).
template <typename T>
bool linear_splits_rows(const LinearWeight<T>& W, int64_t N, int64_t I, int64_t O);

// Several linear layers of the same input rows, out_j[N,O_j] = in[N,I] · W_jᵀ + b_j (up to 4):
// the same values as one linear_forward each; with dense float32 weights and N ≤ kDenseRows all
// in one parallel region (dense_rows_forward's jobs).
template <typename T>
struct LinearOut {
    T* out;
    const LinearWeight<T>& W;
    const T* b;
    int64_t O;
};
template <typename T>
void linear_forward_same_input(const T* in, int64_t N, int64_t I, const LinearOut<T>* outs,
                               int n_outs);

}  // namespace pldr
