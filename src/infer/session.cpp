// Inference session with KV-cache and G-cache (see session.h).
#include "infer/session.h"

#include <algorithm>
#include <cmath>

#include "io/safetensors.h"
#include "model/plga_layer.h"
#include "ops/linear.h"

namespace pldr {

CacheMode cache_mode_from_name(const std::string& s) {
    if (s == "kvg") return CacheMode::KVG;
    if (s == "kv") return CacheMode::KV;
    if (s == "none") return CacheMode::NONE;
    fail("--cache must be kvg, kv or none (got '", s, "')");
}

const char* cache_mode_name(CacheMode m) {
    switch (m) {
        case CacheMode::KVG:
            return "kvg";
        case CacheMode::KV:
            return "kv";
        case CacheMode::NONE:
            return "none";
    }
    return "?";
}

template <typename T>
Session<T>::Session(const Model<T>& m, CacheMode mode, int64_t max_len)
    : m_(m), mode_(mode), max_len_(max_len > 0 ? max_len : m.cfg.max_position) {
    PLDR_REQUIRE(max_len_ <= m.cfg.max_position, "session length ", max_len_,
                 " exceeds max_position_embeddings (", m.cfg.max_position, ")");
    if (mode_ != CacheMode::NONE) {
        const size_t n = static_cast<size_t>(max_len_ * m.cfg.hidden_size);
        K_.assign(size_t(m.cfg.num_layers), std::vector<T>(n));
        V_.assign(size_t(m.cfg.num_layers), std::vector<T>(n));
    }
}

template <typename T>
void Session<T>::reset() {
    ids_.clear();
    if (!preset_g_) g_.clear();
}

template <typename T>
void Session<T>::set_g_cache(const GCache<T>& g) {
    const Config& c = m_.cfg;
    const Shape want{c.num_heads, c.head_dim, c.head_dim};
    PLDR_REQUIRE(int64_t(g.size()) == c.num_layers, "G-cache has ", g.size(),
                 " layers but the model has ", c.num_layers);
    for (const auto& l : g) {
        PLDR_REQUIRE(l.G.shape == want, "G-cache G_LM has shape ", shape_str(l.G.shape),
                     " but the model needs ", shape_str(want));
        PLDR_REQUIRE(!c.learned_g() || (l.A.shape == want && l.A_LM.shape == want),
                     "G-cache A/A_LM must have shape ", shape_str(want));
    }
    PLDR_REQUIRE(ids_.empty(), "set_g_cache must come before the prefill");
    g_ = g;
    preset_g_ = true;
}

template <typename T>
Tensor<T> Session<T>::keys(int64_t l) const {
    PLDR_REQUIRE(mode_ != CacheMode::NONE, "no KV-cache in mode none");
    const int64_t d = m_.cfg.hidden_size, n = length();
    return Tensor<T>({n, m_.cfg.num_heads, m_.cfg.head_dim},
                     std::vector<T>(K_[size_t(l)].begin(), K_[size_t(l)].begin() + n * d));
}

template <typename T>
Tensor<T> Session<T>::values(int64_t l) const {
    PLDR_REQUIRE(mode_ != CacheMode::NONE, "no KV-cache in mode none");
    const int64_t d = m_.cfg.hidden_size, n = length();
    return Tensor<T>({n, m_.cfg.num_heads, m_.cfg.head_dim},
                     std::vector<T>(V_[size_t(l)].begin(), V_[size_t(l)].begin() + n * d));
}

template <typename T>
const std::vector<T>& Session<T>::prefill(const std::vector<int64_t>& ids) {
    PLDR_REQUIRE(!ids.empty(), "empty prompt: a session needs at least one token");
    PLDR_REQUIRE(int64_t(ids.size()) <= max_len_, "prompt of ", ids.size(),
                 " tokens is longer than the context (", max_len_, ")");
    check_inputs(m_, ids.data(), 1, int64_t(ids.size()));
    ids_ = ids;
    if (!preset_g_) g_.clear();
    if (mode_ == CacheMode::NONE)
        run_uncached();
    else
        run(ids.data(), int64_t(ids.size()), true);
    return logits_;
}

template <typename T>
const std::vector<T>& Session<T>::decode(int64_t id) {
    PLDR_REQUIRE(!ids_.empty(), "decode before prefill");
    PLDR_REQUIRE(id >= 0 && id < m_.cfg.vocab_size, "token id ", id,
                 " is outside the vocabulary [0, ", m_.cfg.vocab_size, ")");
    PLDR_REQUIRE(length() < max_len_, "the context is full (", max_len_, " tokens)");
    ids_.push_back(id);
    if (mode_ == CacheMode::NONE)
        run_uncached();
    else
        run(&id, 1, false);
    return logits_;
}

template <typename T>
void Session<T>::run(const int64_t* ids, int64_t S, bool first) {
    const Config& c = m_.cfg;
    const int64_t d = c.hidden_size, V = c.vocab_size, DD = c.head_dim * c.head_dim;
    const int64_t Tp = length() - S;
    Activations<T>& a = acts_;
    a.B = 1;
    a.S = S;
    a.ids.assign(ids, ids + S);
    a.pos.resize(static_cast<size_t>(S));
    for (int64_t s = 0; s < S; ++s) a.pos[size_t(s)] = Tp + s;
    embed_forward(m_, ids, S, a.x0, a.embed_ln, a.ln_mean, a.ln_rstd);
    a.layers.resize(size_t(c.num_layers));
    if (first && !preset_g_) g_.assign(size_t(c.num_layers), {});
    const Tensor<T>* x = &a.embed_ln;
    for (int64_t l = 0; l < c.num_layers; ++l) {
        LayerActs<T>& la = a.layers[size_t(l)];
        la.x_in = *x;
        AttnInput<T> in;
        in.pos = a.pos.data();
        in.mask = first;  // the reference's decode steps pass mask = None
        in.key_ids = first ? ids : nullptr;
        in.K_cache = K_[size_t(l)].data();
        in.V_cache = V_[size_t(l)].data();
        in.T_past = Tp;
        GCacheLayer<T>& gl = g_[size_t(l)];
        const bool use_g = preset_g_ || (!first && c.learned_g());
        if (use_g) {
            auto p = [](const Tensor<T>& t) { return t.numel() ? t.ptr() : nullptr; };
            in.A_frozen = p(gl.A);
            if (preset_g_ || mode_ == CacheMode::KVG) {
                in.A_LM_frozen = p(gl.A_LM);
                in.A_P_frozen = p(gl.A_P);
                in.G_frozen = p(gl.G);
            }
        }
        decoder_layer_forward(m_, l, 1, S, in, la);
        if (first && !preset_g_) {
            const Shape sh{c.num_heads, c.head_dim, c.head_dim};
            auto keep = [&](Tensor<T>& dst, const Tensor<T>& src) {
                if (src.numel() == c.num_heads * DD) dst = Tensor<T>(sh, src.data);
            };
            keep(gl.A, la.A);
            keep(gl.A_LM, la.A_LM);
            keep(gl.A_P, la.A_P);
            keep(gl.G, la.G);
        }
        x = &la.hidden;
    }
    logits_.resize(size_t(V));
    linear_forward(logits_.data(), x->ptr() + (S - 1) * d, m_.lw.head, m_.w.head_b, 1, d, V);
}

template <typename T>
void Session<T>::run_uncached() {
    const Config& c = m_.cfg;
    const int64_t S = length(), d = c.hidden_size, V = c.vocab_size;
    forward_layers(m_, ids_.data(), 1, S, acts_);
    if (g_.empty()) {  // the first pass's operator, for g_cache()
        g_.assign(size_t(c.num_layers), {});
        const Shape sh{c.num_heads, c.head_dim, c.head_dim};
        for (int64_t l = 0; l < c.num_layers; ++l) {
            const LayerActs<T>& la = acts_.layers[size_t(l)];
            GCacheLayer<T>& gl = g_[size_t(l)];
            if (la.A.numel()) gl.A = Tensor<T>(sh, la.A.data);
            if (la.A_LM.numel()) gl.A_LM = Tensor<T>(sh, la.A_LM.data);
            if (la.A_P.numel()) gl.A_P = Tensor<T>(sh, la.A_P.data);
            gl.G = Tensor<T>(sh, la.G.data);
        }
    }
    logits_.resize(size_t(V));
    linear_forward(logits_.data(), acts_.final_hidden().ptr() + (S - 1) * d, m_.lw.head,
                   m_.w.head_b, 1, d, V);
}

template <typename T>
void save_g_cache(const GCache<T>& g, const Config& c, const std::string& path) {
    SafetensorsWriter w;
    for (size_t l = 0; l < g.size(); ++l) {
        const std::string p = "gcache.layer" + std::to_string(l) + ".";
        if (g[l].A.numel()) w.add(p + "A", g[l].A);
        if (g[l].A_LM.numel()) w.add(p + "A_LM", g[l].A_LM);
        if (g[l].A_P.numel()) w.add(p + "A_P", g[l].A_P);
        w.add(p + "G_LM", g[l].G);
    }
    w.set_metadata("format", "pldr-gcache-1");
    w.set_metadata("num_layers", std::to_string(c.num_layers));
    w.set_metadata("num_heads", std::to_string(c.num_heads));
    w.set_metadata("head_dim", std::to_string(c.head_dim));
    w.write(path);
}

template <typename T>
GCache<T> load_g_cache(const std::string& path, const Config& c) {
    SafetensorsFile f(path);
    const auto& md = f.metadata();
    auto meta = [&](const char* k) -> const std::string& {
        auto it = md.find(k);
        PLDR_REQUIRE(it != md.end(), path, ": not a pldr G-cache (no '", k,
                     "' in __metadata__; write one with pldr generate --save-g-cache)");
        return it->second;
    };
    PLDR_REQUIRE(meta("format") == "pldr-gcache-1", path, ": G-cache format '", meta("format"),
                 "' is not supported (this pldr reads pldr-gcache-1)");
    for (const auto& [k, v] : {std::pair<const char*, int64_t>{"num_layers", c.num_layers},
                               {"num_heads", c.num_heads},
                               {"head_dim", c.head_dim}})
        PLDR_REQUIRE(meta(k) == std::to_string(v), path, ": G-cache shape: ", k, " '", meta(k),
                     "' does not match the model's ", v);
    const Shape want{c.num_heads, c.head_dim, c.head_dim};
    GCache<T> g(static_cast<size_t>(c.num_layers));
    size_t used = 0;
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const std::string p = "gcache.layer" + std::to_string(l) + ".";
        auto get = [&](const std::string& n, Tensor<T>& dst, bool required) {
            const TensorInfo* t = f.find(p + n);
            if (!t) {
                PLDR_REQUIRE(!required, path, ": missing tensor '", p + n, "'");
                return;
            }
            PLDR_REQUIRE(t->shape == want, path, ": tensor '", p + n, "' has shape ",
                         shape_str(t->shape), " but the model needs ", shape_str(want));
            PLDR_REQUIRE(dtype_is_float(t->dtype), path, ": tensor '", p + n, "' has dtype ",
                         dtype_name(t->dtype), " (a G-cache holds F32 or F64)");
            dst = f.read<T>(p + n);
            for (T v : dst.data)
                PLDR_REQUIRE(std::isfinite(double(v)), path, ": tensor '", p + n,
                             "' holds a non-finite value");
            ++used;
        };
        get("G_LM", g[size_t(l)].G, true);
        if (c.learned_g()) {
            get("A", g[size_t(l)].A, true);
            get("A_LM", g[size_t(l)].A_LM, true);
            get("A_P", g[size_t(l)].A_P, false);
        }
    }
    if (used != f.tensors().size())
        for (const auto& t : f.tensors()) {
            const std::string& n = t.name;
            const size_t dot = n.rfind('.');
            bool known = false;
            if (n.rfind("gcache.layer", 0) == 0 && dot != std::string::npos) {
                const std::string layer = n.substr(12, dot - 12), part = n.substr(dot + 1);
                const bool digits = !layer.empty() && layer.size() < 10 &&
                                    layer.find_first_not_of("0123456789") == std::string::npos;
                known = digits && std::stoll(layer) < c.num_layers &&
                        (part == "G_LM" ||
                         (c.learned_g() && (part == "A" || part == "A_LM" || part == "A_P")));
            }
            PLDR_REQUIRE(known, path, ": unexpected tensor '", n,
                         "' in the G-cache (the model has ", c.num_layers, " layers",
                         c.learned_g() ? "" : " and a fixed G_LM", ")");
        }
    return g;
}

template class Session<float>;
template class Session<double>;
template void save_g_cache<float>(const GCache<float>&, const Config&, const std::string&);
template void save_g_cache<double>(const GCache<double>&, const Config&, const std::string&);
template GCache<float> load_g_cache<float>(const std::string&, const Config&);
template GCache<double> load_g_cache<double>(const std::string&, const Config&);

}  // namespace pldr
