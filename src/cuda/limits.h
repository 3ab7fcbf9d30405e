// What one CUDA device reaches, measured in the calling process (src/cuda/limits.cu), so that
// `pldr bench --device cuda` can quote its figures as fractions of the same GPU's limits in the
// same run (as the CPU bench quotes the read bandwidth and the SGEMM peak). Plain C++; each
// function selects `device` (an index below cuda::device_count()), allocates what it measures
// over, frees it, and throws pldr::Error (one line) when the runtime fails.
#pragma once
#include <cstdint>
#include <string>

namespace pldr::cuda {

// HBM read bandwidth in GB/s: a kernel that sums a buffer of `bytes` (default 2 GiB, at most a
// quarter of the free memory) in 16-byte loads across every multiprocessor; the best of 5 timed
// passes after one untimed.
double read_bandwidth_gbs(int device, int64_t bytes = int64_t(2) << 30);

// cuBLASLt's n×n×n product in GFLOP/s (2n³ per product), the best of 5 timed products after
// two untimed: "f32" (float32 arithmetic, TF32 off: what the float32 model runs), "tf32"
// (float32 operands, TF32 tensor cores) or "bf16" (bf16 operands, float32 accumulation and
// output: the autocast products). Throws pldr::Error on another name.
double gemm_gflops(int device, const std::string& type, int64_t n = 8192);

// The high-water mark, in bytes, of what pldr's stream-ordered device arrays (Scratch: the
// parameters, activations, gradients, moments) have held on `device` since the last reset: the
// device's default memory pool's cudaMemPoolAttrUsedMemHigh. reset: starts a new mark (and
// returns the old one). cuBLASLt's workspace (32 MiB per Gemm, cudaMalloc) is not in it.
int64_t pool_peak_bytes(int device, bool reset = false);

}  // namespace pldr::cuda
