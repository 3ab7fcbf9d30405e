// Packed linear weights (see packed.h) and packing a model.
#include "model/packed.h"

#include <algorithm>
#include <cmath>

#include <sys/mman.h>

#include <cstdint>

#include "core/alloc.h"
#include "core/blas.h"
#include "core/error.h"
#include "core/onednn.h"
#include "model/model.h"
#include "ops/qlinear.h"

namespace pldr {

LinearWeight<float> PackedTensor::view() const {
    LinearWeight<float> v;
    v.format = format;
    if (format == WeightFormat::BF16) {
        v.bf16 = bf16.data();
    } else {
        v.q8 = q8.data();
        v.q8_scale = scale.data();
    }
    return v;
}

int64_t PackedTensor::bytes() const {
    return format == WeightFormat::BF16 ? int64_t(bf16.size()) * 2
                                        : int64_t(q8.size()) + int64_t(scale.size()) * 4;
}

const PackedTensor* PackedWeights::find(const std::string& name) const {
    auto it = tensors.find(name);
    return it == tensors.end() ? nullptr : &it->second;
}

int64_t PackedWeights::bytes() const {
    int64_t n = 0;
    for (const auto& t : tensors) n += t.second.bytes();
    return n;
}

int64_t PackedWeights::numel() const {
    int64_t n = 0;
    for (const auto& t : tensors) n += t.second.rows * t.second.cols;
    return n;
}

WeightFormat PackedWeights::format() const {
    return tensors.empty() ? WeightFormat::DENSE : tensors.begin()->second.format;
}

const char* weight_format_name(WeightFormat f) {
    switch (f) {
        case WeightFormat::BF16:
            return "bf16";
        case WeightFormat::Q8_0:
            return "q8_0";
        case WeightFormat::DENSE:
            break;
    }
    return "f32";
}

bool is_packable(const Config& c, const std::string& n) {
    if (n == "final_layer.weight") return !c.tie_word_embeddings;
    if (n == "decoder.embedding.weight") return c.tie_word_embeddings;
    const std::string pre = "decoder.dec_layers.";
    if (n.compare(0, pre.size(), pre) != 0) return false;
    size_t i = pre.size();
    const size_t digits = i;
    while (i < n.size() && n[i] >= '0' && n[i] <= '9') ++i;
    if (i == digits || i - digits > 9 || i >= n.size() || n[i] != '.') return false;
    if (std::stoll(n.substr(digits, i - digits)) >= c.num_layers) return false;
    const std::string rest = n.substr(i + 1);
    for (const char* s : {"mha1.wq.weight", "mha1.wk.weight", "mha1.wv.weight", "mha1.dense.weight",
                          "ffn.gluw1.weight", "ffn.gluw2.weight", "ffn.gluw3.weight"})
        if (rest == s) return true;
    return false;
}

PackedTensor pack_tensor(const std::string& name, const float* w, int64_t O, int64_t I,
                         WeightFormat f) {
    PLDR_CHECK(f == WeightFormat::BF16 || f == WeightFormat::Q8_0);
    for (int64_t i = 0; i < O * I; ++i)
        PLDR_REQUIRE(std::isfinite(w[i]), "cannot convert tensor '", name,
                     "': it holds a non-finite value (", w[i], " at element ", i, ")");
    PackedTensor p;
    p.format = f;
    p.rows = O;
    p.cols = I;
    if (f == WeightFormat::BF16) {
        p.bf16.resize(static_cast<size_t>(O * I));
        for (int64_t i = 0; i < O * I; ++i) {
            p.bf16[size_t(i)] = qlinear::bf16_round(w[i]);
            PLDR_REQUIRE(std::isfinite(qlinear::bf16_value(p.bf16[size_t(i)])),
                         "cannot convert tensor '", name, "' to bf16: ", w[i], " (element ", i,
                         ") is outside its range");
        }
    } else {
        const int64_t nb = q8_blocks(I);
        p.q8.resize(static_cast<size_t>(O * I));
        p.scale.resize(static_cast<size_t>(O * nb));
        for (int64_t o = 0; o < O; ++o)
            qlinear::q8_quantize_row(w + o * I, I, p.q8.data() + o * I, p.scale.data() + o * nb);
    }
    return p;
}

PackedTensor bf16_tensor(const float* w, int64_t O, int64_t I) {
    PackedTensor p;
    p.format = WeightFormat::BF16;
    p.rows = O;
    p.cols = I;
    p.bf16.resize(static_cast<size_t>(O * I));
    for (int64_t i = 0; i < O * I; ++i) p.bf16[size_t(i)] = qlinear::bf16_round(w[i]);  // exact
    return p;
}

void unpack_tensor(const PackedTensor& p, float* w) {
    qlinear::dequantize_rows(p.view(), p.cols, 0, p.rows, w);
}

std::string stored_weights(const Config& c) {
    if (c.quantization == "q8_0") return "q8_0";
    if (c.dtype == "bfloat16") return "bf16";
    if (c.dtype == "float16") return "f16";
    if (c.dtype == "float64") return "f64";
    return "f32";
}

void pack_model(Model<float>& m, WeightFormat f) {
    m.panels.reset();  // of the values before packing
    auto p = std::make_shared<PackedWeights>();
    for (const ParamEntry& e : m.layout.entries) {
        if (!is_packable(m.cfg, e.name)) continue;
        PLDR_CHECK(e.shape.size() == 2);
        float* w = m.params.data() + e.offset;
        PackedTensor t = pack_tensor(e.name, w, e.shape[0], e.shape[1], f);
        unpack_tensor(t, w);
        p->tensors.emplace(e.name, std::move(t));
    }
    m.packed = std::move(p);
    m.bind_linears();
}

template <typename T>
void unpack_model(Model<T>& m) {
    m.packed.reset();
    m.bind_linears();
}

template void unpack_model<float>(Model<float>&);
template void unpack_model<double>(Model<double>&);

const float* PanelWeights::find(const std::string& name) const {
    auto it = tensors.find(name);
    return it == tensors.end() ? nullptr : it->second;
}

void keep_panel_weights(Model<float>& m, int64_t max_bytes) {
    m.panels.reset();
    if (panels_available()) {
        std::vector<const ParamEntry*> dense;
        int64_t floats = 0;
        for (const ParamEntry& e : m.layout.entries) {
            if (!is_packable(m.cfg, e.name)) continue;
            if (m.packed && m.packed->find(e.name)) continue;  // read packed, never dense
            PLDR_CHECK(e.shape.size() == 2);
            dense.push_back(&e);
            floats += panel_floats(e.shape[0], e.shape[1]);
        }
        const bool mapped = m.params.is_mapped();
        if (!dense.empty() && (mapped || floats * int64_t(sizeof(float)) <= max_bytes)) {
            auto t = std::make_shared<PanelWeights>();
            const size_t bytes = size_t(floats) * sizeof(float);
            t->arena = std::shared_ptr<float>(static_cast<float*>(map_zero_pages(bytes)),
                                              [bytes](float* p) { unmap_pages(p, bytes); });
#ifdef MADV_HUGEPAGE
            ::madvise(t->arena.get(), bytes, MADV_HUGEPAGE);  // a hint: a stream of 2 MB pages
#endif
            t->floats = floats;
            float* at = t->arena.get();
            for (const ParamEntry* e : dense) {
                const int64_t O = e->shape[0], I = e->shape[1];
                const int64_t I16 = panel_floats(1, I) / kPanelWidth;
                const float* w = m.params.data() + e->offset;
                t->tensors.emplace(e->name, at);
                // In blocks of rows (the panels of rows from a multiple of kPanelWidth on are
                // those of the whole weight). A mapped weight's pages read so far go back to the
                // page cache after each block, so that the weight is never resident twice (the
                // head is 115 MB at 110M); pages that a write has copied stay (core/alloc.h).
                constexpr int64_t kBlockRows = 64 * kPanelWidth;
                for (int64_t o = 0; o < O; o += kBlockRows) {
                    const int64_t rows = std::min(kBlockRows, O - o);
                    to_panels(w + o * I, rows, I, at + o * I16);
                    if (mapped) release_file_pages(w, size_t((o + rows) * I) * sizeof(float));
                }
                at += panel_floats(O, I);
            }
            m.panels = std::move(t);
        }
    }
    m.bind_linears();
}

template <typename T>
void drop_panel_weights(Model<T>& m) {
    if (!m.panels) return;
    m.panels.reset();
    m.bind_linears();
}

template void drop_panel_weights<float>(Model<float>&);
template void drop_panel_weights<double>(Model<double>&);

}  // namespace pldr
