// Cached decoding parity (spec §4.1) with the reference's golden tensors, for every fixture set:
// greedy tokens with the KV+G cache (gen.cached.*), the prompt caches (gen.prompt_cache.*), the
// final KV-cache (gen.final_cache.*), and the uncached mode (gen.uncached_greedy.*,
// gen.uncached_same_tokens.logits). Also: kvg and kv give bit-identical logits.
#include "golden_checks.h"
#include "infer/session.h"

namespace {

template <typename T>
int64_t argmax(const std::vector<T>& v) {
    return int64_t(std::max_element(v.begin(), v.end()) - v.begin());
}

template <typename T>
std::vector<T> greedy_run(pldr::Session<T>& s, const std::vector<int64_t>& prompt, int steps,
                          std::vector<int64_t>* tokens, const std::vector<int64_t>* force) {
    std::vector<T> rows;
    const std::vector<T>* lg = &s.prefill(prompt);
    for (int t = 0; t < steps; ++t) {
        rows.insert(rows.end(), lg->begin(), lg->end());
        const int64_t tok = force ? (*force)[size_t(t)] : argmax(*lg);
        tokens->push_back(tok);
        if (t + 1 < steps) lg = &s.decode(tok);
    }
    return rows;
}

// Every gen.* tensor of the fixture, from model m. With `check` the greedy tokens are asserted
// (and the kv mode must be bit-identical to kvg); otherwise (a perturbed model, for the float32
// sensitivity) each greedy run is forced along the fixture's tokens.
template <typename T>
golden::Quantities gen_quantities(const std::string& what, const pldr::Model<T>& m,
                                  const pldr::SafetensorsFile& f, bool check) {
    golden::Quantities q;
    const auto prompt = f.read_i64("gen.prompt");
    const auto want = f.read_i64("gen.cached.tokens");
    const auto want_none = f.read_i64("gen.uncached_greedy.tokens");
    const int steps = int(want.size());

    pldr::Session<T> kvg(m, pldr::CacheMode::KVG);
    kvg.prefill(prompt);
    for (int64_t l = 0; l < m.cfg.num_layers; ++l) {  // prompt caches
        const std::string p = "gen.prompt_cache.layer" + std::to_string(l) + ".";
        golden::add(q, p + "k", kvg.keys(l).ptr(), kvg.keys(l).numel());
        golden::add(q, p + "v", kvg.values(l).ptr(), kvg.values(l).numel());
        const auto& g = kvg.g_cache()[size_t(l)];
        if (f.has(p + "A")) golden::add(q, p + "A", g.A.ptr(), g.A.numel());
        if (f.has(p + "A_LM")) golden::add(q, p + "A_LM", g.A_LM.ptr(), g.A_LM.numel());
        if (f.has(p + "G_LM")) golden::add(q, p + "G_LM", g.G.ptr(), g.G.numel());
        if (f.has(p + "Ap")) golden::add(q, p + "Ap", g.A_P.ptr(), g.A_P.numel());
    }
    kvg.reset();
    std::vector<int64_t> toks;
    auto rows = greedy_run(kvg, prompt, steps, &toks, check ? nullptr : &want);
    if (check) {
        EXPECT_EQ(toks, want) << what << " gen.cached.tokens";
    }
    golden::add(q, "gen.cached.logits", rows.data(), int64_t(rows.size()));
    for (int64_t l = 0; l < m.cfg.num_layers; ++l) {
        const std::string p = "gen.final_cache.layer" + std::to_string(l) + ".";
        golden::add(q, p + "k", kvg.keys(l).ptr(), kvg.keys(l).numel());
        golden::add(q, p + "v", kvg.values(l).ptr(), kvg.values(l).numel());
    }
    if (check) {  // kv mode: G recomputed from the frozen A — bit-identical logits
        pldr::Session<T> kv(m, pldr::CacheMode::KV);
        std::vector<int64_t> toks_kv;
        EXPECT_EQ(greedy_run(kv, prompt, steps, &toks_kv, nullptr), rows) << what << " kv vs kvg";
    }
    // No cache: greedy, and the cached tokens scored by full recompute.
    pldr::Session<T> none(m, pldr::CacheMode::NONE);
    std::vector<int64_t> toks_none;
    auto rows_none = greedy_run(none, prompt, steps, &toks_none, check ? nullptr : &want_none);
    if (check) {
        EXPECT_EQ(toks_none, want_none) << what << " gen.uncached_greedy.tokens";
    }
    golden::add(q, "gen.uncached_greedy.logits", rows_none.data(), int64_t(rows_none.size()));
    std::vector<int64_t> toks_same;
    none.reset();
    auto rows_same = greedy_run(none, prompt, steps, &toks_same, &want);
    golden::add(q, "gen.uncached_same_tokens.logits", rows_same.data(), int64_t(rows_same.size()));
    return q;
}

TEST(GoldenGenerate, AllFixturesFloat64) {
    GOLDEN_USE(golden::set().steps, "single-step");
    for (const auto& fx : golden::set().steps) {
        pldr::SafetensorsFile f(fx.path("f64"));
        const auto m = golden::model_of<double>(fx, f);
        golden::compare_f64(fx.name + ".f64 generate", gen_quantities(fx.name, m, f, true),
                            golden::refs_of(f), 1e-12)
            .expect_pass();
    }
}

TEST(GoldenGenerate, AllFixturesFloat32) {
    GOLDEN_USE(golden::set().steps, "single-step");
    for (const auto& fx : golden::set().steps) {
        pldr::SafetensorsFile f32(fx.path("f32")), f64(fx.path("f64"));
        const auto m64 = golden::model_of<double>(fx, f64);
        const auto sigma = golden::f32_sensitivity(m64, [&](const pldr::Model<double>& m) {
            return gen_quantities(fx.name, m, f64, false);
        });
        const auto m32 = golden::model_of<float>(fx, f32);
        golden::compare_f32(fx.name + ".f32 generate",
                            gen_quantities(fx.name + ".f32", m32, f32, true), golden::refs_of(f64),
                            sigma, golden::kFloorForward)
            .expect_pass();
    }
}

}  // namespace
