// ParamBuffer<T>: a model's parameter arena (model/model.h). Either owned memory, or a private
// mapping of a weights file whose tensors lie in the model's layout order (io/model_load.cpp,
// load_model with map_file): then a page becomes resident only when a computation reads it (an
// embedding row per token, not the whole table), and the file's pages are shared with the page
// cache and with other processes mapping the same file. The mapping is copy-on-write: writes
// (training, set_param) go to private copies of the pages and never reach the file.
//
// The interface is that of a fixed-size array (data, size, iterators, indexing, comparison);
// copying one gives an owned copy of the values, moving keeps the storage.
#pragma once
#include <algorithm>
#include <cstddef>
#include <memory>
#include <vector>

namespace pldr {

template <typename T>
class ParamBuffer {
  public:
    using value_type = T;
    using size_type = size_t;
    using iterator = T*;
    using const_iterator = const T*;

    ParamBuffer() = default;
    // n zeros, owned.
    explicit ParamBuffer(size_t n) : owned_(n, T(0)), data_(owned_.data()), size_(n) {}
    // n values at data, kept alive by `keep` (a file mapping); not owned.
    static ParamBuffer mapped(std::shared_ptr<void> keep, T* data, size_t n) {
        ParamBuffer b;
        b.keep_ = std::move(keep);
        b.data_ = data;
        b.size_ = n;
        return b;
    }

    ParamBuffer(const ParamBuffer& o) : owned_(o.begin(), o.end()) {
        data_ = owned_.data();
        size_ = owned_.size();
    }
    ParamBuffer& operator=(const ParamBuffer& o) {
        if (this != &o) *this = ParamBuffer(o);
        return *this;
    }
    ParamBuffer(ParamBuffer&& o) noexcept { *this = std::move(o); }
    ParamBuffer& operator=(ParamBuffer&& o) noexcept {
        if (this == &o) return *this;
        const bool own = o.keep_ == nullptr;
        owned_ = std::move(o.owned_);  // a moved vector keeps its buffer
        keep_ = std::move(o.keep_);
        data_ = own ? owned_.data() : o.data_;
        size_ = o.size_;
        o.owned_.clear();
        o.data_ = nullptr;
        o.size_ = 0;
        return *this;
    }

    T* data() { return data_; }
    const T* data() const { return data_; }
    size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    T* begin() { return data_; }
    T* end() { return data_ + size_; }
    const T* begin() const { return data_; }
    const T* end() const { return data_ + size_; }
    T& operator[](size_t i) { return data_[i]; }
    const T& operator[](size_t i) const { return data_[i]; }
    // Whether the values live in a file mapping (rather than owned memory).
    bool is_mapped() const { return keep_ != nullptr; }

    operator std::vector<T>() const { return std::vector<T>(begin(), end()); }  // NOLINT
    friend bool operator==(const ParamBuffer& a, const ParamBuffer& b) {
        return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
    }
    friend bool operator==(const ParamBuffer& a, const std::vector<T>& b) {
        return a.size_ == b.size() && std::equal(a.begin(), a.end(), b.begin());
    }

  private:
    std::vector<T> owned_;
    std::shared_ptr<void> keep_;  // the mapping, when not owned
    T* data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace pldr
