// --device on every command that runs a model: "cpu" runs as before; "cuda" where no CUDA device
// can run the model (no GPU visible, a build without the backend, or a command the backend does
// not run yet) exits 1 with one line naming the device; anything else is refused naming it. The
// same through the C++ API (LoadOptions, TrainOptions, BenchOptions) and the C API. Where a GPU
// is visible, a model loaded onto it runs its forward there (every named tensor as the CPU's)
// and refuses every other job in one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cli_util.h"
#include "pldr/bench.hpp"
#include "pldr/pldr.h"
#include "pldr/pldr.hpp"
#include "train/shard.h"

namespace {

const std::string kModel = std::string(PLDR_SOURCE_DIR) + "/tests/golden/models/a_tiny_v510.f32";

// Whether this process sees a CUDA device it can run on.
bool gpu_visible() {
    return pldr::api::devices().size() > 1;
}

TEST(Device, CudaWithoutABackendExitsOneWithOneLine) {
    const std::string out = cli_test::tmp_dir("device");
    const bool gpu = gpu_visible();
    // What runs on the device: the forward (dump) and the gradient (grad).
    const std::vector<std::string> runs = {
        "dump " + kModel + " --tokens 5,6,7 --out " + out + "/d.safetensors",
        "grad " + kModel + " --tokens 5,6,7,8 --out " + out + "/g.safetensors",
        "generate " + kModel + " --ids 5,6 -n 2",
        "generate " + kModel + " --ids 5,6 -n 2 --save-g-cache " + out + "/g.gcache"};
    if (gpu) {  // they run there; the other commands below refuse
        for (const auto& c : runs) {
            const auto r = cli_test::run(c + " --device cuda");
            EXPECT_EQ(r.code, 0) << c << ": " << r.err;
        }
    }
    std::vector<std::string> commands = {
        "audit " + kModel + " --out " + out + "/audit",
    };
    if (gpu) {  // pldr serve runs there (tests/serve/gpu_serve_check.py), but not its cached echo
        const auto r = cli_test::run("serve " + kModel + " --port 0 --mode cached --device cuda");
        EXPECT_EQ(r.code, 1) << r.err;
        EXPECT_EQ(cli_test::count_lines(r.err), 1) << r.err;
        EXPECT_NE(r.err.find("--mode cached"), std::string::npos) << r.err;
    } else {
        commands.push_back("serve " + kModel + " --port 0");
    }
    if (!gpu) {
        commands.push_back(
            "bench --config S --only decode");  // (with a GPU, train runs there: AModelOnTheGpu...
                                                // and TrainingOnTheGpu...)
        commands.push_back("train --preset tiny --data " + out + " --out " + out +
                           "/ckpt --steps 1");
        commands.insert(commands.end(), runs.begin(), runs.end());
    }
    for (const auto& c : commands) {
        SCOPED_TRACE(c);
        const auto r = cli_test::run(c + " --device cuda");
        EXPECT_EQ(r.code, 1) << r.err;
        EXPECT_EQ(cli_test::count_lines(r.err), 1) << r.err;
        EXPECT_NE(r.err.find("device cuda"), std::string::npos) << r.err;
        if (gpu) {
            EXPECT_NE(r.err.find("not yet this job"), std::string::npos) << r.err;
        }
    }
    const auto r = cli_test::run("generate " + kModel + " --ids 5,6 -n 2 --device tpu");
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find("--device 'tpu': expected cpu, cuda or cuda:N"), std::string::npos)
        << r.err;
    // cpu is the default and runs.
    EXPECT_EQ(cli_test::run("generate " + kModel + " --ids 5,6 -n 2 --device cpu").code, 0);
}

TEST(Device, TheApiRefusesWhatItCannotRun) {
    EXPECT_NO_THROW(pldr::api::check_model_device("cpu"));
    for (const char* d : {"cuda", "cuda:0", "cuda:1", "gpu", "cuda:", "cuda:x", ""})
        EXPECT_THROW(pldr::api::check_model_device(d), pldr::Error) << d;
    pldr::api::LoadOptions lo;
    lo.device = "cuda";
    if (!gpu_visible()) {
        EXPECT_THROW(pldr::api::Model::load(kModel, lo), pldr::Error);
    }
    lo.device = "cpu";
    EXPECT_NO_THROW(pldr::api::Model::load(kModel, lo));
    pldr::api::BenchOptions bo;
    bo.device = "cuda:0";
    EXPECT_THROW(pldr::api::bench(bo), pldr::Error);

    pldr_load_options c = pldr_load_default_options();
    EXPECT_STREQ(c.device, "cpu");
    c.device = "cuda";
    pldr_model* m = nullptr;
    if (!gpu_visible()) {
        EXPECT_EQ(pldr_model_load_with(kModel.c_str(), &c, &m), PLDR_ERR_FAILED);
        EXPECT_EQ(m, nullptr);
        EXPECT_NE(std::string(pldr_last_error()).find("device cuda"), std::string::npos);
    }
    c.device = "cpu";
    ASSERT_EQ(pldr_model_load_with(kModel.c_str(), &c, &m), PLDR_OK) << pldr_last_error();
    pldr_model_free(m);
}

// The largest |a − b| over a tensor, relative to its largest |b| (at least 1).
double rel_diff(const pldr::api::Tensor& a, const pldr::api::Tensor& b) {
    EXPECT_EQ(a.shape, b.shape);
    double d = 0, m = 1;
    for (int64_t i = 0; i < b.numel(); ++i) {
        d = std::max(d, std::abs(a.f64()[i] - b.f64()[i]));
        m = std::max(m, std::abs(b.f64()[i]));
    }
    return d / m;
}

TEST(Device, AModelOnTheGpuRunsItsJobsThereAndRefusesTheRest) {
    if (!gpu_visible()) GTEST_SKIP() << "skipped: no CUDA device";
    pldr::api::LoadOptions lo;
    lo.dtype = pldr::api::DType::F64;  // float64: the GPU's forward equals the CPU's to 1e-12
    const pldr::api::Model cpu = pldr::api::Model::load(kModel, lo);
    lo.device = "cuda";
    const pldr::api::Model gpu = pldr::api::Model::load(kModel, lo);
    const std::vector<int64_t> ids = {5, 6, 7, 8, 9, 10, 11, 12};
    const pldr::api::ForwardResult a = gpu.forward(ids, 2), b = cpu.forward(ids, 2);
    ASSERT_EQ(a.tensors.size(), b.tensors.size());
    for (size_t i = 0; i < b.tensors.size(); ++i) {
        SCOPED_TRACE(b.tensors[i].first);
        ASSERT_EQ(a.tensors[i].first, b.tensors[i].first);
        if (b.tensors[i].second.dtype != pldr::api::DType::F64) continue;
        EXPECT_LE(rel_diff(a.tensors[i].second, b.tensors[i].second), 1e-12);
    }
    // the gradient: every parameter's within 1e-12 of the CPU's, the loss's figures too
    const std::vector<int64_t> tokens = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
    const pldr::api::DagCoefficients dag{0.01, 0.01, 0.01};
    const pldr::api::Gradients ga = gpu.loss_and_grads(tokens, 2, dag);
    const pldr::api::Gradients gb = cpu.loss_and_grads(tokens, 2, dag);
    EXPECT_NEAR(ga.loss.value, gb.loss.value, 1e-12 * std::fabs(gb.loss.value));
    EXPECT_NEAR(ga.loss.dagA, gb.loss.dagA, 1e-12 * std::fabs(gb.loss.dagA) + 1e-300);
    EXPECT_EQ(ga.loss.scored, gb.loss.scored);
    ASSERT_EQ(ga.grads.size(), gb.grads.size());
    for (size_t i = 0; i < gb.grads.size(); ++i) {
        SCOPED_TRACE(gb.grads[i].first);
        ASSERT_EQ(ga.grads[i].first, gb.grads[i].first);
        EXPECT_LE(rel_diff(ga.grads[i].second, gb.grads[i].second), 1e-12);
    }
    // every other job: one line that says which jobs run there
    // a preset G-cache file (another prompt's), in a session and in generation
    const std::string gfile = cli_test::tmp_dir("device_gcache") + "/g.gcache";
    {
        pldr::api::Session src(cpu, pldr::api::CacheMode::KVG, 8);
        src.prefill({9, 8, 7, 6});
        src.save_g_cache(gfile);
        pldr::api::Session sg(gpu, pldr::api::CacheMode::KV, 8),
            sc(cpu, pldr::api::CacheMode::KV, 8);
        sg.load_g_cache(gfile);
        sc.load_g_cache(gfile);
        EXPECT_LE(rel_diff(sg.prefill({5, 6, 7}), sc.prefill({5, 6, 7})), 1e-12);
        EXPECT_LE(rel_diff(sg.decode(9), sc.decode(9)), 1e-12);
        sg.reset();  // the preset stays
        sc.reset();
        EXPECT_LE(rel_diff(sg.prefill({4, 5}), sc.prefill({4, 5})), 1e-12);
        // a session's own G-cache, as the CPU's (and saved the same)
        pldr::api::Session og(gpu, pldr::api::CacheMode::KVG, 8);
        og.prefill({9, 8, 7, 6});
        const auto own = og.g_cache(), want = src.g_cache();
        ASSERT_EQ(own.size(), want.size());
        for (size_t l = 0; l < want.size(); ++l) {
            EXPECT_LE(rel_diff(own[l].G_LM, want[l].G_LM), 1e-12);
            EXPECT_LE(rel_diff(own[l].A_LM, want[l].A_LM), 1e-12);
        }
        og.save_g_cache(gfile + ".gpu");
        pldr::api::Session back(cpu, pldr::api::CacheMode::KVG, 8);
        back.load_g_cache(gfile + ".gpu");
        EXPECT_LE(rel_diff(back.prefill({5, 6}), sc.prefill({5, 6})), 1e-12);
    }
    // generation: the CPU's greedy tokens in every cache mode, with and without a preset
    for (const auto mode :
         {pldr::api::CacheMode::KVG, pldr::api::CacheMode::KV, pldr::api::CacheMode::NONE}) {
        pldr::api::GenerateOptions go;
        go.sampling.temperature = 0;
        go.max_tokens = 6;
        go.stop_at_eos = false;
        go.cache = mode;
        EXPECT_EQ(gpu.generate_ids({5, 6, 7}, go).ids, cpu.generate_ids({5, 6, 7}, go).ids);
        go.g_cache_file = gfile;
        EXPECT_EQ(gpu.generate_ids({5, 6, 7}, go).ids, cpu.generate_ids({5, 6, 7}, go).ids);
    }
    // scoring in every mode, with its alternatives: the CPU's log-probabilities
    for (const auto mode : {pldr::api::ScoreMode::BLOCK, pldr::api::ScoreMode::SEQUENTIAL,
                            pldr::api::ScoreMode::CACHED}) {
        pldr::api::ScoreOptions so;
        so.mode = mode;
        so.top_logprobs = 3;
        const auto sa = gpu.score_ids({5, 6, 7}, {8, 9}, so),
                   sb = cpu.score_ids({5, 6, 7}, {8, 9}, so);
        EXPECT_NEAR(sa.logprob, sb.logprob, 1e-12 * std::fabs(sb.logprob)) << name_of(mode);
        EXPECT_EQ(sa.is_greedy, sb.is_greedy);
        ASSERT_EQ(sa.top.size(), sb.top.size());
    }
    // sessions: prefill, decode and a batched step (one step of both on the device) as the CPU's
    for (const auto mode :
         {pldr::api::CacheMode::KVG, pldr::api::CacheMode::KV, pldr::api::CacheMode::NONE}) {
        pldr::api::Session sg(gpu, mode, 8), sc(cpu, mode, 8), sg2(gpu, mode, 8), sc2(cpu, mode, 8);
        EXPECT_LE(rel_diff(sg.prefill({5, 6, 7}), sc.prefill({5, 6, 7})), 1e-12);
        EXPECT_LE(rel_diff(sg.decode(9), sc.decode(9)), 1e-12);
        sg2.prefill({4, 3});
        sc2.prefill({4, 3});
        const auto bg = pldr::api::decode_batch({&sg, &sg2}, {10, 11});
        const auto bc = pldr::api::decode_batch({&sc, &sc2}, {10, 11});
        for (size_t i = 0; i < 2; ++i) EXPECT_LE(rel_diff(bg[i], bc[i]), 1e-12);
        EXPECT_EQ(sg.tokens(), sc.tokens());
        EXPECT_EQ(sg.capacity(), 8);
    }
    for (const auto& job : std::vector<std::function<void()>>{
             [&] {
                 pldr::api::Session s(gpu, pldr::api::CacheMode::KVG, 8);
                 s.prefill({5, 6});
                 s.g_cache();
             },
             [&] {
                 pldr::api::Session s(gpu, pldr::api::CacheMode::KVG, 8);
                 s.prefill({5, 6});
                 s.last_outputs();
             }}) {
        try {
            job();
            ADD_FAILURE() << "a job ran on the GPU model";
        } catch (const pldr::Error& e) {
            EXPECT_NE(std::string(e.what()).find("not yet this job"), std::string::npos)
                << e.what();
        }
    }
    // pldr bench: the prefill, decode and training steps run there, against the GPU's limits,
    // each with its repetitions and the device's memory; batched decode in pairs with batch 1
    pldr::api::BenchOptions bo;
    bo.device = "cuda";
    bo.config = "S";
    bo.min_time = 0;
    bo.train_batch = 2;
    bo.train_seq = 32;
    for (const auto w : {pldr::api::BenchWorkload::PREFILL, pldr::api::BenchWorkload::DECODE,
                         pldr::api::BenchWorkload::TRAIN}) {
        bo.workload = w;
        bo.reps = 3;
        const pldr::api::BenchResult r = pldr::api::bench(bo);
        EXPECT_EQ(r.tok_s_reps.size(), 3u);
        EXPECT_GT(r.tok_s.min, 0);
        EXPECT_GT(r.device_peak_bytes, r.device_param_bytes);
        if (w == pldr::api::BenchWorkload::PREFILL) {
            EXPECT_GT(r.device_param_bytes, 0);
        }
        if (w == pldr::api::BenchWorkload::TRAIN) {
            EXPECT_TRUE(std::isfinite(r.loss));
        }
    }
    bo.workload = pldr::api::BenchWorkload::DECODE;
    bo.batch = 4;
    bo.pair_batch1 = true;
    const pldr::api::BenchResult rb = pldr::api::bench(bo);
    EXPECT_EQ(rb.tok_s_reps.size(), 3u);
    ASSERT_EQ(rb.batch1_reps.size(), 3u);
    EXPECT_EQ(rb.x_batch1.n, 3);
    double lowest = 1e300;
    for (size_t i = 0; i < 3; ++i) {
        EXPECT_GT(rb.batch1_reps[i], 0);
        lowest = std::min(lowest, rb.tok_s_reps[i] / rb.batch1_reps[i]);
    }
    EXPECT_DOUBLE_EQ(rb.x_batch1.min, lowest);  // each pair's ratio
    const pldr::api::BenchLimits lim = pldr::api::measure_bench_limits(1, "cuda");
    EXPECT_GT(lim.read_gbs, 50);        // any HBM or GDDR GPU of today
    EXPECT_GT(lim.sgemm_gflops, 1000);  // and its float32 products
    EXPECT_GT(lim.bf16_gflops, lim.sgemm_gflops);
}

// pldr eval's benchmarks on the GPU (infer/tasks.h with the scoring passes there): TruthfulQA
// in block and sequential scoring and PIQA in block, float64, every choice's log-likelihood
// within 1e-10 of the CPU's and the same metrics.
TEST(Device, EvaluationOnTheGpuScoresAsTheCpu) {
    if (!gpu_visible()) GTEST_SKIP() << "skipped: no CUDA device";
    const std::string dir =
        std::string(PLDR_SOURCE_DIR) + "/tests/golden/eval/models/eval_v510_s2024";
    const std::string data = std::string(PLDR_SOURCE_DIR) + "/data/eval/";
    pldr::api::LoadOptions lo;
    lo.dtype = pldr::api::DType::F64;
    const pldr::api::Model cpu = pldr::api::Model::load(dir, lo);
    lo.device = "cuda";
    const pldr::api::Model gpu = pldr::api::Model::load(dir, lo);
    const auto same = [](const pldr::api::McAccuracy& a, const pldr::api::McAccuracy& b) {
        ASSERT_EQ(a.lls.size(), b.lls.size());
        for (size_t i = 0; i < b.lls.size(); ++i) {
            ASSERT_EQ(a.lls[i].size(), b.lls[i].size());
            for (size_t c = 0; c < b.lls[i].size(); ++c)
                EXPECT_NEAR(a.lls[i][c], b.lls[i][c], 1e-10 * std::fabs(b.lls[i][c]))
                    << "item " << i << " choice " << c;
        }
        EXPECT_EQ(a.item_mc1, b.item_mc1);
        EXPECT_EQ(a.item_acc, b.item_acc);
        EXPECT_EQ(a.item_acc_norm, b.item_acc_norm);
    };
    for (const auto mode : {pldr::api::ScoreMode::BLOCK, pldr::api::ScoreMode::SEQUENTIAL}) {
        const std::string tq = data + "truthfulqa/mc_task.dev.json";
        same(pldr::api::eval_truthfulqa(gpu, tq, mode, 2),
             pldr::api::eval_truthfulqa(cpu, tq, mode, 2));
    }
    const std::string pj = data + "piqa/valid.jsonl", pl = data + "piqa/valid-labels.lst";
    same(pldr::api::eval_piqa(gpu, pj, pl, pldr::api::ScoreMode::BLOCK, 3),
         pldr::api::eval_piqa(cpu, pj, pl, pldr::api::ScoreMode::BLOCK, 3));
}

// pldr perplexity on a shard with the model on the GPU (the Trainer's validation through the
// device's loss): float64, the loss, cross-entropy, accuracy and DAG metrics as the CPU's.
TEST(Device, AShardsPerplexityOnTheGpuIsTheCpus) {
    if (!gpu_visible()) GTEST_SKIP() << "skipped: no CUDA device";
    const std::string d = cli_test::tmp_dir("device_shard");
    std::vector<int64_t> t;
    for (int i = 0; i < 9 * 6; ++i) t.push_back((7 * i + 3) % 50);
    pldr::write_shard(d + "/valid.pldrtok", t, 50, 9);
    pldr::api::LoadOptions lo;
    lo.dtype = pldr::api::DType::F64;
    const pldr::api::Model cpu = pldr::api::Model::load(kModel, lo);
    lo.device = "cuda";
    const pldr::api::Model gpu = pldr::api::Model::load(kModel, lo);
    const pldr::api::ShardEval a = pldr::api::evaluate_shard(gpu, d + "/valid.pldrtok", 4);
    const pldr::api::ShardEval b = pldr::api::evaluate_shard(cpu, d + "/valid.pldrtok", 4);
    EXPECT_EQ(a.chunks, b.chunks);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.accuracy, b.accuracy);
    for (const auto& [x, y] :
         {std::pair{a.loss, b.loss}, std::pair{a.ce, b.ce}, std::pair{a.dagA, b.dagA},
          std::pair{a.dagAp, b.dagAp}, std::pair{a.dagG, b.dagG}})
        EXPECT_NEAR(x, y, 1e-10 * std::fabs(y));
    EXPECT_GT(b.dagA, 0);  // (a learned-G model: the DAG metrics are compared, not zeros)
}

// pldr train --device cuda: the steps' forward and backward on the GPU (the Trainer's
// StepBackend), the rest as on the CPU. Three float64 steps of the tiny preset from the same
// init give the CPU's checkpoint: the trained models' logits within 1e-9 of each other; and a
// stop and resume on the device gives the uninterrupted run's files, bit for bit.
TEST(Device, TrainingOnTheGpuTakesTheCpusSteps) {
    if (!gpu_visible()) GTEST_SKIP() << "skipped: no CUDA device";
    const std::string root = cli_test::tmp_dir("device_train");
    const std::string tok =
        std::string(PLDR_SOURCE_DIR) +
        "/data/tokenizer/refinedweb-tokenizer-model-pldrllm-kvg-cache-paper.model";
    const std::string text =
        std::string(PLDR_SOURCE_DIR) + "/data/corpus/tinyshakespeare/valid.txt";
    auto r =
        cli_test::run("prepare --tokenizer " + tok + " --out " + root + "/data --ctx 16 " + text);
    ASSERT_EQ(r.code, 0) << r.err;
    std::vector<pldr::api::ForwardResult> outs;
    for (const std::string dev : {"cpu", "cuda"}) {
        const std::string out = root + "/" + dev;
        r = cli_test::run(
            "train --preset tiny --dtype f64 --data " + root + "/data --out " + out +
            " --batch 2 --steps 3 --warmup 1 --save-every 0 --eval-every 0 --device " + dev);
        ASSERT_EQ(r.code, 0) << dev << ": " << r.err;
        pldr::api::LoadOptions lo;
        lo.dtype = pldr::api::DType::F64;
        outs.push_back(pldr::api::Model::load(out, lo).forward({5, 6, 7, 8}, 1));
    }
    const auto logits = [](const pldr::api::ForwardResult& f) {
        for (const auto& [name, t] : f.tensors)
            if (name == "fwd.logits") return t;
        ADD_FAILURE() << "no logits";
        return pldr::api::Tensor();
    };
    EXPECT_LE(rel_diff(logits(outs[1]), logits(outs[0])), 1e-9);
    // Resume on the device is exact: 3 float32 steps at once, or 1 step, a stop and a resume to
    // 3 (the moments downloaded into the checkpoint and uploaded again), give the same files.
    const std::string args = "train --preset tiny --data " + root +
                             "/data --batch 2 --steps 3 --warmup 1 --save-every 0 "
                             "--eval-every 0 --device cuda --out ";
    r = cli_test::run(args + root + "/full");
    ASSERT_EQ(r.code, 0) << r.err;
    r = cli_test::run(args + root + "/part --stop-at 1");
    ASSERT_EQ(r.code, 0) << r.err;
    r = cli_test::run("train --resume " + root + "/part --data " + root + "/data --out " + root +
                      "/part --device cuda");
    ASSERT_EQ(r.code, 0) << r.err;
    for (const char* f : {"model.safetensors", "train_state.safetensors"}) {
        const std::string a = cli_test::slurp(root + "/full/" + f);
        ASSERT_FALSE(a.empty()) << f;
        EXPECT_TRUE(a == cli_test::slurp(root + "/part/" + f)) << f << " differs";
    }
}

}  // namespace
