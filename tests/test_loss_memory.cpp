// The training loss's memory plan (train/loss.cpp, KeepActs::TRAINING in model/activations.h): the
// head and the cross-entropy run over chunks of rows; the metric learner's internals, E, Q·G, O,
// Ep and the FFN gate are recomputed in the backward instead of kept, and a layer's input is the
// previous layer's output moved, not copied. The chunked head must give the one-pass results (the
// loss, count and accuracy exactly, the gradients to rounding); the recomputation must give the
// keep-everything backward's gradients bit for bit, in float32 and float64, for every case of
// tests/numeric_cases.h.
#include <gtest/gtest.h>

#include <cmath>

#include <cstring>

#include "core/alloc.h"
#include "core/rng.h"
#include "model/backward.h"
#include "model/init.h"
#include "numeric_cases.h"
#include "ops/cross_entropy.h"
#include "train/loss.h"

namespace {

pldr::Config tiny(bool learned) {
    pldr::Config c;
    c.num_layers = 2;
    c.num_heads = 2;
    c.head_dim = 4;
    c.hidden_size = 8;
    c.intermediate_size = 21;
    c.vocab_size = 23;
    c.max_position = 16;
    c.A_dff = 6;
    c.num_reslayerA = 2;
    c.num_denseA = 2;
    c.g_type = learned ? pldr::GType::LEARNED : pldr::GType::IDENTITY;
    return c;
}

std::vector<int64_t> tokens(int64_t B, int64_t S1, uint64_t seed) {
    pldr::Rng r(seed);
    std::vector<int64_t> t(static_cast<size_t>(B * S1));
    for (auto& x : t) x = int64_t(r.below(23));
    return t;
}

struct ChunkRows {
    explicit ChunkRows(int64_t n) { pldr::loss_head_chunk_rows() = n; }
    ~ChunkRows() { pldr::loss_head_chunk_rows() = 0; }
};

// The reference: forward() keeping everything (full logits, the learner's internals), the masked
// mean CE with its gradient over all rows at once, and backward() from the [B,S,V] dlogits.
pldr::LossResult one_pass(const pldr::Model<double>& m, const std::vector<int64_t>& tok, int64_t B,
                          int64_t S1, std::vector<double>& grads) {
    const int64_t S = S1 - 1, N = B * S, V = m.cfg.vocab_size;
    std::vector<int64_t> in, tgt;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t s = 0; s < S; ++s) {
            in.push_back(tok[size_t(b * S1 + s)]);
            tgt.push_back(tok[size_t(b * S1 + s + 1)]);
        }
    pldr::Activations<double> a;
    pldr::forward(m, in.data(), B, S, a);
    if (m.cfg.learned_g()) {
        EXPECT_GT(a.layers[0].A0.numel(), 0);  // forward() keeps the learner
    }
    pldr::LossResult r;
    const double total = pldr::cross_entropy_forward<double>(
        nullptr, &r.scored, &r.correct, a.logits.ptr(), tgt.data(), N, V, m.cfg.pad_token_id);
    r.ce = total / double(r.scored);
    pldr::Tensor<double> dl({B, S, V});
    pldr::cross_entropy_backward<double>(dl.ptr(), a.logits.ptr(), tgt.data(), N, V,
                                         m.cfg.pad_token_id, 1.0 / double(r.scored));
    grads.assign(size_t(m.num_params()), 0.0);
    pldr::backward<double>(m, a, dl, nullptr, grads.data());
    return r;
}

class LossMemory : public testing::TestWithParam<bool> {};

TEST_P(LossMemory, ChunkedHeadAndRecomputedLearnerEqualOnePass) {
    pldr::Model<double> m(tiny(GetParam()));
    pldr::init_weights(m, 5);
    const int64_t B = 3, S1 = 8;  // 21 rows
    auto tok = tokens(B, S1, 11);
    tok[3] = tok[12] = tok[20] = m.cfg.pad_token_id;  // masked targets
    std::vector<double> ref;
    const pldr::LossResult r0 = one_pass(m, tok, B, S1, ref);
    ASSERT_GT(r0.scored, 0);
    ASSERT_LT(r0.scored, B * (S1 - 1));  // some rows are masked
    double gmax = 0;
    for (double g : ref) gmax = std::max(gmax, std::abs(g));
    ASSERT_GT(gmax, 0);
    for (int64_t rows : {0, 1, 4, 7, 20, 21, 64}) {  // one chunk, several, a ragged last one
        ChunkRows cr(rows);
        pldr::Activations<double> a;
        std::vector<double> g(ref.size(), 0.0);
        const pldr::LossResult r =
            pldr::loss_and_grads<double>(m, tok.data(), B, S1, {}, a, g.data());
        // Per-row CE summed in row order either way; a row's logits may round differently in
        // a GEMM of other row count (OpenBLAS picks kernels by shape).
        EXPECT_NEAR(r.ce, r0.ce, 1e-14 * r0.ce) << rows;
        EXPECT_EQ(r.scored, r0.scored) << rows;
        EXPECT_EQ(r.correct, r0.correct) << rows;
        EXPECT_EQ(a.logits.numel(), 0) << rows;  // no [B,S,V] logits kept
        if (GetParam()) {
            EXPECT_EQ(a.layers[0].A_ln.numel(), 0) << rows;  // the learner's internals not kept
            EXPECT_EQ(a.layers[0].res.at(0).sum.numel(), 0) << rows;
        }
        double worst = 0;
        for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::abs(g[i] - ref[i]));
        EXPECT_LT(worst, 1e-13 * gmax) << rows;  // summation order only
        // The evaluation path (no gradients) chunks the same way.
        pldr::Activations<double> e;
        const pldr::LossResult re =
            pldr::loss_and_grads<double>(m, tok.data(), B, S1, {}, e, nullptr);
        EXPECT_NEAR(re.ce, r0.ce, 1e-14 * r0.ce) << rows;
        EXPECT_EQ(re.correct, r0.correct) << rows;
    }
}

INSTANTIATE_TEST_SUITE_P(Models, LossMemory, testing::Values(true, false),
                         [](const testing::TestParamInfo<bool>& i) {
                             return std::string(i.param ? "learned_G" : "fixed_G");
                         });

// ---- KeepActs::TRAINING against KeepActs::ALL, over the numeric cases ----

template <typename V>
bool same_bits(const V& a, const V& b) {
    return a.size() == b.size() &&
           std::memcmp(a.data(), b.data(), a.size() * sizeof(typename V::value_type)) == 0;
}

template <typename T>
void plan_gives_the_keep_everything_gradients(const numeric::Case& k) {
    const uint64_t seed = numeric::seed_of(k);
    const pldr::Model<double> md = numeric::make_model(k, seed);
    const pldr::Model<T> m = numeric::cast_model<T>(md);
    const numeric::Shape& s = k.shape;
    const std::vector<int64_t> tok = numeric::make_tokens(s, seed + 3);  // with pad keys
    std::vector<int64_t> in;
    for (int64_t b = 0; b < s.B; ++b)
        in.insert(in.end(), tok.begin() + b * (s.S + 1), tok.begin() + b * (s.S + 1) + s.S);
    const pldr::Config& c = m.cfg;
    const int64_t L = c.num_layers, H = c.num_heads, D = c.head_dim, d = c.hidden_size;

    pldr::Activations<T> all;
    pldr::forward_layers(m, in.data(), s.B, s.S, all, pldr::KeepActs::ALL);
    for (const pldr::KeepActs keep : {pldr::KeepActs::TRAINING, pldr::KeepActs::LAYER_INPUTS}) {
        SCOPED_TRACE(keep == pldr::KeepActs::TRAINING ? "TRAINING" : "LAYER_INPUTS");
        const bool full = keep == pldr::KeepActs::LAYER_INPUTS;
        pldr::Activations<T> plan;
        // `plan` held a keep-everything forward before: nothing of it may leak into the plan's.
        pldr::forward_layers(m, in.data(), s.B, s.S, plan, pldr::KeepActs::ALL);
        pldr::forward_layers(m, in.data(), s.B, s.S, plan, keep);
        ASSERT_EQ(plan.kept, keep);
        EXPECT_TRUE(same_bits(plan.final_hidden().data, all.final_hidden().data));
        EXPECT_EQ(plan.x0.numel(), 0);  // gathered again by the backward
        for (int64_t l = 0; l < L; ++l) {
            const auto& pa = plan.layers[size_t(l)];
            const auto& aa = all.layers[size_t(l)];
            // What the plan does not keep.
            EXPECT_EQ(pa.E.numel() + pa.Ep.numel() + pa.QG.numel() + pa.O.numel(), 0) << l;
            EXPECT_EQ(pa.ffn.gated.numel(), 0) << l;
            EXPECT_EQ(pa.A_ln.numel(), 0) << l;
            EXPECT_EQ(pa.out1.numel(), 0) << l;  // LN1 of attn_out + x_in, again
            // The learner: TRAINING keeps A0 (with LN_A's statistics) and each residual unit's
            // input, not its sum and statistics; LAYER_INPUTS none of it.
            if (full || !c.learned_g()) {
                EXPECT_EQ(pa.A0.numel(), 0) << l;
                EXPECT_TRUE(pa.res.empty()) << l;
            } else {
                EXPECT_TRUE(same_bits(pa.A0.data, aa.A0.data)) << l;
                ASSERT_EQ(pa.res.size(), aa.res.size()) << l;
                for (size_t r = 0; r < pa.res.size(); ++r) {
                    EXPECT_TRUE(same_bits(pa.res[r].in.data, aa.res[r].in.data)) << l;
                    EXPECT_EQ(pa.res[r].sum.numel() + pa.res[r].mean.numel(), 0) << l;
                }
            }
            if (l + 1 < L) {
                EXPECT_EQ(pa.hidden.numel(), 0) << l;  // moved into the next layer's x_in
            }
            if (full) {  // only the input and the deductive outputs
                EXPECT_EQ(pa.q.numel() + pa.k.numel() + pa.v.numel() + pa.A.numel() + pa.Z.numel() +
                              pa.attn_out.numel() + pa.out1.numel() + pa.ffn.h1.numel() +
                              pa.ffn.h2.numel() + pa.ffn_out.numel(),
                          0)
                    << l;
            } else {
                EXPECT_TRUE(same_bits(pa.ffn.h1.data, aa.ffn.h1.data)) << l;
                EXPECT_TRUE(same_bits(pa.q.data, aa.q.data)) << l;
            }
            // What it keeps, with the same bits.
            EXPECT_TRUE(same_bits(pa.x_in.data, aa.x_in.data)) << l;
            EXPECT_TRUE(same_bits(pa.G.data, aa.G.data)) << l;
            if (c.learned_g()) {
                EXPECT_TRUE(same_bits(pa.A_LM.data, aa.A_LM.data)) << l;
                EXPECT_TRUE(same_bits(pa.A_P.data, aa.A_P.data)) << l;
            }
        }
        // The backward from one d(final hidden), with extra gradients on the deductive outputs (the
        // DAG loss's path) for a learned G.
        pldr::Rng r(seed + 17);
        pldr::Tensor<T> dh({s.B, s.S, d});
        for (auto& x : dh.data) x = T(r.normal());
        std::vector<pldr::DeductiveGrads<T>> extra(static_cast<size_t>(L));
        if (c.learned_g())
            for (auto& e : extra)
                for (pldr::Tensor<T>* t : {&e.dA_LM, &e.dA_P, &e.dG}) {
                    *t = pldr::Tensor<T>({s.B, H, D, D});
                    for (auto& x : t->data) x = T(0.1 * r.normal());
                }
        pldr::Tensor<T> dh2 = dh;
        const pldr::Tensor<T> dh_copy = dh;
        std::vector<T> g_all(size_t(m.num_params()), T(0)), g_plan(g_all.size(), T(0));
        pldr::backward_below_head(m, all, dh, &extra, g_all.data());
        pldr::backward_below_head(m, plan, dh2, &extra, g_plan.data());
        double gmax = 0;
        for (T g : g_all) gmax = std::max(gmax, double(std::abs(g)));
        ASSERT_GT(gmax, 0);
        for (const auto& e : m.layout.entries) {
            const std::vector<T> a(g_all.begin() + e.offset, g_all.begin() + e.offset + e.numel);
            const std::vector<T> b(g_plan.begin() + e.offset, g_plan.begin() + e.offset + e.numel);
            EXPECT_TRUE(same_bits(a, b)) << e.name;
        }
        // The training step's backward, which frees each layer's activations as it passes them
        // (consume): the same bits again, and nothing of the layers left.
        pldr::Activations<T> eaten;
        pldr::forward_layers(m, in.data(), s.B, s.S, eaten, keep);
        pldr::Tensor<T> dh3 = dh_copy;
        std::vector<T> g_eaten(g_all.size(), T(0));
        pldr::backward_below_head(m, eaten, dh3, &extra, g_eaten.data(), &eaten);
        EXPECT_TRUE(same_bits(g_eaten, g_all));
        for (const auto& la : eaten.layers)
            EXPECT_EQ(la.x_in.numel() + la.q.numel() + la.ffn.h1.numel() + la.G.numel(), 0);
    }
}

class MemoryPlan : public testing::TestWithParam<numeric::Case> {};

TEST_P(MemoryPlan, RecomputedBackwardEqualsKeepEverythingBitForBit) {
    for (const int64_t blocks : {0, 3}) {  // the learner's rows whole, and in 3 blocks
        SCOPED_TRACE(blocks);
        const numeric::LearnerRowBlocks split(blocks);
        plan_gives_the_keep_everything_gradients<double>(GetParam());
        plan_gives_the_keep_everything_gradients<float>(GetParam());
    }
}

// The training step's gradients live in a ZeroPages buffer whose pages the backward takes from
// the page cache, layer by layer, where the freed activations went (core/alloc.h): the cache's
// pages arrive holding old data. Two micro-batches accumulated that way give the bits of two
// accumulated into a plain vector: the pages are zeroed as they move in, and the second batch
// moves none into what the first one wrote. Then zero() and a second step: the same again.
template <typename T>
void cached_gradient_pages_change_nothing() {
    pldr::Config c = tiny(true);
    c.hidden_size = 64;  // layers of about 50 pages of gradients
    c.head_dim = 32;
    c.intermediate_size = 171;
    c.vocab_size = 300;
    pldr::Model<T> m(c);
    pldr::init_weights(m, 9);
    const int64_t B = 2, S1 = 9, n = m.num_params();
    auto garbage = [] {  // cached pages full of NaN bytes
        std::vector<void*> blocks;
        for (int k = 0; k < 8; ++k) {
            void* p = pldr::cached_pages_allocate(size_t(1) << 20);
            std::memset(p, 0xff, size_t(1) << 20);
            blocks.push_back(p);
        }
        for (void* p : blocks) pldr::cached_pages_free(p, size_t(1) << 20);
    };
    // Beyond kReturnBytes, so that zero() hands the pages back (below it, it memsets them and
    // they stay resident: nothing to fill).
    pldr::ZeroPages<T> z{size_t(n) + pldr::kReturnBytes / sizeof(T)};
    for (int step = 0; step < 2; ++step) {
        SCOPED_TRACE(step);
        std::vector<T> plain(size_t(n), T(0));
        z.zero();
        for (uint64_t mb = 0; mb < 2; ++mb) {
            const auto tok = tokens(B, S1, 40 + mb + 10 * uint64_t(step));
            pldr::Activations<T> a1, a2;
            pldr::loss_and_grads<T>(m, tok.data(), B, S1, {}, a1, plain.data(), 0.5, 0,
                                    pldr::KeepActs::TRAINING, /*consume=*/true);
            garbage();
            pldr::loss_and_grads<T>(m, tok.data(), B, S1, {}, a2, z.data(), 0.5, 0,
                                    pldr::KeepActs::TRAINING, /*consume=*/true);
        }
        double gmax = 0;
        for (T g : plain) gmax = std::max(gmax, double(std::abs(g)));
        ASSERT_GT(gmax, 0);
        size_t differ = 0;
        for (int64_t i = 0; i < n; ++i)
            differ += std::memcmp(&plain[size_t(i)], &z[size_t(i)], sizeof(T)) != 0;
        EXPECT_EQ(differ, 0u);
    }
}

TEST(MemoryPlan, GradientsInPagesFromTheCacheEqualPlainGradients) {
    cached_gradient_pages_change_nothing<float>();
    cached_gradient_pages_change_nothing<double>();
}

INSTANTIATE_TEST_SUITE_P(Cases, MemoryPlan, testing::ValuesIn(numeric::cases()),
                         numeric::CaseName());

}  // namespace
