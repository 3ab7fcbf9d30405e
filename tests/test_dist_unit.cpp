// Pieces of data-parallel training that run in one process: the data loader's state at an
// epoch boundary (ranks skip chunks, so a checkpoint can fall exactly on one), skipping, and the
// global-denominator form of the loss.
#include <gtest/gtest.h>

#include "cli_util.h"
#include "core/rng.h"
#include "model/init.h"
#include "train/data_loader.h"
#include "train/loss.h"
#include "train/presets.h"
#include "train/shard.h"

using namespace pldr;

namespace {

std::string make_shard(const std::string& name, int64_t chunks, int64_t ctx) {
    const std::string d = cli_test::tmp_dir(name);
    Rng rng(3);
    std::vector<int64_t> t(size_t(chunks * ctx));
    for (auto& x : t) x = 1 + int64_t(rng.below(40));
    write_shard(d + "/train.pldrtok", t, 41, ctx);
    return d + "/train.pldrtok";
}

}  // namespace

// A state taken exactly at an epoch boundary restores the next epoch's permutation.
TEST(DistUnit, LoaderStateAtAnEpochBoundaryRestoresExactly) {
    ShardReader s(make_shard("dist_unit_loader", 10, 8));
    for (int mode = 0; mode < 2; ++mode) {
        ChunkLoader a(s, 8, 5, true);
        std::vector<int64_t> buf;
        if (mode == 0) {
            a.next(5, buf);
            a.next(5, buf);  // position 10 = the start of epoch 1
        } else {
            a.next(4, buf);
            a.skip(6);  // the other ranks' chunks
        }
        const LoaderState st = a.state();
        ASSERT_EQ(st.position, 10);
        ChunkLoader b(s, 8, 5, true);
        b.restore(st);
        std::vector<int64_t> x, y;
        for (int i = 0; i < 4; ++i) {
            const TokenBatch p = a.next(5, x), q = b.next(5, y);
            EXPECT_EQ(std::vector<int64_t>(p.tokens, p.tokens + 40),
                      std::vector<int64_t>(q.tokens, q.tokens + 40))
                << "mode " << mode << " batch " << i;
        }
    }
}

// skip(n) then next(B) serves the chunks next(n + B) would end with.
TEST(DistUnit, SkipServesTheSameStream) {
    ShardReader s(make_shard("dist_unit_skip", 7, 6));
    ChunkLoader a(s, 6, 9, true), b(s, 6, 9, true);
    std::vector<int64_t> x, y;
    for (int i = 0; i < 5; ++i) {
        const TokenBatch all = a.next(5, x);
        b.skip(3);
        const TokenBatch part = b.next(2, y);
        EXPECT_EQ(std::vector<int64_t>(all.tokens + 3 * 6, all.tokens + 5 * 6),
                  std::vector<int64_t>(part.tokens, part.tokens + 2 * 6));
    }
}

// Two halves of a batch with their CE gradients divided by the global token count (and scale
// 1/2 for the DAG terms) sum to the gradient of the whole batch, even with uneven padding; the
// mean of the halves' own means would not.
TEST(DistUnit, GlobalDenominatorGivesTheWholeBatchGradient) {
    Model<double> m(preset_config("tiny", 41));
    init_weights(m, 4);
    m.set_reference_numerics(false);
    const int64_t B = 4, S1 = 9;
    std::vector<int64_t> tok(size_t(B * S1));
    Rng rng(8);
    for (auto& t : tok) t = 1 + int64_t(rng.below(40));
    for (int64_t s = 3; s < S1; ++s) tok[size_t(s)] = 0;  // row 0 mostly pad
    const DagCoeffs dag{0.1, 0.2, 0.3};
    Activations<double> acts;
    const size_t n = size_t(m.layout.total);
    std::vector<double> whole(n, 0.0), halves(n, 0.0), means(n, 0.0);
    const LossResult w = loss_and_grads(m, tok.data(), B, S1, dag, acts, whole.data());
    int64_t count[2] = {0, 0};
    for (int h = 0; h < 2; ++h)
        for (int64_t b = 0; b < 2; ++b)
            for (int64_t s = 1; s < S1; ++s) count[h] += tok[size_t((2 * h + b) * S1 + s)] != 0;
    const double N = double(count[0] + count[1]);
    ASSERT_NE(count[0], count[1]);
    for (int h = 0; h < 2; ++h) {
        loss_and_grads(m, tok.data() + 2 * h * S1, 2, S1, dag, acts, halves.data(), 0.5, N / 2);
        loss_and_grads(m, tok.data() + 2 * h * S1, 2, S1, dag, acts, means.data(), 0.5);
    }
    double dmax = 0, mmax = 0, gmax = 0;
    for (size_t i = 0; i < n; ++i) {
        dmax = std::max(dmax, std::abs(whole[i] - halves[i]));
        mmax = std::max(mmax, std::abs(whole[i] - means[i]));
        gmax = std::max(gmax, std::abs(whole[i]));
    }
    EXPECT_LE(dmax, 1e-14 * gmax);
    EXPECT_GT(mmax, 1e-6 * gmax) << "uneven padding must make the mean of means differ";
    EXPECT_GT(w.scored, 0);
}
