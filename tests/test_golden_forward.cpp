// Forward-pass parity with the reference's golden tensors, for every single-step fixture set
// found in PLDR_GOLDEN_DIR: float64 ≤ 1e-12 relative per tensor (max|Δ|/max|ref|); float32
// against the exact (float64) tensors under the allowance its measured conditioning gives
// (golden_util.h). Also: the model directories hold the fixture's parameters.
#include "golden_checks.h"

namespace {

TEST(GoldenForward, AllFixturesFloat64) {
    GOLDEN_USE(golden::set().steps, "single-step");
    for (const auto& fx : golden::set().steps) {
        pldr::SafetensorsFile f(fx.path("f64"));
        const auto m = golden::model_of<double>(fx, f);
        const auto q = golden::forward_quantities(m, f);
        EXPECT_EQ(int(q.size()), golden::forward_tensor_count(f)) << fx.name;
        const auto r = golden::compare_f64(fx.name + ".f64 forward", q, golden::refs_of(f), 1e-12);
        r.expect_pass();
        if (golden::verbose())
            std::printf("%s.f64 forward: %zu tensors, worst relative error %.3g\n", fx.name.c_str(),
                        q.size(), r.worst());
    }
}

TEST(GoldenForward, AllFixturesFloat32) {
    GOLDEN_USE(golden::set().steps, "single-step");
    for (const auto& fx : golden::set().steps) {
        const golden::F32Check c(fx);
        const auto r = c.forward(c.model());
        EXPECT_EQ(int(r.rows.size()), golden::forward_tensor_count(c.f32)) << fx.name;
        r.expect_pass();
    }
}

// The golden model directories (HF layout) load to exactly the fixture's parameters.
TEST(GoldenForward, ModelDirectoriesMatchFixtureParams) {
    GOLDEN_USE(golden::set().steps, "single-step");
    int n = 0;
    for (const auto& fx : golden::set().steps)
        for (const char* dtype : {"f32", "f64"}) {
            if (!std::filesystem::is_directory(fx.model_dir(dtype))) continue;
            pldr::SafetensorsFile sf(fx.path(dtype));
            auto ref = golden::model_of<double>(fx, sf);
            auto m = pldr::load_model<double>(fx.model_dir(dtype));
            EXPECT_EQ(m.params, ref.params) << fx.model_dir(dtype);
            EXPECT_EQ(m.G_fixed, ref.G_fixed) << fx.model_dir(dtype);
            ++n;
        }
    if (golden::is_default_dir()) {
        EXPECT_EQ(n, 2 * int(golden::set().steps.size()));
    }
    if (n == 0)
        GTEST_SKIP() << "no single-step fixture of " << golden::dir() << " has a model directory";
}

}  // namespace
