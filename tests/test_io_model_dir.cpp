// Model directories: single-file and sharded checkpoints, tokenizer discovery, errors, writing.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
#include "error_util.h"
#include "golden_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/alloc.h"  // resident_fraction
#include "core/error.h"
#include "core/fs.h"
#include "io/config_json.h"
#include "io/model_dir.h"
#include "io/model_load.h"
#include "io/param_names.h"
#include "model/init.h"

using namespace pldr;

namespace {

// The a_tiny_v510 shape, smaller vocabulary.
Config tiny_config(GType g = GType::LEARNED) {
    Config c;
    c.vocab_size = 11;
    c.hidden_size = 8;
    c.intermediate_size = 10;
    c.num_layers = 2;
    c.num_heads = 2;
    c.head_dim = 4;
    c.max_position = 16;
    c.num_reslayerA = 2;
    c.num_denseA = 1;
    c.A_dff = 6;
    c.g_type = g;
    return c;
}

// Deterministic value of element k of the i-th expected tensor.
float value_of(size_t i, int64_t k) {
    return float(i) * 0.25f + float(k) * 0.001f - 1.0f;
}

// A tensor per expected_params(c), valued by value_of (past_G_values_status: BOOL true).
void fill(const Config& c, SafetensorsWriter* w, const std::vector<std::string>& only = {}) {
    auto specs = expected_params(c);
    for (size_t i = 0; i < specs.size(); ++i) {
        const ParamSpec& p = specs[i];
        if (!only.empty() && std::find(only.begin(), only.end(), p.name) == only.end()) continue;
        if (p.name == "decoder.past_G_values_status") {
            w->add_bool(p.name, p.shape, std::vector<bool>(size_t(shape_numel(p.shape)), true));
            continue;
        }
        Tensor<float> t(p.shape);
        for (int64_t k = 0; k < t.numel(); ++k) t[k] = value_of(i, k);
        w->add(p.name, t);
    }
}

size_t index_of(const Config& c, const std::string& name) {
    auto specs = expected_params(c);
    for (size_t i = 0; i < specs.size(); ++i)
        if (specs[i].name == name) return i;
    return size_t(-1);
}

class ModelDirTest : public ::testing::Test {
  protected:
    void SetUp() override {
        std::string base = testing::TempDir();
        if (base.empty() || base.back() != '/') base += '/';
        std::string templ = base + "pldr_io_md_XXXXXX";
        ASSERT_NE(::mkdtemp(templ.data()), nullptr);
        root = templ;
    }
    void TearDown() override {
        std::error_code ec;
        std::filesystem::remove_all(root, ec);
    }
    std::string p(const std::string& rel) const { return root + "/" + rel; }

    // Writes a 2-shard checkpoint of `c` in `dir`: shard 1 holds the embedding and layer 0,
    // shard 2 everything else.
    void write_sharded(const std::string& dir, const Config& c) {
        std::filesystem::create_directories(dir);
        save_config(c, dir + "/config.json");
        SafetensorsWriter s1, s2;
        nlohmann::ordered_json wm = nlohmann::ordered_json::object();
        std::vector<std::string> n1, n2;
        for (const auto& spec : expected_params(c)) {
            bool first = spec.name == "decoder.embedding.weight" ||
                         spec.name.rfind("decoder.dec_layers.0.", 0) == 0;
            (first ? n1 : n2).push_back(spec.name);
            wm[spec.name] =
                first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
        }
        fill(c, &s1, n1);
        fill(c, &s2, n2);
        s1.write(dir + "/model-00001-of-00002.safetensors", {{"format", "pt"}});
        s2.write(dir + "/model-00002-of-00002.safetensors", {{"format", "pt"}});
        nlohmann::ordered_json idx = {{"metadata", {{"total_size", 1234}}}, {"weight_map", wm}};
        write_file_atomic(dir + "/model.safetensors.index.json", idx.dump(2));
    }
    std::string root;
};

}  // namespace

TEST_F(ModelDirTest, SingleFileRoundTrip) {
    Config c = tiny_config();
    SafetensorsWriter w;
    fill(c, &w);
    save_model_dir(p("a/b/model"), c, w);  // creates the parents
    ModelFiles mf(p("a/b/model"));
    EXPECT_EQ(mf.dir(), p("a/b/model"));
    EXPECT_FALSE(mf.sharded());
    EXPECT_EQ(mf.weights_path(), p("a/b/model/model.safetensors"));
    EXPECT_EQ(mf.tokenizer_path(), "");
    EXPECT_EQ(mf.config().vocab_size, 11);
    EXPECT_EQ(mf.config().A_dff, 6);
    EXPECT_EQ(mf.names().size(), expected_params(c).size());
    const std::vector<std::string> names = mf.names();
    EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));

    const std::string n = "decoder.dec_layers.1.ffn.gluw3.weight";
    ASSERT_TRUE(mf.has(n));
    EXPECT_EQ(mf.info(n).shape, (Shape{8, 10}));
    EXPECT_EQ(mf.info(n).dtype, DType::F32);
    EXPECT_EQ(mf.file_of(n), p("a/b/model/model.safetensors"));
    const size_t i = index_of(c, n);
    Tensor<float> t = mf.read<float>(n);
    ASSERT_EQ(t.numel(), 80);
    for (int64_t k = 0; k < 80; ++k) EXPECT_EQ(t[k], value_of(i, k)) << k;
    Tensor<double> td = mf.read<double>(n);
    EXPECT_EQ(td[79], double(value_of(i, 79)));
    check_params_against_file(mf);
    EXPECT_TRUE(param_problems(mf).empty());

    SafetensorsFile raw(p("a/b/model/model.safetensors"));
    EXPECT_EQ(raw.metadata().at("format"), "pt");
    EXPECT_EQ(read_file(p("a/b/model/config.json")), config_to_json(c));

    // A tokenizer.model next to it is found.
    write_file_atomic(p("a/b/model/tokenizer.model"), "not really sentencepiece");
    EXPECT_EQ(ModelFiles(p("a/b/model")).tokenizer_path(), p("a/b/model/tokenizer.model"));
}

TEST_F(ModelDirTest, FixedGDirectoryWithBuffers) {
    Config c = tiny_config(GType::EXTERNAL);
    SafetensorsWriter w;
    fill(c, &w);
    save_model_dir(p("g"), c, w);
    ModelFiles mf(p("g"));
    EXPECT_EQ(mf.config().g_type, GType::EXTERNAL);
    EXPECT_EQ(mf.info("decoder.past_G_values").shape, (Shape{2, 3, 1, 2, 4, 4}));
    EXPECT_EQ(mf.info("decoder.past_G_values_status").dtype, DType::BOOL);
    Tensor<int64_t> st = mf.read<int64_t>("decoder.past_G_values_status");
    EXPECT_EQ(std::vector<int64_t>(st.data.begin(), st.data.end()), (std::vector<int64_t>{1, 1}));
    EXPECT_FALSE(mf.has("decoder.dec_layers.0.mha1.plgatt_layer.Wlst"));
    check_params_against_file(mf);
}

TEST_F(ModelDirTest, ShardedIndex) {
    Config c = tiny_config();
    write_sharded(p("sh"), c);
    ModelFiles mf(p("sh"));
    EXPECT_TRUE(mf.sharded());
    EXPECT_EQ(mf.weights_path(), p("sh/model.safetensors.index.json"));
    EXPECT_EQ(mf.names().size(), expected_params(c).size());
    EXPECT_EQ(mf.file_of("decoder.embedding.weight"), p("sh/model-00001-of-00002.safetensors"));
    EXPECT_EQ(mf.file_of("decoder.dec_layers.0.mha1.wq.bias"),
              p("sh/model-00001-of-00002.safetensors"));
    EXPECT_EQ(mf.file_of("final_layer.weight"), p("sh/model-00002-of-00002.safetensors"));
    for (const std::string n : {"decoder.embedding.weight", "final_layer.bias",
                                "decoder.dec_layers.1.mha1.reslayerAs.1.denseAs.0.gluw2.weight"}) {
        Tensor<float> t = mf.read<float>(n);
        const size_t i = index_of(c, n);
        for (int64_t k = 0; k < t.numel(); ++k) ASSERT_EQ(t[k], value_of(i, k)) << n << " " << k;
    }
    check_params_against_file(mf);

    // model.safetensors, when also present, wins.
    SafetensorsWriter w;
    fill(c, &w);
    w.write(p("sh/model.safetensors"));
    ModelFiles both(p("sh"));
    EXPECT_FALSE(both.sharded());
    EXPECT_EQ(both.file_of("final_layer.weight"), p("sh/model.safetensors"));
}

TEST_F(ModelDirTest, HalfPrecisionWeightsReadAsFloat) {
    Config c = tiny_config();
    SafetensorsWriter w;
    fill(c, &w);
    // Replace the final bias (11 values) by F16 values 1.0, -2.5, ...
    std::vector<uint16_t> h(11, 0x3C00);
    h[1] = 0xC100;
    w.add_raw("final_layer.bias", DType::F16, {11}, h.data());
    save_model_dir(p("h"), c, w);
    ModelFiles mf(p("h"));
    EXPECT_EQ(mf.info("final_layer.bias").dtype, DType::F16);
    Tensor<float> b = mf.read<float>("final_layer.bias");
    EXPECT_EQ(b[0], 1.0f);
    EXPECT_EQ(b[1], -2.5f);
    EXPECT_EQ(mf.read<double>("final_layer.bias")[1], -2.5);
}

TEST_F(ModelDirTest, OpenErrors) {
    EXPECT_ERROR_HAS(ModelFiles(p("nowhere")),
                     "model directory " + p("nowhere") + " does not exist");
    write_file_atomic(p("afile"), "x");
    EXPECT_ERROR_HAS(ModelFiles(p("afile")), p("afile") + " is not a directory");
    std::filesystem::create_directories(p("empty"));
    EXPECT_ERROR_HAS(ModelFiles(p("empty")), p("empty") + ": no config.json");
    save_config(tiny_config(), p("empty/config.json"));
    EXPECT_ERROR_HAS(ModelFiles(p("empty")),
                     p("empty") + ": no model.safetensors or model.safetensors.index.json");
    write_file_atomic(p("empty/config.json"), R"({"vocab_size": "many"})");
    EXPECT_ERROR_HAS(ModelFiles(p("empty")), p("empty/config.json") + ": key 'vocab_size'");
    // A broken model.safetensors is reported with its path.
    save_config(tiny_config(), p("empty/config.json"));
    write_file_atomic(p("empty/model.safetensors"), "abc");
    EXPECT_ERROR_HAS(ModelFiles(p("empty")), p("empty/model.safetensors") + ": truncated");
}

TEST_F(ModelDirTest, MissingTensorNamesTensorAndDir) {
    Config c = tiny_config();
    SafetensorsWriter w;
    fill(c, &w);
    save_model_dir(p("m"), c, w);
    ModelFiles mf(p("m"));
    EXPECT_FALSE(mf.has("decoder.nope"));
    EXPECT_ERROR_HAS(mf.info("decoder.nope"), p("m") + ": missing tensor 'decoder.nope'");
    EXPECT_ERROR_HAS(mf.read<float>("decoder.nope"), "missing tensor 'decoder.nope'");
    EXPECT_ERROR_HAS(mf.file_of("decoder.nope"), "missing tensor 'decoder.nope'");
}

TEST_F(ModelDirTest, ShardErrors) {
    Config c = tiny_config();
    write_sharded(p("s1"), c);
    std::filesystem::remove(p("s1/model-00002-of-00002.safetensors"));
    EXPECT_ERROR_HAS(ModelFiles(p("s1")), p("s1/model.safetensors.index.json") +
                                              ": shard 'model-00002-of-00002.safetensors'");
    EXPECT_ERROR_HAS(ModelFiles(p("s1")), "is missing from " + p("s1"));

    write_sharded(p("s2"), c);
    // Point a tensor of shard 2 at shard 1, which lacks it.
    nlohmann::ordered_json idx =
        nlohmann::ordered_json::parse(read_file(p("s2/model.safetensors.index.json")));
    idx["weight_map"]["final_layer.weight"] = "model-00001-of-00002.safetensors";
    write_file_atomic(p("s2/model.safetensors.index.json"), idx.dump());
    EXPECT_ERROR_HAS(ModelFiles(p("s2")),
                     "tensor 'final_layer.weight' is mapped to shard "
                     "'model-00001-of-00002.safetensors', which does not contain it");

    idx["weight_map"]["final_layer.weight"] = "../evil.safetensors";
    write_file_atomic(p("s2/model.safetensors.index.json"), idx.dump());
    EXPECT_ERROR_HAS(ModelFiles(p("s2")), "not a relative path inside the directory");
    idx["weight_map"]["final_layer.weight"] = 3;
    write_file_atomic(p("s2/model.safetensors.index.json"), idx.dump());
    EXPECT_ERROR_HAS(ModelFiles(p("s2")),
                     "weight_map entry for tensor 'final_layer.weight' is not a file name");
    write_file_atomic(p("s2/model.safetensors.index.json"), R"({"metadata": {}})");
    EXPECT_ERROR_HAS(ModelFiles(p("s2")),
                     p("s2/model.safetensors.index.json") + ": no 'weight_map' object");
    write_file_atomic(p("s2/model.safetensors.index.json"), R"({"weight_map": {}})");
    EXPECT_ERROR_HAS(ModelFiles(p("s2")), "'weight_map' is empty");
    write_file_atomic(p("s2/model.safetensors.index.json"), R"({"weight_map": )");
    EXPECT_ERROR_HAS(ModelFiles(p("s2")),
                     p("s2/model.safetensors.index.json") + ": malformed JSON");
}

TEST_F(ModelDirTest, SaveRejectsWrongTensors) {
    Config c = tiny_config();
    SafetensorsWriter w;
    fill(c, &w);
    w.add("decoder.dec_layers.0.mha1.wq.weight", Tensor<float>({8, 4}));
    EXPECT_ERROR_HAS(save_model_dir(p("bad"), c, w),
                     p("bad/model.safetensors") +
                         ": tensor 'decoder.dec_layers.0.mha1.wq.weight' has shape [8,4] but "
                         "config.json implies [8,8]");
    EXPECT_FALSE(std::filesystem::exists(p("bad")));  // nothing written
    save_model_dir(p("bad"), c, w, /*check_params=*/false);
    ModelFiles mf(p("bad"));
    EXPECT_ERROR_HAS(check_params_against_file(mf),
                     "tensor 'decoder.dec_layers.0.mha1.wq.weight' has shape [8,4]");

    Config bad = c;
    bad.hidden_act = "gelu";
    EXPECT_ERROR_HAS(save_model_dir(p("bad2"), bad, w, false),
                     p("bad2/config.json") + ": key 'hidden_act' is 'gelu'");
}

TEST_F(ModelDirTest, MakeDirs) {
    make_dirs(p("x/y/z/"));
    EXPECT_TRUE(std::filesystem::is_directory(p("x/y/z")));
    make_dirs(p("x/y/z"));  // exists already: fine
    write_file_atomic(p("x/f"), "");
    EXPECT_ERROR_HAS(make_dirs(p("x/f/g")),
                     "cannot create directory " + p("x/f") + ": a file is in the way");
}

// Every model directory of the golden set.
TEST(ModelDirGolden, EveryGoldenDirectoryChecksOut) {
    GOLDEN_USE(golden::set().model_dirs, "model directory");
    std::vector<std::string> dirs;
    for (const auto& d : golden::set().model_dirs) dirs.push_back(golden::dir() + "/" + d);
    for (const auto& d : dirs) {
        ModelFiles mf(d);
        EXPECT_NO_THROW(check_params_against_file(mf)) << d;
        int64_t n = 0;
        for (const auto& name : mf.names())
            if (name.rfind("decoder.past_G_values", 0) != 0) n += mf.info(name).numel();
        EXPECT_EQ(n, count_params(mf.config())) << d;
        Tensor<double> e = mf.read<double>("decoder.embedding.weight");
        EXPECT_EQ(e.shape, (Shape{mf.config().vocab_size, mf.config().hidden_size})) << d;
    }
}

// ---- Mapped parameters (load_model with map_file; model/param_buffer.h) ----

namespace {

template <typename T>
pldr::Model<T> random_model(const Config& c, uint64_t seed) {
    pldr::Model<T> m(c);
    pldr::init_weights(m, seed);
    return m;
}

}  // namespace

TEST_F(ModelDirTest, SavedModelsAreMappedWithTheSameValuesAndCopyOnWrite) {
    for (const GType g : {GType::LEARNED, GType::RANDOM}) {
        const Config c = tiny_config(g);
        const std::string dir = p(g == GType::LEARNED ? "learned" : "fixed");
        pldr::Model<float> m = random_model<float>(c, 3);
        if (g == GType::RANDOM)
            for (size_t i = 0; i < m.G_fixed.size(); ++i) m.G_fixed[i] = 0.01f * float(i % 17);
        pldr::save_model(m, dir, DType::F32);
        pldr::Model<float> a = pldr::load_model<float>(dir, true, /*map_file=*/true);
        pldr::Model<float> b = pldr::load_model<float>(dir, true, /*map_file=*/false);
        EXPECT_TRUE(a.params.is_mapped());
        EXPECT_FALSE(b.params.is_mapped());
        ASSERT_EQ(a.params.size(), m.params.size());
        EXPECT_EQ(0, std::memcmp(a.params.data(), m.params.data(), m.params.size() * 4));
        EXPECT_EQ(a.params, b.params);
        EXPECT_EQ(a.G_fixed, m.G_fixed);      // read beside the mapping
        EXPECT_EQ(a.w.emb, a.params.data());  // the views point into the mapping
        // A copy owns its values; writes to the mapping stay in this process.
        pldr::Model<float> copy = a;
        EXPECT_FALSE(copy.params.is_mapped());
        EXPECT_EQ(copy.params, a.params);
        a.params[0] += 1.0f;
        a.w.head_w[3] = 42.0f;
        pldr::Model<float> again = pldr::load_model<float>(dir, true, true);
        EXPECT_EQ(again.params, m.params);  // the file is unchanged
        // The file replaced (as pldr writes: by rename) while `again` is mapped: it keeps its
        // values; a new load sees the new ones.
        pldr::Model<float> other = random_model<float>(c, 4);
        pldr::save_model(other, dir, DType::F32);
        EXPECT_EQ(again.params, m.params);
        EXPECT_EQ(pldr::load_model<float>(dir, true, true).params, other.params);
    }
}

namespace {

// Whether this file system drops a file's clean pages from the page cache on
// POSIX_FADV_DONTNEED (tmpfs keeps them): a scratch file written, synced, advised.
bool drops_cached_pages(const std::string& path) {
    const size_t bytes = size_t(64) << 12;
    {
        std::ofstream f(path, std::ios::binary);
        const std::string block(bytes, 'x');
        f.write(block.data(), std::streamsize(bytes));
    }
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) return false;
    ::fsync(fd);
    ::posix_fadvise(fd, 0, off_t(bytes), POSIX_FADV_DONTNEED);
    void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) return false;
    const bool dropped = pldr::resident_fraction(p, bytes) < 0.5;
    ::munmap(p, bytes);
    return dropped;
}

}  // namespace

// A mapped embedding is read a row per token. Just written (the page cache holds all of it),
// its pages leave the cache at the load, so that a token's fault maps its own page only; the
// pages of the rows read since stay in the cache for the next load (else every run reads them
// from the disk again).
TEST_F(ModelDirTest, AMappedEmbeddingLeavesABulkCacheAndKeepsTheRowsReadBefore) {
    if (!drops_cached_pages(p("probe")))
        GTEST_SKIP() << "this file system keeps cached pages on POSIX_FADV_DONTNEED";
    Config c = tiny_config();
    c.vocab_size = 4096;  // 4,096 rows of 64 floats: 1 MB, 16 rows a page
    c.hidden_size = 64;
    c.intermediate_size = 32;
    c.num_heads = 4;
    c.head_dim = 16;
    const std::string dir = p("emb");
    pldr::save_model(random_model<float>(c, 6), dir, DType::F32);
    const size_t emb = size_t(c.vocab_size) * size_t(c.hidden_size) * sizeof(float);
    const std::vector<int64_t> read = {100, 900, 2047, 3001, 4000};
    {
        const pldr::Model<float> a = pldr::load_model<float>(dir, true, /*map_file=*/true);
        ASSERT_TRUE(a.params.is_mapped());
        EXPECT_LT(pldr::resident_fraction(a.w.emb, emb), 0.25);
        float sum = 0;
        for (int64_t r : read) sum += a.w.emb[size_t(r) * size_t(c.hidden_size)];
        EXPECT_TRUE(std::isfinite(sum));
    }
    const pldr::Model<float> b = pldr::load_model<float>(dir, true, /*map_file=*/true);
    for (int64_t r : read) {  // the page that holds row r
        const uintptr_t at =
            reinterpret_cast<uintptr_t>(b.w.emb + size_t(r) * size_t(c.hidden_size));
        EXPECT_EQ(pldr::resident_fraction(reinterpret_cast<void*>(at & ~uintptr_t(4095)), 4096),
                  1.0)
            << "row " << r;
    }
    EXPECT_LT(pldr::resident_fraction(b.w.emb, emb), 0.25);
}

// The edge of the rule above: a load drops the embedding's cached pages where the cache holds
// more than a quarter of its whole pages, and keeps them at a quarter exactly. The pages are
// counted in the file's page cache (a mapping of its own), and read one at a time (pread
// without read-ahead); a load itself may bring some in (read-ahead of its neighbours).
TEST_F(ModelDirTest, AMappedEmbeddingKeepsAQuarterOfItsPagesCachedAndDropsOneMore) {
    if (!drops_cached_pages(p("probe")))
        GTEST_SKIP() << "this file system keeps cached pages on POSIX_FADV_DONTNEED";
    constexpr size_t kPage = 4096;
    Config c = tiny_config();
    c.hidden_size = 64;  // 16 rows a page
    c.intermediate_size = 32;
    c.num_heads = 4;
    c.head_dim = 16;
    const std::string dir = p("edge"), emb = "decoder.embedding.weight";
    std::string file;
    size_t lo = 0, n = 0;  // the embedding's whole pages: n from file offset lo
    // A vocabulary whose embedding spans a multiple of 4 whole pages (the header's length moves
    // where the pages fall), so that a quarter is a whole number of pages.
    for (int64_t v = 2048; v < 2048 + 16 * 8; v += 16) {
        c.vocab_size = v;
        pldr::save_model(random_model<float>(c, 7), dir, DType::F32);
        const ModelFiles mf(dir);
        file = mf.file_of(emb);
        const size_t off = mf.file_offset(emb), end = off + size_t(v) * 64 * sizeof(float);
        lo = (off + kPage - 1) / kPage * kPage;
        n = (end / kPage * kPage - lo) / kPage;
        if (n % 4 == 0) break;
    }
    ASSERT_EQ(n % 4, 0u);
    const int fd = ::open(file.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    auto cached = [&] {  // the embedding's whole pages in the page cache, each flag
        const size_t len = lo + n * kPage;
        void* m = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
        std::vector<bool> in(n);
        if (m == MAP_FAILED) return in;
        for (size_t i = 0; i < n; ++i)
            in[i] = pldr::resident_fraction(static_cast<char*>(m) + lo + i * kPage, kPage) == 1.0;
        ::munmap(m, len);
        return in;
    };
    auto count = [](const std::vector<bool>& in) {
        return size_t(std::count(in.begin(), in.end(), true));
    };
    // Reads uncached pages until `want` are cached; false where a read brings in more.
    auto fill_to = [&](size_t want) {
        std::vector<bool> in = cached();
        std::vector<char> buf(kPage);
        for (size_t i = 0; i < n && count(in) < want; ++i) {
            if (in[i]) continue;
            if (::pread(fd, buf.data(), kPage, off_t(lo + i * kPage)) != ssize_t(kPage))
                return false;
            in = cached();
        }
        return count(in) == want;
    };
    auto load = [&] { (void)pldr::load_model<float>(dir, true, /*map_file=*/true); };
    load();                              // just written: dropped
    const size_t own = count(cached());  // what a load brings in itself
    ASSERT_LT(own, n / 4);
    if (!fill_to(n / 4)) GTEST_SKIP() << "reads bring in more than the page asked for";
    load();
    EXPECT_GE(count(cached()), n / 4) << "a quarter of " << n << " pages: kept";
    if (count(cached()) != n / 4 || !fill_to(n / 4 + 1))
        GTEST_SKIP() << "reads bring in more than the page asked for";
    load();
    EXPECT_LE(count(cached()), own) << "one page more than a quarter of " << n << ": dropped";
    ::close(fd);
}

TEST_F(ModelDirTest, FilesNotInLayoutOrderOrDtypeAreReadNotMapped) {
    const Config c = tiny_config();
    pldr::Model<float> m = random_model<float>(c, 5);
    // Name order (as other writers store tensors): read into owned memory, the same values.
    const std::string named = p("named");
    std::filesystem::create_directories(named);
    save_config(c, named + "/config.json");
    SafetensorsWriter w;
    for (const pldr::ParamEntry& e : m.layout.entries)
        w.add_as(e.name, DType::F32, e.shape, m.params.data() + e.offset);
    w.write(named + "/model.safetensors");
    const pldr::Model<float> a = pldr::load_model<float>(named, true, true);
    EXPECT_FALSE(a.params.is_mapped());
    EXPECT_EQ(a.params, m.params);
    // A float64 model of a float32 file, and a float64 file read as float32: converted.
    const std::string dir = p("f32");
    pldr::save_model(m, dir, DType::F32);
    const pldr::Model<double> d = pldr::load_model<double>(dir, true, true);
    EXPECT_FALSE(d.params.is_mapped());
    for (size_t i = 0; i < m.params.size(); ++i) ASSERT_EQ(d.params[i], double(m.params[i]));
    const std::string dir64 = p("f64");
    pldr::save_model(d, dir64, DType::F64);
    EXPECT_TRUE((pldr::load_model<double>(dir64, true, true).params.is_mapped()));
    const pldr::Model<float> f = pldr::load_model<float>(dir64, true, true);
    EXPECT_FALSE(f.params.is_mapped());
    EXPECT_EQ(f.params, m.params);
    // Sharded: read.
    write_sharded(p("sharded"), c);
    EXPECT_FALSE((pldr::load_model<float>(p("sharded"), true, true).params.is_mapped()));
}

TEST(SafetensorsWriterOrder, NameOrderByDefaultInsertionOrderWhenAsked) {
    for (const bool keep : {false, true}) {
        SafetensorsWriter w;
        if (keep) w.keep_insertion_order();
        const float x[2] = {1, 2};
        w.add_raw("b", DType::F32, {1}, x);
        w.add_raw("a", DType::F32, {1}, x + 1);
        w.add_raw("b", DType::F32, {1}, x + 1);  // replaced in place
        const std::vector<pldr::TensorInfo> in = w.infos();
        ASSERT_EQ(in.size(), 2u);
        EXPECT_EQ(in[0].name, keep ? "b" : "a");
        EXPECT_EQ(in[0].begin, 0u);
        EXPECT_EQ(in[1].begin, 4u);
        const std::string bytes = w.serialize();
        const std::string h = bytes.substr(8, bytes.size() - 16);
        EXPECT_EQ(h.find("\"b\"") < h.find("\"a\""), keep) << h;
        float last[2];
        std::memcpy(last, bytes.data() + bytes.size() - 8, 8);
        EXPECT_EQ(last[0], 2.0f);  // a and the second b hold x[1] = 2
        EXPECT_EQ(last[1], 2.0f);
    }
}

// write() streams the file (no second copy of a 110M model's optimizer state) and writes the same
// bytes as serialize(); add_view borrows (the data at write time goes out), add_view_as converts
// when the stored type differs; a failed write leaves neither the file nor a temporary.
TEST(SafetensorsWriterStream, WriteEqualsSerializeAndViewsBorrow) {
    const auto dir =
        std::filesystem::temp_directory_path() / ("pldr_st_stream_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    std::vector<float> big(3 << 20);  // 12 MB, past the writer's pieces
    for (size_t i = 0; i < big.size(); ++i) big[i] = float(i % 9973) * 0.5f;
    const double d[3] = {1.0 / 3, 2.0 / 3, 1e-300};
    SafetensorsWriter w;
    w.add_view("big", DType::F32, {int64_t(big.size())}, big.data());
    w.add_view_as("d32", DType::F32, {3}, d);  // converted: a copy
    w.add_view_as("d64", DType::F64, {3}, d);  // borrowed
    w.set_metadata("k", "v");
    big[7] = -1.5f;  // after add_view: the file has it
    const std::string path = (dir / "x.safetensors").string();
    w.write(path, {{"format", "pt"}});
    const std::string mem = w.serialize({{"format", "pt"}});
    EXPECT_EQ(pldr::read_file(path), mem);
    pldr::SafetensorsFile f(path);
    std::vector<float> got(big.size());
    std::memcpy(got.data(), f.raw(f.at("big")), got.size() * 4);
    EXPECT_EQ(got, big);
    float d32[3];
    std::memcpy(d32, f.raw(f.at("d32")), sizeof d32);
    EXPECT_EQ(d32[0], float(d[0]));
    EXPECT_EQ(d32[2], 0.0f);  // 1e-300 rounds to zero in float32: converted, not reinterpreted
    double d64[3];
    std::memcpy(d64, f.raw(f.at("d64")), sizeof d64);
    EXPECT_EQ(d64[2], 1e-300);
    // Unwritable: an error naming the path, and no temporary left behind.
    const std::string bad = (dir / "missing" / "y.safetensors").string();
    EXPECT_THROW(w.write(bad), pldr::Error);
    size_t n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
    EXPECT_EQ(n, 1u);
    std::filesystem::remove_all(dir);
}
