// Rotary position embedding (interleaved pairs or halves), forward and backward. See ops.h.
#include <cmath>

#include "core/error.h"
#include "ops/ops.h"

namespace pldr {

void RopeTable::build(int64_t max_pos_, int64_t head_dim, double theta) {
    PLDR_CHECK(head_dim % 2 == 0);
    max_pos = max_pos_;
    half = head_dim / 2;
    cos.assign(static_cast<size_t>(max_pos * half), 0.f);
    sin.assign(static_cast<size_t>(max_pos * half), 0.f);
    // All in float32, as torchtune and the HF port build it: θ_m = 1 / theta^(2m/D), angle p·θ_m.
    std::vector<float> th(static_cast<size_t>(half));
    for (int64_t m = 0; m < half; ++m) {
        float e = float(2 * m) / float(head_dim);
        th[m] = 1.0f / std::pow(float(theta), e);
    }
    for (int64_t p = 0; p < max_pos; ++p)
        for (int64_t m = 0; m < half; ++m) {
            float a = float(p) * th[m];
            // cos/sin of a float32 angle, correctly rounded to float32.
            cos[p * half + m] = float(std::cos(double(a)));
            sin[p * half + m] = float(std::sin(double(a)));
        }
}

namespace {

template <typename T>
inline T round_f32(T x) {
    return T(float(x));
}

}  // namespace

template <typename T>
void rope_forward(T* x, const int64_t* pos, int64_t N, int64_t H, int64_t D, const RopeTable& t,
                  bool interleaved, bool round_input_f32) {
    const int64_t half = D / 2;
    for (int64_t n = 0; n < N; ++n) {
        PLDR_REQUIRE(pos[n] >= 0 && pos[n] < t.max_pos, "position ", pos[n],
                     " is outside the RoPE table (max_position_embeddings ", t.max_pos, ")");
        const float* cs = t.cos.data() + pos[n] * half;
        const float* sn = t.sin.data() + pos[n] * half;
        for (int64_t h = 0; h < H; ++h) {
            T* v = x + (n * H + h) * D;
            for (int64_t m = 0; m < half; ++m) {
                const int64_t i0 = interleaved ? 2 * m : m;
                const int64_t i1 = interleaved ? 2 * m + 1 : m + half;
                T x0 = v[i0], x1 = v[i1];
                if (round_input_f32) {
                    x0 = round_f32(x0);
                    x1 = round_f32(x1);
                }
                const T c = T(cs[m]), s = T(sn[m]);
                if (interleaved) {
                    v[i0] = x0 * c - x1 * s;
                    v[i1] = x1 * c + x0 * s;
                } else {  // HF: x·cos + rotate_half(x)·sin
                    v[i0] = x0 * c + (-x1) * s;
                    v[i1] = x1 * c + x0 * s;
                }
            }
        }
    }
}

template <typename T>
void rope_backward(T* dx, const int64_t* pos, int64_t N, int64_t H, int64_t D, const RopeTable& t,
                   bool interleaved, bool round_grad_f32) {
    const int64_t half = D / 2;
    for (int64_t n = 0; n < N; ++n) {
        const float* cs = t.cos.data() + pos[n] * half;
        const float* sn = t.sin.data() + pos[n] * half;
        for (int64_t h = 0; h < H; ++h) {
            T* v = dx + (n * H + h) * D;
            for (int64_t m = 0; m < half; ++m) {
                const int64_t i0 = interleaved ? 2 * m : m;
                const int64_t i1 = interleaved ? 2 * m + 1 : m + half;
                const T d0 = v[i0], d1 = v[i1];
                const T c = T(cs[m]), s = T(sn[m]);
                T g0, g1;
                if (round_grad_f32) {
                    // The reference's autograd: each product's gradient is cast back to the
                    // float32 input, and the two contributions are summed in float32.
                    g0 = T(float(d0 * c) + float(d1 * s));
                    g1 = T(float(d1 * c) - float(d0 * s));
                } else {
                    g0 = d0 * c + d1 * s;
                    g1 = d1 * c - d0 * s;
                }
                v[i0] = g0;
                v[i1] = g1;
            }
        }
    }
}

template void rope_forward<float>(float*, const int64_t*, int64_t, int64_t, int64_t,
                                  const RopeTable&, bool, bool);
template void rope_forward<double>(double*, const int64_t*, int64_t, int64_t, int64_t,
                                   const RopeTable&, bool, bool);
template void rope_backward<float>(float*, const int64_t*, int64_t, int64_t, int64_t,
                                   const RopeTable&, bool, bool);
template void rope_backward<double>(double*, const int64_t*, int64_t, int64_t, int64_t,
                                    const RopeTable&, bool, bool);

}  // namespace pldr
