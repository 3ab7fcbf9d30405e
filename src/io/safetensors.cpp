// safetensors reader (mmap + validation) and atomic writer. See safetensors.h.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/fs.h"

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
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) fail("cannot open ", path, ": ", std::strerror(errno));
    struct stat st;
    if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
        ::close(fd);
        fail("cannot open ", path, ": not a regular file");
    }
    map_size_ = size_t(st.st_size);
    if (map_size_ < 8) {
        ::close(fd);
        fail(path, ": truncated safetensors file (", map_size_, " bytes, no header length)");
    }
    map_ = ::mmap(nullptr, map_size_, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (map_ == MAP_FAILED) {
        map_ = nullptr;
        fail("cannot map ", path, ": ", std::strerror(errno));
    }
    try {
        const uint8_t* base = static_cast<const uint8_t*>(map_);
        uint64_t n = load<uint64_t>(base);
        if (n > map_size_ - 8)
            fail(path, ": header length ", n, " runs past the end of the file (", map_size_,
                 " bytes)");
        data_ = base + 8 + n;
        size_t data_size = map_size_ - 8 - n;
        nlohmann::ordered_json h;
        try {
            h = nlohmann::ordered_json::parse(base + 8, base + 8 + n);
        } catch (const std::exception& e) {
            fail(path, ": malformed safetensors header: ", e.what());
        }
        if (!h.is_object()) fail(path, ": malformed safetensors header: not a JSON object");
        for (auto it = h.begin(); it != h.end(); ++it) {
            const std::string& name = it.key();
            const auto& v = it.value();
            if (name == "__metadata__") {
                if (!v.is_object()) fail(path, ": __metadata__ is not an object");
                for (auto m = v.begin(); m != v.end(); ++m)
                    metadata_[m.key()] =
                        m.value().is_string() ? m.value().get<std::string>() : m.value().dump();
                continue;
            }
            if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
                !v.contains("data_offsets") || !v["dtype"].is_string() || !v["shape"].is_array() ||
                !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
                fail(path, ": malformed header entry for tensor '", name, "'");
            TensorInfo t;
            t.name = name;
            std::string dt = v["dtype"].get<std::string>();
            if (!dtype_from_name(dt, &t.dtype))
                fail(path, ": tensor '", name, "' has unknown dtype '", dt, "'");
            int64_t numel = 1;
            for (const auto& d : v["shape"]) {
                if (!d.is_number_integer() || d.get<int64_t>() < 0)
                    fail(path, ": tensor '", name, "' has an invalid shape");
                t.shape.push_back(d.get<int64_t>());
                if (t.shape.back() != 0 && numel > (int64_t(1) << 48) / t.shape.back())
                    fail(path, ": tensor '", name, "' is too large");
                numel *= t.shape.back();
            }
            const auto& off = v["data_offsets"];
            if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
                fail(path, ": tensor '", name, "' has invalid data offsets");
            t.begin = off[0].get<uint64_t>();
            t.end = off[1].get<uint64_t>();
            if (t.begin > t.end || t.end > data_size)
                fail(path, ": tensor '", name, "' data offsets [", t.begin, ",", t.end,
                     ") are outside the data section (", data_size, " bytes); truncated file?");
            if (t.end - t.begin != size_t(numel) * dtype_size(t.dtype))
                fail(path, ": tensor '", name, "' has ", t.end - t.begin, " bytes but shape ",
                     shape_str(t.shape), " of ", dt, " needs ",
                     size_t(numel) * dtype_size(t.dtype));
            index_[name] = tensors_.size();
            tensors_.push_back(std::move(t));
        }
        std::vector<const TensorInfo*> order;
        for (const auto& t : tensors_) order.push_back(&t);
        std::sort(order.begin(), order.end(),
                  [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
        for (size_t i = 1; i < order.size(); ++i)
            if (order[i]->begin < order[i - 1]->end)
                fail(path, ": tensors '", order[i - 1]->name, "' and '", order[i]->name,
                     "' have overlapping data offsets");
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
template Tensor<float> SafetensorsFile::read<float>(const std::string&) const;
template Tensor<double> SafetensorsFile::read<double>(const std::string&) const;

std::vector<int64_t> SafetensorsFile::read_i64(const std::string& name) const {
    const TensorInfo& t = at(name);
    std::vector<int64_t> out(size_t(shape_numel(t.shape)));
    convert_to<int64_t>(t.dtype, raw(t), int64_t(out.size()), out.data());
    return out;
}

void SafetensorsWriter::add_raw(const std::string& name, DType dtype, const Shape& shape,
                                const void* data) {
    Entry e{dtype, shape, {}};
    size_t n = size_t(shape_numel(shape)) * dtype_size(dtype);
    e.bytes.resize(n);
    if (n) std::memcpy(e.bytes.data(), data, n);
    entries_[name] = std::move(e);
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

void SafetensorsWriter::write(const std::string& path) const {
    nlohmann::ordered_json h = nlohmann::ordered_json::object();
    if (!metadata_.empty()) {
        nlohmann::ordered_json m = nlohmann::ordered_json::object();
        for (const auto& [k, v] : metadata_) m[k] = v;
        h["__metadata__"] = m;
    }
    size_t off = 0;
    for (const auto& [name, e] : entries_) {
        h[name] = {{"dtype", dtype_name(e.dtype)},
                   {"shape", e.shape},
                   {"data_offsets", {off, off + e.bytes.size()}}};
        off += e.bytes.size();
    }
    std::string header = h.dump();
    while (header.size() % 8) header += ' ';
    std::string out;
    out.reserve(8 + header.size() + off);
    uint64_t n = header.size();
    out.append(reinterpret_cast<const char*>(&n), 8);
    out += header;
    for (const auto& [name, e] : entries_)
        out.append(reinterpret_cast<const char*>(e.bytes.data()), e.bytes.size());
    write_file_atomic(path, out);
}

}  // namespace pldr
