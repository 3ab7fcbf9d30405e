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

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "golden_checks.h"
#include "io/model_load.h"
#include "io/safetensors.h"
#include "model/forward.h"

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
