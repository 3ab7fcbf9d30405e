// Rotary position embedding (interleaved pairs or halves), forward and backward. See ops.h.
#include <sleef.h>

#include <cmath>

#include "core/error.h"
#include "core/parallel.h"
#include "ops/rope.h"
#include "ops/rope_rotate.h"

namespace pldr {

namespace {

// Tokens over the team from this many elements of q or k: each token's rotation is its own, so
// the bits are those of the loop on one thread. A training batch's q (2 threads, AMD EPYC,
// 2026-12-07): 8 × 256 tokens at d = 256 84.7 -> 56.1 µs, at d = 896 200 -> 143 µs; a prompt's
// few thousand elements rotate faster on the calling thread than a team forks (32 tokens at
// d = 896: 3.5 µs alone, 5.0 µs on the team).
constexpr int64_t kRopeParallelElems = int64_t(1) << 18;

// The float32 elementary functions torch 1.13 evaluates on this CPU. Its AVX2 and AVX-512
// kernels call SLEEF's u10 functions (Sleef_cosf8_u10 / Sleef_cosf16_u10), whose FMA variants
// compute the same algorithm as the scalar purecfma one: the three agree bit for bit with every
// fixture's rope.cache. On a CPU without FMA, torch's default kernels call libm.
struct TorchF32Math {
    bool fma = __builtin_cpu_supports("fma");
    float pow(float x, float y) const {
        return fma ? Sleef_powf1_u10purecfma(x, y) : std::pow(x, y);
    }
    float cos(float x) const { return fma ? Sleef_cosf1_u10purecfma(x) : std::cos(x); }
    float sin(float x) const { return fma ? Sleef_sinf1_u10purecfma(x) : std::sin(x); }
};

}  // namespace

void RopeTable::build(int64_t max_pos_, int64_t head_dim, double theta, RopeTableKind kind_) {
    PLDR_CHECK(head_dim % 2 == 0);
    max_pos = max_pos_;
    half = head_dim / 2;
    kind = kind_;
    cos.assign(static_cast<size_t>(max_pos * half), 0.f);
    sin.assign(static_cast<size_t>(max_pos * half), 0.f);
    cos64.clear();
    sin64.clear();
    if (kind == RopeTableKind::FLOAT64) {
        cos64.assign(cos.size(), 0.0);
        sin64.assign(sin.size(), 0.0);
        for (int64_t m = 0; m < half; ++m) {
            const double th = 1.0 / std::pow(theta, double(2 * m) / double(head_dim));
            for (int64_t p = 0; p < max_pos; ++p) {
                const size_t i = static_cast<size_t>(p * half + m);
                cos64[i] = std::cos(double(p) * th);
                sin64[i] = std::sin(double(p) * th);
                cos[i] = float(cos64[i]);
                sin[i] = float(sin64[i]);
            }
        }
        return;
    }
    const TorchF32Math torch;
    // All in float32, as torchtune builds it: θ_m = 1 / theta^(float32(2m)/D) (torch computes
    // `1.0 / base**e` as reciprocal(pow(base, e)) · 1.0), angle p·θ_m.
    std::vector<float> th(static_cast<size_t>(half));
    for (int64_t m = 0; m < half; ++m)
        th[m] = 1.0f / torch.pow(float(theta), float(2 * m) / float(head_dim));
    for (int64_t p = 0; p < max_pos; ++p)
        for (int64_t m = 0; m < half; ++m) {
            const float a = float(p) * th[m];
            cos[p * half + m] = torch.cos(a);
            sin[p * half + m] = torch.sin(a);
        }
}

namespace {

template <typename T>
inline T round_f32(T x) {
    return T(float(x));
}

// The rotation of one token's H heads by its row of the table (C: float for TORCH, double for
// FLOAT64).
// x.float() of the reference, on n values in place. A loop of its own: GCC 12's SLP vectoriser
// dropped the double → float → double round trip when it sat in the rotation's loop (-O3; the
// float64 golden tests caught it).
template <typename T>
void round_to_f32(T* v, int64_t n) {
    for (int64_t i = 0; i < n; ++i) v[i] = round_f32(v[i]);
}

template <typename T, typename C>
void rotate_token(T* x, int64_t H, int64_t D, const C* cs, const C* sn, bool interleaved,
                  bool round_input_f32) {
    const int64_t half = D / 2;
    if (round_input_f32) round_to_f32(x, H * D);
    for (int64_t h = 0; h < H; ++h) {
        T* v = x + h * D;
        for (int64_t m = 0; m < half; ++m)
            rope_rotate_pair(v[interleaved ? 2 * m : m], v[interleaved ? 2 * m + 1 : m + half],
                             T(cs[m]), T(sn[m]), interleaved, false);
    }
}

// Its transpose, on one token's gradient.
template <typename T, typename C>
void rotate_token_back(T* dx, int64_t H, int64_t D, const C* cs, const C* sn, bool interleaved,
                       bool round_grad_f32) {
    const int64_t half = D / 2;
    for (int64_t h = 0; h < H; ++h) {
        T* v = dx + h * D;
        for (int64_t m = 0; m < half; ++m)
            rope_unrotate_pair(v[interleaved ? 2 * m : m], v[interleaved ? 2 * m + 1 : m + half],
                               T(cs[m]), T(sn[m]), round_grad_f32);
    }
}

// f(cos, sin) with the table's row for position p: float (TORCH) or double (FLOAT64) pointers.
template <typename F>
void with_row(const RopeTable& t, int64_t p, F&& f) {
    const int64_t o = p * t.half;
    if (t.kind == RopeTableKind::FLOAT64)
        f(t.cos64.data() + o, t.sin64.data() + o);
    else
        f(t.cos.data() + o, t.sin.data() + o);
}

}  // namespace

void require_rope_positions(const int64_t* pos, int64_t N, const RopeTable& t) {
    for (int64_t n = 0; n < N; ++n)
        PLDR_REQUIRE(pos[n] >= 0 && pos[n] < t.max_pos, "position ", pos[n],
                     " is outside the RoPE table (max_position_embeddings ", t.max_pos, ")");
}

template <typename T>
void rope_forward(T* x, const int64_t* pos, int64_t N, int64_t H, int64_t D, const RopeTable& t,
                  bool interleaved, bool round_input_f32) {
    require_rope_positions(pos, N, t);
    parallel_for(N, N * H * D >= kRopeParallelElems, [&](int64_t n) {
        with_row(t, pos[n], [&](const auto* cs, const auto* sn) {
            rotate_token(x + n * H * D, H, D, cs, sn, interleaved, round_input_f32);
        });
    });
}

template <typename T>
void rope_backward(T* dx, const int64_t* pos, int64_t N, int64_t H, int64_t D, const RopeTable& t,
                   bool interleaved, bool round_grad_f32) {
    require_rope_positions(pos, N, t);
    parallel_for(N, N * H * D >= kRopeParallelElems, [&](int64_t n) {
        with_row(t, pos[n], [&](const auto* cs, const auto* sn) {
            rotate_token_back(dx + n * H * D, H, D, cs, sn, interleaved, round_grad_f32);
        });
    });
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
