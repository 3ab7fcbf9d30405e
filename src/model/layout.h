// The parameter layout: every trained tensor of a PLDR-LLM (spec §9.1), in the reference's module
// order, as named slices of one flat buffer (llm.c style). The same layout serves parameters,
// gradients and the AdamW moments. ModelView binds typed pointers into such a buffer.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"

namespace pldr {

struct ParamEntry {
    std::string name;
    Shape shape;
    int64_t offset = 0;
    int64_t numel = 0;
};

struct Layout {
    std::vector<ParamEntry> entries;
    std::map<std::string, size_t> index;
    int64_t total = 0;
    // Layer l's parameters are the elements [layer_begin[l], layer_begin[l + 1]).
    std::vector<int64_t> layer_begin;
    const ParamEntry* find(const std::string& name) const;
};

// Checks the config (validate_config) and returns the layout.
Layout make_layout(const Config& cfg);
// Shape of the fixed-G buffer `decoder.past_G_values` [L,3,1,H,dk,dk] (fixed-G models only).
Shape past_g_shape(const Config& cfg);

template <typename T>
struct GluView {
    T *w1 = nullptr, *b1 = nullptr, *w2 = nullptr, *b2 = nullptr, *w3 = nullptr, *b3 = nullptr;
};
template <typename T>
struct ResUnitView {
    std::vector<GluView<T>> glu;
    T *ln_g = nullptr, *ln_b = nullptr;
};
template <typename T>
struct LayerView {
    T *wq = nullptr, *bq = nullptr, *wk = nullptr, *bk = nullptr;
    T *wv = nullptr, *bv = nullptr, *wo = nullptr, *bo = nullptr;
    // PLGA operator parameters [H,dk,dk] and the metric learner (learned G only).
    T *W = nullptr, *b = nullptr, *P = nullptr, *a = nullptr, *ba = nullptr;
    T *lnA_g = nullptr, *lnA_b = nullptr;
    std::vector<ResUnitView<T>> res;
    GluView<T> ffn;
    T *ln1_g = nullptr, *ln1_b = nullptr, *ln2_g = nullptr, *ln2_b = nullptr;
};
template <typename T>
struct ModelView {
    T* emb = nullptr;  // [V,d]
    T *ln_in_g = nullptr, *ln_in_b = nullptr;
    std::vector<LayerView<T>> layers;
    T *head_w = nullptr, *head_b = nullptr;  // head_w == emb when tied
};

// Binds pointers into `base` (a buffer of layout.total elements). Absent biases stay null.
template <typename T>
ModelView<T> bind_view(const Layout& layout, const Config& cfg, T* base);

}  // namespace pldr
