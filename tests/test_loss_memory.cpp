// The training loss's memory plan (train/loss.cpp, model/plga_attention.cpp): the head and the
// cross-entropy run over chunks of rows, and the metric learner's internals are recomputed in the
// backward instead of kept. Both must give the one-pass, keep-everything results: the loss, the
// count and accuracy exactly, the loss and the gradients to rounding.
#include <gtest/gtest.h>

#include <cmath>

#include "core/rng.h"
#include "model/backward.h"
#include "model/init.h"
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
            EXPECT_EQ(a.layers[0].A0.numel(), 0) << rows;  // the learner's internals not kept
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

}  // namespace
