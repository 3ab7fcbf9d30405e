// Cached decoding parity (spec §4.1) with the reference's golden tensors, for every fixture set:
// greedy tokens with the KV+G cache (gen.cached.*), the prompt caches (gen.prompt_cache.*), the
// final KV-cache (gen.final_cache.*), and the uncached mode (gen.uncached_greedy.*,
// gen.uncached_same_tokens.logits). Also: kvg and kv give bit-identical logits.
#include "golden_util.h"
#include "infer/session.h"

namespace {

template <typename T>
int64_t argmax(const std::vector<T>& v) {
    return int64_t(std::max_element(v.begin(), v.end()) - v.begin());
}

struct Checker {
    const golden::Fixture& fx;
    const pldr::SafetensorsFile& f;
    const pldr::SafetensorsFile* exact;  // f64 file when checking float32
    double tol;
    template <typename T>
    void operator()(const std::string& name, const T* ours, int64_t n) const {
        auto ref = f.read<double>(name);
        ASSERT_EQ(ref.numel(), n) << name;
        if (exact) {
            auto ex = exact->read<double>(name);
            const double own = golden::rel_err(ref.ptr(), ex.ptr(), n);
            EXPECT_LE(golden::rel_err(ours, ex.ptr(), n), golden::f32_allowed(tol, own))
                << fx.name << " " << name << " (f32 vs exact)";
        } else {
            EXPECT_LE(golden::rel_err(ours, ref.ptr(), n), tol) << fx.name << " " << name;
        }
    }
};

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

template <typename T>
void check_generation(const golden::Fixture& fx, const std::string& dtype, double tol) {
    pldr::SafetensorsFile f(fx.path(dtype));
    std::unique_ptr<pldr::SafetensorsFile> ex;
    if (dtype != "f64") ex = std::make_unique<pldr::SafetensorsFile>(fx.path("f64"));
    Checker check{fx, f, ex.get(), tol};
    pldr::Model<T> m = golden::model_of<T>(fx, f);
    const auto prompt = f.read_i64("gen.prompt");
    const auto want = f.read_i64("gen.cached.tokens");
    const int steps = int(want.size());

    pldr::Session<T> kvg(m, pldr::CacheMode::KVG);
    std::vector<int64_t> toks;
    kvg.prefill(prompt);
    // Prompt caches.
    for (int64_t l = 0; l < m.cfg.num_layers; ++l) {
        const std::string p = "gen.prompt_cache.layer" + std::to_string(l) + ".";
        check(p + "k", kvg.keys(l).ptr(), kvg.keys(l).numel());
        check(p + "v", kvg.values(l).ptr(), kvg.values(l).numel());
        const auto& g = kvg.g_cache()[size_t(l)];
        if (f.has(p + "A")) check(p + "A", g.A.ptr(), g.A.numel());
        if (f.has(p + "A_LM")) check(p + "A_LM", g.A_LM.ptr(), g.A_LM.numel());
        if (f.has(p + "G_LM")) check(p + "G_LM", g.G.ptr(), g.G.numel());
        if (f.has(p + "Ap")) check(p + "Ap", g.A_P.ptr(), g.A_P.numel());
    }
    kvg.reset();
    auto rows = greedy_run(kvg, prompt, steps, &toks, nullptr);
    EXPECT_EQ(toks, want) << fx.name << "." << dtype << " gen.cached.tokens";
    check("gen.cached.logits", rows.data(), int64_t(rows.size()));
    for (int64_t l = 0; l < m.cfg.num_layers; ++l) {
        const std::string p = "gen.final_cache.layer" + std::to_string(l) + ".";
        check(p + "k", kvg.keys(l).ptr(), kvg.keys(l).numel());
        check(p + "v", kvg.values(l).ptr(), kvg.values(l).numel());
    }

    // kv mode: G recomputed from the frozen A — bit-identical logits.
    pldr::Session<T> kv(m, pldr::CacheMode::KV);
    std::vector<int64_t> toks_kv;
    auto rows_kv = greedy_run(kv, prompt, steps, &toks_kv, nullptr);
    EXPECT_EQ(rows_kv, rows) << fx.name << "." << dtype << " kv vs kvg";

    // No cache: greedy, and the cached tokens scored by full recompute.
    pldr::Session<T> none(m, pldr::CacheMode::NONE);
    std::vector<int64_t> toks_none;
    auto rows_none = greedy_run(none, prompt, steps, &toks_none, nullptr);
    EXPECT_EQ(toks_none, f.read_i64("gen.uncached_greedy.tokens")) << fx.name;
    check("gen.uncached_greedy.logits", rows_none.data(), int64_t(rows_none.size()));
    std::vector<int64_t> toks_same;
    none.reset();
    auto rows_same = greedy_run(none, prompt, steps, &toks_same, &want);
    check("gen.uncached_same_tokens.logits", rows_same.data(), int64_t(rows_same.size()));
}

TEST(GoldenGenerate, AllFixturesFloat64) {
    auto fx = golden::fixtures();
    if (fx.empty()) GTEST_SKIP() << "no fixtures in " << golden::dir();
    for (const auto& f : fx) check_generation<double>(f, "f64", 1e-12);
}

TEST(GoldenGenerate, AllFixturesFloat32) {
    auto fx = golden::fixtures();
    if (fx.empty()) GTEST_SKIP() << "no fixtures in " << golden::dir();
    for (const auto& f : fx) check_generation<float>(f, "f32", 1e-4);
}

}  // namespace
