// Tensor<T>: a shape plus contiguous row-major storage, T = float or double.
// Kernels take raw pointers and shape integers (llm.c style); Tensor owns the memory.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/error.h"

namespace pldr {

using Shape = std::vector<int64_t>;

inline int64_t shape_numel(const Shape& s) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return n;
}

inline std::string shape_str(const Shape& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) {
        if (i) r += ',';
        r += std::to_string(s[i]);
    }
    r += ']';
    return r;
}

template <typename T>
struct Tensor {
    Shape shape;
    std::vector<T> data;

    Tensor() = default;
    explicit Tensor(Shape s, T fill = T(0)) : shape(std::move(s)), data(shape_numel(shape), fill) {}
    Tensor(Shape s, std::vector<T> d) : shape(std::move(s)), data(std::move(d)) {
        PLDR_CHECK(int64_t(data.size()) == shape_numel(shape));
    }

    int64_t numel() const { return int64_t(data.size()); }
    T* ptr() { return data.data(); }
    const T* ptr() const { return data.data(); }
    int64_t dim(int i) const { return shape[i < 0 ? shape.size() + i : i]; }
    void resize(Shape s) {
        shape = std::move(s);
        data.assign(shape_numel(shape), T(0));
    }
    // Like resize, but the contents are unspecified (old values kept, new elements zero): for
    // buffers the caller overwrites entirely, so that a reused buffer is not zeroed each step.
    void resize_for_overwrite(Shape s) {
        shape = std::move(s);
        data.resize(shape_numel(shape));
    }
    void zero() { std::fill(data.begin(), data.end(), T(0)); }
    T& operator[](int64_t i) { return data[i]; }
    const T& operator[](int64_t i) const { return data[i]; }
};

// Numeric type name for messages and file dtypes.
template <typename T>
constexpr const char* type_name();
template <>
constexpr const char* type_name<float>() {
    return "f32";
}
template <>
constexpr const char* type_name<double>() {
    return "f64";
}

}  // namespace pldr
