// safetensors reader (mmap + validation) and atomic writer. See safetensors.h.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "core/fs.h"
#include "io/json_util.h"

namespace pldr {

namespace {

struct DTypeRow {
    DType t;
    const char* name;
    size_t size;
};
constexpr DTypeRow kDTypes[] = {
    {DType::F64, "F64", 8},   {DType::F32, "F32", 4}, {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2}, {DType::I64, "I64", 8}, {DType::I32, "I32", 4},
    {DType::I16, "I16", 2},   {DType::I8, "I8", 1},   {DType::U8, "U8", 1},
    {DType::BOOL, "BOOL", 1},
};

float half_to_float(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else {  // subnormal: renormalise
            int e = -1;
            do {
                ++e;
                man <<= 1;
            } while ((man & 0x400) == 0);
            bits = sign | uint32_t(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | man << 13;
    } else {
        bits = sign | (exp + 127 - 15) << 23 | man << 13;
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

float bf16_to_float(uint16_t h) {
    uint32_t bits = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

template <typename S>
S load(const uint8_t* p) {
    S v;
    std::memcpy(&v, p, sizeof(S));
    return v;
}

}  // namespace

const char* dtype_name(DType t) {
    for (const auto& r : kDTypes)
        if (r.t == t) return r.name;
    return "?";
}

size_t dtype_size(DType t) {
    for (const auto& r : kDTypes)
        if (r.t == t) return r.size;
    return 0;
}

bool dtype_is_float(DType t) {
    return t == DType::F64 || t == DType::F32 || t == DType::F16 || t == DType::BF16;
}

bool dtype_from_name(const std::string& s, DType* out) {
    for (const auto& r : kDTypes)
        if (s == r.name) {
            *out = r.t;
            return true;
        }
    return false;
}

template <typename T>
void convert_to(DType src, const uint8_t* p, int64_t n, T* out) {
    switch (src) {
        case DType::F64:
            for (int64_t i = 0; i < n; ++i) out[i] = T(load<double>(p + 8 * i));
            break;
        case DType::F32:
            for (int64_t i = 0; i < n; ++i) out[i] = T(load<float>(p + 4 * i));
            break;
        case DType::F16:
            for (int64_t i = 0; i < n; ++i) out[i] = T(half_to_float(load<uint16_t>(p + 2 * i)));
            break;
        case DType::BF16:
            for (int64_t i = 0; i < n; ++i) out[i] = T(bf16_to_float(load<uint16_t>(p + 2 * i)));
            break;
        case DType::I64:
            for (int64_t i = 0; i < n; ++i) out[i] = T(load<int64_t>(p + 8 * i));
            break;
        case DType::I32:
            for (int64_t i = 0; i < n; ++i) out[i] = T(load<int32_t>(p + 4 * i));
            break;
        case DType::I16:
            for (int64_t i = 0; i < n; ++i) out[i] = T(load<int16_t>(p + 2 * i));
            break;
        case DType::I8:
            for (int64_t i = 0; i < n; ++i) out[i] = T(int8_t(p[i]));
            break;
        case DType::U8:
            for (int64_t i = 0; i < n; ++i) out[i] = T(p[i]);
            break;
        case DType::BOOL:
            for (int64_t i = 0; i < n; ++i) out[i] = T(p[i] != 0);
            break;
    }
}
template void convert_to<float>(DType, const uint8_t*, int64_t, float*);
template void convert_to<double>(DType, const uint8_t*, int64_t, double*);
template void convert_to<int64_t>(DType, const uint8_t*, int64_t, int64_t*);

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) fail("cannot open ", path, ": ", std::strerror(errno));
    if (S_ISDIR(st.st_mode)) fail("cannot open ", path, ": is a directory, not a safetensors file");
    if (!S_ISREG(st.st_mode)) fail("cannot open ", path, ": not a regular file");
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) fail("cannot open ", path, ": ", std::strerror(errno));
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        fail("cannot open ", path, ": not a regular file");
    }
    map_size_ = size_t(st.st_size);
    if (map_size_ < 8) {
        ::close(fd);
        fail(path, ": truncated safetensors file (", map_size_,
             " bytes, less than the 8-byte header length)");
    }
    map_ = ::mmap(nullptr, map_size_, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (map_ == MAP_FAILED) {
        map_ = nullptr;
        const int e = errno;
        fail("cannot map ", path, " (", map_size_, " bytes): ", std::strerror(e),
             e == ENOMEM ? " (the file does not fit in the memory available to this process)" : "");
    }
    try {
        const uint8_t* base = static_cast<const uint8_t*>(map_);
        uint64_t n = load<uint64_t>(base);
        if (n > map_size_ - 8)
            fail(path, ": header length ", n, " runs past the end of the file (", map_size_,
                 " bytes); truncated or not a safetensors file?");
        if (n == 0) fail(path, ": malformed safetensors header: empty");
        if (n > kMaxSafetensorsHeaderBytes)
            fail(path, ": safetensors header of ", n, " bytes exceeds the limit of ",
                 kMaxSafetensorsHeaderBytes, " bytes");
        data_ = base + 8 + n;
        size_t data_size = map_size_ - 8 - n;
        const char* hb = reinterpret_cast<const char*>(base + 8);
        nlohmann::json h =
            parse_json_strict_map(std::string_view(hb, n), path + ": safetensors header",
                                  kMaxSafetensorsTensors + 1);  // the tensors and __metadata__
        if (!h.is_object())
            fail(path, ": malformed safetensors header: a JSON ", h.type_name(), ", not an object");
        if (h.size() > kMaxSafetensorsTensors + 1)
            fail(path, ": safetensors header lists ", h.size(), " entries, more than the limit of ",
                 kMaxSafetensorsTensors, " tensors");
        for (auto it = h.begin(); it != h.end(); ++it) {
            const std::string& name = it.key();
            const auto& v = it.value();
            if (name == "__metadata__") {
                if (!v.is_object()) fail(path, ": __metadata__ is not an object");
                for (auto m = v.begin(); m != v.end(); ++m) {
                    if (!m.value().is_string())
                        fail(path, ": __metadata__ value for '", m.key(), "' is a ",
                             m.value().type_name(), ", not a string");
                    metadata_[m.key()] = m.value().get<std::string>();
                }
                continue;
            }
            if (name.empty()) fail(path, ": tensor with an empty name");
            if (!v.is_object())
                fail(path, ": malformed header entry for tensor '", name, "': not an object");
            for (const char* key : {"dtype", "shape", "data_offsets"})
                if (!v.contains(key))
                    fail(path, ": malformed header entry for tensor '", name, "': no '", key, "'");
            if (!v["dtype"].is_string())
                fail(path, ": malformed header entry for tensor '", name,
                     "': dtype is not a string");
            if (!v["shape"].is_array())
                fail(path, ": malformed header entry for tensor '", name,
                     "': shape is not an array");
            if (!v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
                fail(path, ": malformed header entry for tensor '", name,
                     "': data_offsets is not an array of two integers");
            TensorInfo t;
            t.name = name;
            std::string dt = v["dtype"].get<std::string>();
            if (!dtype_from_name(dt, &t.dtype))
                fail(path, ": tensor '", name, "' has unknown dtype '", dt, "'");
            if (v["shape"].size() > kMaxSafetensorsRank)
                fail(path, ": tensor '", name, "' has rank ", v["shape"].size(),
                     ", more than the limit of ", kMaxSafetensorsRank);
            int64_t numel = 1;
            for (const auto& d : v["shape"]) {
                if (!d.is_number_integer() ||
                    (d.is_number_unsigned() && d.get<uint64_t>() > uint64_t(INT64_MAX)) ||
                    d.get<int64_t>() < 0)
                    fail(path, ": tensor '", name, "' has an invalid shape ", json_excerpt(d),
                         " in ", json_excerpt(v["shape"]),
                         " (dimensions are non-negative integers)");
                t.shape.push_back(d.get<int64_t>());
                if (t.shape.back() != 0 && numel > (int64_t(1) << 48) / t.shape.back())
                    fail(path, ": tensor '", name, "' is too large (shape ",
                         json_excerpt(v["shape"]), ")");
                numel *= t.shape.back();
            }
            const auto& off = v["data_offsets"];
            if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
                fail(path, ": tensor '", name, "' has invalid data offsets ", json_excerpt(off),
                     " (expected two non-negative integers)");
            uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
            if (b > e || e > data_size)
                fail(path, ": tensor '", name, "' data offsets [", b, ",", e,
                     ") are outside the data section (", data_size, " bytes); truncated file?");
            t.begin = size_t(b);
            t.end = size_t(e);
            size_t need = size_t(numel) * dtype_size(t.dtype);
            if (t.end - t.begin != need)
                fail(path, ": tensor '", name, "' has ", t.end - t.begin, " bytes but shape ",
                     shape_str(t.shape), " of ", dt, " needs ", need);
            index_[name] = tensors_.size();
            tensors_.push_back(std::move(t));
        }
        std::vector<const TensorInfo*> order;
        for (const auto& t : tensors_) order.push_back(&t);
        std::sort(order.begin(), order.end(), [](const TensorInfo* a, const TensorInfo* b) {
            return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
        });
        size_t covered = 0;
        for (size_t i = 0; i < order.size(); ++i) {
            if (i > 0 && order[i]->begin < order[i - 1]->end)
                fail(path, ": tensors '", order[i - 1]->name, "' and '", order[i]->name,
                     "' have overlapping data offsets");
            if (order[i]->begin > covered)
                fail(path, ": data section has a hole of ", order[i]->begin - covered,
                     " bytes before tensor '", order[i]->name, "'");
            covered = std::max(covered, order[i]->end);
        }
        if (covered != data_size)
            fail(path, ": data section has ", data_size - covered,
                 " trailing bytes not covered by any tensor");
    } catch (...) {
        ::munmap(map_, map_size_);
        map_ = nullptr;
        throw;
    }
}

SafetensorsFile::~SafetensorsFile() {
    if (map_) ::munmap(map_, map_size_);
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& SafetensorsFile::at(const std::string& name) const {
    const TensorInfo* t = find(name);
    if (!t) fail(path_, ": missing tensor '", name, "'");
    return *t;
}

template <typename T>
Tensor<T> SafetensorsFile::read(const std::string& name) const {
    const TensorInfo& t = at(name);
    Tensor<T> out(t.shape);
    convert_to<T>(t.dtype, raw(t), out.numel(), out.ptr());
    return out;
}
template <typename T>
void SafetensorsFile::read_into(const TensorInfo& t, T* dst) const {
    convert_to<T>(t.dtype, raw(t), shape_numel(t.shape), dst);
    release(t);
}
template void SafetensorsFile::read_into<float>(const TensorInfo&, float*) const;
template void SafetensorsFile::read_into<double>(const TensorInfo&, double*) const;

void SafetensorsFile::release(const TensorInfo& t) const {
    const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
    const uintptr_t b = uintptr_t(raw(t)), e = b + (t.end - t.begin);
    const uintptr_t lo = (b + page - 1) / page * page, hi = e / page * page;
    if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);  // advisory
}

template Tensor<float> SafetensorsFile::read<float>(const std::string&) const;
template Tensor<double> SafetensorsFile::read<double>(const std::string&) const;
template Tensor<int64_t> SafetensorsFile::read<int64_t>(const std::string&) const;

std::vector<int64_t> SafetensorsFile::read_i64(const std::string& name) const {
    const TensorInfo& t = at(name);
    std::vector<int64_t> out(size_t(shape_numel(t.shape)));
    convert_to<int64_t>(t.dtype, raw(t), int64_t(out.size()), out.data());
    return out;
}

SafetensorsWriter::Entry& SafetensorsWriter::put(const std::string& name, DType dtype,
                                                 const Shape& shape, const void* data) {
    PLDR_REQUIRE(!name.empty(), "safetensors writer: empty tensor name");
    PLDR_REQUIRE(name != "__metadata__", "safetensors writer: '__metadata__' is reserved");
    for (int64_t d : shape)
        PLDR_REQUIRE(d >= 0, "safetensors writer: tensor '", name, "' has a negative dimension in ",
                     shape_str(shape));
    Entry e{dtype, shape, {}, nullptr, size_t(shape_numel(shape)) * dtype_size(dtype)};
    PLDR_REQUIRE(e.nbytes == 0 || data != nullptr, "safetensors writer: tensor '", name,
                 "' has no data");
    if (!entries_.count(name)) added_.push_back(name);
    return entries_[name] = std::move(e);
}

void SafetensorsWriter::add_raw(const std::string& name, DType dtype, const Shape& shape,
                                const void* data) {
    Entry& e = put(name, dtype, shape, data);
    e.bytes.resize(e.nbytes);
    if (e.nbytes) std::memcpy(e.bytes.data(), data, e.nbytes);
}

void SafetensorsWriter::add_view(const std::string& name, DType dtype, const Shape& shape,
                                 const void* data) {
    put(name, dtype, shape, data).view = static_cast<const uint8_t*>(data);
}

std::vector<std::pair<const std::string*, const SafetensorsWriter::Entry*>>
SafetensorsWriter::in_file_order() const {
    std::vector<std::pair<const std::string*, const Entry*>> out;
    out.reserve(entries_.size());
    if (insertion_order_) {
        for (const std::string& n : added_) {
            const auto it = entries_.find(n);
            out.emplace_back(&it->first, &it->second);
        }
    } else {
        for (const auto& [n, e] : entries_) out.emplace_back(&n, &e);
    }
    return out;
}

void SafetensorsWriter::add_bool(const std::string& name, const Shape& shape,
                                 const std::vector<bool>& values) {
    PLDR_REQUIRE(int64_t(values.size()) == shape_numel(shape), "safetensors writer: tensor '", name,
                 "' has ", values.size(), " values but shape ", shape_str(shape));
    std::vector<uint8_t> b(values.size());
    for (size_t i = 0; i < values.size(); ++i) b[i] = values[i] ? 1 : 0;
    add_raw(name, DType::BOOL, shape, b.data());
}

template <typename T>
void SafetensorsWriter::add_as(const std::string& name, DType dtype, const Shape& shape,
                               const T* data) {
    int64_t n = shape_numel(shape);
    if (dtype == DType::F64) {
        std::vector<double> v(data, data + n);
        add_raw(name, dtype, shape, v.data());
    } else if (dtype == DType::F32) {
        std::vector<float> v(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) v[i] = float(data[i]);
        add_raw(name, dtype, shape, v.data());
    } else {
        fail("safetensors writer: unsupported dtype ", dtype_name(dtype), " for '", name, "'");
    }
}
template void SafetensorsWriter::add_as<float>(const std::string&, DType, const Shape&,
                                               const float*);
template void SafetensorsWriter::add_as<double>(const std::string&, DType, const Shape&,
                                                const double*);

template <typename T>
void SafetensorsWriter::add_view_as(const std::string& name, DType dtype, const Shape& shape,
                                    const T* data) {
    if (dtype == (std::is_same_v<T, double> ? DType::F64 : DType::F32))
        add_view(name, dtype, shape, data);
    else
        add_as(name, dtype, shape, data);
}
template void SafetensorsWriter::add_view_as<float>(const std::string&, DType, const Shape&,
                                                    const float*);
template void SafetensorsWriter::add_view_as<double>(const std::string&, DType, const Shape&,
                                                     const double*);

std::vector<TensorInfo> SafetensorsWriter::infos() const {
    std::vector<TensorInfo> out;
    size_t off = 0;
    for (const auto& [name, e] : in_file_order()) {
        TensorInfo t;
        t.name = *name;
        t.dtype = e->dtype;
        t.shape = e->shape;
        t.begin = off;
        t.end = off + e->nbytes;
        off = t.end;
        out.push_back(std::move(t));
    }
    return out;
}

std::string SafetensorsWriter::header(const std::map<std::string, std::string>& extra_metadata,
                                      size_t* data_bytes) const {
    std::map<std::string, std::string> meta = extra_metadata;
    for (const auto& [k, v] : metadata_) meta[k] = v;
    nlohmann::ordered_json h = nlohmann::ordered_json::object();
    if (!meta.empty()) {
        nlohmann::ordered_json m = nlohmann::ordered_json::object();
        for (const auto& [k, v] : meta) m[k] = v;
        h["__metadata__"] = m;
    }
    size_t off = 0;
    for (const auto& [name, e] : in_file_order()) {
        h[*name] = {{"dtype", dtype_name(e->dtype)},
                    {"shape", e->shape},
                    {"data_offsets", {off, off + e->nbytes}}};
        off += e->nbytes;
    }
    std::string json = h.dump();
    while (json.size() % 8) json += ' ';
    const uint64_t n = json.size();
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xff);  // little-endian
    *data_bytes = off;
    return out + json;
}

std::string SafetensorsWriter::serialize(
    const std::map<std::string, std::string>& extra_metadata) const {
    size_t data_bytes = 0;
    std::string out = header(extra_metadata, &data_bytes);
    out.reserve(out.size() + data_bytes);
    for (const auto& [name, e] : in_file_order())
        out.append(reinterpret_cast<const char*>(e->data()), e->nbytes);
    return out;
}

void SafetensorsWriter::write(const std::string& path,
                              const std::map<std::string, std::string>& extra_metadata) const {
    size_t data_bytes = 0;
    const std::string head = header(extra_metadata, &data_bytes);
    AtomicFile f(path, head.size() + data_bytes);
    f.append(head);
    for (const auto& [name, e] : in_file_order())
        f.append({reinterpret_cast<const char*>(e->data()), e->nbytes});
    f.commit();
}

}  // namespace pldr
