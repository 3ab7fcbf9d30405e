// Inference session with KV-cache and G-cache (see session.h).
#include "infer/session.h"

#include <algorithm>
#include <cmath>
#include <utility>

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
        // Not zero-filled: a position's keys and values are written before any read of them,
        // so the pages of the cache are mapped as the sequence grows (a 1024-token cache of a
        // 110M model is 37 MB; a short generation touches only its share).
        const size_t n = static_cast<size_t>(max_len_ * m.cfg.hidden_size);
        K_.resize(size_t(m.cfg.num_layers));
        V_.resize(size_t(m.cfg.num_layers));
        for (Storage<T>& k : K_) k.resize(n);
        for (Storage<T>& v : V_) v.resize(n);
    }
}

template <typename T>
void Session<T>::reset() {
    ids_.clear();
    if (!preset_g_) g_.clear();
}

template <typename T>
void check_g_cache(const GCache<T>& g, const Config& c) {
    const Shape want{c.num_heads, c.head_dim, c.head_dim};
    PLDR_REQUIRE(int64_t(g.size()) == c.num_layers, "G-cache has ", g.size(),
                 " layers but the model has ", c.num_layers);
    for (const auto& l : g) {
        PLDR_REQUIRE(l.G.shape == want, "G-cache G_LM has shape ", shape_str(l.G.shape),
                     " but the model needs ", shape_str(want));
        PLDR_REQUIRE(!c.learned_g() || (l.A.shape == want && l.A_LM.shape == want),
                     "G-cache A/A_LM must have shape ", shape_str(want));
    }
}
template void check_g_cache<float>(const GCache<float>&, const Config&);
template void check_g_cache<double>(const GCache<double>&, const Config&);

template <typename T>
void Session<T>::set_g_cache(const GCache<T>& g) {
    check_g_cache(g, m_.cfg);
    PLDR_REQUIRE(ids_.empty(), "set_g_cache must come before the prefill");
    g_ = g;
    preset_g_ = true;
}

template <typename T>
Tensor<T> Session<T>::keys(int64_t l) const {
    PLDR_REQUIRE(mode_ != CacheMode::NONE, "no KV-cache in mode none");
    const int64_t d = m_.cfg.hidden_size, n = length();
    return Tensor<T>({n, m_.cfg.num_heads, m_.cfg.head_dim},
                     Storage<T>(K_[size_t(l)].begin(), K_[size_t(l)].begin() + n * d));
}

template <typename T>
Tensor<T> Session<T>::values(int64_t l) const {
    PLDR_REQUIRE(mode_ != CacheMode::NONE, "no KV-cache in mode none");
    const int64_t d = m_.cfg.hidden_size, n = length();
    return Tensor<T>({n, m_.cfg.num_heads, m_.cfg.head_dim},
                     Storage<T>(V_[size_t(l)].begin(), V_[size_t(l)].begin() + n * d));
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
    // Without keep_activations: two buffers, layer l writes one while reading the other's output.
    a.layers.resize(size_t(keep_acts_ ? c.num_layers : std::min<int64_t>(2, c.num_layers)));
    if (first && !preset_g_) g_.assign(size_t(c.num_layers), {});
    Tensor<T>* x = &a.embed_ln;
    for (int64_t l = 0; l < c.num_layers; ++l) {
        LayerActs<T>& la = a.layers[size_t(keep_acts_ ? l : l % 2)];
        // Without keep_activations the previous output is only this layer's input: it moves in,
        // and this buffer's old input goes to the other one, which the next layer overwrites (a
        // copy was a serial pass over the rows on the calling thread, per layer and prompt).
        if (keep_acts_)
            la.x_in = *x;
        else
            std::swap(la.x_in, *x);
        AttnInput<T> in;
        in.keep = keep_acts_ ? KeepActs::ALL : KeepActs::INFERENCE;
        in.pos = a.pos.data();
        in.mask = first;  // the reference's decode steps pass mask = None
        in.key_ids = first ? ids : nullptr;
        in.K_cache = K_[size_t(l)].data();
        in.V_cache = V_[size_t(l)].data();
        in.T_past = Tp;
        GCacheLayer<T>& gl = g_[size_t(l)];
        const bool use_g = preset_g_ || (!first && c.learned_g());
        if (use_g) {
            const DecodeSeq<T> f = frozen_operator(l);
            in.A_frozen = f.A;
            in.A_LM_frozen = f.A_LM;
            in.A_P_frozen = f.A_P;
            in.G_frozen = f.G;
        }
        decoder_layer_forward(m_, l, 1, S, in, la);
        if (first && !preset_g_) {
            const Shape sh{c.num_heads, c.head_dim, c.head_dim};
            // Without keep_activations the layer's buffers are dropped below: the cache takes
            // them (a copy cost a prefill its memcpy and the fresh pages of the copy, faulted
            // in on this thread alone).
            auto keep = [&](Tensor<T>& dst, Tensor<T>& src) {
                if (src.numel() != c.num_heads * DD) return;
                if (keep_acts_) {
                    dst = Tensor<T>(sh, src.data);
                } else {
                    dst = Tensor<T>(sh, std::move(src.data));
                    src = Tensor<T>();
                }
            };
            keep(gl.G, la.G);
            if (!(g_only_ && !keep_acts_ && mode_ == CacheMode::KVG)) {
                keep(gl.A, la.A);
                keep(gl.A_LM, la.A_LM);
                keep(gl.A_P, la.A_P);
            }
        }
        if (!keep_acts_ && S > 1) {  // a prefill: of this layer, only its output is read again
            Tensor<T> out = std::move(la.hidden);
            la = LayerActs<T>();
            la.hidden = std::move(out);
        }
        x = &la.hidden;
    }
    logits_.resize(size_t(V));
    linear_forward(logits_.data(), x->ptr() + (S - 1) * d, m_.lw.head, m_.w.head_b, 1, d, V);
    if (!keep_acts_ && S > 1) a = Activations<T>{};  // a decode step keeps its small buffers
}

template <typename T>
DecodeSeq<T> Session<T>::frozen_operator(int64_t l) const {
    const GCacheLayer<T>& gl = g_[size_t(l)];
    auto p = [](const Tensor<T>& t) { return t.numel() ? t.ptr() : nullptr; };
    DecodeSeq<T> f;
    f.A = p(gl.A);
    if (preset_g_ || mode_ == CacheMode::KVG) {
        f.A_LM = p(gl.A_LM);
        f.A_P = p(gl.A_P);
        f.G = p(gl.G);
    }
    return f;
}

template <typename T>
void decode_step(const std::vector<Session<T>*>& ss, const std::vector<int64_t>& ids,
                 bool keep_activations) {
    PLDR_REQUIRE(ss.size() == ids.size(), "decode_step: ", ss.size(), " sessions but ", ids.size(),
                 " token ids");
    for (size_t i = 0; i < ss.size(); ++i) {
        PLDR_REQUIRE(ss[i], "decode_step: session ", i, " is null");
        for (size_t j = 0; j < i; ++j)
            PLDR_REQUIRE(ss[i] != ss[j], "decode_step: session ", i, " is session ", j,
                         " again (each sequence steps once)");
        const Session<T>& s = *ss[i];
        PLDR_REQUIRE(&s.m_ == &ss[0]->m_, "decode_step: session ", i,
                     " belongs to another model than session 0 (one step runs one model)");
        PLDR_REQUIRE(!s.ids_.empty(), "decode_step: session ", i, ": decode before prefill");
        PLDR_REQUIRE(ids[i] >= 0 && ids[i] < s.m_.cfg.vocab_size, "decode_step: session ", i,
                     ": token id ", ids[i], " is outside the vocabulary [0, ", s.m_.cfg.vocab_size,
                     ")");
        PLDR_REQUIRE(s.length() < s.max_len_, "decode_step: session ", i, ": the context is full (",
                     s.max_len_, " tokens)");
    }
    std::vector<Session<T>*> cached;
    std::vector<int64_t> cached_ids;
    for (size_t i = 0; i < ss.size(); ++i)
        if (ss[i]->mode_ != CacheMode::NONE) {
            cached.push_back(ss[i]);
            cached_ids.push_back(ids[i]);
        }
    if (cached.size() == 1)
        cached[0]->decode(cached_ids[0]);
    else if (cached.size() > 1)
        Session<T>::run_batched(cached, cached_ids, keep_activations);
    for (size_t i = 0; i < ss.size(); ++i)
        if (ss[i]->mode_ == CacheMode::NONE) ss[i]->decode(ids[i]);
}

namespace {

// dst = row r of src, whose first dimension holds n rows (the others stay).
template <typename T>
void take_row(Tensor<T>& dst, const Tensor<T>& src, int64_t r, int64_t n) {
    const int64_t k = src.numel() / n;
    Shape sh = src.shape;
    sh[0] = 1;
    dst = Tensor<T>(std::move(sh),
                    Storage<T>(src.data.begin() + r * k, src.data.begin() + (r + 1) * k));
}

}  // namespace

template <typename T>
void Session<T>::run_batched(const std::vector<Session<T>*>& ss, const std::vector<int64_t>& ids,
                             bool keep_activations) {
    const Model<T>& m = ss[0]->m_;
    const Config& c = m.cfg;
    const int64_t B = int64_t(ss.size()), d = c.hidden_size, V = c.vocab_size;
    const int64_t H = c.num_heads, D = c.head_dim, HDD = H * D * D;
    const Shape op_shape{1, H, D, D};

    // One forward over the B new tokens; each at its own position (its session's length). The
    // buffers persist per thread, so that a step allocates nothing once their sizes settle.
    static thread_local Activations<T> a;
    a.B = B;
    a.S = 1;
    a.ids = ids;
    a.pos.resize(size_t(B));
    for (int64_t b = 0; b < B; ++b) a.pos[size_t(b)] = ss[size_t(b)]->length();
    embed_forward(m, ids.data(), B, a.x0, a.embed_ln, a.ln_mean, a.ln_rstd);
    a.x0.shape = a.embed_ln.shape = {B, 1, d};
    a.layers.resize(size_t(c.num_layers));
    std::vector<std::vector<DecodeSeq<T>>> seqs(size_t(c.num_layers),
                                                std::vector<DecodeSeq<T>>(size_t(B)));
    const Tensor<T>* x = &a.embed_ln;
    for (int64_t l = 0; l < c.num_layers; ++l) {
        for (int64_t b = 0; b < B; ++b) {
            Session<T>& s = *ss[size_t(b)];
            DecodeSeq<T>& q = seqs[size_t(l)][size_t(b)];
            // The operator rule of run() for a decode step.
            q = (s.preset_g_ || c.learned_g()) ? s.frozen_operator(l) : DecodeSeq<T>{};
            q.K_cache = s.K_[size_t(l)].data();
            q.V_cache = s.V_[size_t(l)].data();
            q.T_past = s.length();
        }
        LayerActs<T>& la = a.layers[size_t(l)];
        la.x_in = *x;
        AttnInput<T> in;
        in.pos = a.pos.data();
        in.mask = false;  // the reference's decode steps pass mask = None
        in.seqs = seqs[size_t(l)].data();
        decoder_layer_forward(m, l, B, 1, in, la);
        x = &la.hidden;
    }
    a.logits.resize_for_overwrite({B, V});
    linear_forward(a.logits.ptr(), x->ptr(), m.lw.head, m.w.head_b, B, d, V);
    const Storage<T>& logits = a.logits.data;

    // Commit: each session's token, logits and (optionally) its slice of the activations.
    for (int64_t b = 0; b < B; ++b) {
        Session<T>& s = *ss[size_t(b)];
        s.ids_.push_back(ids[size_t(b)]);
        s.logits_.assign(logits.begin() + b * V, logits.begin() + (b + 1) * V);
        if (!keep_activations) {
            s.acts_ = Activations<T>{};
            continue;
        }
        Activations<T>& o = s.acts_;
        o.B = 1;
        o.S = 1;
        o.ids = {ids[size_t(b)]};
        o.pos = {a.pos[size_t(b)]};
        take_row(o.x0, a.x0, b, B);
        take_row(o.embed_ln, a.embed_ln, b, B);
        take_row(o.ln_mean, a.ln_mean, b, B);
        take_row(o.ln_rstd, a.ln_rstd, b, B);
        o.layers.resize(size_t(c.num_layers));
        for (int64_t l = 0; l < c.num_layers; ++l) {
            const LayerActs<T>& la = a.layers[size_t(l)];
            LayerActs<T>& ol = o.layers[size_t(l)];
            for (auto f :
                 {&LayerActs<T>::x_in, &LayerActs<T>::q, &LayerActs<T>::k, &LayerActs<T>::v,
                  &LayerActs<T>::QG, &LayerActs<T>::O, &LayerActs<T>::attn_out, &LayerActs<T>::out1,
                  &LayerActs<T>::ln1_mean, &LayerActs<T>::ln1_rstd, &LayerActs<T>::ffn_out,
                  &LayerActs<T>::hidden, &LayerActs<T>::ln2_mean, &LayerActs<T>::ln2_rstd})
                take_row(ol.*f, la.*f, b, B);
            take_row(ol.ffn.h1, la.ffn.h1, b, B);
            take_row(ol.ffn.h2, la.ffn.h2, b, B);
            take_row(ol.ffn.gated, la.ffn.gated, b, B);
            // E and Ep over this sequence's own keys.
            const int64_t Tk = a.pos[size_t(b)] + 1, T_max = la.E.dim(3);
            ol.Ep.resize_for_overwrite({1, H, 1, Tk});
            ol.E.resize_for_overwrite({1, H, 1, Tk});
            for (int64_t h = 0; h < H; ++h) {
                const int64_t o0 = (b * H + h) * T_max;
                std::copy(la.Ep.ptr() + o0, la.Ep.ptr() + o0 + Tk, ol.Ep.ptr() + h * Tk);
                std::copy(la.E.ptr() + o0, la.E.ptr() + o0 + Tk, ol.E.ptr() + h * Tk);
            }
            // The operator it used, as decode leaves it: a frozen one (the parts present), the
            // one recomputed from A (the j-th such sequence of the step), or the fixed G.
            const DecodeSeq<T>& f = seqs[size_t(l)][size_t(b)];
            auto put = [&](Tensor<T>& dst, const T* src) {
                if (src) dst = Tensor<T>(op_shape, Storage<T>(src, src + HDD));
            };
            if (f.G) {
                put(ol.A, f.A);
                put(ol.A_LM, f.A_LM);
                put(ol.A_P, f.A_P);
                put(ol.G, f.G);
            } else if (c.learned_g()) {
                int64_t j = 0;
                for (int64_t i = 0; i < b; ++i) j += seqs[size_t(l)][size_t(i)].G ? 0 : 1;
                const int64_t R = la.G.dim(0);
                for (auto t : {&LayerActs<T>::A, &LayerActs<T>::Z, &LayerActs<T>::A_LM,
                               &LayerActs<T>::A_P, &LayerActs<T>::G})
                    take_row(ol.*t, la.*t, j, R);
            } else {
                put(ol.G, m.G_fixed_layer(l));
            }
        }
    }
}

template <typename T>
void Session<T>::run_uncached() {
    const Config& c = m_.cfg;
    const int64_t S = length(), d = c.hidden_size, V = c.vocab_size;
    forward_layers(m_, ids_.data(), 1, S, acts_, keep_acts_ ? KeepActs::ALL : KeepActs::INFERENCE);
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
template void decode_step<float>(const std::vector<Session<float>*>&, const std::vector<int64_t>&,
                                 bool);
template void decode_step<double>(const std::vector<Session<double>*>&, const std::vector<int64_t>&,
                                  bool);
template void save_g_cache<float>(const GCache<float>&, const Config&, const std::string&);
template void save_g_cache<double>(const GCache<double>&, const Config&, const std::string&);
template GCache<float> load_g_cache<float>(const std::string&, const Config&);
template GCache<double> load_g_cache<double>(const std::string&, const Config&);

}  // namespace pldr
