// The public C++ API (include/pldr/pldr.hpp) over the internal templates: models, tokenizer,
// forward, sessions, sampling, generation, scoring, loss and gradients.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "api_impl.h"
#include "core/fs.h"
#include "infer/generate.h"
#include "infer/requests.h"
#include "infer/sampler.h"
#include "infer/score.h"
#include "infer/session.h"
#include "io/model_load.h"
#include "model/forward.h"
#include "model/named_outputs.h"
#include "train/loss.h"

namespace pldr::api {

const char* version() {
    return "0.1.0";
}

// ---- names -------------------------------------------------------------------------------

DType dtype_from_name(const std::string& s) {
    if (s == "f32" || s == "float32") return DType::F32;
    if (s == "f64" || s == "float64") return DType::F64;
    fail("dtype must be f32 or f64 (got '", s, "')");
}
CacheMode cache_mode_from_name(const std::string& s) {
    switch (::pldr::cache_mode_from_name(s)) {
        case ::pldr::CacheMode::KVG:
            return CacheMode::KVG;
        case ::pldr::CacheMode::KV:
            return CacheMode::KV;
        default:
            return CacheMode::NONE;
    }
}
ScoreMode score_mode_from_name(const std::string& s) {
    switch (::pldr::score_mode_from_name(s)) {
        case ::pldr::ScoreMode::BLOCK:
            return ScoreMode::BLOCK;
        case ::pldr::ScoreMode::SEQUENTIAL:
            return ScoreMode::SEQUENTIAL;
        default:
            return ScoreMode::CACHED;
    }
}
ClipMode clip_mode_from_name(const std::string& s) {
    if (s == "value") return ClipMode::VALUE;
    if (s == "norm") return ClipMode::NORM;
    if (s == "none") return ClipMode::NONE;
    fail("clip must be value, norm or none (got '", s, "')");
}
const char* name_of(DType d) {
    return d == DType::F64 ? "f64" : d == DType::I64 ? "i64" : "f32";
}
const char* name_of(CacheMode m) {
    return ::pldr::cache_mode_name(internal(m));  // the one table of names (infer/session.cpp)
}
const char* name_of(ScoreMode m) {
    return m == ScoreMode::BLOCK ? "block" : m == ScoreMode::SEQUENTIAL ? "sequential" : "cached";
}
const char* name_of(ClipMode m) {
    return m == ClipMode::VALUE ? "value" : m == ClipMode::NORM ? "norm" : "none";
}

// ---- Tensor ------------------------------------------------------------------------------

int64_t Tensor::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}
const float* Tensor::f32() const {
    PLDR_REQUIRE(dtype == DType::F32, "tensor is ", name_of(dtype), ", not f32");
    return static_cast<const float*>(storage.get());
}
const double* Tensor::f64() const {
    PLDR_REQUIRE(dtype == DType::F64, "tensor is ", name_of(dtype), ", not f64");
    return static_cast<const double*>(storage.get());
}
const int64_t* Tensor::i64() const {
    PLDR_REQUIRE(dtype == DType::I64, "tensor is ", name_of(dtype), ", not i64");
    return static_cast<const int64_t*>(storage.get());
}
double Tensor::at(int64_t i) const {
    PLDR_REQUIRE(i >= 0 && i < numel(), "tensor index ", i, " out of range [0, ", numel(), ")");
    return dtype == DType::F32   ? double(f32()[i])
           : dtype == DType::F64 ? f64()[i]
                                 : double(i64()[i]);
}
std::vector<double> Tensor::to_vector() const {
    const int64_t n = numel();
    std::vector<double> v(size_t(std::max<int64_t>(n, 0)));
    if (!storage) return v;
    if (dtype == DType::F32)
        std::copy(f32(), f32() + n, v.begin());
    else if (dtype == DType::F64)
        std::copy(f64(), f64() + n, v.begin());
    else
        std::copy(i64(), i64() + n, v.begin());
    return v;
}

// ---- Tokenizer ---------------------------------------------------------------------------

std::vector<int64_t> Tokenizer::encode(const std::string& text) const {
    return impl_->tok.encode(text);
}
std::vector<int64_t> Tokenizer::encode_prompt(const std::string& text) const {
    return impl_->tok.encode_prompt(text);
}
std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
    return impl_->tok.decode(ids);
}
std::string Tokenizer::piece(int64_t id) const {
    return impl_->tok.piece(id);
}
std::string Tokenizer::token_text(int64_t id) const {
    return impl_->tok.token_text(id);
}
std::string Tokenizer::piece_text(int64_t id) const {
    return impl_->tok.piece_text(id);
}
std::string Tokenizer::continuation_text(const std::vector<int64_t>& prompt,
                                         const std::vector<int64_t>& ids) const {
    return impl_->tok.continuation_text(prompt, ids);
}
TokenPieces Tokenizer::pieces(const std::vector<int64_t>& ids) const {
    ::pldr::Tokenizer::Pieces p = impl_->tok.pieces(ids);
    return {std::move(p.text), std::move(p.offset)};
}
int64_t Tokenizer::vocab_size() const {
    return impl_->tok.vocab_size();
}
int64_t Tokenizer::eos_id() const {
    return impl_->tok.eos_id();
}

// ---- ForwardResult, Gradients ------------------------------------------------------------

bool ForwardResult::has(const std::string& name) const {
    for (const auto& [n, t] : tensors)
        if (n == name) return true;
    return false;
}
const Tensor& ForwardResult::get(const std::string& name) const {
    for (const auto& [n, t] : tensors)
        if (n == name) return t;
    fail("forward result has no tensor '", name, "'");
}
const Tensor& ForwardResult::layer(int64_t l, const std::string& what) const {
    PLDR_REQUIRE(l >= 0 && l < num_layers, "layer ", l, " out of range [0, ", num_layers, ")");
    return get("fwd.layer" + std::to_string(l) + "." + (what == "A_P" ? "Ap" : what));
}
const Tensor& Gradients::get(const std::string& name) const {
    for (const auto& [n, t] : grads)
        if (n == name) return t;
    fail("no gradient for '", name, "'");
}

// ---- Model -------------------------------------------------------------------------------

const ::pldr::Tokenizer* Model::Impl::internal_tok() const {
    return tok ? &tok->impl()->tok : nullptr;
}

Model::Model(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

const Model::Impl& impl_of(const Model& m) {
    PLDR_REQUIRE(m.impl(), "use of a moved-from pldr model");
    return *m.impl();
}

namespace {

TokenInfo token_info(const ::pldr::GenStep& st, const Model::Impl& im) {
    TokenInfo ti;
    ti.id = st.id;
    ti.logprob = st.logprob;
    ti.top = to_top(st.top);
    if (im.tok) ti.text = im.tok->token_text(st.id);
    return ti;
}

// The one generation loop (infer/generate) over the public options: the G-cache file loaded
// once for every prompt, the model's tokenizer for the texts and stop strings.
std::vector<Generation> run_generation(const Model& model,
                                       const std::vector<std::vector<int64_t>>& prompts,
                                       const GenerateOptions& opt, const ::pldr::GenCallback& cb) {
    const Model::Impl& im = impl_of(model);
    const ::pldr::GenerateOptions o = internal(opt);
    return im.visit_host([&](const auto& m) {
        using T = scalar_t<decltype(m)>;
        std::unique_ptr<::pldr::GCache<T>> preset;
        if (!opt.g_cache_file.empty())
            preset = std::make_unique<::pldr::GCache<T>>(
                ::pldr::load_g_cache<T>(opt.g_cache_file, m.cfg));
        ::pldr::DeviceDecoders<T> device;  // a model on a GPU: its sessions there
        if (im.dev) gpu::decoders(*im.dev, device);
        auto rs = ::pldr::generate_batch(m, prompts, o, preset.get(), im.internal_tok(), cb,
                                         im.dev ? &device : nullptr);
        std::vector<Generation> out;
        out.reserve(rs.size());
        for (auto& r : rs) {
            Generation g;
            g.prompt_ids = std::move(r.prompt_ids);
            g.ids = std::move(r.ids);
            g.text = std::move(r.text);
            for (const auto& st : r.steps) g.tokens.push_back(token_info(st, im));
            g.finish_reason = std::move(r.finish_reason);
            g.prefill_seconds = r.prefill_seconds;
            g.decode_seconds = r.decode_seconds;
            out.push_back(std::move(g));
        }
        return out;
    });
}

}  // namespace

void Model::Impl::require_host() const {
    PLDR_REQUIRE(!dev, gpu::not_yet(device));
}

Model Model::load(const std::string& dir, const LoadOptions& opt) {
    check_options(opt);
    const DeviceSpec device = ::pldr::parse_device(opt.device);  // before reading anything
    auto impl = std::make_shared<Impl>();
    if (opt.dtype == DType::F32) {
        impl->m32 = std::make_unique<::pldr::Model<float>>(
            load_model<float>(dir, !opt.dequantize, opt.map_file));
        impl->m32->set_reference_numerics(opt.reference_numerics);
        // an immutable model for inference on the CPU (a CUDA device reads params only)
        if (device.kind == DeviceKind::CPU) keep_panel_weights(*impl->m32);
        impl->info = info_of(*impl->m32, dir);
    } else {
        impl->m64 =
            std::make_unique<::pldr::Model<double>>(load_model<double>(dir, true, opt.map_file));
        impl->m64->set_reference_numerics(opt.reference_numerics);
        impl->info = info_of(*impl->m64, dir);
    }
    std::string tp = opt.tokenizer;
    if (tp.empty() && file_exists(dir + "/tokenizer.model")) tp = dir + "/tokenizer.model";
    if (!tp.empty()) {
        auto ti = std::make_shared<const Tokenizer::Impl>(tp);
        PLDR_REQUIRE(ti->tok.vocab_size() == impl->info.vocab_size, "tokenizer ", tp, " has ",
                     ti->tok.vocab_size(), " pieces but the model's vocab_size is ",
                     impl->info.vocab_size);
        impl->tok = std::make_unique<Tokenizer>(std::move(ti));
    }
    impl->device = device;
    if (device.kind == DeviceKind::CUDA)
        impl->dev = impl->visit_host([&](const auto& m) { return gpu::upload(m, device); });
    return Model(std::move(impl));
}

const ModelInfo& Model::info() const {
    return impl_of(*this).info;
}
bool Model::has_tokenizer() const {
    return impl_of(*this).tok != nullptr;
}
const Tokenizer& Model::tokenizer() const {
    const Impl& i = impl_of(*this);
    PLDR_REQUIRE(i.tok, "model ", i.info.dir,
                 " has no tokenizer (no tokenizer.model; give LoadOptions::tokenizer)");
    return *i.tok;
}

ForwardResult Model::forward(const std::vector<int64_t>& ids, int64_t batch) const {
    PLDR_REQUIRE(batch >= 1, "batch must be >= 1 (got ", batch, ")");
    PLDR_REQUIRE(!ids.empty() && int64_t(ids.size()) % batch == 0, "forward: ", ids.size(),
                 " token ids do not form ", batch, " rows of equal length");
    const int64_t S = int64_t(ids.size()) / batch;
    const Impl& im = impl_of(*this);
    return im.visit_host([&](const auto& m) {
        using T = scalar_t<decltype(m)>;
        ::pldr::Activations<T> acts;
        if (im.dev)
            gpu::forward(*im.dev, ids.data(), batch, S, acts);  // every named tensor, as below
        else
            ::pldr::forward(m, ids.data(), batch, S, acts);
        return forward_result(m, acts);
    });
}

Generation Model::generate(const std::string& prompt, const GenerateOptions& opt,
                           const TokenCallback& on_token) const {
    PLDR_REQUIRE(!prompt.empty(), "empty prompt: give some text, or token ids (generate_ids)");
    return generate_ids(tokenizer().encode_prompt(prompt), opt, on_token);
}

Generation Model::generate_ids(const std::vector<int64_t>& prompt, const GenerateOptions& opt,
                               const TokenCallback& on_token) const {
    check_options(opt);
    ::pldr::GenCallback cb;
    if (on_token)
        cb = [&](size_t, const ::pldr::GenResult& r) {
            return on_token(token_info(r.steps.back(), impl_of(*this)), r.text);
        };
    return std::move(run_generation(*this, {prompt}, opt, cb).front());
}

namespace {

template <typename T>
ScoreResult score_one(const ::pldr::Model<T>& m, const std::vector<int64_t>& ctx,
                      const std::vector<int64_t>& cont, const ScoreOptions& opt,
                      const ::pldr::DeviceScoring<T>* device) {
    PLDR_REQUIRE(!cont.empty(), "empty continuation");
    check_options(opt);
    const ::pldr::ScoreResult r =
        ::pldr::score_request(m, {ctx, cont}, internal(opt.mode), opt.top_logprobs, device);
    return to_score(r, ctx, cont);
}

}  // namespace

std::pair<std::vector<int64_t>, std::vector<int64_t>> Model::encode_request(
    const std::string& context, const std::string& continuation) const {
    ::pldr::ScoreRequest r =
        ::pldr::encode_request(tokenizer().impl()->tok, context, continuation, info().eos_id);
    return {std::move(r.context), std::move(r.continuation)};
}

std::vector<ScoreRequest> parse_score_requests(const std::string& jsonl, const std::string& where) {
    std::vector<ScoreRequest> out;
    for (auto& r : ::pldr::parse_score_requests(jsonl, where))
        out.push_back({r.line, r.has_ids, std::move(r.context_ids), std::move(r.continuation_ids),
                       std::move(r.context), std::move(r.continuation)});
    return out;
}

void Model::check_generation(const std::vector<int64_t>& prompt, const GenerateOptions& opt) const {
    const Impl& im = impl_of(*this);
    check_options(opt);
    internal(opt.sampling);
    im.visit_host([&](const auto& m) {  // (checks only: generation runs on the device too)
        using T = scalar_t<decltype(m)>;
        ::pldr::check_generation_fits(m, prompt, opt.max_tokens);
        if (!opt.g_cache_file.empty()) ::pldr::load_g_cache<T>(opt.g_cache_file, m.cfg);
    });
}

std::vector<Generation> Model::generate_batch(const std::vector<std::vector<int64_t>>& prompts,
                                              const GenerateOptions& opt) const {
    check_options(opt);
    return run_generation(*this, prompts, opt, {});
}

ScoreResult Model::score(const std::string& context, const std::string& continuation,
                         const ScoreOptions& opt) const {
    const ::pldr::ScoreRequest r =
        ::pldr::encode_request(tokenizer().impl()->tok, context, continuation, info().eos_id);
    return score_ids(r.context, r.continuation, opt);
}

ScoreResult Model::score_ids(const std::vector<int64_t>& context,
                             const std::vector<int64_t>& continuation,
                             const ScoreOptions& opt) const {
    return with_scoring(impl_of(*this), [&](const auto& m, const auto* device) {
        return score_one(m, context, continuation, opt, device);
    });
}

std::vector<ScoreResult> Model::score_batch(
    const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>& requests,
    const ScoreOptions& opt) const {
    std::vector<ScoreResult> out(requests.size());
    std::string err;
    const int64_t n = int64_t(requests.size());
#pragma omp parallel for schedule(dynamic, 1) if (n > 1)
    for (int64_t i = 0; i < n; ++i) {
        try {
            out[size_t(i)] = score_ids(requests[size_t(i)].first, requests[size_t(i)].second, opt);
        } catch (const std::exception& e) {
#pragma omp critical
            if (err.empty()) err = cat("request ", i + 1, ": ", e.what());
        }
    }
    PLDR_REQUIRE(err.empty(), err);
    return out;
}

Gradients Model::loss_and_grads(const std::vector<int64_t>& tokens, int64_t batch,
                                const DagCoefficients& dag) const {
    PLDR_REQUIRE(batch >= 1, "batch must be >= 1 (got ", batch, ")");
    PLDR_REQUIRE(!tokens.empty() && int64_t(tokens.size()) % batch == 0,
                 "loss_and_grads: ", tokens.size(), " token ids do not form ", batch,
                 " rows of equal length");
    const int64_t S1 = int64_t(tokens.size()) / batch;
    PLDR_REQUIRE(dag.A >= 0 && dag.Ap >= 0 && dag.G >= 0 && std::isfinite(dag.A + dag.Ap + dag.G),
                 "DAG coefficients must be finite and >= 0");
    const Impl& im = impl_of(*this);
    return im.visit_host([&](const auto& m) {
        using T = scalar_t<decltype(m)>;
        auto grads = std::make_shared<std::vector<T>>(size_t(m.layout.total), T(0));
        const ::pldr::DagCoeffs coeffs{dag.A, dag.Ap, dag.G};
        ::pldr::LossResult r;
        if (im.dev) {
            r = gpu::loss_and_grads(*im.dev, tokens.data(), batch, S1, coeffs, grads->data());
        } else {
            ::pldr::Activations<T> acts;
            r = ::pldr::loss_and_grads(m, tokens.data(), batch, S1, coeffs, acts, grads->data());
        }
        if (!std::isfinite(r.value)) {
            // Name the first activation that went bad, in forward order.
            const std::string bad = ::pldr::non_finite_origin(m, tokens.data(), batch, S1);
            fail("the loss is not finite (", r.value, ")",
                 bad.empty() ? std::string() : "; non-finite values first appear in " + bad);
        }
        for (const auto& e : m.layout.entries)
            for (int64_t i = 0; i < e.numel; ++i)
                PLDR_REQUIRE(std::isfinite(double((*grads)[size_t(e.offset + i)])),
                             "the gradient of ", e.name, " is not finite (element ", i, ")");
        Gradients g;
        g.loss = {r.value, r.ce, r.accuracy, r.dagA, r.dagAp, r.dagG, r.scored};
        for (const auto& e : m.layout.entries) {
            Tensor t;
            t.dtype = dtype_of<T>();
            t.shape = e.shape;
            // Each gradient is a view into one buffer that the views keep alive.
            t.storage = std::shared_ptr<const void>(grads, grads->data() + e.offset);
            g.grads.emplace_back(e.name, std::move(t));
        }
        return g;
    });
}

std::vector<std::string> Model::parameter_names() const {
    return impl_of(*this).visit_host([&](const auto& m) {
        std::vector<std::string> v;
        for (const auto& e : m.layout.entries) v.push_back(e.name);
        return v;
    });
}

Tensor Model::parameter(const std::string& name) const {
    return impl_of(*this).visit_host([&](const auto& m) {  // (the host copy: a read, not a job)
        using T = scalar_t<decltype(m)>;
        const auto* e = m.layout.find(name);
        PLDR_REQUIRE(e, "model has no parameter '", name, "'");
        std::vector<T> v(m.params.begin() + e->offset, m.params.begin() + e->offset + e->numel);
        return make_tensor<T>(e->shape, std::move(v));
    });
}

}  // namespace pldr::api
