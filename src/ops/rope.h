// Rotary position embedding: the float32 angle table and the rotation, forward and backward
// (src/ops/rope.cpp).
#pragma once
#include <cstdint>
#include <vector>

namespace pldr {

// ---- RoPE ------------------------------------------------------------------------------------
// The float32 (cos, sin) table of torchtune / the HF port: angle p·θ_m with θ_m =
// 1/theta^(2m/D), all in float32; cos and sin stored [max_pos, D/2].
//  - TORCH: bit for bit the table torch builds (the reference's `rope.cache`): θ with SLEEF's
//    powf_u10 and a float32 reciprocal, cos/sin with SLEEF's u10 functions (the vectorised
//    kernels torch runs on AVX2/AVX-512 CPUs; glibc's cosf/sinf on CPUs without FMA, where
//    torch's default kernels call them). Used by --numerics reference and by float32 models.
//  - FLOAT64: θ_m, the angle p·θ_m and its cos/sin all in float64 (--numerics exact, Python's
//    reference_numerics=False: a float64 model with no float32 step). `cos64`/`sin64` hold it;
//    `cos`/`sin` hold the same values rounded to float32 (for a float32 consumer).
enum class RopeTableKind { TORCH, FLOAT64 };
struct RopeTable {
    int64_t max_pos = 0, half = 0;
    RopeTableKind kind = RopeTableKind::TORCH;
    std::vector<float> cos, sin;
    std::vector<double> cos64, sin64;  // FLOAT64 only
    void build(int64_t max_pos, int64_t head_dim, double theta, RopeTableKind kind);
};
// Requires every pos[n] inside the table (pldr::Error naming the first that is not): what the
// rotations below check before any token moves. A caller that rotates rows inside its own
// parallel region (where nothing may throw) checks them all first.
void require_rope_positions(const int64_t* pos, int64_t N, const RopeTable& t);
// Rotates x [N tokens, H, D] in place; token n has position pos[n].
// interleaved: pairs (2m, 2m+1) (reference_rope = true); otherwise halves (m, m + D/2).
// round_input_f32: the reference's x.float() before the rotation (float64 parity quirk).
template <typename T>
void rope_forward(T* x, const int64_t* pos, int64_t N, int64_t H, int64_t D, const RopeTable& t,
                  bool interleaved, bool round_input_f32);
// The transpose rotation, in place on the gradient. round_grad_f32 mirrors the reference's
// float32 cast on the way back.
template <typename T>
void rope_backward(T* dx, const int64_t* pos, int64_t N, int64_t H, int64_t D, const RopeTable& t,
                   bool interleaved, bool round_grad_f32);

}  // namespace pldr
