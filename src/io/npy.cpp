// NumPy .npy writer and reader (see npy.h).
#include "io/npy.h"

#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "core/fs.h"

namespace pldr {

namespace {

template <typename T>
const char* npy_descr() {
    if constexpr (std::is_same_v<T, float>)
        return "<f4";
    else if constexpr (std::is_same_v<T, double>)
        return "<f8";
    else {
        static_assert(std::is_same_v<T, int64_t>, "npy: float, double or int64_t");
        return "<i8";
    }
}

std::string shape_tuple(const Shape& s) {
    std::string r = "(";
    for (size_t i = 0; i < s.size(); ++i) {
        if (i) r += ", ";
        r += std::to_string(s[i]);
    }
    if (s.size() == 1) r += ',';
    return r + ")";
}

}  // namespace

template <typename T>
std::string npy_bytes(const Shape& shape, const T* data) {
    for (int64_t d : shape) PLDR_REQUIRE(d >= 0, "npy: negative dimension in ", shape_str(shape));
    const int64_t n = shape_numel(shape);
    PLDR_REQUIRE(n == 0 || data != nullptr, "npy: no data for shape ", shape_str(shape));
    std::string header = std::string("{'descr': '") + npy_descr<T>() +
                         "', 'fortran_order': False, 'shape': " + shape_tuple(shape) + ", }";
    // magic(6) + version(2) + length(2) + header + '\n' ≡ 0 (mod 64)
    size_t total = 10 + header.size() + 1;
    header.append((64 - total % 64) % 64, ' ');
    header += '\n';
    PLDR_REQUIRE(header.size() <= 65535, "npy: header too long for format 1.0");
    std::string out("\x93NUMPY\x01\x00", 8);
    out += char(header.size() & 0xff);
    out += char((header.size() >> 8) & 0xff);
    out += header;
    out.append(reinterpret_cast<const char*>(data), size_t(n) * sizeof(T));  // little-endian host
    return out;
}

template <typename T>
void save_npy(const std::string& path, const Shape& shape, const T* data) {
    write_file_atomic(path, npy_bytes<T>(shape, data));
}

namespace {

// Value of 'key' in a NumPy header dict, as raw text up to the next top-level ',' or '}'.
std::string dict_value(const std::string& h, const std::string& key, const std::string& path) {
    size_t k = h.find("'" + key + "'");
    if (k == std::string::npos) fail(path, ": npy header has no '", key, "'");
    size_t colon = h.find(':', k);
    if (colon == std::string::npos) fail(path, ": malformed npy header");
    size_t i = colon + 1;
    while (i < h.size() && h[i] == ' ') ++i;
    size_t j = i;
    int depth = 0;
    while (j < h.size()) {
        char ch = h[j];
        if (ch == '(') ++depth;
        if (ch == ')') --depth;
        if (depth == 0 && (ch == ',' || ch == '}')) break;
        ++j;
    }
    if (j >= h.size()) fail(path, ": malformed npy header");
    size_t k2 = j;
    while (k2 > i && h[k2 - 1] == ' ') --k2;
    return h.substr(i, k2 - i);
}

}  // namespace

template <typename T>
Tensor<T> load_npy(const std::string& path) {
    const std::string b = read_file(path);
    if (b.size() < 10 || b.compare(0, 6, "\x93NUMPY") != 0)
        fail(path, ": not a .npy file (bad magic)");
    const int major = uint8_t(b[6]);
    size_t hlen, hstart;
    if (major == 1) {
        hlen = size_t(uint8_t(b[8])) | size_t(uint8_t(b[9])) << 8;
        hstart = 10;
    } else if (major == 2 || major == 3) {
        if (b.size() < 12) fail(path, ": truncated .npy file");
        hlen = 0;
        for (int i = 0; i < 4; ++i) hlen |= size_t(uint8_t(b[8 + i])) << (8 * i);
        hstart = 12;
    } else {
        fail(path, ": unsupported .npy format version ", major);
    }
    if (hstart + hlen > b.size()) fail(path, ": truncated .npy header");
    const std::string h = b.substr(hstart, hlen);
    std::string descr = dict_value(h, "descr", path);
    std::string fortran = dict_value(h, "fortran_order", path);
    std::string shape_txt = dict_value(h, "shape", path);
    if (fortran != "False") fail(path, ": Fortran-order .npy arrays are not supported");
    if (descr.size() < 2 || descr.front() != '\'' || descr.back() != '\'')
        fail(path, ": malformed npy descr ", descr);
    descr = descr.substr(1, descr.size() - 2);
    if (shape_txt.size() < 2 || shape_txt.front() != '(' || shape_txt.back() != ')')
        fail(path, ": malformed npy shape ", shape_txt);
    Shape shape;
    {
        std::string inner = shape_txt.substr(1, shape_txt.size() - 2);
        size_t i = 0;
        while (i < inner.size()) {
            while (i < inner.size() && (inner[i] == ' ' || inner[i] == ',')) ++i;
            if (i >= inner.size()) break;
            size_t j = i;
            while (j < inner.size() && inner[j] >= '0' && inner[j] <= '9') ++j;
            if (j == i || j - i > 15) fail(path, ": malformed npy shape ", shape_txt);
            shape.push_back(std::stoll(inner.substr(i, j - i)));
            i = j;
        }
    }
    size_t esize;
    if (descr == "<f4" || descr == "<i4")
        esize = 4;
    else if (descr == "<f8" || descr == "<i8")
        esize = 8;
    else if (descr == "|b1" || descr == "|u1")
        esize = 1;
    else
        fail(path, ": unsupported npy dtype '", descr, "'");
    const size_t data_start = hstart + hlen;
    const int64_t n = shape_numel(shape);
    if (b.size() - data_start != size_t(n) * esize)
        fail(path, ": .npy data has ", b.size() - data_start, " bytes but shape ", shape_str(shape),
             " of ", descr, " needs ", size_t(n) * esize);
    Tensor<T> out(shape);
    const char* p = b.data() + data_start;
    for (int64_t i = 0; i < n; ++i) {
        if (descr == "<f4") {
            float v;
            std::memcpy(&v, p + 4 * i, 4);
            out[i] = T(v);
        } else if (descr == "<f8") {
            double v;
            std::memcpy(&v, p + 8 * i, 8);
            out[i] = T(v);
        } else if (descr == "<i8") {
            int64_t v;
            std::memcpy(&v, p + 8 * i, 8);
            out[i] = T(v);
        } else if (descr == "<i4") {
            int32_t v;
            std::memcpy(&v, p + 4 * i, 4);
            out[i] = T(v);
        } else {
            out[i] = T(uint8_t(p[i]));
        }
    }
    return out;
}

template std::string npy_bytes<float>(const Shape&, const float*);
template std::string npy_bytes<double>(const Shape&, const double*);
template std::string npy_bytes<int64_t>(const Shape&, const int64_t*);
template void save_npy<float>(const std::string&, const Shape&, const float*);
template void save_npy<double>(const std::string&, const Shape&, const double*);
template void save_npy<int64_t>(const std::string&, const Shape&, const int64_t*);
template Tensor<float> load_npy<float>(const std::string&);
template Tensor<double> load_npy<double>(const std::string&);
template Tensor<int64_t> load_npy<int64_t>(const std::string&);

}  // namespace pldr
