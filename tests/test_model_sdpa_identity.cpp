// PLGA contains SDPA exactly at G_LM = I (spec §7, Thm 5.4(i)): the fixed-G model with G = I
// equals a plain SDPA decoder written here from the equations (spec §1, §11.1), on random weights
// and inputs, for several shapes, in both numerics modes. The oracle shares nothing with the
// model's code but the parameter buffer: its own LayerNorm, linear maps, RoPE (θ, angles and
// cos/sin built here), score scale, mask, softmax and GLU.
#include <gtest/gtest.h>
#include <sleef.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "model/forward.h"
#include "model/init.h"

namespace {

struct Shape6 {
    int64_t L, H, D, V, B, S;
};

pldr::Config fixed_g_config(const Shape6& s, bool reference_rope) {
    pldr::Config c;
    c.num_layers = s.L;
    c.num_heads = s.H;
    c.head_dim = s.D;
    c.hidden_size = s.H * s.D;
    c.intermediate_size = int64_t(double(c.hidden_size) * 8 / 3);
    c.vocab_size = s.V;
    c.max_position = 64;
    c.reference_rope = reference_rope;
    c.g_type = pldr::GType::IDENTITY;
    return c;
}

template <typename T>
void randomize(pldr::Model<T>& m, uint64_t seed) {
    pldr::init_weights(m, seed);
    pldr::Rng r(seed + 1);
    for (auto& p : m.params) p += T(0.05 * r.normal());  // non-trivial LN params and biases
}

using Vec = std::vector<double>;

// y[n,o] = Σ_i x[n,i]·W[o,i] + b[o]   (nn.Linear: W is [out, in]).
Vec linear(const Vec& x, const double* W, const double* b, int64_t N, int64_t I, int64_t O) {
    Vec y(size_t(N * O));
    for (int64_t n = 0; n < N; ++n)
        for (int64_t o = 0; o < O; ++o) {
            long double s = b ? b[o] : 0.0;
            for (int64_t i = 0; i < I; ++i) s += (long double)x[size_t(n * I + i)] * W[o * I + i];
            y[size_t(n * O + o)] = double(s);
        }
    return y;
}

// LayerNorm over the last axis (biased variance, eps inside the square root).
void layer_norm(Vec& x, const double* g, const double* b, int64_t N, int64_t d, double eps) {
    for (int64_t n = 0; n < N; ++n) {
        double* r = x.data() + n * d;
        long double mu = 0, var = 0;
        for (int64_t j = 0; j < d; ++j) mu += r[j];
        mu /= d;
        for (int64_t j = 0; j < d; ++j) var += (r[j] - mu) * (r[j] - mu);
        var /= d;
        for (int64_t j = 0; j < d; ++j)
            r[j] = double((r[j] - mu) / std::sqrt(var + eps)) * g[j] + b[j];
    }
}

// RoPE of one head vector at position p (spec §1.5, §11.1): θ_m = theta^(−2m/dk). Exact
// numerics: θ_m, the angle p·θ_m and its cos/sin in float64. Reference numerics: all in float32
// with torch's functions (SLEEF's u10 functions, which torch's AVX2/AVX-512 kernels call; libm
// where the CPU has no FMA). Interleaved pairs (2m, 2m+1) or halves (m, m + dk/2); both rotate
// (x0, x1) → (x0·c − x1·s, x1·c + x0·s).
void rotate(double* v, int64_t p, int64_t dk, double theta, bool interleaved, bool torch) {
    const bool fma = __builtin_cpu_supports("fma");
    for (int64_t m = 0; m < dk / 2; ++m) {
        double c, s;
        if (torch) {
            const float e = float(2 * m) / float(dk);
            const float th =
                1.0f / (fma ? Sleef_powf1_u10purecfma(float(theta), e) : std::pow(float(theta), e));
            const float ang = float(p) * th;
            c = fma ? Sleef_cosf1_u10purecfma(ang) : std::cos(ang);
            s = fma ? Sleef_sinf1_u10purecfma(ang) : std::sin(ang);
        } else {
            const double ang = double(p) * (1.0 / std::pow(theta, double(2 * m) / double(dk)));
            c = std::cos(ang);
            s = std::sin(ang);
        }
        const int64_t i0 = interleaved ? 2 * m : m, i1 = interleaved ? 2 * m + 1 : m + dk / 2;
        const double x0 = v[i0], x1 = v[i1];
        v[i0] = x0 * c - x1 * s;
        v[i1] = x1 * c + x0 * s;
    }
}

// The plain SDPA decoder (post-LN, SwiGLU FFN, biased head) in float64. ref_numerics adds the
// reference's float32 islands: q and k rounded to float32 before RoPE, sqrt(float32(dk)) and
// sqrt(float32(d)).
Vec plain_sdpa(const pldr::Model<double>& m, const std::vector<int64_t>& ids, int64_t B, int64_t S,
               bool ref_numerics) {
    const pldr::Config& c = m.cfg;
    const int64_t d = c.hidden_size, H = c.num_heads, dk = c.head_dim, F = c.intermediate_size;
    const int64_t N = B * S, V = c.vocab_size;
    const double emb_scale = ref_numerics ? double(std::sqrt(float(d))) : std::sqrt(double(d));
    const double score_scale = ref_numerics ? double(std::sqrt(float(dk))) : std::sqrt(double(dk));
    Vec x(size_t(N * d));
    for (int64_t n = 0; n < N; ++n)
        for (int64_t j = 0; j < d; ++j)
            x[size_t(n * d + j)] = m.w.emb[ids[size_t(n)] * d + j] * emb_scale;
    layer_norm(x, m.w.ln_in_g, m.w.ln_in_b, N, d, c.layer_norm_eps);
    for (const auto& Lw : m.w.layers) {
        Vec q = linear(x, Lw.wq, Lw.bq, N, d, d), k = linear(x, Lw.wk, Lw.bk, N, d, d);
        const Vec v = linear(x, Lw.wv, Lw.bv, N, d, d);
        for (int64_t n = 0; n < N; ++n)
            for (int64_t h = 0; h < H; ++h) {
                double* qh = q.data() + (n * H + h) * dk;
                double* kh = k.data() + (n * H + h) * dk;
                if (ref_numerics)
                    for (int64_t t = 0; t < dk; ++t) {
                        qh[t] = float(qh[t]);
                        kh[t] = float(kh[t]);
                    }
                rotate(qh, n % S, dk, c.rope_theta, c.reference_rope, ref_numerics);
                rotate(kh, n % S, dk, c.rope_theta, c.reference_rope, ref_numerics);
            }
        Vec o(size_t(N * d), 0.0);
        for (int64_t b = 0; b < B; ++b)
            for (int64_t h = 0; h < H; ++h)
                for (int64_t i = 0; i < S; ++i) {
                    // softmax_j(q_i·k_j / √dk − 1e9·[j > i or key j is pad])
                    Vec e(static_cast<size_t>(S));
                    double mx = -INFINITY;
                    for (int64_t j = 0; j < S; ++j) {
                        long double s = 0;
                        for (int64_t t = 0; t < dk; ++t)
                            s += (long double)q[size_t(((b * S + i) * H + h) * dk + t)] *
                                 k[size_t(((b * S + j) * H + h) * dk + t)];
                        double sc = double(s) / score_scale;
                        if (j > i || ids[size_t(b * S + j)] == c.pad_token_id) sc += -1e9;
                        e[size_t(j)] = sc;
                        mx = std::max(mx, sc);
                    }
                    long double z = 0;
                    for (auto& ej : e) z += (ej = std::exp(ej - mx));
                    for (int64_t t = 0; t < dk; ++t) {
                        long double acc = 0;
                        for (int64_t j = 0; j < S; ++j)
                            acc += e[size_t(j)] * v[size_t(((b * S + j) * H + h) * dk + t)];
                        o[size_t(((b * S + i) * H + h) * dk + t)] = double(acc / z);
                    }
                }
        const Vec att = linear(o, Lw.wo, Lw.bo, N, d, d);
        for (size_t i = 0; i < x.size(); ++i) x[i] += att[i];
        layer_norm(x, Lw.ln1_g, Lw.ln1_b, N, d, c.layer_norm_eps);
        const Vec a = linear(x, Lw.ffn.w1, Lw.ffn.b1, N, d, F),
                  g = linear(x, Lw.ffn.w2, Lw.ffn.b2, N, d, F);
        Vec hgl(a.size());
        for (size_t i = 0; i < a.size(); ++i) hgl[i] = a[i] / (1.0 + std::exp(-a[i])) * g[i];
        const Vec f = linear(hgl, Lw.ffn.w3, Lw.ffn.b3, N, F, d);
        for (size_t i = 0; i < x.size(); ++i) x[i] += f[i];
        layer_norm(x, Lw.ln2_g, Lw.ln2_b, N, d, c.layer_norm_eps);
    }
    return linear(x, m.w.head_w, m.w.head_b, N, d, V);
}

double max_rel(const pldr::Tensor<double>& a, const Vec& b) {
    double md = 0, mr = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
        md = std::max(md, std::abs(a[i] - b[size_t(i)]));
        mr = std::max(mr, std::abs(b[size_t(i)]));
    }
    return md / mr;
}

TEST(SdpaIdentity, FixedGAtIdentityEqualsPlainSdpaFromTheEquations) {
    const Shape6 shapes[] = {
        {2, 2, 8, 50, 2, 12},   // H·dk = 16
        {1, 3, 10, 37, 1, 1},   // S = 1, H·dk = 30
        {3, 4, 16, 211, 2, 9},  // H·dk = 64
        {2, 5, 6, 64, 3, 17},   // H·dk = 30, odd S
    };
    for (const auto& s : shapes) {
        // The reference numerics emulate the KVG reference, whose RoPE is interleaved.
        const std::pair<bool, bool> modes[] = {{true, true}, {false, true}, {false, false}};
        for (const auto& [ref_numerics, ref_rope] : modes) {
            pldr::Model<double> m(fixed_g_config(s, ref_rope));
            m.set_reference_numerics(ref_numerics);
            randomize(m, 7 + uint64_t(s.S));
            std::vector<int64_t> ids(size_t(s.B * s.S));
            pldr::Rng r(99);
            for (auto& id : ids) id = 1 + int64_t(r.below(uint64_t(s.V - 1)));
            if (s.S > 3) ids[size_t(s.S - 1)] = 0;  // a pad key in row 0
            char what[96];
            std::snprintf(what, sizeof what, "L%lld H%lld D%lld S%lld %s %s", (long long)s.L,
                          (long long)s.H, (long long)s.D, (long long)s.S,
                          ref_numerics ? "reference" : "exact",
                          ref_rope ? "interleaved" : "halves");
            const Vec sdpa = plain_sdpa(m, ids, s.B, s.S, ref_numerics);
            pldr::Activations<double> a;
            pldr::forward(m, ids.data(), s.B, s.S, a);
            // Measured: ≤ 1.4e-15 over these shapes and modes (summation order only).
            EXPECT_LE(max_rel(a.logits, sdpa), 1e-13) << what;
            // The model's own minimal SDPA path agrees as well.
            auto own = pldr::sdpa_reference_forward(m, ids.data(), s.B, s.S);
            EXPECT_LE(max_rel(own, sdpa), 1e-13) << what;
            // A non-identity G must be visibly different (the test can fail).
            for (auto& g : m.G_fixed) g *= 1.5;
            pldr::forward(m, ids.data(), s.B, s.S, a);
            if (s.S > 1) {
                EXPECT_GT(max_rel(a.logits, sdpa), 1e-6) << what;
            }
        }
    }
}

// The oracle is sensitive to what it checks: float32 islands on or off, and the RoPE layout,
// each move the logits far beyond the 1e-13 above.
TEST(SdpaIdentity, OracleSeesNumericsAndRopeLayout) {
    const Shape6 s{2, 2, 8, 50, 1, 12};
    pldr::Model<double> m(fixed_g_config(s, true));
    randomize(m, 3);
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < s.S; ++i) ids.push_back(1 + (7 * i) % 49);
    pldr::Activations<double> a;
    m.set_reference_numerics(false);
    pldr::forward(m, ids.data(), 1, s.S, a);
    EXPECT_LE(max_rel(a.logits, plain_sdpa(m, ids, 1, s.S, false)), 1e-13);
    EXPECT_GT(max_rel(a.logits, plain_sdpa(m, ids, 1, s.S, true)), 1e-10);  // dk = 8: √8 inexact
    m.cfg.reference_rope = false;
    EXPECT_GT(max_rel(a.logits, plain_sdpa(m, ids, 1, s.S, false)), 1e-4);
}

}  // namespace
