// Data-parallel training (docs/distributed.md): `mpirun -np 2 pldr train` on loopback against
// one process, ZeRO-1 against plain data parallel, resume with the same and another number of
// ranks, and a failing, a killed and a hung rank stopping the whole job. Skipped (with the
// reason) in a build without MPI or where mpirun is missing.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cli_util.h"
#include "core/rng.h"
#include "io/model_load.h"
#include "io/safetensors.h"
#include "train/shard.h"

namespace fs = std::filesystem;
using namespace pldr;

namespace {

bool have_mpirun() {
#ifndef PLDR_MPI
    return false;
#else
    return std::system("command -v mpirun >/dev/null 2>&1") == 0;
#endif
}

#define REQUIRE_MPI()                                                                              \
    do {                                                                                           \
        if (!have_mpirun())                                                                        \
            GTEST_SKIP() << "needs a PLDR_MPI build and mpirun (scripts/install-deps.sh installs " \
                            "openmpi-bin)";                                                        \
    } while (0)

// mpirun on loopback as root, not bound to cores (other tests run beside it).
// With limit_s > 0, under `timeout`. In the sanitizer build LeakSanitizer is off for the ranks:
// Open MPI's own allocations (its plugins are unloaded at exit, so they cannot be suppressed by
// name) would fail every run; pldr's own code is leak-checked by the single-process tests.
std::string mpirun(int np, int limit_s = 0) {
    return std::string(
               "ASAN_OPTIONS=detect_leaks=0 "
               "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
               "OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=lo "
               "OMPI_MCA_oob_tcp_if_include=lo ") +
           (limit_s > 0 ? "timeout " + std::to_string(limit_s) + " " : "") +
           "mpirun --oversubscribe --bind-to none -np " + std::to_string(np) + " ";
}

std::string pldr_bin() {
    return std::string(PLDR_BINARY_DIR) + "/pldr";
}

cli_test::Result sh(const std::string& cmd) {
    static int counter = 0;
    const std::string base = cli_test::tmp_dir("dist_sh") + "/c" + std::to_string(counter++);
    const int st = std::system((cmd + " >" + base + ".out 2>" + base + ".err").c_str());
    cli_test::Result r;
    if (WIFEXITED(st))
        r.code = WEXITSTATUS(st);
    else
        r.signaled = true;
    r.out = cli_test::slurp(base + ".out");
    r.err = cli_test::slurp(base + ".err");
    return r;
}

// Random tokens: 96 chunks of 17 over a 60-token vocabulary, some pad (0) to exercise the
// global masked mean.
std::string make_data(const std::string& name) {
    const std::string d = cli_test::tmp_dir(name);
    Rng rng(11);
    const int64_t ctx = 17;
    std::vector<int64_t> t(size_t(96 * ctx)), v(size_t(8 * ctx));
    for (size_t i = 0; i < t.size(); ++i) {
        t[i] = 1 + int64_t(rng.below(59));
        if (i % 23 < 3) t[i] = 0;  // uneven pad per chunk
    }
    for (auto& x : v) x = 1 + int64_t(rng.below(59));
    write_shard(d + "/train.pldrtok", t, 60, ctx);
    write_shard(d + "/valid.pldrtok", v, 60, ctx);
    return d;
}

// Flat concatenation of every tensor of a safetensors file (sorted by name), as double.
std::vector<double> flat(const std::string& path) {
    SafetensorsFile f(path);
    std::vector<std::string> names;
    for (const auto& t : f.tensors()) names.push_back(t.name);
    std::sort(names.begin(), names.end());
    std::vector<double> out;
    for (const auto& n : names) {
        const Tensor<double> t = f.read<double>(n);
        out.insert(out.end(), t.data.begin(), t.data.end());
    }
    return out;
}

// max |a − b| / max |a| over the whole buffer.
double rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
    EXPECT_EQ(a.size(), b.size());
    double d = 0, m = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        d = std::max(d, std::abs(a[i] - b[i]));
        m = std::max(m, std::abs(a[i]));
    }
    return m > 0 ? d / m : d;
}

std::string train_args(const std::string& data, const std::string& out, int steps, int batch) {
    return " train --preset tiny --data " + data + " --out " + out + " --steps " +
           std::to_string(steps) + " --batch " + std::to_string(batch) +
           " --dtype f64 --numerics exact --eval-every 0 --eval-batches 1 --save-every 0";
}

// Losses of the training lines of a metrics file.
std::vector<double> losses(const std::string& metrics) {
    std::vector<double> out;
    std::ifstream in(metrics);
    std::string line;
    while (std::getline(in, line)) {
        const auto p = line.find("\"type\":\"train\"");
        if (p == std::string::npos) continue;
        const auto q = line.find("\"loss\":");
        out.push_back(std::stod(line.substr(q + 7)));
    }
    return out;
}

}  // namespace

// 2 ranks × batch B = 1 rank × batch 2B, float64 pure numerics (measured: docs/distributed.md).
TEST(DistMpi, TwoRanksEqualOneRankWithTwiceTheBatch) {
    REQUIRE_MPI();
    const std::string data = make_data("dist_eq");
    const std::string d = cli_test::tmp_dir("dist_eq_runs");
    const std::string P = pldr_bin();
    // Step 1 runs at lr 0 (warmup): the moments are the gradient itself, m = 0.1·g.
    ASSERT_EQ(sh(P + train_args(data, d + "/g1", 1, 6)).code, 0);
    auto r = sh(mpirun(2) + P + train_args(data, d + "/g2", 1, 3));
    ASSERT_EQ(r.code, 0) << r.err;
    const double g =
        rel_diff(flat(d + "/g1/train_state.safetensors"), flat(d + "/g2/train_state.safetensors"));
    EXPECT_LE(g, 1e-14) << "gradient (step 1)";
    EXPECT_GT(g, 0.0) << "expected summation-order differences; identical bits suggest one rank";

    // 10 steps at lr 1e-4: parameters within 1e-12 (measured 1.0e-15).
    ASSERT_EQ(sh(P + train_args(data, d + "/a1", 10, 6) + " --lr 1e-4").code, 0);
    r = sh(mpirun(2) + P + train_args(data, d + "/a2", 10, 3) + " --lr 1e-4");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_LE(rel_diff(flat(d + "/a1/model.safetensors"), flat(d + "/a2/model.safetensors")),
              1e-12);
    // The global loss of every step (the masked mean over the global batch, not a mean of
    // per-rank means: the pad makes them differ).
    const auto l1 = losses(d + "/a1/metrics.jsonl"), l2 = losses(d + "/a2/metrics.jsonl");
    ASSERT_EQ(l1.size(), 10u);
    ASSERT_EQ(l2.size(), 10u);
    for (size_t i = 0; i < l1.size(); ++i) EXPECT_NEAR(l1[i], l2[i], 1e-12 * l1[i]) << i;
    EXPECT_NE(r.out.find("data parallel: 2 ranks"), std::string::npos) << r.out;

    // 10 steps at the default lr 1e-3: AdamW's gain lr/eps = 100 on small gradients amplifies
    // the summation-order differences step by step (measured 4.7e-12 on the presets' data).
    ASSERT_EQ(sh(P + train_args(data, d + "/b1", 10, 6)).code, 0);
    ASSERT_EQ(sh(mpirun(2) + P + train_args(data, d + "/b2", 10, 3)).code, 0);
    EXPECT_LE(rel_diff(flat(d + "/b1/model.safetensors"), flat(d + "/b2/model.safetensors")),
              1e-10);
}

// ZeRO-1 (sharded moments, parameter all-gather) gives the same bits as plain data parallel,
// and its checkpoint (moments gathered on rank 0) is the same file.
TEST(DistMpi, Zero1IsBitIdenticalToPlainDataParallel) {
    REQUIRE_MPI();
    const std::string data = make_data("dist_z");
    const std::string d = cli_test::tmp_dir("dist_z_runs");
    const std::string P = pldr_bin();
    for (const char* clip : {"", " --clip-norm 0.5"}) {
        fs::remove_all(d + "/p");
        fs::remove_all(d + "/z");
        auto a = sh(mpirun(2) + P + train_args(data, d + "/p", 8, 3) + clip);
        auto b = sh(mpirun(2) + P + train_args(data, d + "/z", 8, 3) + " --zero1" + clip);
        ASSERT_EQ(a.code, 0) << a.err;
        ASSERT_EQ(b.code, 0) << b.err;
        EXPECT_TRUE(cli_test::slurp(d + "/p/model.safetensors") ==
                    cli_test::slurp(d + "/z/model.safetensors"))
            << clip;
        EXPECT_TRUE(cli_test::slurp(d + "/p/train_state.safetensors") ==
                    cli_test::slurp(d + "/z/train_state.safetensors"))
            << clip;
        EXPECT_NE(b.out.find("ZeRO-1"), std::string::npos) << b.out;
    }
}

// A 2-rank run stopped at step 4 resumes bit for bit (every rank's data position restored);
// the same checkpoint resumed by 1 rank keeps the global batch (3 per rank → 6) and continues
// the same data stream, equal up to summation order.
TEST(DistMpi, ResumeRestoresEveryRankAndAcceptsAnotherWorldSize) {
    REQUIRE_MPI();
    const std::string data = make_data("dist_r");
    const std::string d = cli_test::tmp_dir("dist_r_runs");
    const std::string P = pldr_bin();
    ASSERT_EQ(sh(mpirun(2) + P + train_args(data, d + "/full", 9, 3) + " --lr 1e-4").code, 0);
    auto r = sh(mpirun(2) + P + train_args(data, d + "/part", 9, 3) + " --lr 1e-4 --stop-at 4");
    ASSERT_EQ(r.code, 0) << r.err;
    fs::copy(d + "/part", d + "/part1", fs::copy_options::recursive);
    r = sh(mpirun(2) + P + " train --resume " + d + "/part --data " + data + " --out " + d +
           "/part --dtype f64");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(cli_test::slurp(d + "/full/model.safetensors") ==
                cli_test::slurp(d + "/part/model.safetensors"));
    EXPECT_TRUE(cli_test::slurp(d + "/full/train_state.safetensors") ==
                cli_test::slurp(d + "/part/train_state.safetensors"));
    // One rank.
    r = sh(P + " train --resume " + d + "/part1 --data " + data + " --out " + d +
           "/part1 --dtype f64");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("written by 2 rank(s); 1 continue"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("global batch of 6 chunks (6 per rank)"), std::string::npos) << r.out;
    const double diff =
        rel_diff(flat(d + "/full/model.safetensors"), flat(d + "/part1/model.safetensors"));
    EXPECT_LE(diff, 1e-12);
    EXPECT_GT(diff, 0.0);
    // Three ranks cannot split 6 chunks... they can (2 each); four cannot.
    fs::copy(d + "/part1", d + "/part4", fs::copy_options::recursive);
    r = sh(mpirun(4) + P + " train --resume " + d + "/part4 --data " + data + " --out " + d +
           "/part4 --steps 12 --dtype f64");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.err.find("does not split over 4 ranks"), std::string::npos) << r.err;
}

// A rank that fails stops every rank with its message (no hang).
TEST(DistMpi, AFailingRankStopsTheJob) {
    REQUIRE_MPI();
    const std::string data = make_data("dist_f");
    const std::string d = cli_test::tmp_dir("dist_f_runs");
    const std::string P = pldr_bin();
    // MPMD: rank 1 is given a data directory that does not exist.
    const auto t0 = std::chrono::steady_clock::now();
    auto r = sh(mpirun(1, 120) + P + train_args(data, d + "/o", 5, 2) + " : -np 1 " + P +
                train_args(d + "/missing", d + "/o", 5, 2));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.code, 124) << "the job hung";
    EXPECT_LT(s, 60);
    EXPECT_NE(r.err.find("pldr: error: rank 1 of 2: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("data directory does not exist"), std::string::npos) << r.err;
}

// A rank that stops responding (SIGSTOP) makes the others give up after --dist-timeout with a
// message naming the collective; a killed rank (SIGKILL) stops the job at once.
TEST(DistMpi, AHungOrKilledRankStopsTheJob) {
    REQUIRE_MPI();
    const std::string data = make_data("dist_h");
    const std::string d = cli_test::tmp_dir("dist_h_runs");
    const std::string P = pldr_bin();
    for (int sig : {SIGSTOP, SIGKILL}) {
        fs::remove_all(d + "/o");
        const std::string log = d + "/log" + std::to_string(sig);
        const std::string cmd = mpirun(2, 120) + P + train_args(data, d + "/o", 100000, 2) +
                                " --dist-timeout 3 >" + log + ".out 2>" + log + ".err; echo $? >" +
                                log + ".rc";
        const pid_t child = fork();
        if (child == 0) {
            execl("/bin/sh", "sh", "-c", cmd.c_str(), (char*)nullptr);
            _exit(127);
        }
        // Wait for training to run, then find rank 1 (its environment names its rank).
        pid_t rank1 = -1;
        for (int i = 0; i < 600 && rank1 < 0; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            if (!fs::exists(d + "/o/metrics.jsonl") ||
                cli_test::slurp(d + "/o/metrics.jsonl").empty())
                continue;
            for (const auto& e : fs::directory_iterator("/proc")) {
                const std::string env = cli_test::slurp(e.path().string() + "/environ");
                const std::string exe = cli_test::slurp(e.path().string() + "/cmdline");
                if (exe.find(d + "/o") != std::string::npos &&
                    env.find(std::string("OMPI_COMM_WORLD_RANK=1") + '\0') != std::string::npos) {
                    rank1 = pid_t(std::stol(e.path().filename().string()));
                    break;
                }
            }
        }
        ASSERT_GT(rank1, 0) << "rank 1 not found";
        const auto t0 = std::chrono::steady_clock::now();
        ::kill(rank1, sig);
        int st = 0;
        ::waitpid(child, &st, 0);
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        ::kill(rank1, SIGKILL);  // if still there
        const std::string rc = cli_test::slurp(log + ".rc"), err = cli_test::slurp(log + ".err");
        EXPECT_NE(rc, "0\n") << err;
        EXPECT_NE(rc, "124\n") << "the job hung: " << err;
        EXPECT_LT(s, 60);
        if (sig == SIGSTOP) {
            EXPECT_NE(err.find("pldr: error: rank 0 of 2: "), std::string::npos) << err;
            EXPECT_NE(err.find("did not complete within 3 s"), std::string::npos) << err;
        }
    }
}
