// Bad input to `pldr inspect` and `pldr dump` gets one clear error line and exit code 1 (never a
// signal): each case of the foundation issue, on damaged copies of a golden model directory.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "cli_util.h"
#include "io/model_load.h"

namespace fs = std::filesystem;

namespace {

const std::string kModel = std::string(PLDR_SOURCE_DIR) + "/tests/golden/models/a_tiny_v510.f32";

// A copy of the golden model directory that a test may damage.
std::string copy_model(const std::string& name) {
    const std::string d = cli_test::tmp_dir(name);
    fs::copy(kModel, d, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    for (auto& e : fs::directory_iterator(d))
        fs::permissions(e.path(), fs::perms::owner_read | fs::perms::owner_write);
    return d;
}

void write(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << bytes;
}

// Rewrites model.safetensors with its JSON header edited by `edit` (same data section).
void edit_header(const std::string& dir, const std::function<void(std::string&)>& edit) {
    const std::string p = dir + "/model.safetensors";
    std::string b = cli_test::slurp(p);
    uint64_t n;
    std::memcpy(&n, b.data(), 8);
    std::string h = b.substr(8, n), data = b.substr(8 + n);
    edit(h);
    uint64_t m = h.size();
    std::string out(reinterpret_cast<const char*>(&m), 8);
    write(p, out + h + data);
}

void expect_error(const std::string& args, const std::string& needle) {
    for (const char* cmd : {"inspect ", "dump --tokens 1,2,3 --out /dev/null "}) {
        auto r = cli_test::run(std::string(cmd) + args);
        EXPECT_FALSE(r.signaled) << cmd << args;
        EXPECT_EQ(r.code, 1) << cmd << args << "\n" << r.err;
        EXPECT_EQ(cli_test::count_lines(r.err), 1) << r.err;
        EXPECT_NE(r.err.find("error"), std::string::npos) << r.err;
        EXPECT_NE(r.err.find(needle), std::string::npos)
            << "expected '" << needle << "' in: " << r.err;
    }
}

TEST(CliErrors, GoodModelWorks) {
    auto r = cli_test::run("inspect " + kModel);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("12154"), std::string::npos);  // total parameters
    const std::string out = cli_test::tmp_dir("dumpok") + "/d.safetensors";
    r = cli_test::run("dump " + kModel + " --tokens 1,2,3 --tokens 4,5,6 --out " + out);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(fs::exists(out));
}

TEST(CliErrors, MissingDirectoryAndFile) {
    expect_error("/nonexistent/model", "does not exist");
    const std::string d = copy_model("nofile");
    fs::remove(d + "/model.safetensors");
    expect_error(d, "model.safetensors");
}

TEST(CliErrors, TruncatedSafetensors) {
    const std::string d = copy_model("trunc");
    std::string b = cli_test::slurp(d + "/model.safetensors");
    write(d + "/model.safetensors", b.substr(0, b.size() - 100));
    expect_error(d, "truncated");
    write(d + "/model.safetensors", b.substr(0, 5));
    expect_error(d, "truncated");
}

TEST(CliErrors, HeaderLengthPastEnd) {
    const std::string d = copy_model("hdr");
    std::string b = cli_test::slurp(d + "/model.safetensors");
    uint64_t n = b.size() + 10;
    std::memcpy(b.data(), &n, 8);
    write(d + "/model.safetensors", b);
    expect_error(d, "past the end");
}

TEST(CliErrors, OverlappingOffsets) {
    const std::string d = copy_model("overlap");
    // Point the embedding's data at the start of the data section (where another tensor lives).
    edit_header(d, [](std::string& h) {
        auto p = h.find("\"decoder.embedding.weight\"");
        auto o = h.find("\"data_offsets\":[", p);
        auto e = h.find(']', o);
        auto comma = h.find(',', o);
        const long len = std::stol(h.substr(comma + 1, e - comma - 1)) -
                         std::stol(h.substr(o + 16, comma - o - 16));
        h.replace(o + 16, e - o - 16, "0," + std::to_string(len));
    });
    expect_error(d, "overlap");
}

TEST(CliErrors, OutOfRangeOffsets) {
    const std::string d = copy_model("range");
    edit_header(d, [](std::string& h) {
        auto p = h.find("\"final_layer.bias\"");
        auto o = h.find("\"data_offsets\":[", p);
        auto e = h.find(']', o);
        h.replace(o + 16, e - o - 16, "99999992,99999992");
    });
    expect_error(d, "outside");
}

TEST(CliErrors, UnknownDtype) {
    const std::string d = copy_model("dtype");
    edit_header(d, [](std::string& h) {
        auto p = h.find("\"final_layer.bias\"");
        auto o = h.find("\"F32\"", p);
        h.replace(o, 5, "\"Q4K\"");
    });
    expect_error(d, "unknown dtype");
}

TEST(CliErrors, MissingTensor) {
    const std::string d = copy_model("missing");
    edit_header(d, [](std::string& h) {
        auto p = h.find("\"final_layer.bias\"");
        h.replace(p, 18, "\"final_layer.bisa\"");
    });
    expect_error(d, "missing tensor 'final_layer.bias'");
}

TEST(CliErrors, ShapeDisagreesWithConfig) {
    const std::string d = copy_model("shape");
    std::string c = cli_test::slurp(d + "/config.json");
    auto p = c.find("\"intermediate_size\": 42");
    ASSERT_NE(p, std::string::npos);
    c.replace(p, 23, "\"intermediate_size\": 41");
    write(d + "/config.json", c);
    expect_error(d, "config.json implies");
}

TEST(CliErrors, MalformedConfig) {
    const std::string d = copy_model("config");
    write(d + "/config.json", "{\"vocab_size\": 50, \"hidden_size\": ");
    expect_error(d, "config.json");
    write(d + "/config.json", "{\"vocab_size\": \"fifty\"}");
    expect_error(d, "vocab_size");
}

TEST(CliErrors, TokenIdOutsideVocabAndTooLong) {
    auto r = cli_test::run("dump " + kModel + " --tokens 1,2,50 --out /dev/null");
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find("token id 50 is outside the vocabulary"), std::string::npos) << r.err;
    EXPECT_EQ(cli_test::count_lines(r.err), 1);
    std::string ids = "1";
    for (int i = 1; i < 65; ++i) ids += ",1";  // 65 > max_position_embeddings 64
    r = cli_test::run("dump " + kModel + " --tokens " + ids + " --out /dev/null");
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find("longer than max_position_embeddings"), std::string::npos) << r.err;
    r = cli_test::run("dump " + kModel + " --tokens 1,x,3 --out /dev/null");
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find("not an integer"), std::string::npos) << r.err;
    r = cli_test::run("dump " + kModel + " --tokens 1,2 --tokens 3 --out /dev/null");
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find("equal lengths"), std::string::npos) << r.err;
}

}  // namespace

namespace {

TEST(CliErrors, GradRejectsBadDagCoefficients) {
    const std::string m = std::string(PLDR_SOURCE_DIR) + "/tests/golden/models/e_tiny_v510_dag.f32";
    auto r = cli_test::run("grad " + m + " --tokens 7,11,32,49 --dag -0.1,0,0 --out /dev/null");
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(cli_test::count_lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("must be >= 0"), std::string::npos) << r.err;
    r = cli_test::run("grad " + m + " --tokens 7,11,32,49 --dag 0.1,0.2 --out /dev/null");
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find("three coefficients"), std::string::npos) << r.err;
    const std::string out = cli_test::tmp_dir("gradok") + "/g.safetensors";
    r = cli_test::run("grad " + m + " --tokens 7,11,32,49 --dag 0.1,0.2,0.3 --dtype f64 --out " +
                      out);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("dag metrics"), std::string::npos);
}

}  // namespace
