// The training program as a library: data order, checkpoints (transactional, checked), exact
// resume, stop requests, refusal of a non-finite step, presets, entropy, learning.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <set>

#include "cli_util.h"
#include "core/fs.h"
#include "core/rng.h"
#include "io/config_json.h"
#include "io/model_load.h"
#include "io/safetensors.h"
#include "model/init.h"
#include "model/layout.h"
#include "train/checkpoint.h"
#include "train/data_loader.h"
#include "train/metrics.h"
#include "train/presets.h"
#include "train/trainer_loop.h"

namespace fs = std::filesystem;
using namespace pldr;

namespace {

// A shard dir with random tokens (train) and a predictable valid split.
std::string make_data(const std::string& name, int64_t vocab, int64_t ctx, int64_t chunks,
                      bool cyclic = false) {
    const std::string d = cli_test::tmp_dir(name);
    Rng rng(7);
    std::vector<int64_t> t(size_t(chunks * ctx)), v(size_t(4 * ctx));
    for (size_t i = 0; i < t.size(); ++i)
        t[i] = cyclic ? 4 + int64_t(i % 16) : 1 + int64_t(rng.below(uint64_t(vocab - 1)));
    for (size_t i = 0; i < v.size(); ++i)
        v[i] = cyclic ? 4 + int64_t((i + 3) % 16) : 1 + int64_t(rng.below(uint64_t(vocab - 1)));
    write_shard(d + "/train.pldrtok", t, vocab, ctx);
    write_shard(d + "/valid.pldrtok", v, vocab, ctx);
    return d;
}

TrainOptions tiny_opts(const std::string& data, const std::string& out) {
    TrainOptions o;
    o.preset = "tiny";
    o.data_dir = data;
    o.out_dir = out;
    o.steps = 12;
    o.batch = 3;
    o.lr = 3e-3;
    o.warmup = 2;
    o.eval_every = 4;
    o.eval_batches = 1;
    o.save_every = 0;
    return o;
}

std::string bytes_of(const std::string& p) {
    return cli_test::slurp(p);
}

void expect_same_checkpoint(const std::string& a, const std::string& b) {
    const std::string ma = bytes_of(a + "/model.safetensors");
    ASSERT_FALSE(ma.empty());
    EXPECT_TRUE(ma == bytes_of(b + "/model.safetensors")) << "weights differ";
    EXPECT_TRUE(bytes_of(a + "/train_state.safetensors") ==
                bytes_of(b + "/train_state.safetensors"))
        << "optimizer state differs";
    EXPECT_EQ(bytes_of(a + "/config.json"), bytes_of(b + "/config.json"));
}

}  // namespace

TEST(TrainLoader, EpochsArePermutationsAndRestoreIsExact) {
    const std::string d = make_data("loader", 50, 8, 10);
    ShardReader s(d + "/train.pldrtok");
    ChunkLoader a(s, 8, 99, true), ref(s, 8, 99, false), other(s, 8, 100, true);
    std::vector<int64_t> first, second, plain, oth;
    for (int64_t p = 0; p < 10; ++p) first.push_back(a.chunk_at(p));
    for (int64_t p = 10; p < 20; ++p) second.push_back(a.chunk_at(p));
    for (int64_t p = 0; p < 10; ++p)
        plain.push_back(ref.chunk_at(p)), oth.push_back(other.chunk_at(p));
    EXPECT_EQ(std::set<int64_t>(first.begin(), first.end()).size(), 10u);
    EXPECT_EQ(std::set<int64_t>(second.begin(), second.end()).size(), 10u);
    EXPECT_NE(first, second);  // a fresh permutation per epoch
    EXPECT_NE(first, oth);     // seed-dependent
    for (int64_t p = 0; p < 10; ++p) EXPECT_EQ(plain[size_t(p)], p);  // --no-shuffle: file order

    // Batches straddle epochs; a restored loader continues identically.
    ChunkLoader b(s, 8, 99, true);
    std::vector<int64_t> buf, buf2;
    for (int i = 0; i < 4; ++i) b.next(3, buf);  // 12 chunks: into epoch 1
    EXPECT_EQ(b.epoch(), 1);
    const LoaderState st = b.state();
    ChunkLoader c(s, 8, 12345, true);
    c = ChunkLoader(s, 8, 99, true);
    c.restore(st);
    for (int i = 0; i < 5; ++i) {
        const TokenBatch x = b.next(3, buf), y = c.next(3, buf2);
        EXPECT_EQ(std::vector<int64_t>(x.tokens, x.tokens + 24),
                  std::vector<int64_t>(y.tokens, y.tokens + 24));
    }
    // The batch holds the chunk's tokens (first ctx of the chunk).
    ChunkLoader e(s, 5, 99, false);
    const TokenBatch tb = e.next(2, buf);
    EXPECT_EQ(tb.S1, 5);
    for (int64_t j = 0; j < 5; ++j) EXPECT_EQ(tb.tokens[5 + j], s[8 + j]);
}

TEST(TrainLoader, UnigramEntropy) {
    const std::string d = cli_test::tmp_dir("entropy");
    write_shard(d + "/a.pldrtok", {5, 5, 6, 6, 0, 0, 0, 0}, 10, 4);
    ShardReader s(d + "/a.pldrtok");
    EXPECT_NEAR(unigram_entropy(s, 0), std::log(2.0), 1e-15);  // pad ignored
    EXPECT_NEAR(unigram_entropy(s, -1), 1.5 * std::log(2.0), 1e-15);
}

TEST(TrainPresets, ShapesAndParameterCounts) {
    EXPECT_EQ(make_layout(preset_config("v51-110M", 32000)).total, 109689362);  // spec §5.5
    const int64_t small = make_layout(preset_config("small", 4000)).total;
    EXPECT_GT(small, 1000000);
    EXPECT_LT(small, 5000000);
    const int64_t tiny = make_layout(preset_config("tiny", 1000)).total;
    EXPECT_GT(tiny, 50000);
    EXPECT_LT(tiny, 500000);
    const Config s = sdpa_twin(preset_config("small", 4000));
    EXPECT_FALSE(s.learned_g());
    EXPECT_LT(make_layout(s).total, small);  // no metric learner
    EXPECT_THROW(preset_config("huge", 100), Error);
}

TEST(TrainLoop, ResumeIsBitIdentical) {
    for (const char* dtype : {"f32", "f64"}) {
        const std::string data = make_data(std::string("resume_") + dtype, 40, 12, 7);
        const std::string root = cli_test::tmp_dir(std::string("resume_out_") + dtype);
        TrainOptions o = tiny_opts(data, root + "/full");
        o.dtype = dtype;
        o.accum = 2;  // accumulation, epochs wrap (7 chunks, 6 per step)
        o.dag = {0.01, 0.02, 0.03};
        const TrainOutcome full = run_training(o);
        EXPECT_EQ(full.reason, StopReason::COMPLETED);
        EXPECT_EQ(full.step, 12);
        EXPECT_TRUE(full.has_eval);

        TrainOptions h = o;
        h.out_dir = root + "/half";
        h.stop_at = 5;
        const TrainOutcome part = run_training(h);
        EXPECT_EQ(part.reason, StopReason::STOP_AT);
        EXPECT_EQ(read_checkpoint_info(h.out_dir).step, 5);
        TrainOptions r;  // resume: the options come from the checkpoint
        r.data_dir = data;
        r.out_dir = h.out_dir;
        r.resume_dir = h.out_dir;
        r.dtype = dtype;
        const TrainOutcome rest = run_training(r);
        EXPECT_EQ(rest.start_step, 5);
        EXPECT_EQ(rest.step, 12);
        expect_same_checkpoint(o.out_dir, h.out_dir);
        // The metrics of the resumed run continue the first part without duplicates.
        const auto curves = read_loss_curves(h.out_dir + "/metrics.jsonl");
        ASSERT_EQ(curves[0].x.size(), 12u);
        for (size_t i = 0; i < 12; ++i) EXPECT_EQ(curves[0].x[i], double(i + 1));
        EXPECT_EQ(curves[0].y, read_loss_curves(o.out_dir + "/metrics.jsonl")[0].y);

        // The weights moved, and the optimizer state was written for every parameter.
        Model<double> a = load_model<double>(o.out_dir);
        Model<double> init(a.cfg);
        init_weights(init, o.seed);
        EXPECT_NE(a.params, init.params);
        SafetensorsFile st(o.out_dir + "/train_state.safetensors");
        EXPECT_EQ(st.tensors().size(), 2 * a.layout.entries.size());
        EXPECT_EQ(st.metadata().at("step"), "12");
    }
}

TEST(TrainLoop, StopFlagWritesCheckpointAndResumeRefusesChangedOptions) {
    const std::string data = make_data("stopflag", 30, 10, 5);
    const std::string out = cli_test::tmp_dir("stopflag_out");
    std::atomic<bool> stop{false};
    TrainHooks h;
    h.stop_flag = &stop;
    h.on_step = [&](const StepReport& r) {
        if (r.step == 3) stop = true;
    };
    TrainOptions o = tiny_opts(data, out);
    const TrainOutcome res = run_training(o, h);
    EXPECT_EQ(res.reason, StopReason::INTERRUPTED);
    EXPECT_EQ(res.step, 3);
    EXPECT_EQ(read_checkpoint_info(out).step, 3);
    // A fresh run into a checkpoint directory is refused.
    EXPECT_THROW(run_training(o), Error);
    // Changing the maths on resume is refused with a clear message.
    TrainOptions r;
    r.data_dir = data;
    r.out_dir = out;
    r.resume_dir = out;
    r.lr = 0.5;
    r.given = {"lr"};
    try {
        run_training(r);
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--lr 0.5 differs"), std::string::npos) << e.what();
    }
}

TEST(TrainLoop, NonFiniteLossKeepsLastGoodCheckpoint) {
    const std::string data = make_data("nan", 30, 10, 5);
    const std::string out = cli_test::tmp_dir("nan_out");
    TrainOptions o = tiny_opts(data, out);
    o.lr = 1e30;
    o.warmup = 0;
    o.steps = 50;
    o.save_every = 1;
    o.clip = ClipMode::NONE;
    try {
        run_training(o);
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("non-finite"), std::string::npos) << m;
        EXPECT_NE(m.find("last good checkpoint"), std::string::npos) << m;
        const CheckpointInfo ck = read_checkpoint_info(out);
        EXPECT_NE(m.find("(step " + std::to_string(ck.step) + ")"), std::string::npos) << m;
        Model<float> mm;
        AdamWState<float> opt;
        EXPECT_NO_THROW(load_checkpoint<float>(out, &mm, &opt));
        EXPECT_GE(ck.step, 1);
        EXPECT_LT(ck.step, 50);
    }
}

TEST(TrainCheckpoint, InterruptedWritesAreRepairedOrDiscarded) {
    const std::string data = make_data("txn", 30, 10, 5);
    const std::string root = cli_test::tmp_dir("txn_out");
    TrainOptions o = tiny_opts(data, root + "/a");
    o.steps = 4;
    o.stop_at = 2;
    run_training(o);  // checkpoint at step 2 in a
    TrainOptions o4 = tiny_opts(data, root + "/b");
    o4.steps = 4;
    o4.stop_at = 3;
    run_training(o4);  // checkpoint at step 3 in b
    const std::string a = o.out_dir, b = o4.out_dir;

    // An interrupted write (no COMMIT): discarded, the old checkpoint stays.
    fs::create_directories(a + "/.ckpt-new");
    fs::copy_file(b + "/model.safetensors", a + "/.ckpt-new/model.safetensors");
    EXPECT_TRUE(recover_checkpoint(a));
    EXPECT_FALSE(fs::exists(a + "/.ckpt-new"));
    EXPECT_EQ(read_checkpoint_info(a).step, 2);

    // An interrupted swap (COMMIT, model already moved): completed.
    fs::create_directories(a + "/.ckpt-new");
    for (const char* f : {"config.json", "train_state.safetensors"})
        fs::copy_file(b + "/" + f, a + "/.ckpt-new/" + f);
    fs::copy_file(b + "/model.safetensors", a + "/model.safetensors",
                  fs::copy_options::overwrite_existing);
    write_file_atomic(a + "/.ckpt-new/COMMIT", "3\n");
    Model<float> m;
    AdamWState<float> opt;
    EXPECT_EQ(load_checkpoint<float>(a, &m, &opt).step, 3);
    EXPECT_EQ(opt.step, 3);

    // A model file from another checkpoint is detected.
    const std::string c = root + "/c";
    fs::copy(b, c);
    fs::copy_file(root + "/a/model.safetensors", c + "/model.safetensors",
                  fs::copy_options::overwrite_existing);  // same bytes as b: fine
    EXPECT_NO_THROW(load_checkpoint<float>(c, &m, &opt));
    TrainOptions o2 = tiny_opts(data, root + "/d");
    o2.steps = 4;
    o2.stop_at = 1;
    run_training(o2);
    fs::copy_file(root + "/d/model.safetensors", c + "/model.safetensors",
                  fs::copy_options::overwrite_existing);
    try {
        load_checkpoint<float>(c, &m, &opt);
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("does not belong"), std::string::npos) << e.what();
    }
    // The dtype must match.
    Model<double> md;
    AdamWState<double> od;
    EXPECT_THROW(load_checkpoint<double>(b, &md, &od), Error);
}

TEST(TrainLoop, LearnsAPredictableSequence) {
    // Tokens cycle through 16 ids: the next token is determined by the current one, so the
    // loss must fall far below ln(16) and accuracy rise close to 1.
    const std::string data = make_data("learn", 32, 17, 24, true);
    const std::string out = cli_test::tmp_dir("learn_out");
    TrainOptions o = tiny_opts(data, out);
    o.steps = 40;
    o.batch = 4;
    o.lr = 1e-2;
    o.warmup = 4;
    o.eval_every = 0;
    const TrainOutcome r = run_training(o);
    ASSERT_TRUE(r.has_eval);
    EXPECT_LT(r.last_eval.ce, 0.5);
    EXPECT_GT(r.last_eval.accuracy, 0.9);
    // valid: 68 tokens cycling through 16 ids from offset 3: 4 ids occur 5 times, 12 occur 4.
    const double h = -(4 * (5 / 68.0) * std::log(5 / 68.0) + 12 * (4 / 68.0) * std::log(4 / 68.0));
    EXPECT_NEAR(r.valid_unigram_entropy, h, 1e-12);
    EXPECT_NEAR(r.last_eval.perplexity, std::exp(r.last_eval.ce), 1e-9);
    const auto c = read_loss_curves(out + "/metrics.jsonl");
    ASSERT_EQ(c.size(), 2u);
    EXPECT_GT(c[0].y.front(), 2.5);
}

TEST(TrainLoop, ConfigWithCustomGTypeTrainsTheSdpaBaseline) {
    const std::string data = make_data("cfg_identity", 30, 10, 5);
    const std::string d = cli_test::tmp_dir("cfg_identity_out");
    Config c = preset_config("tiny", 30);
    c.g_type = GType::IDENTITY;
    save_config(c, d + "/config.json");
    TrainOptions o = tiny_opts(data, d + "/run");
    o.preset.clear();
    o.config_path = d + "/config.json";
    o.steps = 3;
    const TrainOutcome r = run_training(o);
    EXPECT_EQ(r.step, 3);
    const Model<float> m = load_model<float>(d + "/run");
    EXPECT_FALSE(m.cfg.learned_g());
    EXPECT_EQ(m.num_params(), make_layout(sdpa_twin(preset_config("tiny", 30))).total);
    // The same shape from --preset tiny --fixed-g identity matches the checkpoint; a learned-G
    // preset does not.
    TrainOptions r2;
    r2.data_dir = data;
    r2.out_dir = r2.resume_dir = d + "/run";
    r2.preset = "tiny";
    try {
        run_training(r2);
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("does not match --preset tiny"), std::string::npos)
            << e.what();
    }
}
