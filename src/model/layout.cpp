// Parameter layout and typed views (see layout.h).
#include "model/layout.h"

#include "core/error.h"

namespace pldr {

const ParamEntry* Layout::find(const std::string& name) const {
    auto it = index.find(name);
    return it == index.end() ? nullptr : &entries[it->second];
}

Shape past_g_shape(const Config& c) {
    return {c.num_layers, 3, 1, c.num_heads, c.head_dim, c.head_dim};
}

Layout make_layout(const Config& c) {
    validate_config(c, "config");
    Layout L;
    auto add = [&](const std::string& name, Shape s) {
        ParamEntry e{name, std::move(s), L.total, 0};
        e.numel = shape_numel(e.shape);
        L.total += e.numel;
        L.index[name] = L.entries.size();
        L.entries.push_back(std::move(e));
    };
    const int64_t d = c.hidden_size, H = c.num_heads, D = c.head_dim, F = c.intermediate_size;
    auto linear = [&](const std::string& p, int64_t out, int64_t in, bool bias) {
        add(p + ".weight", {out, in});
        if (bias) add(p + ".bias", {out});
    };
    auto glu = [&](const std::string& p, int64_t in, int64_t hid, int64_t out) {
        linear(p + ".gluw1", hid, in, c.glu_bias);
        linear(p + ".gluw2", hid, in, c.glu_bias);
        linear(p + ".gluw3", out, hid, c.glu_bias);
    };
    auto ln = [&](const std::string& p, int64_t n) {
        add(p + ".weight", {n});
        add(p + ".bias", {n});
    };
    add("decoder.embedding.weight", {c.vocab_size, d});
    for (int64_t i = 0; i < c.num_layers; ++i) {
        L.layer_begin.push_back(L.total);
        const std::string l = "decoder.dec_layers." + std::to_string(i);
        const std::string m = l + ".mha1";
        linear(m + ".wq", d, d, c.attention_bias);
        linear(m + ".wk", d, d, c.attention_bias);
        linear(m + ".wv", d, d, c.attention_bias);
        if (c.learned_g()) {
            for (const char* p : {"Wlst", "blst", "pwlst", "alst", "balst"})
                add(m + ".plgatt_layer." + p, {H, D, D});
        }
        linear(m + ".dense", d, d, c.attention_bias);
        if (c.learned_g()) {
            for (int64_t j = 0; j < c.num_reslayerA; ++j) {
                const std::string r = m + ".reslayerAs." + std::to_string(j);
                for (int64_t n = 0; n < c.num_denseA; ++n)
                    glu(r + ".denseAs." + std::to_string(n), D, c.A_dff, D);
                ln(r + ".layernormA", D);
            }
            ln(m + ".layernorm1", D);
        }
        glu(l + ".ffn", d, F, d);
        ln(l + ".layernorm1", d);
        ln(l + ".layernorm2", d);
    }
    L.layer_begin.push_back(L.total);
    ln("decoder.layernorm1", d);
    if (!c.tie_word_embeddings) add("final_layer.weight", {c.vocab_size, d});
    if (c.final_bias) add("final_layer.bias", {c.vocab_size});
    return L;
}

template <typename T>
ModelView<T> bind_view(const Layout& L, const Config& c, T* base) {
    auto get = [&](const std::string& name) -> T* {
        const ParamEntry* e = L.find(name);
        return e ? base + e->offset : nullptr;
    };
    auto glu = [&](const std::string& p) {
        GluView<T> g;
        g.w1 = get(p + ".gluw1.weight");
        g.b1 = get(p + ".gluw1.bias");
        g.w2 = get(p + ".gluw2.weight");
        g.b2 = get(p + ".gluw2.bias");
        g.w3 = get(p + ".gluw3.weight");
        g.b3 = get(p + ".gluw3.bias");
        return g;
    };
    ModelView<T> v;
    v.emb = get("decoder.embedding.weight");
    v.ln_in_g = get("decoder.layernorm1.weight");
    v.ln_in_b = get("decoder.layernorm1.bias");
    for (int64_t i = 0; i < c.num_layers; ++i) {
        const std::string l = "decoder.dec_layers." + std::to_string(i);
        const std::string m = l + ".mha1";
        LayerView<T> lv;
        lv.wq = get(m + ".wq.weight");
        lv.bq = get(m + ".wq.bias");
        lv.wk = get(m + ".wk.weight");
        lv.bk = get(m + ".wk.bias");
        lv.wv = get(m + ".wv.weight");
        lv.bv = get(m + ".wv.bias");
        lv.wo = get(m + ".dense.weight");
        lv.bo = get(m + ".dense.bias");
        if (c.learned_g()) {
            lv.W = get(m + ".plgatt_layer.Wlst");
            lv.b = get(m + ".plgatt_layer.blst");
            lv.P = get(m + ".plgatt_layer.pwlst");
            lv.a = get(m + ".plgatt_layer.alst");
            lv.ba = get(m + ".plgatt_layer.balst");
            lv.lnA_g = get(m + ".layernorm1.weight");
            lv.lnA_b = get(m + ".layernorm1.bias");
            for (int64_t j = 0; j < c.num_reslayerA; ++j) {
                const std::string r = m + ".reslayerAs." + std::to_string(j);
                ResUnitView<T> ru;
                for (int64_t n = 0; n < c.num_denseA; ++n)
                    ru.glu.push_back(glu(r + ".denseAs." + std::to_string(n)));
                ru.ln_g = get(r + ".layernormA.weight");
                ru.ln_b = get(r + ".layernormA.bias");
                lv.res.push_back(std::move(ru));
            }
        }
        lv.ffn = glu(l + ".ffn");
        lv.ln1_g = get(l + ".layernorm1.weight");
        lv.ln1_b = get(l + ".layernorm1.bias");
        lv.ln2_g = get(l + ".layernorm2.weight");
        lv.ln2_b = get(l + ".layernorm2.bias");
        v.layers.push_back(std::move(lv));
    }
    v.head_w = c.tie_word_embeddings ? v.emb : get("final_layer.weight");
    v.head_b = get("final_layer.bias");
    return v;
}

template ModelView<float> bind_view<float>(const Layout&, const Config&, float*);
template ModelView<double> bind_view<double>(const Layout&, const Config&, double*);

}  // namespace pldr
