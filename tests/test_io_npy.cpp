// NumPy .npy writer (exact bytes) and reader.
#include <gtest/gtest.h>
#include <stdlib.h>
#include "error_util.h"

#include <cstring>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "core/fs.h"
#include "io/npy.h"

using namespace pldr;

namespace {

std::string fresh_dir() {
    std::string base = testing::TempDir();
    if (base.empty() || base.back() != '/') base += '/';
    std::string dir = base + "pldr_io_npy_XXXXXX";
    if (!::mkdtemp(dir.data())) throw std::runtime_error("mkdtemp failed");
    return dir;
}

}  // namespace

TEST(Npy, ExactBytesFloat2x3) {
    const float v[6] = {1.0f, -2.5f, 0.0f, 3.0f, 1e-3f, 7.0f};
    std::string b = npy_bytes<float>({2, 3}, v);
    const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    ASSERT_EQ(dict.size(), 59u);
    // 10 + 118 = 128: the data starts 64-byte aligned.
    std::string want =
        std::string("\x93NUMPY\x01\x00\x76\x00", 10) + dict + std::string(58, ' ') + "\n";
    ASSERT_EQ(want.size(), 128u);
    ASSERT_EQ(b.size(), 128u + 24);
    EXPECT_EQ(b.substr(0, 128), want);
    float back[6];
    std::memcpy(back, b.data() + 128, 24);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(back[i], v[i]);
    EXPECT_EQ(std::string(b.data() + 128, 4), std::string("\x00\x00\x80\x3f", 4));  // 1.0f LE
}

TEST(Npy, ShapesAndDescrs) {
    const double d[3] = {0.5, 1.5, -1.0};
    std::string b = npy_bytes<double>({3}, d);
    EXPECT_EQ(b.substr(10, 58), "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), } ");
    EXPECT_EQ(b.size(), 128u + 24);
    const int64_t i[1] = {-7};
    b = npy_bytes<int64_t>({}, i);  // 0-d array
    EXPECT_EQ(b.substr(10, 56), "{'descr': '<i8', 'fortran_order': False, 'shape': (), } ");
    EXPECT_EQ(b.size(), 128u + 8);  // 10 + 55 + 1 > 64: padded to 128
    EXPECT_EQ(b[127], '\n');
    EXPECT_EQ(b[126], ' ');
    int64_t back;
    std::memcpy(&back, b.data() + 128, 8);
    EXPECT_EQ(back, -7);
    b = npy_bytes<float>({4, 0, 2}, nullptr);
    EXPECT_NE(b.find("'shape': (4, 0, 2), }"), std::string::npos);
    EXPECT_EQ(b.size(), 128u);
    EXPECT_NE(error_of([] { npy_bytes<float>({-1}, nullptr); }).find("negative dimension"),
              std::string::npos);
}

TEST(Npy, SaveAndLoad) {
    std::string dir = fresh_dir();
    Tensor<double> t({2, 2, 3});
    for (int64_t k = 0; k < t.numel(); ++k) t[k] = 0.1 * double(k) - 0.3;
    save_npy(dir + "/t.npy", t);
    Tensor<double> r = load_npy<double>(dir + "/t.npy");
    EXPECT_EQ(r.shape, t.shape);
    EXPECT_EQ(r.data, t.data);
    Tensor<float> rf = load_npy<float>(dir + "/t.npy");
    EXPECT_EQ(rf[5], float(t[5]));
    Tensor<int64_t> ti({3}, std::vector<int64_t>{1, -2, int64_t(1) << 50});
    save_npy(dir + "/i.npy", ti);
    EXPECT_EQ(load_npy<int64_t>(dir + "/i.npy").data, ti.data);

    write_file_atomic(dir + "/bad.npy", "hello");
    EXPECT_NE(error_of([&] {
                  load_npy<float>(dir + "/bad.npy");
              }).find(dir + "/bad.npy: not a .npy file"),
              std::string::npos);
    std::string trunc = npy_bytes<double>(t.shape, t.ptr());
    write_file_atomic(dir + "/cut.npy", trunc.substr(0, trunc.size() - 8));
    EXPECT_NE(error_of([&] {
                  load_npy<double>(dir + "/cut.npy");
              }).find(".npy data has 88 bytes but shape [2,2,3] of <f8 needs 96"),
              std::string::npos);
    std::string fort = trunc;
    fort.replace(fort.find("False"), 5, "True ");
    write_file_atomic(dir + "/f.npy", fort);
    EXPECT_NE(error_of([&] { load_npy<double>(dir + "/f.npy"); }).find("Fortran-order"),
              std::string::npos);
    std::filesystem::remove_all(dir);
}
