// scripts/check-readme.sh checks something: a README without any ./build/pldr command fails, a
// failing command fails, and a good one passes and is counted.
#include <gtest/gtest.h>

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

}  // namespace
