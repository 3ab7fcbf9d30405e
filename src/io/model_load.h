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
// Low-precision weights (model/packed.h): a q8_0 model (config.json "quantization") has
// NAME.q8 / NAME.q8_scale for each packable weight, and its scales must be finite and ≥ 0; a
// packable weight stored as BF16 is bf16. With T = float and `pack` they stay packed (the
// products stream them); otherwise, and always for T = double, they are dequantized into the
// parameters (q8_0: float(q)·scale in float32 arithmetic, then widened).
//
// map_file: where the weights file holds the parameters exactly as the model's buffer (one
// unsharded file, every parameter in T's dtype, in layout order, contiguous and aligned: what
// save_model writes), the buffer is a copy-on-write mapping of the file instead of a copy
// (model/param_buffer.h): only the pages a computation reads become resident, shared with the
// page cache. Otherwise, or when mapping fails, the parameters are read into owned memory.
// (A mapped file must not be truncated or rewritten in place while the model lives; pldr
// replaces files by rename, which leaves the mapping intact.)
template <typename T>
Model<T> load_model(const std::string& dir, bool pack = true, bool map_file = false);

// Writes a model directory (config.json + model.safetensors, atomically) with the weights
// stored in `dtype` (F32 or F64), in layout order (so that load_model can map them);
// config.json's "dtype" records it. Fixed-G models also get
// decoder.past_G_values (slot 2 = G, slots 0 and 1 zero) and decoder.past_G_values_status.
// With `keep_packed` (T = float) the packed weights are written packed (the rest F32): bf16 as
// BF16 with "dtype": "bfloat16", q8_0 as NAME.q8 (I8) + NAME.q8_scale (F32) with
// "quantization": {"method": "q8_0", "block": 32}. Without it they are written as their
// dequantized values and the config has no quantization.
template <typename T>
void save_model(const Model<T>& m, const std::string& dir, DType dtype = DType::F32,
                bool keep_packed = false);

// pldr convert: reads the model directory `dir` (any stored format) and writes it to `out` with
// the linear weights as `f` (DENSE = every tensor F32; BF16; Q8_0), tokenizer.model copied.
// Returns the bytes of the packed weights (0 for DENSE). `out` follows the output rule
// (core/fs.h require_output_dir): an existing model directory or checkpoint only with `force`.
struct ConvertStats {
    int64_t packed_tensors = 0, packed_numel = 0, packed_bytes = 0;
    int64_t in_bytes = 0, out_bytes = 0;  // size of the weights file(s) read and written
};
ConvertStats convert_model_dir(const std::string& dir, const std::string& out, WeightFormat f,
                               bool force = false);

}  // namespace pldr
