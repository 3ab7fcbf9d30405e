// `--numerics exact` (Model::reference_numerics = false) against the golden float64 tensors.
// The reference computed them in float64 with a few float32 islands (q, k rounded to float32
// before RoPE, a float32 cos/sin table, sqrt(float32(dk)) for the scores, sqrt(float32(d)) for
// the embeddings). Exact numerics drop the islands, so they may differ from the golden tensors
// by the islands' rounding and by nothing else. The islands are float32 roundings of inputs, so
// their effect is bounded by the fixture's measured float32 sensitivity σ (golden_util.h: the
// move under a relative 2^-24 perturbation of every parameter), with the same factor as the
// float32 checks: max(1e-9, kSigmaFactor·σ). Measured (worst of logits and hidden states): a
// 2.1e-7, b 2.0e-5, c 2.9e-8, d 2.9e-8, e 2.1e-7; far below what a real change of the maths
// gives (a score scale of sqrt(d) instead of sqrt(dk) moves the logits by more than 1e-2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "golden_checks.h"
#include "io/model_load.h"
#include "io/safetensors.h"
#include "model/forward.h"
#include "ops/rope.h"

namespace {

double rel_err(const double* a, const double* b, int64_t n) {
    double md = 0, mr = 0;
    for (int64_t i = 0; i < n; ++i) {
        md = std::max(md, std::abs(a[i] - b[i]));
        mr = std::max(mr, std::abs(b[i]));
    }
    return md / mr;
}

TEST(NumericsExact, ForwardDiffersFromGoldenFloat64OnlyByTheFloat32Islands) {
    GOLDEN_USE(golden::set().steps, "single-step");
    for (const auto& fx : golden::set().steps) {
        SCOPED_TRACE(fx.name);
        const auto name = fx.name.c_str();
        pldr::SafetensorsFile f(fx.path("f64"));
        auto m = golden::model_of<double>(fx, f);
        const auto sigma = golden::f32_sensitivity(
            m, [&](const pldr::Model<double>& mm) { return golden::forward_quantities(mm, f); });
        double bound = 1e-9;
        for (const auto& [n, sg] : sigma)
            if (n == "fwd.logits" || n.find(".hidden") != std::string::npos)
                bound = std::max(bound, golden::kSigmaFactor * sg);
        const auto ids = f.read_i64("fwd.input_ids");
        const auto& shape = f.at("fwd.input_ids").shape;
        ASSERT_EQ(shape.size(), 2u);
        const int64_t B = shape[0], S = shape[1];
        pldr::Activations<double> exact, ref;
        m.set_reference_numerics(false);
        pldr::forward(m, ids.data(), B, S, exact);
        m.set_reference_numerics(true);
        pldr::forward(m, ids.data(), B, S, ref);
        const auto logits = f.read<double>("fwd.logits");
        ASSERT_EQ(logits.numel(), exact.logits.numel());
        double worst = rel_err(exact.logits.ptr(), logits.ptr(), logits.numel());
        for (int64_t l = 0; l < m.cfg.num_layers; ++l) {
            const auto h = f.read<double>("fwd.layer" + std::to_string(l) + ".hidden");
            ASSERT_EQ(h.numel(), exact.layers[size_t(l)].hidden.numel());
            worst =
                std::max(worst, rel_err(exact.layers[size_t(l)].hidden.ptr(), h.ptr(), h.numel()));
        }
        if (std::getenv("PLDR_TEST_VERBOSE"))
            std::printf("%s: exact vs golden f64, worst tensor %.3g (bound %.3g)\n", name, worst,
                        bound);
        EXPECT_LE(worst, bound);
        // The scaled embeddings, before the LayerNorm that hides their scale from every later
        // tensor: emb·sqrt(d), with sqrt(d) in float64 (exact) or float32 (reference).
        const int64_t d = m.cfg.hidden_size;
        double e_exact = 0, e_ref = 0;
        for (int64_t n = 0; n < B * S; ++n)
            for (int64_t j = 0; j < d; ++j) {
                const double e = m.w.emb[ids[size_t(n)] * d + j];
                e_exact =
                    std::max(e_exact, std::abs(exact.x0[n * d + j] - e * std::sqrt(double(d))));
                e_ref =
                    std::max(e_ref, std::abs(ref.x0[n * d + j] - e * double(std::sqrt(float(d)))));
            }
        EXPECT_EQ(e_exact, 0.0);
        EXPECT_EQ(e_ref, 0.0);
        // The islands are real: exact and reference numerics differ (dk = 8 or 16, d = 16 or 64:
        // at least the float32 rounding of q and k moves every score).
        EXPECT_GT(rel_err(exact.logits.ptr(), ref.logits.ptr(), logits.numel()), 1e-12);
    }
}

}  // namespace

// Exact numerics are float64 throughout, the RoPE table included (issue 36: it was a float32
// table, 2.8e-8 off in the logits). Every entry of the table and every rotation of an exact
// float64 model agree with a long-double evaluation to the rounding of the float64 angle
// (|angle|·2^-52 + 2^-53); a float32 table misses that by seven orders of magnitude.
TEST(NumericsExact, RopeIsFloat64) {
    auto bound = [](long double a) { return double((std::fabs(a) + 1) * 4.5e-16L); };
    for (const auto& [D, theta] : {std::pair<int64_t, double>{8, 1e4}, {64, 1e4}, {32, 5e5}}) {
        pldr::RopeTable t;
        t.build(1024, D, theta, pldr::RopeTableKind::FLOAT64);
        ASSERT_EQ(t.cos64.size(), size_t(1024 * D / 2));
        double worst = 0;
        for (int64_t p = 0; p < 1024; ++p)
            for (int64_t m = 0; m < D / 2; ++m) {
                const long double a =
                    (long double)p / std::pow((long double)theta, (long double)(2 * m) / D);
                const size_t i = size_t(p * (D / 2) + m);
                worst = std::max(worst, std::fabs(double(t.cos64[i] - std::cos(a))) / bound(a));
                worst = std::max(worst, std::fabs(double(t.sin64[i] - std::sin(a))) / bound(a));
            }
        EXPECT_LE(worst, 1.0) << "D " << D << " theta " << theta;
    }
    // The model: set_reference_numerics(false) builds the float64 table and rotates with it.
    GOLDEN_USE(golden::set().steps, "single-step");
    const auto& fx = golden::set().steps.front();
    pldr::SafetensorsFile f(fx.path("f64"));
    auto m = golden::model_of<double>(fx, f);
    m.set_reference_numerics(false);
    ASSERT_EQ(m.rope.kind, pldr::RopeTableKind::FLOAT64);
    const int64_t D = m.cfg.head_dim, p = m.cfg.max_position - 1;
    std::vector<double> x(size_t(D), 0.0);
    x[0] = 1.0;  // the first pair's (or half's) unit vector: x' = (cos a, sin a)
    pldr::rope_forward(x.data(), &p, 1, 1, D, m.rope, m.cfg.reference_rope, false);
    const long double a = (long double)p / std::pow((long double)m.cfg.rope_theta, 0.0L);
    const size_t i1 = m.cfg.reference_rope ? 1 : size_t(D / 2);
    EXPECT_LE(std::fabs(double(x[0] - std::cos(a))), bound(a));
    EXPECT_LE(std::fabs(double(x[i1] - std::sin(a))), bound(a));
}
