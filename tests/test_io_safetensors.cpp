// safetensors reader/writer: round trips, half-precision decoding, and every rejected input.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include "error_util.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "core/error.h"
#include "io/safetensors.h"

using namespace pldr;

namespace {

std::string fresh_dir() {
    std::string base = testing::TempDir();
    if (base.empty() || base.back() != '/') base += '/';
    std::string templ = base + "pldr_io_st_XXXXXX";
    char* p = ::mkdtemp(templ.data());
    if (!p) throw std::runtime_error("mkdtemp failed");
    return templ;
}

void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string u64le(uint64_t n) {
    std::string s(8, '\0');
    for (int i = 0; i < 8; ++i) s[i] = char((n >> (8 * i)) & 0xff);
    return s;
}

// A safetensors file from a header text and a data section.
std::string st_bytes(const std::string& header, const std::string& data) {
    return u64le(header.size()) + header + data;
}

class SafetensorsTest : public ::testing::Test {
  protected:
    void SetUp() override { dir = fresh_dir(); }
    void TearDown() override {
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
    }
    std::string path(const std::string& name) const { return dir + "/" + name; }
    // Writes header+data to a file and returns its path.
    std::string make(const std::string& name, const std::string& header, const std::string& data) {
        std::string p = path(name);
        write_bytes(p, st_bytes(header, data));
        return p;
    }
    std::string dir;
};

std::string u16s(std::initializer_list<uint16_t> v) {
    std::string s;
    for (uint16_t x : v) {
        s += char(x & 0xff);
        s += char(x >> 8);
    }
    return s;
}

}  // namespace

TEST_F(SafetensorsTest, RoundTripF32F64I64) {
    Tensor<float> a({2, 3}, std::vector<float>{1.5f, -2.25f, 3e-8f, 1e30f, -0.0f, 7.0f});
    Tensor<double> b({3}, std::vector<double>{0.1, -1e-300, 123456789.123456789});
    std::vector<int64_t> c = {-5, 0, int64_t(1) << 40, std::numeric_limits<int64_t>::min()};
    SafetensorsWriter w;
    w.add("b.double", b);
    w.add("a.float", a);
    w.add_i64("c.ints", {2, 2}, c.data());
    w.add_bool("d.flags", {3}, {true, false, true});
    w.set_metadata("format", "pt");
    EXPECT_EQ(w.size(), 4u);
    w.write(path("rt.safetensors"));

    SafetensorsFile f(path("rt.safetensors"));
    ASSERT_EQ(f.tensors().size(), 4u);
    EXPECT_EQ(f.metadata().at("format"), "pt");
    const TensorInfo& ia = f.at("a.float");
    EXPECT_EQ(ia.dtype, DType::F32);
    EXPECT_EQ(ia.shape, (Shape{2, 3}));
    EXPECT_EQ(ia.numel(), 6);
    EXPECT_EQ(ia.nbytes(), 24u);
    EXPECT_EQ(f.at("b.double").dtype, DType::F64);
    EXPECT_EQ(f.at("c.ints").dtype, DType::I64);
    EXPECT_EQ(f.at("d.flags").dtype, DType::BOOL);

    Tensor<float> ra = f.read<float>("a.float");
    EXPECT_EQ(ra.shape, a.shape);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(ra[i], a[i]) << i;
    EXPECT_TRUE(std::signbit(ra[4]));
    Tensor<double> rad = f.read<double>("a.float");  // F32 widened exactly
    for (int i = 0; i < 6; ++i) EXPECT_EQ(rad[i], double(a[i])) << i;
    Tensor<double> rb = f.read<double>("b.double");
    for (int i = 0; i < 3; ++i) EXPECT_EQ(rb[i], b[i]) << i;
    Tensor<float> rbf = f.read<float>("b.double");  // narrowed
    EXPECT_EQ(rbf[0], 0.1f);
    EXPECT_EQ(f.read_i64("c.ints"), c);
    EXPECT_EQ(f.read_i64("d.flags"), (std::vector<int64_t>{1, 0, 1}));
    Tensor<int64_t> ci = f.read<int64_t>("c.ints");
    EXPECT_EQ(ci.shape, (Shape{2, 2}));
    EXPECT_EQ(std::vector<int64_t>(ci.data.begin(), ci.data.end()), c);

    // Layout: 8-aligned header, tensors sorted by name and packed back to back.
    std::ifstream in(path("rt.safetensors"), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    EXPECT_EQ(n % 8, 0u);
    EXPECT_EQ(bytes.size(), 8 + n + 24 + 24 + 32 + 3);
    EXPECT_EQ(ia.begin, 0u);
    EXPECT_EQ(f.at("b.double").begin, 24u);
    EXPECT_EQ(f.at("c.ints").begin, 48u);
    EXPECT_EQ(f.at("d.flags").begin, 80u);
    float first;
    std::memcpy(&first, bytes.data() + 8 + n, 4);
    EXPECT_EQ(first, 1.5f);
}

TEST_F(SafetensorsTest, WriterExtraMetadataAndAddAs) {
    double src[3] = {1.0 / 3.0, 2.5, -4.0};
    SafetensorsWriter w;
    w.add_as<double>("x", DType::F32, {3}, src);
    w.set_metadata("mine", "1");
    w.write(path("m.safetensors"), {{"format", "pt"}, {"mine", "overridden?"}});
    SafetensorsFile f(path("m.safetensors"));
    EXPECT_EQ(f.metadata().at("format"), "pt");
    EXPECT_EQ(f.metadata().at("mine"), "1");  // the writer's own entry wins
    EXPECT_EQ(f.at("x").dtype, DType::F32);
    EXPECT_EQ(f.read<float>("x")[0], float(1.0 / 3.0));
    EXPECT_ERROR_HAS(w.add_as<double>("y", DType::F16, {3}, src), "unsupported dtype F16");
    EXPECT_ERROR_HAS(w.add_raw("z", DType::F32, {-1}, src), "negative dimension");
    EXPECT_ERROR_HAS(w.add_raw("__metadata__", DType::F32, {1}, src), "reserved");
    EXPECT_ERROR_HAS(w.add_bool("b", {2}, {true}), "has 1 values but shape [2]");
}

TEST_F(SafetensorsTest, ZeroSizedTensorAndEmptyFile) {
    std::string p = make("z.safetensors",
                         R"({"e":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]},)"
                         R"("x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                         std::string("\0\0\x80\x3f", 4));
    SafetensorsFile f(p);
    EXPECT_EQ(f.read<float>("e").numel(), 0);
    EXPECT_EQ(f.read<float>("e").shape, (Shape{0, 4}));
    EXPECT_EQ(f.read<float>("x")[0], 1.0f);
    SafetensorsFile g(make("empty.safetensors", "{}", ""));
    EXPECT_TRUE(g.tensors().empty());
}

TEST_F(SafetensorsTest, HalfAndBFloat16Decode) {
    // F16: 1, -2.5, smallest subnormal, largest subnormal, smallest normal, max, inf, -inf, -0
    std::string f16 =
        u16s({0x3C00, 0xC100, 0x0001, 0x03FF, 0x0400, 0x7BFF, 0x7C00, 0xFC00, 0x8000});
    // BF16: 1, -2.5, smallest subnormal, inf, 0x3EAB = 0.333984375, NaN
    std::string bf16 = u16s({0x3F80, 0xC020, 0x0001, 0x7F80, 0x3EAB, 0x7FC0});
    std::string p = make("half.safetensors",
                         R"({"bf":{"dtype":"BF16","shape":[6],"data_offsets":[18,30]},)"
                         R"("h":{"dtype":"F16","shape":[3,3],"data_offsets":[0,18]}})",
                         f16 + bf16);
    SafetensorsFile f(p);
    const double inf = std::numeric_limits<double>::infinity();
    const double want_h[9] = {1.0,
                              -2.5,
                              std::ldexp(1.0, -24),
                              1023 * std::ldexp(1.0, -24),
                              std::ldexp(1.0, -14),
                              65504.0,
                              inf,
                              -inf,
                              0.0};
    Tensor<float> hf = f.read<float>("h");
    Tensor<double> hd = f.read<double>("h");
    EXPECT_EQ(hf.shape, (Shape{3, 3}));
    for (int i = 0; i < 9; ++i) {
        EXPECT_EQ(double(hf[i]), want_h[i]) << i;
        EXPECT_EQ(hd[i], want_h[i]) << i;
    }
    EXPECT_TRUE(std::signbit(hf[8]));
    EXPECT_TRUE(std::signbit(hd[8]));
    const double want_b[5] = {1.0, -2.5, std::ldexp(1.0, -133), inf, 0.333984375};
    Tensor<float> bf = f.read<float>("bf");
    Tensor<double> bd = f.read<double>("bf");
    for (int i = 0; i < 5; ++i) {
        EXPECT_EQ(double(bf[i]), want_b[i]) << i;
        EXPECT_EQ(bd[i], want_b[i]) << i;
    }
    EXPECT_TRUE(std::isnan(bf[5]));
    EXPECT_TRUE(std::isnan(bd[5]));
}

TEST_F(SafetensorsTest, IntegerDtypesConvert) {
    std::string data;
    data += std::string("\xff\xff\xff\xff", 4);  // I32 -1
    data += std::string("\x02\x00\x00\x00", 4);  // I32 2
    data += std::string("\xfe", 1);              // I8 -2
    data += std::string("\xfe", 1);              // U8 254
    std::string p = make("ints.safetensors",
                         R"({"i32":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},)"
                         R"("i8":{"dtype":"I8","shape":[1],"data_offsets":[8,9]},)"
                         R"("u8":{"dtype":"U8","shape":[1],"data_offsets":[9,10]}})",
                         data);
    SafetensorsFile f(p);
    EXPECT_EQ(f.read_i64("i32"), (std::vector<int64_t>{-1, 2}));
    EXPECT_EQ(f.read<float>("i8")[0], -2.0f);
    EXPECT_EQ(f.read<double>("u8")[0], 254.0);
}

TEST_F(SafetensorsTest, RejectsBadFiles) {
    EXPECT_ERROR_HAS(SafetensorsFile(path("nope.safetensors")), "cannot open " + path("nope"));
    EXPECT_ERROR_HAS(SafetensorsFile(path("nope.safetensors")), "No such file");
    ::mkdir(path("adir").c_str(), 0755);
    EXPECT_ERROR_HAS(SafetensorsFile(path("adir")), "is a directory");
    write_bytes(path("zero"), "");
    EXPECT_ERROR_HAS(SafetensorsFile(path("zero")), "truncated safetensors file (0 bytes");
    write_bytes(path("five"), "abcde");
    EXPECT_ERROR_HAS(SafetensorsFile(path("five")),
                     path("five") + ": truncated safetensors file (5 bytes");
    write_bytes(path("hl"), u64le(1000) + "{}");
    EXPECT_ERROR_HAS(SafetensorsFile(path("hl")),
                     "header length 1000 runs past the end of the file (10 bytes)");
    write_bytes(path("hl0"), u64le(0) + "xx");
    EXPECT_ERROR_HAS(SafetensorsFile(path("hl0")), "empty");
}

TEST_F(SafetensorsTest, RejectsTruncatedData) {
    SafetensorsWriter w;
    Tensor<float> t({4}, std::vector<float>{1, 2, 3, 4});
    w.add("t", t);
    std::string bytes = w.serialize();
    write_bytes(path("cut"), bytes.substr(0, bytes.size() - 3));
    EXPECT_ERROR_HAS(
        SafetensorsFile(path("cut")),
        "tensor 't' data offsets [0,16) are outside the data section (13 bytes); truncated file?");
}

TEST_F(SafetensorsTest, RejectsBadOffsets) {
    std::string d12(12, '\0');
    EXPECT_ERROR_HAS(
        SafetensorsFile(make("ov",
                             R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                             d12)),
        "tensors 'a' and 'b' have overlapping data offsets");
    EXPECT_ERROR_HAS(
        SafetensorsFile(
            make("oor", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})", d12)),
        "data offsets [16,24) are outside the data section (12 bytes)");
    EXPECT_ERROR_HAS(SafetensorsFile(make(
                         "rev", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", d12)),
                     "data offsets [8,0) are outside");
    EXPECT_ERROR_HAS(SafetensorsFile(make(
                         "neg", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", d12)),
                     "tensor 'a' has invalid data offsets [-8,0]");
    EXPECT_ERROR_HAS(
        SafetensorsFile(
            make("flo", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0.0,8]}})", d12)),
        "invalid data offsets");
    EXPECT_ERROR_HAS(
        SafetensorsFile(
            make("three", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,12]}})", d12)),
        "data_offsets is not an array of two integers");
    EXPECT_ERROR_HAS(
        SafetensorsFile(make("hole",
                             R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                             d12)),
        "hole of 4 bytes before tensor 'b'");
    EXPECT_ERROR_HAS(
        SafetensorsFile(
            make("trail", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", d12)),
        "4 trailing bytes");
}

TEST_F(SafetensorsTest, RejectsBadEntries) {
    std::string d8(8, '\0');
    EXPECT_ERROR_HAS(SafetensorsFile(make(
                         "cnt", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", d8)),
                     "tensor 'a' has 8 bytes but shape [3] of F32 needs 12");
    EXPECT_ERROR_HAS(SafetensorsFile(make(
                         "cnt2", R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}})", d8)),
                     "has 8 bytes but shape [2] of F64 needs 16");
    EXPECT_ERROR_HAS(
        SafetensorsFile(
            make("dt", R"({"a":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})", d8)),
        "tensor 'a' has unknown dtype 'F8_E4M3'");
    EXPECT_ERROR_HAS(
        SafetensorsFile(make("dt2", R"({"a":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", d8)),
        "dtype is not a string");
    EXPECT_ERROR_HAS(SafetensorsFile(make(
                         "sh1", R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", d8)),
                     "tensor 'a' has an invalid shape 2.0");
    EXPECT_ERROR_HAS(SafetensorsFile(make(
                         "sh2", R"({"a":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}})", d8)),
                     "invalid shape");
    EXPECT_ERROR_HAS(SafetensorsFile(make(
                         "sh3", R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", d8)),
                     "invalid shape -2");
    EXPECT_ERROR_HAS(
        SafetensorsFile(make("sh4", R"({"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", d8)),
        "shape is not an array");
    EXPECT_ERROR_HAS(
        SafetensorsFile(make(
            "sh5",
            R"({"a":{"dtype":"F32","shape":[1048576,1048576,1048576],"data_offsets":[0,8]}})", d8)),
        "too large");
    EXPECT_ERROR_HAS(SafetensorsFile(make("miss", R"({"a":{"dtype":"F32","shape":[2]}})", d8)),
                     "malformed header entry for tensor 'a': no 'data_offsets'");
    EXPECT_ERROR_HAS(SafetensorsFile(make("notobj", R"({"a":[1,2]})", d8)),
                     "malformed header entry for tensor 'a': not an object");
}

TEST_F(SafetensorsTest, RejectsBadHeaders) {
    std::string d8(8, '\0');
    EXPECT_ERROR_HAS(SafetensorsFile(make("json", R"({"a":{"dtype":"F32",)", d8)),
                     "safetensors header: malformed JSON");
    EXPECT_ERROR_HAS(SafetensorsFile(make("json2", "not json at all", d8)), "malformed JSON");
    EXPECT_ERROR_HAS(SafetensorsFile(make("arr", "[1,2,3]", "")), "a JSON array, not an object");
    EXPECT_ERROR_HAS(SafetensorsFile(make("str", R"("hello")", "")),
                     "a JSON string, not an object");
    EXPECT_ERROR_HAS(
        SafetensorsFile(make("dup",
                             R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                             d8)),
        "duplicate key 'a'");
    EXPECT_ERROR_HAS(
        SafetensorsFile(make("meta1", R"({"__metadata__":{"format":"pt","n":1}})", "")),
        "__metadata__ value for 'n' is a number, not a string");
    EXPECT_ERROR_HAS(SafetensorsFile(make("meta2", R"({"__metadata__":["pt"]})", "")),
                     "__metadata__ is not an object");
    EXPECT_ERROR_HAS(SafetensorsFile(make("meta3", R"({"__metadata__":{"k":{"x":"y"}}})", "")),
                     "__metadata__ value for 'k' is a object");
    // Valid metadata is kept; padding spaces after the JSON are fine.
    SafetensorsFile ok(make("meta_ok", R"({"__metadata__":{"format":"pt"}}   )", ""));
    EXPECT_EQ(ok.metadata().at("format"), "pt");
}

TEST_F(SafetensorsTest, MissingTensorLookup) {
    SafetensorsWriter w;
    w.add("x", Tensor<float>({1}, 2.0f));
    w.write(path("one.safetensors"));
    SafetensorsFile f(path("one.safetensors"));
    EXPECT_TRUE(f.has("x"));
    EXPECT_FALSE(f.has("y"));
    EXPECT_EQ(f.find("y"), nullptr);
    EXPECT_ERROR_HAS(f.at("y"), path("one.safetensors") + ": missing tensor 'y'");
    EXPECT_ERROR_HAS(f.read<float>("y"), "missing tensor 'y'");
}

TEST(SafetensorsDType, NamesAndSizes) {
    DType t;
    EXPECT_TRUE(dtype_from_name("BF16", &t));
    EXPECT_EQ(t, DType::BF16);
    EXPECT_EQ(dtype_size(DType::BF16), 2u);
    EXPECT_EQ(dtype_size(DType::I64), 8u);
    EXPECT_STREQ(dtype_name(DType::F16), "F16");
    EXPECT_FALSE(dtype_from_name("f32", &t));  // names are case-sensitive
    EXPECT_TRUE(dtype_is_float(DType::BF16));
    EXPECT_FALSE(dtype_is_float(DType::BOOL));
}
