// scripts/check-readme.sh checks something: a README without any ./build/pldr command fails, a
// failing command fails, and a good one passes and is counted. tests/check_layers.sh fails on
// every kind of include that breaks the layering, naming the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli_util.h"

namespace {

cli_test::Result check_readme(const std::string& readme_body) {
    const std::string dir = cli_test::tmp_dir("readme");
    std::ofstream(dir + "/README.md") << readme_body;
    const std::string cmd = "bash " + std::string(PLDR_SOURCE_DIR) + "/scripts/check-readme.sh " +
                            PLDR_BINARY_DIR + " " + dir + "/README.md >" + dir + "/out 2>" + dir +
                            "/err";
    const int st = std::system(cmd.c_str());
    cli_test::Result r;
    r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    r.out = cli_test::slurp(dir + "/out");
    r.err = cli_test::slurp(dir + "/err");
    return r;
}

TEST(CheckReadme, FailsWithoutCommandsOrOnAFailingCommand) {
    auto r = check_readme("# Title\n\n```sh\nls\n```\n");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.err.find("no ./build/pldr commands"), std::string::npos) << r.err;
    r = check_readme("```sh\n./build/pldr inspect tests/golden/models/no_such_model\n```\n");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.err.find("README command failed"), std::string::npos) << r.err;
    r = check_readme(
        "```sh\n./build/pldr inspect tests/golden/models/a_tiny_v510.f32   # a comment\n```\n"
        "./build/pldr outside a code block is not run\n");
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("README: 1 commands ran"), std::string::npos) << r.out;
}

// tests/check_layers.sh on a copy of src/core, src/ops and include/pldr (real files: ops includes
// only core, core only pldr/error.hpp) with a train/ and a model/ header of one line each.
class CheckLayers : public ::testing::Test {
  protected:
    std::string root;
    void SetUp() override {
        namespace fs = std::filesystem;
        root = cli_test::tmp_dir("layers");
        const fs::path src = PLDR_SOURCE_DIR;
        for (const char* d : {"src/core", "src/ops", "include/pldr"}) {
            fs::create_directories(root + "/" + d);
            fs::copy(src / d, root + "/" + d, fs::copy_options::recursive);
        }
        fs::create_directories(root + "/src/train");
        fs::create_directories(root + "/src/model");
        std::ofstream(root + "/src/train/loss.h") << "#pragma once\n#include \"core/tensor.h\"\n";
        std::ofstream(root + "/src/model/config.h") << "#pragma once\n#include <cstdint>\n";
    }
    cli_test::Result run() const {
        const std::string cmd = "bash " + std::string(PLDR_SOURCE_DIR) + "/tests/check_layers.sh " +
                                root + " >" + root + "/out 2>" + root + "/err";
        const int st = std::system(cmd.c_str());
        cli_test::Result r;
        r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        r.out = cli_test::slurp(root + "/out");
        r.err = cli_test::slurp(root + "/err");
        return r;
    }
    void append(const std::string& file, const std::string& text) const {
        std::ofstream(root + "/" + file, std::ios::app) << text;
    }
};

TEST_F(CheckLayers, PassesTheLayeredTree) {
    const auto r = run();
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("follow the layer matrix"), std::string::npos) << r.out;
}

TEST_F(CheckLayers, FailsOnAnUpwardIncludeNamingTheFile) {
    append("src/ops/softmax.h", "#include \"train/loss.h\"\n");
    const auto r = run();
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("src/ops/softmax.h:"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\"train/loss.h\": src/ops may include only core"), std::string::npos)
        << r.out;
    EXPECT_EQ(cli_test::count_lines(r.out), 1) << r.out;
}

TEST_F(CheckLayers, FailsOnEveryOtherBreach) {
    // ops includes the model's config in <...>; a public header includes an internal one; a
    // quoted header that is not in the file's folder; a folder with no row in the matrix.
    append("src/ops/rope.h", "#include <model/config.h>\n");
    append("include/pldr/pldr.hpp", "#include \"core/tensor.h\"\n");
    append("src/core/rng.h", "#include \"softmax.h\"\n");
    std::filesystem::create_directories(root + "/src/extra");
    const auto r = run();
    EXPECT_NE(r.code, 0) << r.out;
    for (const char* s :
         {"src/ops/rope.h:", "\"model/config.h\": src/ops may include only core",
          "include/pldr/pldr.hpp:", "include/pldr/ includes only include/pldr/",
          "src/core/rng.h:", "no header of src/core/", "src/extra: a folder with no row"})
        EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
    EXPECT_EQ(cli_test::count_lines(r.out), 4) << r.out;
}

}  // namespace
