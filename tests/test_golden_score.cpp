// Scoring parity with the reference (spec §6): block scoring reproduces score.block.logprobs and
// cached scoring reproduces score.sequential.logprobs (the fixtures' name for the KV+G-cached
// chain), for every single-step fixture set; on fixed-G models sequential scoring (one pass per
// prefix) equals block scoring too (1e-12, f64). float32 under the measured allowance.
#include "golden_checks.h"
#include "infer/score.h"

namespace {

// score.block.logprobs and score.sequential.logprobs (the cached chain) of model m; the
// sequential mode (spec §6.3) is kept under its own name, compared where the set is fixed-G.
template <typename T>
golden::Quantities score_quantities(const pldr::Model<T>& m, const pldr::SafetensorsFile& f) {
    pldr::ScoreRequest req{f.read_i64("score.context"), f.read_i64("score.continuation")};
    const auto block = pldr::score_request(m, req, pldr::ScoreMode::BLOCK);
    const auto cached = pldr::score_request(m, req, pldr::ScoreMode::CACHED);
    golden::Quantities q;
    q.push_back(
        {"score.block.logprobs", {block.token_logprobs.begin(), block.token_logprobs.end()}});
    q.push_back({"score.sequential.logprobs",
                 {cached.token_logprobs.begin(), cached.token_logprobs.end()}});
    return q;
}

TEST(GoldenScore, AllFixturesFloat64) {
    GOLDEN_USE(golden::set().steps, "single-step");
    for (const auto& fx : golden::set().steps) {
        pldr::SafetensorsFile f(fx.path("f64"));
        const auto m = golden::model_of<double>(fx, f);
        golden::compare_f64(fx.name + ".f64 score", score_quantities(m, f), golden::refs_of(f),
                            1e-12)
            .expect_pass();
        if (!m.cfg.learned_g()) {
            // Fixed G: block, cached and sequential scoring are the same computation.
            pldr::ScoreRequest req{f.read_i64("score.context"), f.read_i64("score.continuation")};
            const auto seq = pldr::score_request(m, req, pldr::ScoreMode::SEQUENTIAL);
            golden::compare_f64(
                fx.name + ".f64 sequential",
                {{"score.block.logprobs", {seq.token_logprobs.begin(), seq.token_logprobs.end()}}},
                golden::refs_of(f), 1e-12)
                .expect_pass();
        }
    }
}

TEST(GoldenScore, AllFixturesFloat32) {
    GOLDEN_USE(golden::set().steps, "single-step");
    for (const auto& fx : golden::set().steps) {
        pldr::SafetensorsFile f32(fx.path("f32")), f64(fx.path("f64"));
        const auto m64 = golden::model_of<double>(fx, f64);
        const auto sigma = golden::f32_sensitivity(
            m64, [&](const pldr::Model<double>& m) { return score_quantities(m, f64); });
        golden::compare_f32(fx.name + ".f32 score",
                            score_quantities(golden::model_of<float>(fx, f32), f32),
                            golden::refs_of(f64), sigma, golden::kFloorForward)
            .expect_pass();
    }
}

}  // namespace
