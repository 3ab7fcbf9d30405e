// Helpers for tests that run the built `pldr` binary: capture exit code, stdout and stderr.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

namespace cli_test {

struct Result {
    int code = -1;  // exit code (-1 if killed by a signal)
    bool signaled = false;
    std::string out, err;
};

// The directories tmp_dir made; removed when the test process exits, unless
// PLDR_KEEP_TEST_TMP is set (to look at a failing test's files).
struct TmpDirs {
    std::vector<std::filesystem::path> made;
    ~TmpDirs() {
        const char* keep = std::getenv("PLDR_KEEP_TEST_TMP");
        if (keep && *keep) return;
        for (const auto& p : made) {
            std::error_code ec;
            std::filesystem::remove_all(p, ec);
        }
    }
};

inline TmpDirs& tmp_dirs() {
    static TmpDirs dirs;
    return dirs;
}

inline std::string tmp_dir(const std::string& name) {
    auto p = std::filesystem::temp_directory_path() /
             ("pldr_test_" + name + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(p);
    std::filesystem::create_directories(p);
    auto& made = tmp_dirs().made;
    if (std::find(made.begin(), made.end(), p) == made.end()) made.push_back(p);
    return p.string();
}

inline std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// Runs `pldr <args>` (args already shell-quoted as needed), in the working directory `cwd`
// ("" = this process's).
inline Result run_in(const std::string& cwd, const std::string& args) {
    static int counter = 0;
    const std::string base = tmp_dir("cli") + "/run" + std::to_string(counter++);
    const std::string cmd = (cwd.empty() ? "" : "cd '" + cwd + "' && ") +
                            std::string(PLDR_BINARY_DIR) + "/pldr " + args + " >" + base +
                            ".out 2>" + base + ".err";
    const int st = std::system(cmd.c_str());
    Result r;
    if (WIFEXITED(st)) {
        r.code = WEXITSTATUS(st);
    } else {
        r.signaled = true;
    }
    r.out = slurp(base + ".out");
    r.err = slurp(base + ".err");
    return r;
}

inline Result run(const std::string& args) {
    return run_in("", args);
}

inline int count_lines(const std::string& s) {
    int n = 0;
    for (char c : s) n += c == '\n';
    return n;
}

// `pldr <args>` must fail cleanly: exit code 1 (no signal), one line on stderr containing needle.
inline void expect_error(const std::string& args, const std::string& needle) {
    auto r = run(args);
    EXPECT_FALSE(r.signaled) << args;
    EXPECT_EQ(r.code, 1) << args << "\n" << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("error"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << "expected '" << needle << "' in: " << r.err;
}

}  // namespace cli_test
