// The implementation side of the public API (include/pldr/pldr.hpp): the opaque Impl types over
// the internal templates, shared by api.cpp, api_tasks.cpp and c_api.cpp.
#pragma once
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "api/api_cuda.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/tensor.h"
#include "cuda/device.h"
#include "infer/generate.h"
#include "infer/sampler.h"
#include "infer/score.h"
#include "infer/session.h"
#include "io/tokenizer.h"
#include "model/model.h"
#include "model/named_outputs.h"
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
    // Where the model's jobs run (LoadOptions::device), and its copy there (null on the CPU).
    // The host model stays: it is what the copy was made from, and what save() writes.
    DeviceSpec device;
    std::shared_ptr<const gpu::Copy> dev;

    // f(model) with the model of the loaded precision, for a job that computes on the host:
    // a model loaded onto a CUDA device refuses it in one line (require_host).
    template <typename F>
    decltype(auto) visit(F&& f) const {
        require_host();
        return visit_host(std::forward<F>(f));
    }
    // f(model) whatever the device: what reads the host model's parameters or layout only.
    template <typename F>
    decltype(auto) visit_host(F&& f) const {
        if (m32) return f(*m32);
        return f(*m64);
    }
    // Throws unless the jobs run on the CPU: "--device cuda:0: the CUDA backend runs the
    // forward pass (...) but not yet this job; ...".
    void require_host() const;
};

const Model::Impl& impl_of(const Model& m);

// f(model, device) for a scoring job (infer/score.h): the host model of the loaded precision, and
// its passes on the GPU where the model has a copy there (device null on the CPU).
template <typename F>
decltype(auto) with_scoring(const Model::Impl& im, F&& f) {
    return im.visit_host([&](const auto& mm) {
        using T = scalar_t<decltype(mm)>;
        ::pldr::DeviceScoring<T> device;
        if (im.dev) gpu::scoring(*im.dev, device);
        return f(mm, im.dev ? &device : nullptr);
    });
}

// ---- the public options and results as the internals' (and back) ----

inline ::pldr::ScoreMode internal(ScoreMode m) {
    return m == ScoreMode::BLOCK        ? ::pldr::ScoreMode::BLOCK
           : m == ScoreMode::SEQUENTIAL ? ::pldr::ScoreMode::SEQUENTIAL
                                        : ::pldr::ScoreMode::CACHED;
}
inline ::pldr::SamplerConfig internal(const SamplingOptions& o) {
    ::pldr::SamplerConfig c;
#define PLDR_COPY_OPTION(K, n, d, r, s, cli, help) c.n = o.n;
    PLDR_SAMPLING_OPTIONS(PLDR_COPY_OPTION)
#undef PLDR_COPY_OPTION
    c.validate();
    return c;
}
inline std::vector<TopLogprob> to_top(const std::vector<std::pair<int64_t, double>>& v) {
    std::vector<TopLogprob> out;
    out.reserve(v.size());
    for (const auto& [id, lp] : v) out.push_back({id, lp});
    return out;
}
template <typename T>
std::vector<double> log_softmax_of(const T* logits, int64_t V) {
    std::vector<double> lp;
    ::pldr::Sampler::log_softmax(logits, V, lp);
    return lp;
}

// The public generation options as the generation loop's (infer/generate.h).
inline ::pldr::GenerateOptions internal(const GenerateOptions& opt) {
    ::pldr::GenerateOptions o;
    o.sampler = internal(opt.sampling);
    PLDR_REQUIRE(opt.top_logprobs >= 0, "top_logprobs must be >= 0 (got ", opt.top_logprobs, ")");
    o.max_new = opt.max_tokens;
    o.stop_at_eos = opt.stop_at_eos;
    o.cache = internal(opt.cache);
    o.top_report = opt.top_logprobs;
    o.stop = opt.stop;
    return o;
}

inline ScoreResult to_score(const ::pldr::ScoreResult& r, const std::vector<int64_t>& ctx,
                            const std::vector<int64_t>& cont) {
    ScoreResult s;
    s.logprob = r.logprob;
    s.is_greedy = r.is_greedy;
    s.context_ids = ctx;
    s.continuation_ids = cont;
    s.token_logprobs = r.token_logprobs;
    for (const auto& t : r.top) s.top.push_back(to_top(t));
    return s;
}

template <typename T>
ForwardResult forward_result(const ::pldr::Model<T>& m, const ::pldr::Activations<T>& acts) {
    ForwardResult r;
    r.num_layers = m.cfg.num_layers;
    auto named = ::pldr::forward_tensors(m, acts);
    r.non_finite = ::pldr::first_non_finite(named);
    for (auto& nt : named) r.tensors.emplace_back(nt.name, make_tensor<T>(std::move(nt.t)));
    return r;
}

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
