// The public API's decoding sessions, the batched decode step over them, and the sampler
// (include/pldr/pldr.hpp: Session, decode_batch, Sampler) over the internal Session<T> and
// Sampler.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "api_impl.h"
#include "infer/generate.h"

namespace pldr::api {

// ---- Session -----------------------------------------------------------------------------

// A session of a model on a GPU: its caches there (infer/session.h DeviceDecoder over
// cuda::DeviceSession). Prefill, decode, the logits and the counts run there; every other
// call refuses in one line (gpu::not_yet).
struct DeviceSessionState {
    std::unique_ptr<::pldr::DeviceDecoder<float>> d32;
    std::unique_ptr<::pldr::DeviceDecoder<double>> d64;
    ::pldr::CacheMode mode = ::pldr::CacheMode::KVG;
    int64_t cap = 0;
    std::vector<int64_t> ids;
    // A preset G-cache (load_g_cache), given to each new device session; it stays over resets.
    std::optional<::pldr::GCache<float>> preset32;
    std::optional<::pldr::GCache<double>> preset64;
    // Starts the sequence (each prefill): a new session on the device.
    void open(const Model::Impl& mi) {
        if (mi.m32) {
            ::pldr::DeviceDecoders<float> make;
            gpu::decoders(*mi.dev, make);
            d32 = make(mode, cap);
            if (preset32) d32->set_g_cache(*preset32);
        } else {
            ::pldr::DeviceDecoders<double> make;
            gpu::decoders(*mi.dev, make);
            d64 = make(mode, cap);
            if (preset64) d64->set_g_cache(*preset64);
        }
        ids.clear();
    }
};

struct Session::Impl {
    Model model;
    std::unique_ptr<::pldr::Session<float>> s32;
    std::unique_ptr<::pldr::Session<double>> s64;
    std::unique_ptr<DeviceSessionState> dev;  // the model is on a GPU
    template <typename F>
    decltype(auto) visit(F&& f) {
        PLDR_REQUIRE(!dev, gpu::not_yet(impl_of(model).device));
        PLDR_REQUIRE(s32 || s64, "use of a moved-from pldr session");
        if (s32) return f(*s32);
        return f(*s64);
    }
    template <typename F>
    decltype(auto) visit(F&& f) const {
        PLDR_REQUIRE(!dev, gpu::not_yet(impl_of(model).device));
        PLDR_REQUIRE(s32 || s64, "use of a moved-from pldr session");
        if (s32) return f(*s32);
        return f(*s64);
    }
};

namespace {
template <typename T>
Tensor logits_tensor(const std::vector<T>& v) {
    std::vector<T> c = v;
    const int64_t V = int64_t(c.size());
    return make_tensor<T>({V}, std::move(c));
}
// The session's state; a moved-from session (its state moved away) is refused in one line.
Session::Impl* live(const std::unique_ptr<Session::Impl>& p) {
    PLDR_REQUIRE(p, "use of a moved-from pldr session");
    return p.get();
}
// A device session's logits of its last position.
Tensor device_logits(const DeviceSessionState& d) {
    return d.d32 ? logits_tensor(d.d32->logits()) : logits_tensor(d.d64->logits());
}
// One token into a device session (checked by the caller).
void device_decode(DeviceSessionState& d, int64_t id) {
    if (d.d32)
        d.d32->decode(id);
    else
        d.d64->decode(id);
    d.ids.push_back(id);
}
}  // namespace

Session::Session(const Model& model, CacheMode mode, int64_t max_len)
    : impl_(std::make_unique<Impl>(Impl{model, nullptr, nullptr, nullptr})) {
    const Model::Impl& mi = impl_of(model);
    PLDR_REQUIRE(max_len >= 0, "session max_len must be >= 0 (got ", max_len, ")");
    if (mi.dev) {  // the caches on the GPU
        const int64_t ctx = mi.m32 ? mi.m32->cfg.max_position : mi.m64->cfg.max_position;
        PLDR_REQUIRE(max_len <= ctx, "session length ", max_len,
                     " exceeds max_position_embeddings (", ctx, ")");
        impl_->dev = std::make_unique<DeviceSessionState>();
        impl_->dev->mode = internal(mode);
        impl_->dev->cap = max_len > 0 ? max_len : ctx;  // (its device session: at the prefill)
        return;
    }
    if (mi.m32)
        impl_->s32 = std::make_unique<::pldr::Session<float>>(*mi.m32, internal(mode), max_len);
    else
        impl_->s64 = std::make_unique<::pldr::Session<double>>(*mi.m64, internal(mode), max_len);
}
Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

Tensor Session::prefill(const std::vector<int64_t>& ids) {
    if (DeviceSessionState* d = live(impl_)->dev.get()) {
        PLDR_REQUIRE(!ids.empty(), "prefill needs at least one token");
        PLDR_REQUIRE(int64_t(ids.size()) <= d->cap, "prompt of ", ids.size(),
                     " tokens exceeds the session capacity ", d->cap);
        d->open(impl_of(live(impl_)->model));  // a prefill starts the sequence again
        if (d->d32)
            d->d32->prefill(ids);
        else
            d->d64->prefill(ids);
        d->ids = ids;
        return device_logits(*d);
    }
    return live(impl_)->visit([&](auto& s) {
        PLDR_REQUIRE(!ids.empty(), "prefill needs at least one token");
        ::pldr::check_inputs(s.model(), ids.data(), 1, int64_t(ids.size()));
        PLDR_REQUIRE(int64_t(ids.size()) <= s.capacity(), "prompt of ", ids.size(),
                     " tokens exceeds the session capacity ", s.capacity());
        return logits_tensor(s.prefill(ids));
    });
}
Tensor Session::decode(int64_t id) {
    if (DeviceSessionState* d = live(impl_)->dev.get()) {  // (the device session checks the id)
        PLDR_REQUIRE(!d->ids.empty(), "decode before prefill");
        PLDR_REQUIRE(int64_t(d->ids.size()) < d->cap, "session is full (", d->cap, " tokens)");
        device_decode(*d, id);
        return device_logits(*d);
    }
    return live(impl_)->visit([&](auto& s) {
        PLDR_REQUIRE(s.length() > 0, "decode before prefill");
        PLDR_REQUIRE(s.length() < s.capacity(), "session is full (", s.capacity(), " tokens)");
        ::pldr::check_inputs(s.model(), &id, 1, 1);
        return logits_tensor(s.decode(id));
    });
}
Tensor Session::logits() const {
    if (const DeviceSessionState* d = live(impl_)->dev.get()) {
        PLDR_REQUIRE(!d->ids.empty(), "no logits before prefill");
        return device_logits(*d);
    }
    return live(impl_)->visit([&](const auto& s) {
        PLDR_REQUIRE(s.length() > 0, "no logits before prefill");
        return logits_tensor(s.logits());
    });
}
std::vector<double> Session::logprobs() const {
    return Sampler::log_softmax(logits());
}
void Session::reset() {
    if (DeviceSessionState* d = live(impl_)->dev.get()) {  // forgets the sequence
        d->d32.reset();
        d->d64.reset();
        d->ids.clear();
        return;
    }
    live(impl_)->visit([](auto& s) { s.reset(); });
}
const std::vector<int64_t>& Session::tokens() const {
    if (live(impl_)->dev) return live(impl_)->dev->ids;
    return live(impl_)->visit(
        [](const auto& s) -> const std::vector<int64_t>& { return s.tokens(); });
}
int64_t Session::length() const {
    if (live(impl_)->dev) return int64_t(live(impl_)->dev->ids.size());
    return live(impl_)->visit([](const auto& s) { return s.length(); });
}
int64_t Session::capacity() const {
    if (live(impl_)->dev) return live(impl_)->dev->cap;
    return live(impl_)->visit([](const auto& s) { return s.capacity(); });
}
const Model& Session::model() const {
    return live(impl_)->model;
}
namespace {
// A device session's operator cache (its decoder's; empty before the prefill, or the preset).
template <typename T>
::pldr::GCache<T> device_g_cache(const std::unique_ptr<::pldr::DeviceDecoder<T>>& d,
                                 const std::optional<::pldr::GCache<T>>& preset) {
    if (d) return d->g_cache();
    return preset ? *preset : ::pldr::GCache<T>{};
}
template <typename T>
std::vector<GCacheLayer> api_g_cache(const ::pldr::GCache<T>& g) {
    std::vector<GCacheLayer> out;
    auto copy = [](const ::pldr::Tensor<T>& t) {
        ::pldr::Tensor<T> c = t;
        return c.numel() ? make_tensor<T>(std::move(c)) : Tensor{};
    };
    for (const auto& l : g) out.push_back({copy(l.A), copy(l.A_LM), copy(l.A_P), copy(l.G)});
    return out;
}
}  // namespace

std::vector<GCacheLayer> Session::g_cache() const {
    if (const DeviceSessionState* d = live(impl_)->dev.get())
        return d->d64 || d->preset64 ? api_g_cache(device_g_cache(d->d64, d->preset64))
                                     : api_g_cache(device_g_cache(d->d32, d->preset32));
    return live(impl_)->visit([](const auto& s) { return api_g_cache(s.g_cache()); });
}
void Session::load_g_cache(const std::string& path) {
    if (DeviceSessionState* d = live(impl_)->dev.get()) {  // kept for each prefill's session
        impl_of(impl_->model).visit_host([&](const auto& m) {
            using T = scalar_t<decltype(m)>;
            auto g = ::pldr::load_g_cache<T>(path, m.cfg);  // (the CPU's order of checks)
            ::pldr::check_g_cache(g, m.cfg);
            PLDR_REQUIRE(d->ids.empty(), "set_g_cache must come before the prefill");
            if constexpr (std::is_same_v<T, float>)
                d->preset32 = std::move(g);
            else
                d->preset64 = std::move(g);
        });
        return;
    }
    live(impl_)->visit([&](auto& s) {
        using T = scalar_t<decltype(s.model())>;
        s.set_g_cache(::pldr::load_g_cache<T>(path, s.model().cfg));
    });
}
void Session::save_g_cache(const std::string& path, bool force) const {
    require_output_file(path, inputs_of(live(impl_)->model), "the G-cache path", force);
    if (const DeviceSessionState* d = live(impl_)->dev.get()) {
        PLDR_REQUIRE(!d->ids.empty(), "no G-cache before prefill");
        impl_of(impl_->model).visit_host([&](const auto& m) {
            using T = scalar_t<decltype(m)>;
            if constexpr (std::is_same_v<T, float>)
                ::pldr::save_g_cache(device_g_cache(d->d32, d->preset32), m.cfg, path);
            else
                ::pldr::save_g_cache(device_g_cache(d->d64, d->preset64), m.cfg, path);
        });
        return;
    }
    live(impl_)->visit([&](const auto& s) {
        PLDR_REQUIRE(s.length() > 0, "no G-cache before prefill");
        ::pldr::save_g_cache(s.g_cache(), s.model().cfg, path);
    });
}
void Session::keep_outputs(bool on) {
    if (live(impl_)->dev && !on) return;  // a device session keeps none
    live(impl_)->visit([&](auto& s) { s.keep_activations(on); });
}
ScoreResult Session::score_prompt(int64_t top_logprobs) const {
    return live(impl_)->visit([&](const auto& s) {
        const std::vector<int64_t>& ids = s.tokens();
        PLDR_REQUIRE(ids.size() >= 2, "score_prompt needs a prefill of at least two tokens (got ",
                     ids.size(), ")");
        return to_score(::pldr::score_prefill(s, top_logprobs), {ids.front()},
                        std::vector<int64_t>(ids.begin() + 1, ids.end()));
    });
}
ForwardResult Session::last_outputs() const {
    return live(impl_)->visit([](const auto& s) {
        PLDR_REQUIRE(s.length() > 0, "no outputs before prefill");
        PLDR_REQUIRE(s.keeps_activations(), "the session keeps no outputs (keep_outputs(false))");
        ForwardResult r = forward_result(s.model(), s.last());
        // A session's forward computes the LM head on its last position only (its own logits,
        // not the activations'), so fwd.logits is that row, [1,1,V].
        if (!r.has("fwd.logits")) {
            using T = scalar_t<decltype(s.model())>;
            std::vector<T> v = s.logits();
            const auto V = int64_t(v.size());
            r.tensors.emplace_back("fwd.logits", make_tensor<T>({1, 1, V}, std::move(v)));
        }
        return r;
    });
}

std::vector<Tensor> decode_batch(const std::vector<Session*>& sessions,
                                 const std::vector<int64_t>& ids) {
    PLDR_REQUIRE(sessions.size() == ids.size(), "decode_batch: ", sessions.size(), " sessions but ",
                 ids.size(), " token ids");
    for (size_t i = 0; i < sessions.size(); ++i) {
        PLDR_REQUIRE(sessions[i], "decode_batch: session ", i, " is null");
        PLDR_REQUIRE(sessions[i]->impl_, "decode_batch: session ", i, " is a moved-from session");
        for (size_t j = 0; j < i; ++j)
            PLDR_REQUIRE(sessions[i] != sessions[j], "decode_batch: session ", i, " appears twice");
        if (const DeviceSessionState* d = sessions[i]->impl_->dev.get()) {
            const int64_t V = sessions[i]->model().info().vocab_size;
            PLDR_REQUIRE(!d->ids.empty(), "decode_batch: session ", i, ": decode before prefill");
            PLDR_REQUIRE(int64_t(d->ids.size()) < d->cap, "decode_batch: session ", i,
                         ": session is full (", d->cap, " tokens)");
            PLDR_REQUIRE(ids[i] >= 0 && ids[i] < V, "decode_batch: session ", i, ": token id ",
                         ids[i], " is outside the vocabulary [0, ", V, ")");
            continue;
        }
        sessions[i]->impl_->visit([&](const auto& s) {
            PLDR_REQUIRE(s.length() > 0, "decode_batch: session ", i, ": decode before prefill");
            PLDR_REQUIRE(s.length() < s.capacity(), "decode_batch: session ", i,
                         ": session is full (", s.capacity(), " tokens)");
            PLDR_REQUIRE(ids[i] >= 0 && ids[i] < s.model().cfg.vocab_size, "decode_batch: session ",
                         i, ": token id ", ids[i], " is outside the vocabulary [0, ",
                         s.model().cfg.vocab_size, ")");
        });
    }
    // One shared step (::pldr::decode_step) per model: the sessions of each model, in order;
    // on a device, one batched step (DeviceDecoder::decode_group) per model copy there.
    std::vector<bool> done(sessions.size(), false);
    for (size_t i = 0; i < sessions.size(); ++i) {
        if (done[i]) continue;
        if (sessions[i]->impl_->dev) {
            const gpu::Copy* copy = impl_of(sessions[i]->impl_->model).dev.get();
            std::vector<::pldr::DeviceDecoder<float>*> d32;
            std::vector<::pldr::DeviceDecoder<double>*> d64;
            std::vector<int64_t> group_ids;
            std::vector<DeviceSessionState*> group;
            for (size_t j = i; j < sessions.size(); ++j) {
                DeviceSessionState* d = sessions[j]->impl_->dev.get();
                if (done[j] || !d || impl_of(sessions[j]->impl_->model).dev.get() != copy) continue;
                done[j] = true;
                group.push_back(d);
                group_ids.push_back(ids[j]);
                if (d->d32)
                    d32.push_back(d->d32.get());
                else
                    d64.push_back(d->d64.get());
            }
            if (!d32.empty()) d32[0]->decode_group(d32, group_ids);
            if (!d64.empty()) d64[0]->decode_group(d64, group_ids);
            for (size_t k = 0; k < group.size(); ++k) group[k]->ids.push_back(group_ids[k]);
            continue;
        }
        const Session::Impl& first = *sessions[i]->impl_;
        std::vector<::pldr::Session<float>*> s32;
        std::vector<::pldr::Session<double>*> s64;
        std::vector<int64_t> group_ids;
        for (size_t j = i; j < sessions.size(); ++j) {
            Session::Impl& o = *sessions[j]->impl_;
            if (o.dev) continue;
            const bool same = first.s32 ? (o.s32 && &o.s32->model() == &first.s32->model())
                                        : (o.s64 && &o.s64->model() == &first.s64->model());
            if (!same) continue;
            done[j] = true;
            group_ids.push_back(ids[j]);
            if (o.s32)
                s32.push_back(o.s32.get());
            else
                s64.push_back(o.s64.get());
        }
        // Each session's outputs of the step are kept when any of them keeps outputs.
        bool keep = false;
        for (auto* s : s32) keep = keep || s->keeps_activations();
        for (auto* s : s64) keep = keep || s->keeps_activations();
        if (first.s32)
            ::pldr::decode_step(s32, group_ids, keep);
        else
            ::pldr::decode_step(s64, group_ids, keep);
    }
    std::vector<Tensor> out;
    for (Session* s : sessions)
        out.push_back(s->impl_->dev ? device_logits(*s->impl_->dev)
                                    : s->impl_->visit(
                                          [](const auto& x) { return logits_tensor(x.logits()); }));
    return out;
}

// ---- Sampler -----------------------------------------------------------------------------

struct Sampler::Impl {
    explicit Impl(const ::pldr::SamplerConfig& c) : s(c) {}
    ::pldr::Sampler s;
};
Sampler::Sampler(const SamplingOptions& opt) : impl_(std::make_unique<Impl>(internal(opt))) {}
Sampler::~Sampler() = default;
Sampler::Sampler(Sampler&&) noexcept = default;
Sampler& Sampler::operator=(Sampler&&) noexcept = default;

int64_t Sampler::sample(const Tensor& logits, const std::vector<int64_t>& history) {
    PLDR_REQUIRE(impl_, "use of a moved-from pldr sampler");
    const int64_t V = logits.numel();
    PLDR_REQUIRE(V > 0 && logits.storage, "sample: empty logits");
    for (int64_t id : history)
        PLDR_REQUIRE(id >= 0 && id < V, "sample: history id ", id, " outside [0, ", V, ")");
    return logits.dtype == DType::F32 ? impl_->s.sample(logits.f32(), V, history)
                                      : impl_->s.sample(logits.f64(), V, history);
}
std::vector<double> Sampler::log_softmax(const Tensor& logits) {
    const int64_t V = logits.numel();
    PLDR_REQUIRE(V > 0 && logits.storage, "log_softmax: empty logits");
    return logits.dtype == DType::F32 ? log_softmax_of(logits.f32(), V)
                                      : log_softmax_of(logits.f64(), V);
}
std::vector<TopLogprob> Sampler::top(const std::vector<double>& logprobs, int64_t n) {
    PLDR_REQUIRE(n >= 0, "top: n must be >= 0 (got ", n, ")");
    return to_top(::pldr::Sampler::top_n(logprobs, n));
}

}  // namespace pldr::api
