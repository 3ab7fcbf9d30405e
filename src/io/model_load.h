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

}  // namespace pldr
