// bfloat16 matrix products with float32 accumulation (issue 15, spec §5.2), through oneDNN's
// matmul primitive (Debian's libdnnl) on the CPU's bf16 instructions: AMX tiles where the CPU
// has AMX-BF16, AVX512-BF16 dot products otherwise. Chosen at run time:
//   available()  — oneDNN is built in, the CPU has AVX512-BF16 or AMX-BF16, and the environment
//                  does not force the fallback (PLDR_FORCE_FP32=1);
//   otherwise every caller takes its float32 path (OpenBLAS), so with PLDR_FORCE_FP32=1 the
//   whole suite exercises the float32 code on any machine.
//
// Autocast, in the manner of torch.autocast: inside a `Bf16Autocast` scope the float32 linear
// layers of this thread (ops/linear.h: linear_forward / linear_backward) round their operands to
// bf16 and multiply through this backend; LayerNorm, softmax, attention and the PLGA operator,
// the loss and the optimizer stay float32 because they do not call it. A weight is rounded once
// per scope (a cache keyed by its address, dropped when the scope ends: a training step opens
// one scope for its forward and backward and closes it before the optimizer moves the weights).
#pragma once
#include <cstdint>
#include <string>

namespace pldr {

enum class Precision : uint8_t { FP32, BF16 };
const char* precision_name(Precision p);
Precision parse_precision(const std::string& s);  // "fp32" | "bf16"; throws pldr::Error

namespace bf16 {

// Whether bf16 products run on this machine (see above); the reason when not.
bool available();
std::string unavailable_reason();
// "onednn avx512_core_bf16", "onednn avx512_core_amx", or "fp32 (<reason>)".
std::string backend_name();
// Tests: force the fallback (true) or restore the run-time choice (false).
void force_fallback(bool on);

// float32 → bf16, to nearest, ties to even (a NaN stays a quiet NaN). Parallel for large n.
void round_to_bf16(const float* x, int64_t n, uint16_t* out);

// C[M,N] = alpha·op(A)[M,K]·op(B)[K,N] + beta·C, row-major, A and B bf16 bits, C float32, the
// products accumulated in float32. Requires available().
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
          int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc);

// The same with float32 operands rounded to bf16 first. `a_weight` / `b_weight` mark an
// operand as a weight: inside an autocast scope it is rounded once and reused for the scope.
void gemm_f32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
              int64_t lda, bool a_weight, const float* B, int64_t ldb, bool b_weight, float beta,
              float* C, int64_t ldc);

// Whether this thread is inside a Bf16Autocast scope on a machine where bf16 is available.
bool autocast_active();

}  // namespace bf16

// Scope of autocast on this thread: Precision::BF16 turns bf16 products on (where available),
// Precision::FP32 turns them off inside an enclosing BF16 scope (the metric learner's chain, as
// torch.autocast(enabled=False)); the previous state returns when the scope ends. The weight
// cache lives until the outermost BF16 scope ends.
class Bf16Autocast {
  public:
    explicit Bf16Autocast(Precision p);
    ~Bf16Autocast();
    Bf16Autocast(const Bf16Autocast&) = delete;
    Bf16Autocast& operator=(const Bf16Autocast&) = delete;

  private:
    bool on_ = false, was_ = false;
};

}  // namespace pldr
