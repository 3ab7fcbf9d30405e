// Model parameter loading (see model_load.h).
#include "io/model_load.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>

#include "core/alloc.h"  // resident_fraction
#include "core/fs.h"
#include "io/model_dir.h"
#include "io/param_names.h"

namespace pldr {

template <typename T>
void fill_params(Model<T>& m, const SafetensorsFile& f, const std::string& prefix) {
    for (const ParamEntry& e : m.layout.entries) {
        const std::string name = prefix + e.name;
        const TensorInfo* t = f.find(name);
        PLDR_REQUIRE(t, f.path(), ": missing tensor '", name, "'");
        PLDR_REQUIRE(t->shape == e.shape, f.path(), ": tensor '", name, "' has shape ",
                     shape_str(t->shape), " but config.json implies ", shape_str(e.shape));
        PLDR_REQUIRE(t->dtype != DType::BOOL, f.path(), ": tensor '", name, "' has dtype BOOL");
        convert_to<T>(t->dtype, f.raw(*t), e.numel, m.params.data() + e.offset);
    }
    if (!m.cfg.learned_g()) {
        const std::string name = prefix + "decoder.past_G_values";
        if (const TensorInfo* t = f.find(name)) {
            const Shape want = past_g_shape(m.cfg);
            PLDR_REQUIRE(t->shape == want, f.path(), ": tensor '", name, "' has shape ",
                         shape_str(t->shape), " but config.json implies ", shape_str(want));
            std::vector<T> all(static_cast<size_t>(shape_numel(want)));
            convert_to<T>(t->dtype, f.raw(*t), int64_t(all.size()), all.data());
            const int64_t per = m.cfg.num_heads * m.cfg.head_dim * m.cfg.head_dim;
            for (int64_t l = 0; l < m.cfg.num_layers; ++l)  // slot 2 of [L,3,1,H,D,D] is G
                std::copy(all.begin() + (l * 3 + 2) * per, all.begin() + (l * 3 + 3) * per,
                          m.G_fixed.begin() + l * per);
        } else {
            PLDR_REQUIRE(m.cfg.g_type == GType::IDENTITY, f.path(), ": missing tensor '", name,
                         "' (custom_G_type ", g_type_name(m.cfg.g_type), " needs it)");
        }
    }
}

namespace {

// A fixed-G model's G: slot 2 of decoder.past_G_values [L,3,1,H,D,D].
template <typename T>
void read_fixed_g(const ModelFiles& mf, Model<T>& m) {
    if (m.cfg.learned_g()) return;
    Tensor<T> all = mf.read<T>("decoder.past_G_values");
    const int64_t per = m.cfg.num_heads * m.cfg.head_dim * m.cfg.head_dim;
    for (int64_t l = 0; l < m.cfg.num_layers; ++l)
        std::copy(all.data.begin() + (l * 3 + 2) * per, all.data.begin() + (l * 3 + 3) * per,
                  m.G_fixed.begin() + l * per);
}

// A q8_0 weight: its values and scales (checked finite and ≥ 0), dequantized into w.
PackedTensor read_q8(const ModelFiles& mf, const std::string& name, const Shape& shape) {
    const std::string qn = name + ".q8", sn = name + ".q8_scale";
    PackedTensor p;
    p.format = WeightFormat::Q8_0;
    p.rows = shape[0];
    p.cols = shape[1];
    const int64_t nb = q8_blocks(p.cols);
    // check_params_against_file has checked the dtypes (I8; F32 or F16) and the shapes.
    const Tensor<float> q = mf.read<float>(qn), s = mf.read<float>(sn);
    PLDR_CHECK(q.numel() == p.rows * p.cols && s.numel() == p.rows * nb);
    p.q8.resize(q.data.size());
    for (size_t i = 0; i < q.data.size(); ++i) p.q8[i] = int8_t(q.data[i]);
    for (int64_t i = 0; i < s.numel(); ++i)
        PLDR_REQUIRE(std::isfinite(s[i]) && s[i] >= 0, mf.file_of(sn), ": tensor '", sn, "' holds ",
                     std::isfinite(s[i]) ? "a negative" : "a non-finite", " scale (", s[i],
                     " at row ", i / nb, ", block ", i % nb, "; q8_0 scales are max|w|/127)");
    p.scale.assign(s.data.begin(), s.data.end());
    return p;
}

// A packable weight stored as BF16, kept as its bits.
PackedTensor read_bf16(const ModelFiles& mf, const std::string& name, const Shape& shape) {
    const Tensor<float> w = mf.read<float>(name);  // exact: bf16 values are floats
    PLDR_CHECK(w.numel() == shape[0] * shape[1]);
    return bf16_tensor(w.ptr(), shape[0], shape[1]);
}

// Where the page cache holds more than this fraction of a mapped embedding, its pages leave
// the cache before the first token (map_params): a fault would map up to 16 of them, most of
// them rows that no token reads. At a quarter, about 5.
constexpr double kBulkCached = 0.25;

// The parameters of m's layout as a private mapping of the weights file, when the file holds
// them exactly as the buffer (see load_model); an empty buffer otherwise.
template <typename T>
ParamBuffer<T> map_params(const ModelFiles& mf, const Layout& layout, const Config& cfg) {
    constexpr DType want = std::is_same_v<T, double> ? DType::F64 : DType::F32;
    if (layout.entries.empty() || mf.sharded() || !cfg.quantization.empty()) return {};
    const std::string& first = layout.entries.front().name;
    const std::string path = mf.file_of(first);
    const size_t base = mf.file_offset(first);
    if (base % alignof(T) != 0) return {};
    for (const ParamEntry& e : layout.entries) {
        const TensorInfo& t = mf.info(e.name);
        if (t.dtype != want || mf.file_of(e.name) != path ||
            mf.file_offset(e.name) != base + size_t(e.offset) * sizeof(T) ||
            int64_t(t.nbytes()) != e.numel * int64_t(sizeof(T)))
            return {};
    }
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return {};
    struct stat st;
    const size_t bytes = size_t(layout.total) * sizeof(T);
    if (::fstat(fd, &st) != 0 || size_t(st.st_size) < base + bytes) {
        ::close(fd);
        return {};
    }
    const size_t len = size_t(st.st_size);
    void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
        ::close(fd);
        return {};
    }
    std::shared_ptr<void> keep(p, [len](void* q) { ::munmap(q, len); });
    T* data = reinterpret_cast<T*>(static_cast<uint8_t*>(p) + base);
    for (const ParamEntry& e : layout.entries) {
        if (e.name != "decoder.embedding.weight" || cfg.tie_word_embeddings) continue;
        // The embedding is read a row per token, so that the rows no token uses stay out of
        // memory: no read-ahead of its neighbours. A fault also maps the pages around it that
        // the page cache holds (fault-around, 64 KB): where the cache holds most of the
        // embedding (a file just written or copied), those pages leave the cache first, and the
        // rows come back one page each. Where it holds only the pages of rows read before (the
        // earlier runs' tokens), they stay: every run would read them from the disk again
        // (measured: 1,400 reads of 4 KB in a 110M `pldr generate` of 8 prompts, 0.1-0.2 s).
        // All advisory.
        const size_t page = size_t(::sysconf(_SC_PAGESIZE));
        const size_t b = base + size_t(e.offset) * sizeof(T);
        const size_t lo = (b + page - 1) / page * page;
        const size_t hi = (b + size_t(e.numel) * sizeof(T)) / page * page;
        if (hi > lo) {
            uint8_t* rows = static_cast<uint8_t*>(p) + lo;
            ::madvise(rows, hi - lo, MADV_RANDOM);
            if (resident_fraction(rows, hi - lo) > kBulkCached)
                ::posix_fadvise(fd, off_t(lo), off_t(hi - lo), POSIX_FADV_DONTNEED);
        }
    }
    ::close(fd);
    return ParamBuffer<T>::mapped(std::move(keep), data, size_t(layout.total));
}

}  // namespace

template <typename T>
Model<T> load_model(const std::string& dir, bool pack, bool map_file) {
    ModelFiles mf(dir);
    check_params_against_file(mf);
    if (map_file) {
        const Config& cfg = mf.config();
        ParamBuffer<T> buf = map_params<T>(mf, make_layout(cfg), cfg);
        if (!buf.empty()) {  // every parameter is in the mapping: only fixed G is left to read
            Model<T> m;
            m.init(cfg, std::move(buf));
            read_fixed_g(mf, m);
            return m;
        }
    }
    Model<T> m(mf.config());
    const bool q8 = m.cfg.quantization == "q8_0";
    auto packed = std::make_shared<PackedWeights>();
    std::vector<float> scratch;
    for (const ParamEntry& e : m.layout.entries) {
        T* dst = m.params.data() + e.offset;
        const bool packable = is_packable(m.cfg, e.name);
        if (packable && (q8 || mf.info(e.name).dtype == DType::BF16)) {
            PackedTensor p = q8 ? read_q8(mf, e.name, e.shape) : read_bf16(mf, e.name, e.shape);
            scratch.resize(size_t(e.numel));
            unpack_tensor(p, scratch.data());
            std::copy(scratch.begin(), scratch.end(), dst);
            if (std::is_same_v<T, float> && pack) packed->tensors.emplace(e.name, std::move(p));
            continue;
        }
        PLDR_CHECK(mf.info(e.name).shape == e.shape);  // check_params_against_file said so
        mf.read_into<T>(e.name, dst);
    }
    read_fixed_g(mf, m);
    if constexpr (std::is_same_v<T, float>) {
        if (!packed->tensors.empty()) {
            m.packed = std::move(packed);
            m.bind_linears();
        }
    }
    return m;
}

template <typename T>
void save_model(const Model<T>& m, const std::string& dir, DType dtype, bool keep_packed) {
    PLDR_REQUIRE(dtype == DType::F32 || dtype == DType::F64, "models are saved as F32 or F64 (got ",
                 dtype_name(dtype), ")");
    const PackedWeights* pw = keep_packed ? m.packed.get() : nullptr;
    PLDR_CHECK(!pw || dtype == DType::F32);
    SafetensorsWriter w;
    w.keep_insertion_order();  // the layout's order: load_model can map the parameters
    for (const ParamEntry& e : m.layout.entries) {
        const PackedTensor* p = pw ? pw->find(e.name) : nullptr;
        if (!p) {
            w.add_view_as(e.name, dtype, e.shape, m.params.data() + e.offset);
        } else if (p->format == WeightFormat::BF16) {
            w.add_view(e.name, DType::BF16, e.shape, p->bf16.data());
        } else {
            w.add_view(e.name + ".q8", DType::I8, e.shape, p->q8.data());
            w.add_view(e.name + ".q8_scale", DType::F32, {e.shape[0], q8_blocks(e.shape[1])},
                       p->scale.data());
        }
    }
    if (!m.cfg.learned_g()) {
        const Shape sh = past_g_shape(m.cfg);
        const int64_t per = m.cfg.num_heads * m.cfg.head_dim * m.cfg.head_dim;
        std::vector<T> all(static_cast<size_t>(shape_numel(sh)), T(0));
        for (int64_t l = 0; l < m.cfg.num_layers; ++l)
            std::copy(m.G_fixed.begin() + l * per, m.G_fixed.begin() + (l + 1) * per,
                      all.begin() + (l * 3 + 2) * per);
        w.add_as("decoder.past_G_values", dtype, sh, all.data());
        std::vector<uint8_t> status(static_cast<size_t>(m.cfg.num_layers), 1);
        w.add_raw("decoder.past_G_values_status", DType::BOOL, {m.cfg.num_layers}, status.data());
    }
    Config c = m.cfg;
    c.dtype = dtype == DType::F64 ? "float64" : "float32";
    c.quantization.clear();
    if (pw && pw->format() == WeightFormat::BF16) c.dtype = "bfloat16";
    if (pw && pw->format() == WeightFormat::Q8_0) c.quantization = "q8_0";
    save_model_dir(dir, c, w);
}

ConvertStats convert_model_dir(const std::string& dir, const std::string& out, WeightFormat f,
                               bool force) {
    PLDR_CHECK(f == WeightFormat::DENSE || f == WeightFormat::BF16 || f == WeightFormat::Q8_0);
    {
        InputSet in;
        in.add_dir(dir);
        require_output_dir(out, in, "the output directory",
                           {"config.json", "model.safetensors", "tokenizer.model"}, force);
    }
    ConvertStats st;
    std::string tokenizer;
    {
        ModelFiles mf(dir);
        for (const auto& n : mf.names()) st.in_bytes += int64_t(mf.info(n).nbytes());
        tokenizer = mf.tokenizer_path();
    }
    Model<float> m = load_model<float>(dir, false);
    if (f != WeightFormat::DENSE) {
        pack_model(m, f);
        st.packed_tensors = int64_t(m.packed->tensors.size());
        st.packed_numel = m.packed->numel();
        st.packed_bytes = m.packed->bytes();
    }
    save_model(m, out, DType::F32, f != WeightFormat::DENSE);
    {
        ModelFiles written(out);
        for (const auto& n : written.names()) st.out_bytes += int64_t(written.info(n).nbytes());
    }
    if (!tokenizer.empty()) write_file_atomic(out + "/tokenizer.model", read_file(tokenizer));
    return st;
}

template Model<float> load_model<float>(const std::string&, bool, bool);
template Model<double> load_model<double>(const std::string&, bool, bool);
template void save_model<float>(const Model<float>&, const std::string&, DType, bool);
template void save_model<double>(const Model<double>&, const std::string&, DType, bool);
template void fill_params<float>(Model<float>&, const SafetensorsFile&, const std::string&);
template void fill_params<double>(Model<double>&, const SafetensorsFile&, const std::string&);

}  // namespace pldr
