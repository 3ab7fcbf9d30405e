// The CUDA kernels of the backend (src/cuda/*.cu), each forward beside its backward as on the CPU
// (src/ops/, src/train/), declared for host code: plain C++ (the host compiler includes this
// header; nothing here needs the CUDA headers). Every pointer named as data is device memory;
// every function enqueues on `stream` (null: the default stream) and returns without waiting,
// unless it returns a value computed on the device (those wait for the stream). A CUDA error
// throws pldr::Error ("CUDA: <call>: <reason>").
//
// Element types: T = float, double, or bf16 (storage only: loaded as float, computed in float,
// rounded once to nearest-even on store). Acc<T> is the type of the arithmetic and of the
// per-row and per-parameter buffers: float for float and bf16, double for double.
// Which kernel gives which bits (docs/gpu.md; tests/gpu/):
//   - the CPU's bits in float32 and float64: LayerNorm forward and backward (the CPU's summation
//     order, ops/layernorm_order.h), AdamW (train/adamw_element.h), clipping by value and by
//     global norm (train/clip_order.h: the same sum of squares);
//   - RoPE (ops/rope_rotate.h): the CPU's operations, but GCC 12 contracts the CPU's pairs into
//     fused multiply-adds on AVX-512 machines, so within one rounding of it;
//   - within the float rounding of exp/log/pow (CUDA's against glibc's or SLEEF's, each ≤ 2 ulp):
//     the GLU gate, the positive maps and couplings, the cross-entropy (whose row sums also run
//     in another order);
//   - bf16 storage: the float32 result rounded once (LayerNorm: the CPU's float32 bits on the
//     widened inputs, rounded).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/hd.h"
#include "ops/rope.h"
#include "train/adamw.h"
#include "train/clip.h"

struct CUstream_st;  // = cudaStream_t's pointee (driver_types.h)

namespace pldr::cuda {

using Stream = ::CUstream_st*;

// bfloat16 bits (the layout of __nv_bfloat16 and of the CPU's bf16 arrays, core/gemm_bf16.h).
// Widening to float is exact, on either side (the shared arithmetic of ops/*_order.h reads bf16
// storage through it); rounding to bf16 is the store's job (round_to_bf16 on the CPU).
struct bf16 {
    uint16_t bits;
    PLDR_HD operator float() const {
        const uint32_t u = uint32_t(bits) << 16;
        float f;
        std::memcpy(&f, &u, sizeof f);
        return f;
    }
};
template <class T>
struct AccOf {
    using type = T;
};
template <>
struct AccOf<bf16> {
    using type = float;
};
template <class T>
using Acc = typename AccOf<T>::type;

// ---- LayerNorm over the last axis (ops/layernorm.h): x, out [N,C]; g, b [C] (b may be null);
// mean, rstd [N] (may be null). The backward accumulates into dx, dg, db (each may be null) as
// the CPU does: dg and db over the rows in order. --------------------------------------------
template <class T>
void layernorm_forward(T* out, Acc<T>* mean, Acc<T>* rstd, const T* x, const Acc<T>* g,
                       const Acc<T>* b, int64_t N, int64_t C, double eps, Stream stream);
template <class T>
void layernorm_backward(T* dx, Acc<T>* dg, Acc<T>* db, const T* dout, const T* x,
                        const Acc<T>* mean, const Acc<T>* rstd, const Acc<T>* g, int64_t N,
                        int64_t C, Stream stream);

// ---- The SwiGLU gate of the GLU blocks (ops/glu.h): gated = silu(h1) ⊙ h2 over n elements;
// the backward writes dh1 = dgated ⊙ h2 ⊙ silu'(h1) and dh2 = dgated ⊙ silu(h1) (dh1 may be
// dgated itself, as on the CPU). -------------------------------------------------------------
template <class T>
void glu_gate(T* gated, const T* h1, const T* h2, int64_t n, Stream stream);
template <class T>
void glu_gate_backward(T* dh1, T* dh2, const T* dgated, const T* h1, const T* h2, int64_t n,
                       Stream stream);

// ---- RoPE (ops/rope.h) --------------------------------------------------------------------------
// A RopeTable's float32 cos/sin on the device, and its float64 ones for a FLOAT64 table (the pure
// float64 numerics: the rotation then reads those, as the CPU's does).
class DeviceRopeTable {
  public:
    explicit DeviceRopeTable(const RopeTable& t);
    ~DeviceRopeTable();
    DeviceRopeTable(const DeviceRopeTable&) = delete;
    DeviceRopeTable& operator=(const DeviceRopeTable&) = delete;
    const float* cos() const { return cos_; }
    const float* sin() const { return sin_; }
    const double* cos64() const { return cos64_; }  // null for a TORCH table
    const double* sin64() const { return sin64_; }
    int64_t max_pos() const { return max_pos_; }
    int64_t half() const { return half_; }

  private:
    float* cos_ = nullptr;
    float* sin_ = nullptr;
    double* cos64_ = nullptr;
    double* sin64_ = nullptr;
    int64_t max_pos_ = 0, half_ = 0;
};
// Rotates x [N tokens, H, D] in place, token n at position pos[n] (device memory). A position
// outside [0, max_pos) is never read from the table: that token's values become NaN and, when
// bad_pos (device memory) is not null, *bad_pos is set to 1. Callers validate positions on the
// host where they come from (rope_check_positions), as the CPU's rope_forward does.
template <class T>
void rope_forward(T* x, const int64_t* pos, int64_t N, int64_t H, int64_t D,
                  const DeviceRopeTable& t, bool interleaved, bool round_input_f32, int* bad_pos,
                  Stream stream);
template <class T>
void rope_backward(T* dx, const int64_t* pos, int64_t N, int64_t H, int64_t D,
                   const DeviceRopeTable& t, bool interleaved, bool round_grad_f32, int* bad_pos,
                   Stream stream);
// Host positions: throws the CPU's message for the first one outside the table.
void rope_check_positions(const int64_t* pos_host, int64_t N, int64_t max_pos);

// ---- The masked cross-entropy over a chunk of rows (ops/cross_entropy.h,
// cross_entropy_fused_rows): per row the CE (unmasked) into ce_rows[N] and the top-1 hit into
// hit_rows[N]; dlogits[N,V] overwritten with scale·(softmax − onehot) on scored rows and 0 on
// rows whose target is ignore_id. dlogits may be logits itself. A target outside [0, V) gives
// a NaN row (ce NaN, gradient NaN unless ignored). ------------------------------------------
template <class T>
void cross_entropy_fused_rows(T* dlogits, Acc<T>* ce_rows, char* hit_rows, const T* logits,
                              const int64_t* targets, int64_t N, int64_t V, int64_t ignore_id,
                              Acc<T> scale, Stream stream);

// ---- AdamW (train/adamw.h) and clipping (train/clip.h), T = float or double: the CPU's bits. --
template <class T>
void adamw_update(T* p, const T* g, T* m, T* v, int64_t n, int64_t t, double lr,
                  const AdamWConfig& cfg, Stream stream);
// Returns the count of |g| > limit before clipping (waits for the stream).
template <class T>
int64_t clip_by_value(T* g, int64_t n, T limit, Stream stream);
// sum_of_squares' bits and clip_by_value's count in one read (waits for the stream).
template <class T>
GradPass grad_pass(const T* g, int64_t n, T limit, Stream stream);
template <class T>
void scale_to_norm(T* g, int64_t n, double max_norm, double norm, Stream stream);
// Returns the norm before clipping (waits for the stream), as the CPU's clip_by_global_norm.
template <class T>
double clip_by_global_norm(T* g, int64_t n, double max_norm, Stream stream);
// True when no element is inf or NaN (waits for the stream).
template <class T>
bool all_finite(const T* g, int64_t n, Stream stream);

// ---- The PLGA operator's element-wise steps (ops/plga_variants.h), T = float or double, every
// registered variant by its config name (cuda_has_positive_map / cuda_has_coupling). The
// forwards evaluate in double and round once to T, as the CPU operator does; the backwards run
// in T, as the CPU's. Unknown names throw pldr::Error. ----------------------------------------
bool cuda_has_positive_map(const std::string& name);
bool cuda_has_coupling(const std::string& name);
template <class T>
void positive_map_forward(const std::string& name, const T* Z, T* A_LM, int64_t n, Stream stream);
// dZ[i] ← dZ[i]·f'(Z[i]).
template <class T>
void positive_map_backward(const std::string& name, T* dZ, const T* Z, const T* A_LM, int64_t n,
                           Stream stream);
template <class T>
void coupling_forward(const std::string& name, const T* A_LM, const T* P, T* A_P, int64_t n,
                      Stream stream);
// dA_LM = dA_P·∂c/∂A_LM (overwritten); dP += dA_P·∂c/∂P.
template <class T>
void coupling_backward(const std::string& name, T* dA_LM, T* dP, const T* dA_P, const T* A_LM,
                       const T* A_P, const T* P, int64_t n, Stream stream);

// ---- The DAG terms (ops/dag.h) per instance: `count` n×n matrices X back to back (n ≤
// kDagMaxSide), one thread block each running ops/dag_expm.h's algorithm, the CPU's steps in the
// same order (the same bits, up to the float rounding of log2, of exp, log and pow in the exact
// mode, and of expf for n = 1 in the reference one). vals [count] (device) receives each instance's
// dag in the exact mode, and with reference numerics its y = tr(expm(X∘X)) / dk, whose dag is
// dag_detail::dag_ref_value(y) on the host (the CPU's float32 log, so the CPU's bits). When dX is
// not null each instance's gradient is ACCUMULATED into it, seeded as ops/dag.cpp's dag_mean seeds
// it: `seed` (float32) with reference numerics (torch's float32 algorithm and its autograd
// backward), `scale` (the instance's d mean / d dag times the coefficient) in the exact mode
// (float64). T = float or double. --------------------------------------------------------------
constexpr int64_t kDagMaxSide = 128;
template <class T>
void dag_instances(const T* X, int64_t count, int64_t n, bool reference, T* dX, float seed,
                   double scale, double* vals, Stream stream);

}  // namespace pldr::cuda
