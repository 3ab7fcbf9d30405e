// A decoding session on the GPU (see session.h): the prefill through the device forward with its
// layers' keys, values and operator copied into the caches, and the one-token step of
// model/plga_attention.cpp (decode_step_forward: no mask, each sequence's own keys) for one or
// several sessions at once: the dense parts as products over their rows, the attention in one
// kernel of ours for all sequences and heads.
#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda_model/impl.cuh"
#include "cuda_model/session.h"

namespace pldr::cuda {

using namespace model_detail;

namespace {

// One sequence's part of a decode step, per layer: its caches (the new token's key and value go
// to row Tk − 1), its operator G [H,D,D] and its length with the new token.
template <class T>
struct DecodeRow {
    T* K;
    T* V;
    const T* G;
    int64_t Tk;
};

// The new tokens' keys and values k, v [n,d] into their rows of the caches.
template <class T>
__global__ void __launch_bounds__(kThreads)
    append_kv_kernel(const DecodeRow<T>* rows, const T* k, const T* v, int64_t n, int64_t d) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n * d;
         i += int64_t(gridDim.x) * blockDim.x) {
        const DecodeRow<T> r = rows[i / d];
        const int64_t at = (r.Tk - 1) * d + i % d;
        r.K[at] = k[i];
        r.V[at] = v[i];
    }
}

// The attention of one decode step for n sequences (ops/attention.cpp query_row_attention per
// head, no mask): block (h, i) takes head h of sequence i (q and o [n,d]): qg = q·G (the sum over
// G's rows in order), the scores qg·k_j / scale over its Tk cached keys (a warp per key), their
// softmax (softmax_row), o = Σ_j e_j·v_j (kThreads / D groups of keys, then the groups in
// order). e: scratch [n,H,Tmax]. Dynamic shared memory: (D + kThreads) values of T.
template <class T>
__global__ void __launch_bounds__(kThreads)
    decode_attention_kernel(T* o, T* e_all, const T* q, const DecodeRow<T>* rows, int64_t d,
                            int64_t D, int64_t Tmax, T scale) {
    const int64_t h = blockIdx.x, i = blockIdx.y, H = gridDim.x;
    const DecodeRow<T> r = rows[i];
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* qg = reinterpret_cast<T*>(smem_raw);
    T* part = qg + D;  // kThreads values
    __shared__ T red[kThreads];
    const T* qh = q + i * d + h * D;
    const T* G = r.G + h * D * D;
    for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
        T acc = 0;
        for (int64_t k = 0; k < D; ++k) acc += qh[k] * G[k * D + c];
        qg[c] = acc;
    }
    __syncthreads();
    T* e = e_all + (i * H + h) * Tmax;
    const int64_t lane = threadIdx.x % 32, warps = blockDim.x / 32;
    for (int64_t j = threadIdx.x / 32; j < r.Tk; j += warps) {
        const T* kr = r.K + j * d + h * D;
        T acc = 0;
        for (int64_t c = lane; c < D; c += 32) acc += qg[c] * kr[c];
        for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
        if (lane == 0) e[j] = acc;
    }
    __syncthreads();
    // x = s / scale, then the softmax; each thread reads back only what it wrote of the row
    for (int64_t j = threadIdx.x; j < r.Tk; j += blockDim.x) e[j] = e[j] / scale;
    softmax_row(e, r.Tk, red);
    __syncthreads();
    T* oh = o + i * d + h * D;
    if (D <= int64_t(blockDim.x)) {
        const int64_t groups = blockDim.x / D, g = threadIdx.x / D, c = threadIdx.x % D;
        if (g < groups) {
            T acc = 0;
            for (int64_t j = g; j < r.Tk; j += groups) acc += e[j] * r.V[j * d + h * D + c];
            part[g * D + c] = acc;
        }
        __syncthreads();
        if (int64_t(threadIdx.x) < D) {
            T acc = 0;
            for (int64_t k = 0; k < groups; ++k) acc += part[k * D + threadIdx.x];
            oh[threadIdx.x] = acc;
        }
    } else {
        for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
            T acc = 0;
            for (int64_t j = 0; j < r.Tk; ++j) acc += e[j] * r.V[j * d + h * D + c];
            oh[c] = acc;
        }
    }
}

}  // namespace

template <class T>
struct DeviceSession<T>::State {
    DeviceModel<T>& dm;
    typename DeviceModel<T>::Impl& im;
    CacheMode mode;
    int64_t max_len;
    std::vector<int64_t> ids;
    std::vector<T> logits;
    // Per layer: keys and values [max_len, d] (rotated keys), and the operator's cache [H,D,D]:
    // G (kvg) or the metric A (kv, learned G).
    std::vector<Scratch<T>> K, V, Gc;
    // A preset G-cache's G_LM per layer [H,D,D] (set_g_cache): every cached call runs with it
    // (mode none runs the model's own forward, as the CPU's), and g_cache() returns it.
    std::vector<Scratch<T>> Gpre;
    GCache<T> preset_host;
    bool preset = false;
    // The prefill's operator per layer (the first pass's in mode none), for g_cache(): A, A_LM,
    // A_P (learned G) and G, [H,D,D] each.
    std::vector<Scratch<T>> gA, gALM, gAP, gG;

    State(DeviceModel<T>& d, CacheMode m, int64_t len)
        : dm(d), im(d.impl()), mode(m), max_len(len > 0 ? len : d.model().cfg.max_position) {
        const Config& c = im.m.cfg;
        PLDR_REQUIRE(max_len <= c.max_position, "session length ", max_len,
                     " exceeds max_position_embeddings (", c.max_position, ")");
    }

    // first: the sequence's prefill (its operator kept for g_cache); else mode none's pass
    // over the whole sequence again.
    void prefill(const std::vector<int64_t>& p, bool first = true);
};

// A decode step's device buffers for n rows and caches of at most cap positions (the scores'
// stride), kept by the model per (n, cap): the same addresses every step, so that the step's
// work can be captured once into a CUDA graph and replayed (the graph reads the step's tokens,
// positions and per-sequence caches from tok, pos and rows, uploaded before each launch).
template <class T>
struct DecodeWork {
    Scratch<int64_t> tok, pos;
    Scratch<DecodeRow<T>> rows;  // [L, n]
    Scratch<T> x0, x, mean, rstd, q, k, v, o, y, r, out1, h1, h2, gated, e, out;
    cudaGraphExec_t graph = nullptr;
    bool captured = false;  // a capture was tried (graph null: it failed; eager steps)
    DecodeWork(const Config& c, int64_t n, int64_t cap, Stream s)
        : tok(n, s),
          pos(n, s),
          rows(c.num_layers * n, s),
          x0(n * c.hidden_size, s),
          x(n * c.hidden_size, s),
          mean(n, s),
          rstd(n, s),
          q(n * c.hidden_size, s),
          k(n * c.hidden_size, s),
          v(n * c.hidden_size, s),
          o(n * c.hidden_size, s),
          y(n * c.hidden_size, s),
          r(n * c.hidden_size, s),
          out1(n * c.hidden_size, s),
          h1(n * c.intermediate_size, s),
          h2(n * c.intermediate_size, s),
          gated(n * c.intermediate_size, s),
          e(n * c.num_heads * cap, s),
          out(n * c.vocab_size, s) {}
    ~DecodeWork() {
        if (graph) cudaGraphExecDestroy(graph);
    }
    DecodeWork(const DecodeWork&) = delete;
    DecodeWork& operator=(const DecodeWork&) = delete;
};

namespace {

// The step's work on W's buffers (n rows; the scores' stride cap): the rows' embedding and
// LN_in, per layer the projections, RoPE, the keys and values appended, the attention
// (decode_attention_kernel), the output projection, LN1, the FFN, LN2; the head into W.out.
// Stream work only (no allocation, no synchronisation): a CUDA graph can capture it.
template <class T>
void run_decode_work(typename DeviceModel<T>::Impl& im, DecodeWork<T>& W, int64_t n, int64_t cap) {
    const Config& c = im.m.cfg;
    const int64_t d = c.hidden_size, H = c.num_heads, D = c.head_dim, F = c.intermediate_size;
    const int64_t nd = n * d;
    const double eps = c.layer_norm_eps;
    Stream s = im.stream;
    embed_kernel<T><<<grid_for(nd), kThreads, 0, s>>>(W.x0.get(), im.dev(im.m.w.emb), W.tok.get(),
                                                      n, d, im.m.embed_scale());
    PLDR_CUDA_LAUNCHED("embed");
    layernorm_forward<T>(W.x.get(), W.mean.get(), W.rstd.get(), W.x0.get(), im.dev(im.m.w.ln_in_g),
                         im.dev(im.m.w.ln_in_b), n, d, eps, s);
    const size_t smem = size_t(D + kThreads) * sizeof(T);
    T *x = W.x.get(), *q = W.q.get(), *k = W.k.get(), *v = W.v.get(), *o = W.o.get();
    T *y = W.y.get(), *r = W.r.get(), *out1 = W.out1.get();
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const LayerView<T>& w = im.m.w.layers[size_t(l)];
        im.proj(q, x, w.wq, w.bq, n, d, d);
        im.proj(k, x, w.wk, w.bk, n, d, d);
        im.proj(v, x, w.wv, w.bv, n, d, d);
        rope_forward<T>(q, W.pos.get(), n, H, D, im.rope, c.reference_rope, im.m.round_f32(),
                        nullptr, s);
        rope_forward<T>(k, W.pos.get(), n, H, D, im.rope, c.reference_rope, im.m.round_f32(),
                        nullptr, s);
        append_kv_kernel<T><<<grid_for(nd), kThreads, 0, s>>>(W.rows.get() + l * n, k, v, n, d);
        PLDR_CUDA_LAUNCHED("append_kv");
        decode_attention_kernel<T><<<dim3(unsigned(H), unsigned(n)), kThreads, smem, s>>>(
            o, W.e.get(), q, W.rows.get() + l * n, d, D, cap, im.m.score_scale());
        PLDR_CUDA_LAUNCHED("decode_attention");
        // The output projection, + x, LN1; the FFN, + out1, LN2.
        im.proj(y, o, w.wo, w.bo, n, d, d);
        add(r, y, x, nd, s);
        layernorm_forward<T>(out1, W.mean.get(), W.rstd.get(), r, im.dev(w.ln1_g), im.dev(w.ln1_b),
                             n, d, eps, s);
        im.proj(W.h1.get(), out1, w.ffn.w1, w.ffn.b1, n, d, F);
        im.proj(W.h2.get(), out1, w.ffn.w2, w.ffn.b2, n, d, F);
        glu_gate<T>(W.gated.get(), W.h1.get(), W.h2.get(), n * F, s);
        im.proj(y, W.gated.get(), w.ffn.w3, w.ffn.b3, n, F, d);
        add(r, y, out1, nd, s);
        layernorm_forward<T>(x, W.mean.get(), W.rstd.get(), r, im.dev(w.ln2_g), im.dev(w.ln2_b), n,
                             d, eps, s);
    }
    im.proj(W.out.get(), x, im.m.w.head_w, im.m.w.head_b, n, d, c.vocab_size);
}

// W's work as a CUDA graph, captured on first use (a failed capture leaves W.graph null).
template <class T>
void capture(typename DeviceModel<T>::Impl& im, DecodeWork<T>& W, int64_t n, int64_t cap) {
    W.captured = true;
    Stream s = im.stream;
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    bool ok = true;
    try {
        run_decode_work<T>(im, W, n, cap);
    } catch (const std::exception&) {
        ok = false;
    }
    cudaGraph_t g = nullptr;
    ok = cudaStreamEndCapture(s, &g) == cudaSuccess && ok && g;
    if (ok && cudaGraphInstantiate(&W.graph, g, 0) != cudaSuccess) W.graph = nullptr;
    if (g) cudaGraphDestroy(g);
    (void)cudaGetLastError();  // (a refused capture's error is not the next call's)
}

// One decode step of n cached sessions of one model, each holding its new token as the last of
// its ids: the operators of its kv sequences (G from the frozen A), the step's tokens,
// positions and per-sequence caches uploaded, then run_decode_work (its graph where it has one);
// each session's logits downloaded.
template <class T>
void step_rows(const std::vector<typename DeviceSession<T>::State*>& g) {
    auto& im = g[0]->im;
    const Config& c = im.m.cfg;
    const int64_t n = int64_t(g.size()), H = c.num_heads, D = c.head_dim;
    const int64_t HDD = H * D * D, L = c.num_layers, V = c.vocab_size;
    Stream s = im.stream;
    std::vector<int64_t> tok(static_cast<size_t>(n)), pos(static_cast<size_t>(n));
    int64_t cap = 0;  // the scores' stride: the largest capacity, so that steps share a graph
    for (int64_t i = 0; i < n; ++i) {
        tok[size_t(i)] = g[size_t(i)]->ids.back();
        pos[size_t(i)] = int64_t(g[size_t(i)]->ids.size()) - 1;
        cap = std::max(cap, g[size_t(i)]->max_len);
    }
    rope_check_positions(pos.data(), n, im.rope.max_pos());
    // The operator per (layer, sequence): the cached G (kvg), the model's fixed G, or G from the
    // frozen A (kv: the operator run here, for each such sequence).
    std::vector<int64_t> kv_at(static_cast<size_t>(n), -1);
    int64_t nkv = 0;
    if (c.learned_g())
        for (int64_t i = 0; i < n; ++i)
            if (g[size_t(i)]->mode == CacheMode::KV && !g[size_t(i)]->preset)
                kv_at[size_t(i)] = nkv++;
    Scratch<T> Gkv(L * nkv * HDD, s);
    std::vector<DecodeRow<T>> rows(static_cast<size_t>(L * n));
    for (int64_t l = 0; l < L; ++l)
        for (int64_t i = 0; i < n; ++i) {
            auto& st = *g[size_t(i)];
            const T* G = nullptr;
            if (st.preset) {  // (a cached session: mode none never steps here)
                G = st.Gpre[size_t(l)].get();
            } else if (!c.learned_g()) {
                G = im.G_fixed.get() + l * HDD;
            } else if (kv_at[size_t(i)] < 0) {
                G = st.Gc[size_t(l)].get();
            } else {
                T* out = Gkv.get() + (l * nkv + kv_at[size_t(i)]) * HDD;
                im.operator_g(l, 1, st.Gc[size_t(l)].get(), out, nullptr, false, nullptr);
                G = out;
            }
            rows[size_t(l * n + i)] = {st.K[size_t(l)].get(), st.V[size_t(l)].get(), G,
                                       pos[size_t(i)] + 1};
        }
    auto& slot = im.decode_work[{n, cap}];
    if (!slot) {
        if (im.decode_work.size() > 16) {  // (batches shrink as sequences end: keep a few)
            im.decode_work.clear();
            return step_rows<T>(g);
        }
        slot = std::make_shared<DecodeWork<T>>(c, n, cap, s);
    }
    DecodeWork<T>& W = *slot;
    copy_to_device(W.tok.get(), tok.data(), n, s);
    copy_to_device(W.pos.get(), pos.data(), n, s);
    copy_to_device(W.rows.get(), rows.data(), L * n, s);
    if (im.decode_graphs && !W.captured) capture<T>(im, W, n, cap);
    if (im.decode_graphs && W.graph)
        PLDR_CUDA_CALL(cudaGraphLaunch(W.graph, s));
    else
        run_decode_work<T>(im, W, n, cap);
    std::vector<T> all(static_cast<size_t>(n * V));
    copy_to_host(all.data(), W.out.get(), n * V, s);  // (waits for the step; Gkv freed after)
    for (int64_t i = 0; i < n; ++i)
        g[size_t(i)]->logits.assign(all.begin() + i * V, all.begin() + (i + 1) * V);
}

}  // namespace

template <class T>
void DeviceSession<T>::State::prefill(const std::vector<int64_t>& p, bool first) {
    const Config& c = im.m.cfg;
    const int64_t S = int64_t(p.size()), d = c.hidden_size, nv = c.vocab_size;
    const int64_t HDD = c.num_heads * c.head_dim * c.head_dim;
    const int64_t L = c.num_layers;
    Stream s = im.stream;
    DevActs<T> da;
    const bool cached = mode != CacheMode::NONE;
    const bool keep_g = first && !preset;  // the operator for g_cache()
    const bool learned = c.learned_g() && !(preset && cached);
    if (cached) {
        K.resize(size_t(L));
        V.resize(size_t(L));
        Gc.resize(size_t(L));
    }
    if (keep_g) {
        for (auto* v : {&gA, &gALM, &gAP, &gG}) v->clear();
        for (auto* v : {&gA, &gALM, &gAP, &gG}) v->resize(size_t(L));
        da.keep_operator = c.learned_g();  // (the float32 operator's rounded A_LM, A_P)
    }
    da.after_layer = [&](int64_t l, DevLayer<T>& Lr) {
        if (cached) {
            copy_on_device(sized(K[size_t(l)], max_len * d, s), Lr.k.get(), S * d, s);
            copy_on_device(sized(V[size_t(l)], max_len * d, s), Lr.v.get(), S * d, s);
            if (mode == CacheMode::KVG)
                copy_on_device(sized(Gc[size_t(l)], HDD, s), Lr.G.get(), HDD, s);
            else if (learned)  // kv: the frozen metric
                copy_on_device(sized(Gc[size_t(l)], HDD, s), Lr.A.get(), HDD, s);
        }
        if (!keep_g) return;
        const size_t i = size_t(l);
        copy_on_device(sized(gG[i], HDD, s), Lr.G.get(), HDD, s);
        if (!c.learned_g()) return;
        copy_on_device(sized(gA[i], HDD, s), Lr.A.get(), HDD, s);
        copy_on_device(sized(gALM[i], HDD, s), Lr.A_LM.get(), HDD, s);
        copy_on_device(sized(gAP[i], HDD, s), Lr.A_P.get(), HDD, s);
    };
    if (preset && cached)  // (mode none: the model's own forward, as the CPU's run_uncached)
        for (const Scratch<T>& g : Gpre) da.preset_G.push_back(g.get());
    Activations<T> none;
    im.layers(p.data(), 1, S, da, none, false);
    // The head over the last row; its logits to the host.
    Scratch<T> out(nv, s);
    im.proj(out.get(), da.input_of(L) + (S - 1) * d, im.m.w.head_w, im.m.w.head_b, 1, d, nv);
    logits.resize(size_t(nv));
    copy_to_host(logits.data(), out.get(), nv, s);
}

template <class T>
DeviceSession<T>::DeviceSession(DeviceModel<T>& dm, CacheMode mode, int64_t max_len)
    : st_(std::make_unique<State>(dm, mode, max_len)) {}
template <class T>
DeviceSession<T>::~DeviceSession() = default;

template <class T>
void DeviceSession<T>::set_g_cache(const GCache<T>& g) {
    State& s = *st_;
    const Config& c = s.im.m.cfg;
    check_g_cache(g, c);
    PLDR_REQUIRE(s.ids.empty(), "set_g_cache must come before the prefill");
    s.im.on.select();
    const int64_t HDD = c.num_heads * c.head_dim * c.head_dim;
    s.Gpre.clear();
    for (const GCacheLayer<T>& l : g) {
        s.Gpre.emplace_back(HDD, s.im.stream);
        copy_to_device(s.Gpre.back().get(), l.G.ptr(), HDD, s.im.stream);
    }
    PLDR_CUDA_CALL(cudaStreamSynchronize(s.im.stream));  // before the host's tensors may go
    s.preset_host = g;
    s.preset = true;
}

template <class T>
GCache<T> DeviceSession<T>::g_cache() const {
    const State& s = *st_;
    if (s.preset) return s.preset_host;
    const Config& c = s.im.m.cfg;
    const Shape sh{c.num_heads, c.head_dim, c.head_dim};
    const int64_t HDD = c.num_heads * c.head_dim * c.head_dim;
    GCache<T> g;
    if (s.gG.empty()) return g;  // before the prefill
    s.im.on.select();
    const auto get = [&](const Scratch<T>& src, Tensor<T>& dst) {
        if (!src.get()) return;
        dst.resize_for_overwrite(sh);
        copy_to_host(dst.ptr(), src.get(), HDD, s.im.stream);
    };
    g.resize(size_t(c.num_layers));
    for (size_t l = 0; l < g.size(); ++l) {
        get(s.gA[l], g[l].A);
        get(s.gALM[l], g[l].A_LM);
        get(s.gAP[l], g[l].A_P);
        get(s.gG[l], g[l].G);
    }
    return g;
}

template <class T>
const std::vector<T>& DeviceSession<T>::prefill(const std::vector<int64_t>& ids) {
    State& s = *st_;
    PLDR_REQUIRE(!ids.empty(), "empty prompt: a session needs at least one token");
    PLDR_REQUIRE(int64_t(ids.size()) <= s.max_len, "prompt of ", ids.size(),
                 " tokens is longer than the context (", s.max_len, ")");
    check_inputs(s.im.m, ids.data(), 1, int64_t(ids.size()));
    s.im.on.select();
    s.ids = ids;
    s.prefill(ids);
    return s.logits;
}

template <class T>
const std::vector<T>& DeviceSession<T>::decode(int64_t id) {
    decode_batch({this}, {id});
    return st_->logits;
}

template <class T>
void DeviceSession<T>::decode_batch(const std::vector<DeviceSession*>& ss,
                                    const std::vector<int64_t>& ids) {
    PLDR_REQUIRE(ss.size() == ids.size(), "decode_batch: ", ss.size(), " sessions but ", ids.size(),
                 " ids");
    if (ss.empty()) return;
    for (size_t i = 0; i < ss.size(); ++i) {
        PLDR_REQUIRE(ss[i], "decode_batch: session ", i + 1, " is null");
        const State& st = *ss[i]->st_;
        const Config& c = st.im.m.cfg;
        const std::string which = ss.size() > 1 ? cat("session ", i + 1, ": ") : std::string();
        PLDR_REQUIRE(&st.im == &ss[0]->st_->im, which,
                     "a batched decode step takes sessions of one model on one device");
        for (size_t j = 0; j < i; ++j)
            PLDR_REQUIRE(ss[j] != ss[i], which, "the session is in the batch twice");
        PLDR_REQUIRE(!st.ids.empty(), which, "decode before prefill");
        PLDR_REQUIRE(ids[i] >= 0 && ids[i] < c.vocab_size, which, "token id ", ids[i],
                     " is outside the vocabulary [0, ", c.vocab_size, ")");
        PLDR_REQUIRE(int64_t(st.ids.size()) < st.max_len, which, "the context is full (",
                     st.max_len, " tokens)");
    }
    PLDR_REQUIRE(ss.size() <= 65535, "a batched decode step takes at most 65535 sessions (got ",
                 ss.size(), ")");
    ss[0]->st_->im.on.select();
    std::vector<State*> cached;
    for (size_t i = 0; i < ss.size(); ++i) ss[i]->st_->ids.push_back(ids[i]);
    try {
        for (size_t i = 0; i < ss.size(); ++i) {
            State& st = *ss[i]->st_;
            if (st.mode == CacheMode::NONE)
                st.prefill(st.ids, false);  // the whole sequence again (no cache)
            else
                cached.push_back(&st);
        }
        if (!cached.empty()) step_rows<T>(cached);
    } catch (...) {
        // (a failed step leaves every session as it was: the rows past a length are never read)
        for (DeviceSession* x : ss) x->st_->ids.pop_back();
        throw;
    }
}

template <class T>
const std::vector<T>& DeviceSession<T>::logits() const {
    return st_->logits;
}
template <class T>
int64_t DeviceSession<T>::length() const {
    return int64_t(st_->ids.size());
}
template <class T>
int64_t DeviceSession<T>::capacity() const {
    return st_->max_len;
}

template <class T>
void DeviceModel<T>::set_decode_graphs(bool on) {
    impl_->decode_graphs = on;
}
template <class T>
int64_t DeviceModel<T>::decode_graphs_made() const {
    int64_t made = 0;
    for (const auto& [key, w] : impl_->decode_work) made += w && w->graph ? 1 : 0;
    return made;
}
template void DeviceModel<float>::set_decode_graphs(bool);
template void DeviceModel<double>::set_decode_graphs(bool);
template int64_t DeviceModel<float>::decode_graphs_made() const;
template int64_t DeviceModel<double>::decode_graphs_made() const;

template class DeviceSession<float>;
template class DeviceSession<double>;

}  // namespace pldr::cuda
