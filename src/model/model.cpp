// Model<T> setup (see model.h).
#include "model/model.h"

#include <cmath>
#include <string>
#include <type_traits>

namespace pldr {

template <typename T>
void Model<T>::init(const Config& c) {
    init(c, ParamBuffer<T>(static_cast<size_t>(make_layout(c).total)));
}

template <typename T>
void Model<T>::init(const Config& c, ParamBuffer<T> storage) {
    cfg = c;
    layout = make_layout(c);
    PLDR_CHECK(int64_t(storage.size()) == layout.total);
    params = std::move(storage);
    w = bind_view(layout, cfg, params.data());
    packed.reset();
    bind_linears();
    G_fixed.clear();
    if (!c.learned_g()) {
        const int64_t D = c.head_dim;
        G_fixed.assign(static_cast<size_t>(c.num_layers * c.num_heads * D * D), T(0));
        for (int64_t lh = 0; lh < c.num_layers * c.num_heads; ++lh)
            for (int64_t i = 0; i < D; ++i) G_fixed[size_t((lh * D + i) * D + i)] = T(1);
    }
    build_rope();
}

template <typename T>
void Model<T>::bind_linears() {
    if constexpr (!std::is_same_v<T, float>) PLDR_CHECK(!packed && !panels);
    auto lin = [&](const std::string& name, const T* dense) {
        LinearWeight<T> v(dense);
        if constexpr (std::is_same_v<T, float>) {
            if (packed) {
                if (const PackedTensor* p = packed->find(name)) v = p->view();
            }
            if (panels && v.format == WeightFormat::DENSE) v.panels = panels->find(name);
        }
        return v;
    };
    lw.layers.clear();
    for (int64_t i = 0; i < cfg.num_layers && size_t(i) < w.layers.size(); ++i) {
        const LayerView<T>& v = w.layers[size_t(i)];
        const std::string l = "decoder.dec_layers." + std::to_string(i), m = l + ".mha1";
        lw.layers.push_back(
            {lin(m + ".wq.weight", v.wq), lin(m + ".wk.weight", v.wk), lin(m + ".wv.weight", v.wv),
             lin(m + ".dense.weight", v.wo), lin(l + ".ffn.gluw1.weight", v.ffn.w1),
             lin(l + ".ffn.gluw2.weight", v.ffn.w2), lin(l + ".ffn.gluw3.weight", v.ffn.w3)});
    }
    lw.head =
        lin(cfg.tie_word_embeddings ? "decoder.embedding.weight" : "final_layer.weight", w.head_w);
}

template <typename T>
void Model<T>::build_rope() {
    rope.build(cfg.max_position, cfg.head_dim, cfg.rope_theta,
               reference_numerics_ ? RopeTableKind::TORCH : RopeTableKind::FLOAT64);
}

template <typename T>
void Model<T>::set_reference_numerics(bool on) {
    if (on == reference_numerics_ && rope.max_pos == cfg.max_position) return;
    reference_numerics_ = on;
    build_rope();
}

template <typename T>
T Model<T>::embed_scale() const {
    if (sizeof(T) == sizeof(float) || reference_numerics_)
        return T(std::sqrt(float(cfg.hidden_size)));
    return T(std::sqrt(double(cfg.hidden_size)));
}

template <typename T>
T Model<T>::score_scale() const {
    if (sizeof(T) == sizeof(float) || reference_numerics_) return T(std::sqrt(float(cfg.head_dim)));
    return T(std::sqrt(double(cfg.head_dim)));
}

template struct Model<float>;
template struct Model<double>;

}  // namespace pldr
