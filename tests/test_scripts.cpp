// scripts/check-readme.sh checks something: a README without any ./build/pldr command fails, a
// failing command fails, and a good one passes and is counted. scripts/check-sizes.py finds
// exactly the planted files and functions over the size limits of a tree. tests/check_layers.sh
// fails on every kind of include that breaks the layering, naming the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli_util.h"

namespace {

// Runs a shell command with its standard output and error in dir/out and dir/err.
cli_test::Result run_script(const std::string& cmd, const std::string& dir) {
    const int st = std::system((cmd + " >" + dir + "/out 2>" + dir + "/err").c_str());
    cli_test::Result r;
    r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    r.out = cli_test::slurp(dir + "/out");
    r.err = cli_test::slurp(dir + "/err");
    return r;
}

cli_test::Result check_readme(const std::string& readme_body) {
    const std::string dir = cli_test::tmp_dir("readme");
    std::ofstream(dir + "/README.md") << readme_body;
    return run_script("bash " + std::string(PLDR_SOURCE_DIR) + "/scripts/check-readme.sh " +
                          PLDR_BINARY_DIR + " " + dir + "/README.md",
                      dir);
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

// scripts/check-sizes.py --root ROOT: its exit code and its output.
cli_test::Result check_sizes(const std::string& root) {
    return run_script("/usr/bin/python3 " + std::string(PLDR_SOURCE_DIR) +
                          "/scripts/check-sizes.py --root " + root,
                      root);
}

void write(const std::string& root, const std::string& rel, const std::string& text) {
    const std::filesystem::path p = std::filesystem::path(root) / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
}

// `n` lines of plain statements.
std::string statements(int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += "    x += " + std::to_string(i) + ";\n";
    return s;
}

// A function of exactly `lines` lines: the signature line, the body, the closing brace.
std::string function_of(const std::string& name, int lines) {
    return "int " + name + "(int x) {\n" + statements(lines - 3) + "    return x;\n}\n";
}

TEST(CheckSizes, FindsExactlyThePlantedFilesAndFunctions) {
    const std::string root = cli_test::tmp_dir("sizes");
    // At the limits: nothing to report.
    write(root, "src/a/at_limit.cpp", function_of("at_limit", 150) + "\n");
    std::string lines600;
    for (int i = 0; i < 600; ++i) lines600 += "// line\n";
    write(root, "src/a/six_hundred.h", lines600);
    // Over them: a 151-line function (with a template head, counted from it) and a 601-line
    // file (its functions short), in subdirectories of src/ and tools/.
    write(root, "src/a/long.cpp",
          "// header\n\ntemplate <typename T>\nT long_one(T x) {\n" + statements(147) +
              "    return x;\n}\n");
    write(root, "tools/deep/er/big.h", function_of("short_one", 10) + lines600.substr(0, 591 * 8));
    // A function whose lambdas (short, one nested in another, one with a trailing return type
    // and mutable) count toward it: 160 lines, reported once under its own name.
    std::string lam = "void Outer::lambdas(int n) const {\n";
    lam += "    auto a = [&](int k) {\n" + statements(40) + "    };\n";
    lam += "    auto b = [=](int k) mutable -> int {\n        auto c = [](int j) { return j; };\n" +
           statements(40) + "        return c(k);\n    };\n";
    lam += "    std::sort(v.begin(), v.end(), [](int p, int q) { return p < q; });\n";
    lam += statements(160 - 1 - 42 - 44 - 1 - 1) + "}\n";
    write(root, "python/module.cpp", lam);
    // Braces inside a raw string, a comment, string and character literals, and a digit
    // separator: none of them opens or closes anything (155 and 152 lines).
    write(root, "src/b/literals.cpp",
          "namespace n {\n"
          "const char* raw() {\n"
          "    const char* s = R\"js(}} { \"}\" )\" }})js\";\n" +
              statements(150) +
              "    const char* t = u8R\"(}})\";\n"
              "    return s + t;\n"
              "}\n"
              "int commented(int x) {\n"
              "    // } } }\n"
              "    /* { {\n"
              "       } */\n"
              "    x += '}' + '{' + 1'000 + \"}\\\"}\";\n" +
              statements(145) +
              "    return x;\n"
              "}\n"
              "}  // namespace n\n");
    // Classes, namespaces and brace initializers are not functions; a constructor with an
    // initializer list is (151 lines); a table behind the marker is exempt, one whose marker is
    // not on the line just before it is not.
    write(root, "src/c/classes.h",
          "struct S {\n  public:\n    int a{1}, b = 2;\n    S(int x) : a{x}, b(x) {\n" +
              statements(149) + "    }\n" +
              "};\nenum class E { A, B };\nconst int k[] = {1, 2};\n" + "// size-limit: table\n" +
              function_of("table", 200) + "// size-limit: table\n\n" +
              function_of("not_marked", 151));
    // Files outside src/, tools/ and python/, or not C/C++, are not read.
    write(root, "tests/t.cpp", function_of("ignored", 700));
    write(root, "src/notes.txt", lines600 + "x\n");

    cli_test::Result r = check_sizes(root);
    EXPECT_EQ(r.code, 1) << r.out << r.err;
    EXPECT_EQ(r.out,
              "python/module.cpp:1: function Outer::lambdas is 160 lines (limit 150)\n"
              "src/a/long.cpp:3: function long_one is 151 lines (limit 150)\n"
              "src/b/literals.cpp:2: function raw is 155 lines (limit 150)\n"
              "src/b/literals.cpp:157: function commented is 152 lines (limit 150)\n"
              "src/c/classes.h:4: function S is 151 lines (limit 150)\n"
              "src/c/classes.h:361: function not_marked is 151 lines (limit 150)\n"
              "tools/deep/er/big.h: 601 lines (limit 600)\n");
    EXPECT_EQ(r.err, "");

    // Within the limits: OK, exit 0.
    for (const char* f : {"python/module.cpp", "src/a/long.cpp", "src/b/literals.cpp",
                          "src/c/classes.h", "tools/deep/er/big.h"})
        std::filesystem::remove(root + "/" + f);
    r = check_sizes(root);
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_EQ(r.out.rfind("check-sizes: OK (2 files, 1 functions;", 0), 0u) << r.out;

    // Unbalanced braces cannot be measured: exit 2, naming the file.
    write(root, "src/open.cpp", "void f() {\n");
    r = check_sizes(root);
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find("src/open.cpp"), std::string::npos) << r.err;
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
