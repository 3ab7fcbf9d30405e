// Reliability (issue 17): the output-vs-input check, crash-safe writes, the loader's tensor
// count bound, the JSON limits, and training that keeps its last good checkpoint when the
// numbers blow up.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "cli_util.h"
#include "core/fs.h"
#include "error_util.h"
#include "io/config_json.h"
#include "io/json_util.h"
#include "io/param_names.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"
#include "train/shard.h"

namespace fs = std::filesystem;

namespace {

void write(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << bytes;
}

}  // namespace

TEST(Reliability, RequireNotInputSeesPathsAndLinks) {
    const std::string d = cli_test::tmp_dir("rel_inputs");
    fs::create_directories(d + "/model/sub");
    write(d + "/model/config.json", "{}");
    write(d + "/model/sub/shard.safetensors", "x");
    write(d + "/other.txt", "y");
    fs::create_symlink(d + "/model/config.json", d + "/sym.json");
    fs::create_hard_link(d + "/other.txt", d + "/hard.txt");
    pldr::InputSet in;
    in.add_dir(d + "/model");
    in.add_file(d + "/other.txt");
    // Same path, a relative spelling, a symbolic link, a hard link, a shard in a sub-folder.
    EXPECT_ERROR_HAS(
        pldr::require_not_input(d + "/model/config.json", in, "--out"),
        "--out " + d + "/model/config.json would overwrite the input " + d + "/model/config.json");
    EXPECT_ERROR_HAS(pldr::require_not_input(d + "/model/../model/./config.json", in, "--out"),
                     "would overwrite the input");
    EXPECT_ERROR_HAS(pldr::require_not_input(d + "/sym.json", in, "--out"),
                     "would overwrite the input " + d + "/model/config.json");
    EXPECT_ERROR_HAS(pldr::require_not_input(d + "/hard.txt", in, "--x"),
                     "--x " + d + "/hard.txt would overwrite the input " + d + "/other.txt");
    EXPECT_ERROR_HAS(pldr::require_not_input(d + "/model/sub/shard.safetensors", in, "--out"),
                     "would overwrite the input");
    // New files, and other existing files, are fine.
    EXPECT_NO_THROW(pldr::require_not_input(d + "/new.safetensors", in, "--out"));
    EXPECT_NO_THROW(pldr::require_not_input(d + "/model/new.npy", in, "--out"));
    // Directories: the input directory itself (or a link to it) is refused, another is not.
    fs::create_directory_symlink(d + "/model", d + "/modellink");
    EXPECT_ERROR_HAS(pldr::require_dir_not_input(d + "/modellink", in, "--out"),
                     "is the input directory " + d + "/model");
    EXPECT_ERROR_HAS(pldr::require_dir_not_input(d, in, "--out", {"other.txt"}),
                     "other.txt would overwrite the input");
    EXPECT_NO_THROW(pldr::require_dir_not_input(d + "/fresh", in, "--out", {"config.json"}));
    EXPECT_FALSE(pldr::is_model_dir(d + "/model"));  // config.json without weights
    write(d + "/model/model.safetensors", "");
    EXPECT_TRUE(pldr::is_model_dir(d + "/model"));
}

// The output rule of every writer (core/fs.h require_output_file / require_output_dir): an empty
// path is refused; an existing model directory or training checkpoint is written only with
// force (a directory output that is one, a file output that replaces one of its files), except
// the command's own checkpoint; new paths beside them are fine; the input check holds even
// with force.
TEST(Reliability, OutputRule) {
    const std::string d = cli_test::tmp_dir("rel_rule");
    fs::create_directories(d + "/model");
    write(d + "/model/config.json", "{}");
    write(d + "/model/model.safetensors", "");
    fs::create_directories(d + "/ck");
    write(d + "/ck/config.json", "{}");
    write(d + "/ck/model.safetensors", "");
    write(d + "/ck/" + std::string(pldr::kTrainStateFile), "");
    fs::create_directories(d + "/half/.ckpt-new");  // a first checkpoint stopped in its swap
    write(d + "/half/.ckpt-new/COMMIT", "1\n");
    fs::create_directories(d + "/none/.ckpt-new");  // stopped before COMMIT: no checkpoint yet
    write(d + "/file.txt", "x");
    pldr::InputSet none, in;
    in.add_dir(d + "/model");
    EXPECT_ERROR_HAS(pldr::require_output_file("", none, "--out", false), "--out is empty");
    EXPECT_ERROR_HAS(pldr::require_output_file("", none, "--out", true), "--out is empty");
    EXPECT_ERROR_HAS(pldr::require_output_dir("", none, "--out", {}, true), "--out is empty");
    EXPECT_NO_THROW(pldr::require_output_file("-", none, "--out", false));  // standard output
    // Directories.
    EXPECT_TRUE(pldr::is_checkpoint_dir(d + "/ck"));
    EXPECT_TRUE(pldr::is_checkpoint_dir(d + "/half"));
    EXPECT_FALSE(pldr::is_checkpoint_dir(d + "/model"));
    EXPECT_FALSE(pldr::is_checkpoint_dir(d + "/none"));
    EXPECT_NO_THROW(pldr::require_output_dir(d + "/none", none, "--out", {}, false));
    EXPECT_ERROR_HAS(pldr::require_output_dir(d + "/model", none, "--out", {}, false),
                     "--out " + d + "/model is a model directory; writing there would replace it");
    EXPECT_ERROR_HAS(pldr::require_output_dir(d + "/ck", none, "--out", {}, false),
                     "is a pldr training checkpoint; writing there would replace it");
    EXPECT_ERROR_HAS(pldr::require_output_dir(d + "/half", none, "--out", {}, false),
                     "is a pldr training checkpoint");
    EXPECT_ERROR_HAS(pldr::require_output_dir(d + "/file.txt", none, "--out", {}, true),
                     "is a file, not a directory");
    EXPECT_NO_THROW(pldr::require_output_dir(d + "/model", none, "--out", {}, true));
    EXPECT_NO_THROW(pldr::require_output_dir(d + "/ck", none, "--out", {}, false, d + "/ck"));
    EXPECT_ERROR_HAS(pldr::require_output_dir(d + "/ck", none, "--out", {}, false, d + "/model"),
                     "is a pldr training checkpoint");
    EXPECT_NO_THROW(pldr::require_output_dir(d + "/fresh", none, "--out", {}, false));
    EXPECT_NO_THROW(pldr::require_output_dir(d, none, "--out", {}, false));
    EXPECT_ERROR_HAS(pldr::require_output_dir(d + "/model", in, "--out", {}, true),
                     "is the input directory");
    // Files: replacing a file of a model directory or checkpoint needs force; a new file there
    // does not; an input never.
    EXPECT_ERROR_HAS(pldr::require_output_file(d + "/ck/model.safetensors", none, "--out", false),
                     "would replace a file of a pldr training checkpoint (" + d + "/ck)");
    EXPECT_ERROR_HAS(pldr::require_output_file(d + "/model/config.json", none, "-o", false),
                     "-o " + d + "/model/config.json would replace a file of a model directory");
    EXPECT_NO_THROW(pldr::require_output_file(d + "/model/config.json", none, "--out", true));
    EXPECT_NO_THROW(pldr::require_output_file(d + "/model/g.safetensors", none, "--out", false));
    EXPECT_NO_THROW(pldr::require_output_file(d + "/file.txt", none, "--out", false));
    EXPECT_ERROR_HAS(pldr::require_output_file(d + "/model/config.json", in, "--out", true),
                     "would overwrite the input");
}

TEST(Reliability, AtomicWriteLeavesOnlyTheFile) {
    const std::string d = cli_test::tmp_dir("rel_atomic");
    const std::string p = d + "/f.bin";
    write(p, "old");
    pldr::write_file_atomic(p, std::string(100000, 'n'));
    EXPECT_EQ(cli_test::slurp(p), std::string(100000, 'n'));
    int files = 0;
    for (auto& e : fs::directory_iterator(d)) files += e.is_regular_file() ? 1 : 0;
    EXPECT_EQ(files, 1);  // no temporary left behind
    // A directory in the way: one clear error, the directory untouched.
    fs::create_directories(d + "/dir");
    EXPECT_ERROR_HAS(pldr::write_file_atomic(d + "/dir", "x"), "cannot write " + d + "/dir");
    EXPECT_TRUE(fs::is_directory(d + "/dir"));
}

// The tensor count of a config, computed without expanding names, equals the real list's size
// for every shape the probes must extrapolate (layers, residual units, dense layers, fixed G,
// biases off, tied head).
TEST(Reliability, ExpectedTensorCountMatchesTheList) {
    const pldr::Config base = pldr::load_config(std::string(PLDR_SOURCE_DIR) +
                                                "/tests/golden/models/a_tiny_v510.f32/config.json");
    int checked = 0;
    for (int64_t L : {1, 3, 7})
        for (int64_t R : {1, 2, 5})
            for (int64_t N : {1, 3})
                for (int variant = 0; variant < 4; ++variant) {
                    pldr::Config c = base;
                    c.num_layers = L, c.num_reslayerA = R, c.num_denseA = N;
                    if (variant == 1) c.g_type = pldr::GType::IDENTITY;
                    if (variant == 2) c.glu_bias = false, c.attention_bias = false;
                    if (variant == 3) c.tie_word_embeddings = true, c.final_bias = false;
                    EXPECT_EQ(pldr::expected_tensor_count(c),
                              double(pldr::expected_params(c).size()))
                        << "L " << L << " R " << R << " N " << N << " variant " << variant;
                    ++checked;
                }
    EXPECT_EQ(checked, 72);
    pldr::Config huge = base;
    huge.num_layers = int64_t(1) << 40;
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_GT(pldr::expected_tensor_count(huge), 1e13);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
}

TEST(Reliability, JsonLimits) {
    EXPECT_ERROR_HAS(pldr::parse_json_strict(std::string(65, '[') + std::string(65, ']'), "f"),
                     "f: malformed JSON: nested deeper than 64 levels");
    EXPECT_NO_THROW(pldr::parse_json_strict(std::string(60, '[') + std::string(60, ']'), "f"));
    // Many keys: sorted objects parse in n log n (the insertion-ordered type is quadratic and
    // took 77 s here for 200,000 keys; it refuses objects over 4096 keys).
    std::string big = "{";
    for (int i = 0; i < 200000; ++i) big += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":0";
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(pldr::parse_json_strict_map(big + "}", "f").size(), 200000u);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
    EXPECT_ERROR_HAS(pldr::parse_json_strict_map(big + ",\"k7\":1}", "f"), "duplicate key 'k7'");
    EXPECT_ERROR_HAS(pldr::parse_json_strict(big + "}", "f"),
                     "f: an object with more than 4096 keys");
    EXPECT_ERROR_HAS(pldr::parse_json_strict_map(big + "}", "f", 1000),
                     "f: an object with more than 1000 keys");
}

// Training that blows up (lr 1e30) stops with exit 1, names where the non-finite values appear,
// and the checkpoint it keeps is a good one: it loads, and a forward pass on it is finite.
TEST(Reliability, BlowUpKeepsAGoodCheckpoint) {
    const std::string d = cli_test::tmp_dir("rel_blowup");
    fs::create_directories(d + "/data");
    std::vector<int64_t> t;
    for (int i = 0; i < 9 * 24; ++i) t.push_back((11 * i + i / 7) % 50);
    pldr::write_shard(d + "/data/train.pldrtok", t, 50, 9);
    const std::string cfg =
        std::string(PLDR_SOURCE_DIR) + "/tests/golden/models/a_tiny_v510.f32/config.json";
    auto r = cli_test::run("train --config " + cfg + " --data " + d + "/data --out " + d +
                           "/o --steps 40 --batch 2 --lr 1e30 --warmup 0 --no-clip "
                           "--save-every 1 --eval-every 0");
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_EQ(cli_test::count_lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("non-finite"), std::string::npos) << r.err;
    const bool named = r.err.find("first appear in fwd.") != std::string::npos ||
                       r.err.find("grad.") != std::string::npos ||
                       r.err.find("is not finite; checkpoint not written") != std::string::npos;
    EXPECT_TRUE(named) << r.err;
    const size_t at = r.err.find("last good checkpoint (step ");
    ASSERT_NE(at, std::string::npos) << r.err;
    const int64_t step = std::stoll(r.err.substr(at + 27));
    EXPECT_GE(step, 1);
    // The kept checkpoint is that step's, its weights and moments are finite, and it loads: the
    // resume runs into the same wall at the same step (the maths are the checkpoint's).
    pldr::SafetensorsFile st(d + "/o/train_state.safetensors");
    EXPECT_EQ(st.metadata().at("step"), std::to_string(step));
    for (const auto& ti : st.tensors())
        for (double v : st.read<double>(ti.name).data) ASSERT_TRUE(std::isfinite(v)) << ti.name;
    pldr::SafetensorsFile w(d + "/o/model.safetensors");
    for (const auto& ti : w.tensors()) {
        if (!pldr::dtype_is_float(ti.dtype)) continue;
        for (double v : w.read<double>(ti.name).data) ASSERT_TRUE(std::isfinite(v)) << ti.name;
    }
    auto again =
        cli_test::run("train --resume " + d + "/o --data " + d + "/data --out " + d + "/o");
    EXPECT_EQ(again.code, 1) << again.err;
    EXPECT_NE(again.err.find("last good checkpoint (step " + std::to_string(step) + ")"),
              std::string::npos)
        << again.err;
}
