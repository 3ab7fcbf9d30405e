// The implementation side of the public API (include/pldr/pldr.hpp): the opaque Impl types over
// the internal templates, shared by api.cpp, api_tasks.cpp and c_api.cpp.
#pragma once
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/fs.h"
#include "core/tensor.h"
#include "infer/session.h"
#include "io/tokenizer.h"
#include "model/model.h"
#include "pldr/pldr.hpp"

namespace pldr::api {

template <typename T>
constexpr DType dtype_of() {
    return std::is_same_v<T, double> ? DType::F64 : DType::F32;
}

// The scalar type T of ::pldr::Model<T>, Tensor<T>, Session<T> (references and const allowed).
template <typename X>
struct scalar_of;
template <typename T>
struct scalar_of<::pldr::Model<T>> {
    using type = T;
};
template <typename T>
struct scalar_of<::pldr::Tensor<T>> {
    using type = T;
};
template <typename X>
using scalar_t = typename scalar_of<std::decay_t<X>>::type;

// A Tensor that owns `data` (moved, not copied): a std::vector or a tensor's storage.
template <typename T, typename Alloc>
Tensor make_tensor(std::vector<int64_t> shape, std::vector<T, Alloc>&& data) {
    auto sp = std::make_shared<std::vector<T, Alloc>>(std::move(data));
    Tensor t;
    t.dtype = dtype_of<T>();
    t.shape = std::move(shape);
    t.storage = std::shared_ptr<const void>(sp, sp->data());
    return t;
}
template <typename T>
Tensor make_tensor(::pldr::Tensor<T>&& x) {
    std::vector<int64_t> shape = x.shape;
    return make_tensor(std::move(shape), std::move(x.data));
}
// The values of a Tensor of compute type T (a pointer into it).
template <typename T>
const T* typed(const Tensor& t) {
    if constexpr (std::is_same_v<T, double>)
        return t.f64();
    else
        return t.f32();
}

inline ::pldr::CacheMode internal(CacheMode m) {
    return m == CacheMode::KVG  ? ::pldr::CacheMode::KVG
           : m == CacheMode::KV ? ::pldr::CacheMode::KV
                                : ::pldr::CacheMode::NONE;
}

struct Tokenizer::Impl {
    explicit Impl(const std::string& path) : tok(path) {}
    ::pldr::Tokenizer tok;
};

struct Model::Impl {
    ModelInfo info;
    std::unique_ptr<::pldr::Model<float>> m32;
    std::unique_ptr<::pldr::Model<double>> m64;
    std::unique_ptr<api::Tokenizer> tok;  // null without tokenizer
    const ::pldr::Tokenizer* internal_tok() const;

    // f(model) with the model of the loaded precision.
    template <typename F>
    decltype(auto) visit(F&& f) const {
        if (m32) return f(*m32);
        return f(*m64);
    }
};

const Model::Impl& impl_of(const Model& m);
// The inputs a writer given this model must not replace (the output rule, core/fs.h): the
// directory it was loaded from (files.cpp).
::pldr::InputSet inputs_of(const Model& m);

// The ModelInfo of an internal model loaded from `dir` in precision `dtype`.
template <typename T>
ModelInfo info_of(const ::pldr::Model<T>& m, const std::string& dir) {
    ModelInfo i;
    const auto& c = m.cfg;
    i.dir = dir;
    i.dtype = dtype_of<T>();
    i.vocab_size = c.vocab_size;
    i.num_layers = c.num_layers;
    i.num_heads = c.num_heads;
    i.head_dim = c.head_dim;
    i.hidden_size = c.hidden_size;
    i.max_position = c.max_position;
    i.eos_id = c.eos_token_id;
    i.pad_id = c.pad_token_id;
    i.bos_id = c.bos_token_id;
    i.learned_g = c.learned_g();
    i.num_params = m.num_params();
    i.weights = ::pldr::stored_weights(c);
    i.packed = m.packed != nullptr;
    i.packed_bytes = m.packed ? m.packed->bytes() : 0;
    i.mapped = m.params.is_mapped();
    return i;
}

}  // namespace pldr::api
