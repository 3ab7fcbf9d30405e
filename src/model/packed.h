// Packed linear weights for float32 inference (ops/linear.h formats BF16 and Q8_0): the large
// matrices every decoded token reads — the q, k, v and output projections, the FFN's three
// weights and the LM head (the embedding when it is tied to the head) — held as bf16 or as int8
// blocks with their scales, which halves or nearly quarters the bytes a token streams. The
// embedding lookup, LayerNorms, biases, the PLGA operator parameters and the metric learner stay
// in the parameter buffer in the compute precision; so does the operator path and the G-cache.
//
// A model with packed weights also keeps their dequantized values in its parameter buffer, so
// that every path that reads parameters (parameter(), the audit's absorption check, save) sees
// the weights the packed products compute with; gradients are refused (model/backward.cpp).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "ops/linear.h"

namespace pldr {

struct PackedTensor {
    WeightFormat format = WeightFormat::BF16;
    int64_t rows = 0, cols = 0;  // O, I
    std::vector<uint16_t> bf16;  // [O,I] (BF16)
    std::vector<int8_t> q8;      // [O,I] (Q8_0)
    std::vector<float> scale;    // [O, q8_blocks(I)] (Q8_0)
    LinearWeight<float> view() const;
    int64_t bytes() const;  // what a product over it reads
};

struct PackedWeights {
    std::map<std::string, PackedTensor> tensors;  // by parameter name
    const PackedTensor* find(const std::string& name) const;
    int64_t bytes() const;
    int64_t numel() const;
    WeightFormat format() const;  // of the tensors (all the same)
};

// Dense float32 weights in panels (ops/linear.h), by parameter name (model.h:
// keep_panel_weights): every product of an inference model reads them, a prompt's through
// oneDNN's kernels as they lie (its matmul otherwise copies W [O,I] into this layout on every
// call: 20 % of a 128-token product of the 110M shapes, 50 % at 32 tokens), a decode step's as
// one stream with the inputs broadcast (batch 8 at 6× batch 1 rather than 4×). All of the
// packable weights, in one block of memory (2 MB pages where the kernel gives them).
struct PanelWeights {
    std::shared_ptr<float> arena;
    int64_t floats = 0;
    std::map<std::string, const float*> tensors;
    const float* find(const std::string& name) const;
    int64_t bytes() const { return floats * int64_t(sizeof(float)); }
};
// A model's panels cost the memory of its weights again, unless its parameters are a file
// mapping: then the weights' pages, read once to build the panels, go back to the page cache
// (a computation that reads them later faults them in from there). A model keeps panels where
// they fit this budget or its parameters are mapped.
inline constexpr int64_t kPanelMaxBytes = int64_t(64) << 20;

// "bf16", "q8_0" (and "f32" for DENSE).
const char* weight_format_name(WeightFormat f);

// The weights that may be packed: per layer mha1.{wq,wk,wv,dense}.weight and
// ffn.gluw{1,2,3}.weight, then final_layer.weight, or decoder.embedding.weight when
// tie_word_embeddings (the head's weight). Not the metric learner's GLUs.
bool is_packable(const Config& c, const std::string& name);

// Packs w[O,I] (finite values, else pldr::Error naming `name`): BF16 rounds to nearest even,
// Q8_0 quantizes each block (qlinear::q8_quantize_row).
PackedTensor pack_tensor(const std::string& name, const float* w, int64_t O, int64_t I,
                         WeightFormat f);
// w[O·I] = the dequantized values.
void unpack_tensor(const PackedTensor& p, float* w);
// The BF16 tensor of w[O,I] whose values are bfloat16 values already (a weight stored as BF16):
// their bits, exactly, and no check (the values are the file's, as any loaded weight's).
PackedTensor bf16_tensor(const float* w, int64_t O, int64_t I);

// The linear weights of a model as its matrix products read them: packed when the model has
// them packed, else views into the parameter buffer.
template <typename T>
struct LayerLinears {
    LinearWeight<T> wq, wk, wv, wo;  // attention projections (wo: mha1.dense)
    LinearWeight<T> w1, w2, w3;      // FFN
};
template <typename T>
struct LinearViews {
    std::vector<LayerLinears<T>> layers;
    LinearWeight<T> head;
};

// How the model's linear weights are stored, from its config: "q8_0" (config.json
// "quantization"), "bf16", "f16", "f32" or "f64" (config.json "dtype").
std::string stored_weights(const Config& c);

}  // namespace pldr
