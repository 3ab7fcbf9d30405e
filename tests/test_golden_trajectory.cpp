// 40-step training trajectories of the reference (tests/golden/trajectory, see its README):
// every trajectory fixture found under PLDR_GOLDEN_DIR/trajectory is replayed with the
// library's training step (forward, masked CE, backward, clip by value, AdamW, schedule).
//  - fixed-G (well conditioned, "t2"): parameters at steps 10/20/40, the AdamW moments and the
//    loss of every step, element-wise, with the README's tolerances;
//  - learned G (chaotic, "t1"): the lr of every step exactly, the loss of steps 1–2 (and 3–4
//    in float64) and the clip counts of steps 1–2; later steps only as a loose envelope.
#include <filesystem>

#include "golden_util.h"
#include "train/step.h"

namespace {

struct Traj {
    std::string name;
    nlohmann::json side;
};

std::vector<Traj> trajectories() {
    std::vector<Traj> out;
    const std::string d = golden::dir() + "/trajectory";
    if (!std::filesystem::is_directory(d)) return out;
    for (const auto& e : std::filesystem::directory_iterator(d)) {
        if (e.path().extension() != ".json") continue;
        std::ifstream f(e.path());
        auto j = nlohmann::json::parse(f, nullptr, false);
        if (j.is_discarded() || !j.contains("model_dirs") || !j.contains("hyperparams")) continue;
        out.push_back({e.path().stem().string(), j});
    }
    std::sort(out.begin(), out.end(), [](const Traj& a, const Traj& b) { return a.name < b.name; });
    return out;
}

template <typename T>
double max_abs_diff(const T* a, const pldr::Tensor<double>& b) {
    double m = 0;
    for (int64_t i = 0; i < b.numel(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
    return m;
}

template <typename T>
void replay(const Traj& tj, const std::string& dtype) {
    const std::string dir = golden::dir() + "/trajectory/";
    pldr::SafetensorsFile f(dir + tj.side["files"][dtype].get<std::string>());
    pldr::Model<T> m = pldr::load_model<T>(dir + tj.side["model_dirs"][dtype].get<std::string>());
    golden::use_reference_rope_table(m, f);
    const auto& hp = tj.side["hyperparams"];
    pldr::TrainConfig cfg;
    cfg.schedule = {hp["learning_rate"].get<double>(), hp["warmup_steps"].get<int64_t>(),
                    hp["lr_total_steps"].get<int64_t>(), hp["lr_alpha"].get<double>()};
    cfg.adam.weight_decay = hp["adamw_decay"].get<double>();
    cfg.clip_value = hp["clip_grad_value"].get<double>();
    pldr::Trainer<T> tr(m, cfg);
    const auto batches = f.read_i64("batches");
    const auto& bs = f.at("batches").shape;  // [steps, B, S1]
    const auto loss = f.read<double>("traj.loss");
    const auto lr = f.read<double>("traj.lr");
    const auto clipped = f.read_i64("traj.grad_elements_clipped");
    const bool learned = m.cfg.learned_g();
    const bool f64 = dtype == "f64";
    const std::vector<T> init = m.params;
    for (int64_t k = 1; k <= bs[0]; ++k) {
        auto r = tr.step({batches.data() + (k - 1) * bs[1] * bs[2], bs[1], bs[2]});
        const size_t i = size_t(k - 1);
        EXPECT_EQ(r.lr, lr[int64_t(i)]) << tj.name << "." << dtype << " lr of step " << k;
        if (k == 1) {
            EXPECT_EQ(m.params, init) << "step 1 runs at lr 0";
        }
        double loss_tol;
        if (!learned) {
            loss_tol = f64 ? 1e-9 : 2e-6;
        } else if (k <= 2) {
            loss_tol = f64 ? 1e-12 : 2e-6;
        } else if (k <= 4 && f64) {
            loss_tol = 1e-7;
        } else {
            loss_tol = 0.2;  // chaotic: a different trajectory after ~5 steps (README)
        }
        EXPECT_NEAR(r.loss.value, loss[int64_t(i)], loss_tol)
            << tj.name << "." << dtype << " loss of step " << k;
        if (!learned || (k <= 2 && f64) || k == 1) {
            EXPECT_EQ(r.clipped, clipped[i]) << tj.name << "." << dtype << " clip count " << k;
        } else if (k == 2) {
            // float32 learned-G gradients are good to ~1e-3 of their max (golden README), so a
            // few elements sit within rounding of the clip threshold: 291 vs 294 measured.
            EXPECT_NEAR(double(r.clipped), double(clipped[i]), 0.02 * double(clipped[i]))
                << tj.name << "." << dtype << " clip count " << k;
        }
        const std::string snap = k == 10   ? "step10."
                                 : k == 20 ? "step20."
                                 : k == 40 ? "final."
                                           : "";
        if (snap.empty() || learned || !f.has(snap + m.layout.entries[0].name)) continue;
        for (const auto& e : m.layout.entries) {
            auto ref = f.read<double>(snap + e.name);
            double tol = f64 ? (k < 40 ? 1e-13 : 1e-7) : 5e-6;
            EXPECT_LE(max_abs_diff(m.params.data() + e.offset, ref), tol)
                << tj.name << "." << dtype << " " << snap << e.name;
            if (k == 40) {
                auto am = f.read<double>("final.adam_m." + e.name);
                auto av = f.read<double>("final.adam_v." + e.name);
                EXPECT_LE(max_abs_diff(tr.optimizer().m.data() + e.offset, am), f64 ? 1e-9 : 5e-6)
                    << tj.name << " adam_m." << e.name;
                EXPECT_LE(max_abs_diff(tr.optimizer().v.data() + e.offset, av), f64 ? 1e-11 : 5e-6)
                    << tj.name << " adam_v." << e.name;
            }
        }
    }
}

TEST(GoldenTrajectory, Float64) {
    auto tj = trajectories();
    if (tj.empty()) GTEST_SKIP() << "no trajectories in " << golden::dir();
    for (const auto& t : tj) replay<double>(t, "f64");
}

TEST(GoldenTrajectory, Float32) {
    auto tj = trajectories();
    if (tj.empty()) GTEST_SKIP() << "no trajectories in " << golden::dir();
    for (const auto& t : tj) replay<float>(t, "f32");
}

}  // namespace
