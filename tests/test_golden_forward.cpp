// Forward-pass parity with the reference's golden tensors, for every fixture set found in
// PLDR_GOLDEN_DIR and both precisions (float64 ≤ 1e-12 relative, float32 ≤ 1e-4 relative).
#include <memory>

#include "audit/dump.h"
#include "golden_util.h"
#include "model/forward.h"

namespace {

// tol is relative to each tensor's max-abs. float64 is compared with the f64 reference; a
// float32 result is compared with the exact (f64) reference under golden::f32_allowed().
template <typename T>
void check_forward(const golden::Fixture& fx, const std::string& dtype, double tol) {
    pldr::SafetensorsFile f(fx.path(dtype));
    std::unique_ptr<pldr::SafetensorsFile> f64;
    if (dtype != "f64") f64 = std::make_unique<pldr::SafetensorsFile>(fx.path("f64"));
    pldr::Model<T> m = golden::model_of<T>(fx, f);
    const auto in = f.read_i64("fwd.input_ids");
    const auto& sh = f.at("fwd.input_ids").shape;
    pldr::Activations<T> acts;
    pldr::forward(m, in.data(), sh[0], sh[1], acts);
    int checked = 0;
    double worst = 0;
    for (const auto& nt : pldr::forward_tensors(m, acts)) {
        if (!f.has(nt.name)) continue;
        auto ref = f.read<double>(nt.name);
        ASSERT_EQ(ref.shape, nt.t.shape) << fx.name << " " << nt.name;
        const double e = golden::rel_err(nt.t.ptr(), ref.ptr(), ref.numel());
        if (f64) {
            auto exact = f64->read<double>(nt.name);
            const double e_exact = golden::rel_err(nt.t.ptr(), exact.ptr(), exact.numel());
            const double ref_own = golden::rel_err(ref.ptr(), exact.ptr(), exact.numel());
            EXPECT_LE(e_exact, golden::f32_allowed(tol, ref_own))
                << fx.name << "." << dtype << " " << nt.name << " vs f64 (reference f32 error "
                << ref_own << ")";
            if (std::getenv("PLDR_GOLDEN_VERBOSE"))
                std::printf("%s %-26s vs-f32ref %.3g  vs-f64ref %.3g  f32ref-vs-f64ref %.3g\n",
                            fx.name.c_str(), nt.name.c_str(), e, e_exact, ref_own);
        } else {
            EXPECT_LE(e, tol) << fx.name << "." << dtype << " " << nt.name;
            worst = std::max(worst, e);
        }
        ++checked;
    }
    // Every fwd.* tensor of the fixture except ids/targets must have been produced.
    int in_fixture = 0;
    for (const auto& t : f.tensors())
        if (t.name.rfind("fwd.", 0) == 0 && t.name != "fwd.input_ids" && t.name != "fwd.targets")
            ++in_fixture;
    EXPECT_EQ(checked, in_fixture) << fx.name;
    if (std::getenv("PLDR_GOLDEN_VERBOSE") && !f64)
        std::printf("%s.%s: %d tensors, worst relative error %.3g\n", fx.name.c_str(),
                    dtype.c_str(), checked, worst);
}

TEST(GoldenForward, AllFixturesFloat64) {
    auto fx = golden::fixtures();
    if (fx.empty()) GTEST_SKIP() << "no fixtures in " << golden::dir();
    for (const auto& f : fx) check_forward<double>(f, "f64", 1e-12);
}

TEST(GoldenForward, AllFixturesFloat32) {
    auto fx = golden::fixtures();
    if (fx.empty()) GTEST_SKIP() << "no fixtures in " << golden::dir();
    for (const auto& f : fx) check_forward<float>(f, "f32", 1e-4);
}

}  // namespace

namespace {

// The golden model directories (HF layout) load to exactly the fixture's parameters.
TEST(GoldenForward, ModelDirectoriesMatchFixtureParams) {
    auto fx = golden::fixtures();
    if (fx.empty()) GTEST_SKIP() << "no fixtures in " << golden::dir();
    int n = 0;
    for (const auto& f : fx)
        for (const char* dtype : {"f32", "f64"}) {
            const std::string dir = golden::dir() + "/models/" + f.name + "." + dtype;
            if (!std::filesystem::is_directory(dir)) continue;
            pldr::SafetensorsFile sf(f.path(dtype));
            auto ref = golden::model_of<double>(f, sf);
            auto m = pldr::load_model<double>(dir);
            EXPECT_EQ(m.params, ref.params) << dir;
            EXPECT_EQ(m.G_fixed, ref.G_fixed) << dir;
            ++n;
        }
    EXPECT_GT(n, 0);
}

}  // namespace
