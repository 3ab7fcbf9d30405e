// A decoding session on the GPU (see session.h): the prefill through the device forward with its
// layers' keys, values and operator copied into the caches, and the one-token step of
// model/plga_attention.cpp (decode_step_forward: no mask, the sequence's own keys) from the
// backend's kernels and cuBLASLt products, the heads as strided batches.
#include <string>
#include <type_traits>
#include <vector>

#include "cuda_model/impl.cuh"
#include "cuda_model/session.h"

namespace pldr::cuda {

using namespace model_detail;

namespace {

// One query row per head over Tk keys, in place: x = s / scale, E = softmax(x) (the row's
// maximum, exp(x − max), the sum, each divided by it; ops/attention.cpp query_row_attention,
// mask None). One block per head.
template <class T>
__global__ void __launch_bounds__(kThreads) row_softmax_kernel(T* e, int64_t Tk, T scale) {
    T* r = e + int64_t(blockIdx.x) * Tk;
    __shared__ T red[kThreads];
    for (int64_t j = threadIdx.x; j < Tk; j += blockDim.x) r[j] = r[j] / scale;
    softmax_row(r, Tk, red);
}

// x[i] = emb[id, i]·scale for one token.
template <class T>
__global__ void __launch_bounds__(kThreads)
    embed_one_kernel(T* x, const T* emb, const int64_t* id, int64_t d, T scale) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < d;
         i += int64_t(gridDim.x) * blockDim.x)
        x[i] = emb[*id * d + i] * scale;
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

    State(DeviceModel<T>& d, CacheMode m, int64_t len)
        : dm(d), im(d.impl()), mode(m), max_len(len > 0 ? len : d.model().cfg.max_position) {
        const Config& c = im.m.cfg;
        PLDR_REQUIRE(max_len <= c.max_position, "session length ", max_len,
                     " exceeds max_position_embeddings (", c.max_position, ")");
    }

    void head_last(const T* x, int64_t rows_before);
    void prefill(const std::vector<int64_t>& p);
    void step(int64_t id);
    void layer_step(int64_t l, T* x, const int64_t* pos, int64_t Tk);
};

// The head over one row (x + rows_before·d), its logits to the host.
template <class T>
void DeviceSession<T>::State::head_last(const T* x, int64_t rows_before) {
    const Config& c = im.m.cfg;
    const int64_t d = c.hidden_size, V = c.vocab_size;
    Scratch<T> out(V, im.stream);
    im.proj(out.get(), x + rows_before * d, im.m.w.head_w, im.m.w.head_b, 1, d, V);
    logits.resize(size_t(V));
    copy_to_host(logits.data(), out.get(), V, im.stream);
}

template <class T>
void DeviceSession<T>::State::prefill(const std::vector<int64_t>& p) {
    const Config& c = im.m.cfg;
    const int64_t S = int64_t(p.size()), d = c.hidden_size;
    const int64_t HDD = c.num_heads * c.head_dim * c.head_dim;
    const int64_t L = c.num_layers;
    Stream s = im.stream;
    DevActs<T> da;
    if (mode != CacheMode::NONE) {
        K.resize(size_t(L));
        V.resize(size_t(L));
        Gc.resize(size_t(L));
        da.after_layer = [&](int64_t l, DevLayer<T>& Lr) {
            copy_on_device(sized(K[size_t(l)], max_len * d, s), Lr.k.get(), S * d, s);
            copy_on_device(sized(V[size_t(l)], max_len * d, s), Lr.v.get(), S * d, s);
            if (mode == CacheMode::KVG)
                copy_on_device(sized(Gc[size_t(l)], HDD, s), Lr.G.get(), HDD, s);
            else if (c.learned_g())  // kv: the frozen metric
                copy_on_device(sized(Gc[size_t(l)], HDD, s), Lr.A.get(), HDD, s);
        };
    }
    Activations<T> none;
    im.layers(p.data(), 1, S, da, none, false);
    head_last(da.input_of(L), S - 1);
}

// One decoder layer of a decode step, x [1,d] in place (model/plga_layer.cpp over one token).
template <class T>
void DeviceSession<T>::State::layer_step(int64_t l, T* x, const int64_t* pos, int64_t Tk) {
    const Config& c = im.m.cfg;
    const LayerView<T>& w = im.m.w.layers[size_t(l)];
    const int64_t d = c.hidden_size, H = c.num_heads, D = c.head_dim, DD = D * D, HDD = H * DD;
    const int64_t F = c.intermediate_size, Tp = Tk - 1;
    Stream s = im.stream;
    Scratch<T> q(d, s), k(d, s), v(d, s), qg(d, s), e(H * Tk, s), o(d, s), y(d, s), r(d, s),
        out1(d, s), h1(F, s), h2(F, s), gated(F, s), mean(1, s), rstd(1, s), Gtmp;
    im.proj(q.get(), x, w.wq, w.bq, 1, d, d);
    im.proj(k.get(), x, w.wk, w.bk, 1, d, d);
    im.proj(v.get(), x, w.wv, w.bv, 1, d, d);
    rope_forward<T>(q.get(), pos, 1, H, D, im.rope, c.reference_rope, im.m.round_f32(), nullptr, s);
    rope_forward<T>(k.get(), pos, 1, H, D, im.rope, c.reference_rope, im.m.round_f32(), nullptr, s);
    // This token's key and value join the cache at row Tp.
    T* Kc = K[size_t(l)].get();
    T* Vc = V[size_t(l)].get();
    copy_on_device(Kc + Tp * d, k.get(), d, s);
    copy_on_device(Vc + Tp * d, v.get(), d, s);
    // The operator: the cached G (kvg), the model's fixed G, or G from the frozen A (kv).
    const T* G = nullptr;
    if (!c.learned_g()) {
        G = im.G_fixed.get() + l * HDD;
    } else if (mode == CacheMode::KVG) {
        G = Gc[size_t(l)].get();
    } else {
        Gtmp = Scratch<T>(HDD, s);
        im.operator_g(l, 1, Gc[size_t(l)].get(), Gtmp.get(), nullptr, false, nullptr);
        G = Gtmp.get();
    }
    // Per head: q·G, its scores over the Tk keys / √dk, the softmax, ·V.
    mm(im.gemm, false, false, 1, D, D, q.get(), d, G, D, qg.get(), D, nullptr,
       GemmBatch{H, D, DD, D});
    mm(im.gemm, false, true, 1, Tk, D, qg.get(), D, Kc, d, e.get(), Tk, nullptr,
       GemmBatch{H, D, D, Tk});
    row_softmax_kernel<T><<<unsigned(H), kThreads, 0, s>>>(e.get(), Tk, im.m.score_scale());
    PLDR_CUDA_LAUNCHED("row_softmax");
    mm(im.gemm, false, false, 1, D, Tk, e.get(), Tk, Vc, d, o.get(), d, nullptr,
       GemmBatch{H, Tk, D, D});
    // The output projection, + x, LN1; the FFN, + out1, LN2.
    const double eps = c.layer_norm_eps;
    im.proj(y.get(), o.get(), w.wo, w.bo, 1, d, d);
    add(r.get(), y.get(), x, d, s);
    layernorm_forward<T>(out1.get(), mean.get(), rstd.get(), r.get(), im.dev(w.ln1_g),
                         im.dev(w.ln1_b), 1, d, eps, s);
    im.proj(h1.get(), out1.get(), w.ffn.w1, w.ffn.b1, 1, d, F);
    im.proj(h2.get(), out1.get(), w.ffn.w2, w.ffn.b2, 1, d, F);
    glu_gate<T>(gated.get(), h1.get(), h2.get(), F, s);
    im.proj(y.get(), gated.get(), w.ffn.w3, w.ffn.b3, 1, F, d);
    add(r.get(), y.get(), out1.get(), d, s);
    layernorm_forward<T>(x, mean.get(), rstd.get(), r.get(), im.dev(w.ln2_g), im.dev(w.ln2_b), 1, d,
                         eps, s);
}

template <class T>
void DeviceSession<T>::State::step(int64_t id) {
    const Config& c = im.m.cfg;
    const int64_t d = c.hidden_size, Tk = int64_t(ids.size());  // ids holds the new token
    Stream s = im.stream;
    const int64_t pos_h = Tk - 1;
    rope_check_positions(&pos_h, 1, im.rope.max_pos());
    Scratch<int64_t> tok(1, s), pos(1, s);
    copy_to_device(tok.get(), &id, 1, s);
    copy_to_device(pos.get(), &pos_h, 1, s);
    Scratch<T> x0(d, s), x(d, s), mean(1, s), rstd(1, s);
    embed_one_kernel<T><<<grid_for(d), kThreads, 0, s>>>(x0.get(), im.dev(im.m.w.emb), tok.get(), d,
                                                         im.m.embed_scale());
    PLDR_CUDA_LAUNCHED("embed_one");
    layernorm_forward<T>(x.get(), mean.get(), rstd.get(), x0.get(), im.dev(im.m.w.ln_in_g),
                         im.dev(im.m.w.ln_in_b), 1, d, c.layer_norm_eps, s);
    for (int64_t l = 0; l < c.num_layers; ++l) layer_step(l, x.get(), pos.get(), Tk);
    head_last(x.get(), 0);
}

template <class T>
DeviceSession<T>::DeviceSession(DeviceModel<T>& dm, CacheMode mode, int64_t max_len)
    : st_(std::make_unique<State>(dm, mode, max_len)) {}
template <class T>
DeviceSession<T>::~DeviceSession() = default;

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
    State& s = *st_;
    const Config& c = s.im.m.cfg;
    PLDR_REQUIRE(!s.ids.empty(), "decode before prefill");
    PLDR_REQUIRE(id >= 0 && id < c.vocab_size, "token id ", id, " is outside the vocabulary [0, ",
                 c.vocab_size, ")");
    PLDR_REQUIRE(length() < s.max_len, "the context is full (", s.max_len, " tokens)");
    s.im.on.select();
    s.ids.push_back(id);
    if (s.mode == CacheMode::NONE)
        s.prefill(s.ids);  // the whole sequence again (prefill's forward, no cache)
    else
        s.step(id);
    return s.logits;
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

template class DeviceSession<float>;
template class DeviceSession<double>;

}  // namespace pldr::cuda
