// Loss and gradient parity with the reference's golden tensors (loss.value, loss.accuracy,
// grad.<param>) for every fixture set: float64 ≤ 1e-9 relative per tensor, float32 ≤ 2e-3.
#include "golden_util.h"
#include "train/loss.h"

namespace {

template <typename T>
void check_grads(const golden::Fixture& fx, const std::string& dtype, double tol) {
    pldr::SafetensorsFile f(fx.path(dtype));
    pldr::Model<T> m = golden::model_of<T>(fx, f);
    const auto tok = f.read_i64("batch.tokens");
    const auto& sh = f.at("batch.tokens").shape;
    pldr::DagCoeffs dag;
    if (fx.side["config"]["kind"] == "dag") {
        const auto& c = fx.side["hyperparams_train_step"]["DAG_reg_coeffs"];
        dag = {c[0].get<double>(), c[1].get<double>(), c[2].get<double>()};
    }
    std::vector<T> grads(size_t(m.layout.total), T(0));
    pldr::Activations<T> acts;
    auto r = pldr::loss_and_grads(m, tok.data(), sh[0], sh[1], dag, acts, grads.data());
    const double loss_ref = f.read<double>("loss.value")[0];
    EXPECT_NEAR(r.value, loss_ref, tol * std::abs(loss_ref)) << fx.name << "." << dtype;
    EXPECT_EQ(r.accuracy, f.read<double>("loss.accuracy")[0]) << fx.name;
    int checked = 0;
    double worst = 0;
    std::string worst_name;
    for (const auto& e : m.layout.entries) {
        auto ref = f.read<double>("grad." + e.name);
        ASSERT_EQ(ref.shape, e.shape) << e.name;
        const double err = golden::rel_err(grads.data() + e.offset, ref.ptr(), e.numel);
        EXPECT_LE(err, tol) << fx.name << "." << dtype << " grad." << e.name;
        if (err > worst) worst = err, worst_name = e.name;
        ++checked;
    }
    if (std::getenv("PLDR_GOLDEN_VERBOSE"))
        std::printf("%s.%s: loss %.17g (ref %.17g), worst grad rel err %.3g (%s)\n",
                    fx.name.c_str(), dtype.c_str(), r.value, loss_ref, worst, worst_name.c_str());
    EXPECT_GT(checked, 0);
}

TEST(GoldenGrad, AllFixturesFloat64) {
    auto fx = golden::fixtures();
    if (fx.empty()) GTEST_SKIP() << "no fixtures in " << golden::dir();
    for (const auto& f : fx) check_grads<double>(f, "f64", 1e-9);
}

TEST(GoldenGrad, AllFixturesFloat32) {
    auto fx = golden::fixtures();
    if (fx.empty()) GTEST_SKIP() << "no fixtures in " << golden::dir();
    for (const auto& f : fx) check_grads<float>(f, "f32", 2e-3);
}

}  // namespace
