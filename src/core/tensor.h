// Tensor<T>: a shape plus contiguous row-major storage, T = float or double.
// Kernels take raw pointers and shape integers (llm.c style); Tensor owns the memory.
#pragma once
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/alloc.h"
#include "core/error.h"

// AddressSanitizer checks the bounds of heap blocks only: under it, tensors stay on the heap.
#if defined(__SANITIZE_ADDRESS__)
#define PLDR_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PLDR_ASAN 1
#endif
#endif
#ifndef PLDR_ASAN
#define PLDR_ASAN 0
#endif

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

// std::allocator, except that a value-initialising construction (what vector::resize does to
// the elements it adds) leaves a trivial element uninitialised: a buffer that the caller
// overwrites is not zero-filled first. Fills and copies are unchanged. The sanitizer builds
// (PLDR_POISON_UNINIT) fill such elements with 0xFF bytes, so that reading one before writing
// it shows (NaN) even where the memory happens to hold zeros.
// Blocks from kCachedPagesMin bytes come from the page cache (core/alloc.h), except under
// AddressSanitizer, which checks the bounds of heap blocks only.
template <typename T>
struct UninitAllocator : std::allocator<T> {
    template <typename U>
    struct rebind {
        using other = UninitAllocator<U>;
    };
    UninitAllocator() = default;
    template <typename U>
    UninitAllocator(const UninitAllocator<U>&) noexcept {}
#if !PLDR_ASAN
    // Whether a block of n elements comes from the page cache (the same answer for its
    // allocation and its release: the cache is on or off for the whole process).
    static bool cached(size_t n) {
        return n >= kCachedPagesMin / sizeof(T) && page_cache_enabled();
    }
    T* allocate(size_t n) {
        if (!cached(n)) return std::allocator<T>::allocate(n);
        if (n > size_t(-1) / sizeof(T)) throw std::bad_array_new_length();
        return static_cast<T*>(cached_pages_allocate(n * sizeof(T)));
    }
    void deallocate(T* p, size_t n) noexcept {
        if (cached(n))
            cached_pages_free(p, n * sizeof(T));
        else
            std::allocator<T>::deallocate(p, n);
    }
#endif
    template <typename U>
    void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
        ::new (static_cast<void*>(p)) U;
#ifdef PLDR_POISON_UNINIT  // the sanitizer builds: NaN (floats), -1 (integers)
        if constexpr (std::is_trivially_copyable_v<U>)
            std::memset(static_cast<void*>(p), 0xff, sizeof(U));
#endif
    }
    template <typename U, typename... A>
    void construct(U* p, A&&... a) {
        ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
    }
};

// A tensor's storage: a vector whose resize does not zero what it adds.
template <typename T>
using Storage = std::vector<T, UninitAllocator<T>>;

template <typename T>
struct Tensor {
    Shape shape;
    Storage<T> data;

    Tensor() = default;
    explicit Tensor(Shape s, T fill = T(0)) : shape(std::move(s)), data(shape_numel(shape), fill) {}
    Tensor(Shape s, Storage<T> d) : shape(std::move(s)), data(std::move(d)) {
        PLDR_CHECK(int64_t(data.size()) == shape_numel(shape));
    }
    Tensor(Shape s, const std::vector<T>& d)
        : Tensor(std::move(s), Storage<T>(d.begin(), d.end())) {}

    int64_t numel() const { return int64_t(data.size()); }
    T* ptr() { return data.data(); }
    const T* ptr() const { return data.data(); }
    int64_t dim(int i) const { return shape[i < 0 ? shape.size() + i : i]; }
    void resize(Shape s) {
        shape = std::move(s);
        data.assign(shape_numel(shape), T(0));
    }
    // Like resize, but the contents are unspecified (old values kept, new elements
    // uninitialised): for buffers the caller overwrites entirely, so that neither a reused nor a
    // fresh buffer is zeroed first (a training step zero-filled its 2 × 32 MB head buffers).
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
