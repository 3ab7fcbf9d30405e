// Filling a Model<T> from safetensors tensors (any stored float dtype → compute dtype T),
// with a shape check of every tensor against the layout that config.json implies.
#pragma once
#include <string>

#include "io/safetensors.h"
#include "model/model.h"

namespace pldr {

// Reads every parameter `prefix + name` of m.layout from f (and, for fixed-G models, the G
// buffer `prefix + decoder.past_G_values` slot 2 when present). Throws pldr::Error naming the
// tensor on a missing tensor or a shape mismatch.
template <typename T>
void fill_params(Model<T>& m, const SafetensorsFile& f, const std::string& prefix = "");

// Loads a model directory (config.json + model.safetensors or a sharded index) into compute
// type T. Every tensor is checked against the layout config.json implies (names, shapes, dtypes;
// unexpected tensors are errors, the non-persistent RoPE buffers are ignored).
template <typename T>
Model<T> load_model(const std::string& dir);

// Writes a model directory (config.json + model.safetensors, atomically) with the weights
// stored in `dtype` (F32 or F64); config.json's "dtype" records it. Fixed-G models also get
// decoder.past_G_values (slot 2 = G, slots 0 and 1 zero) and decoder.past_G_values_status.
template <typename T>
void save_model(const Model<T>& m, const std::string& dir, DType dtype = DType::F32);

}  // namespace pldr
