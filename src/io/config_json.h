// config.json (Hugging Face PLDR-LLM, spec §9.2, §11.6) <-> pldr::Config, driven by one table of
// fields (config_fields(): key, parse, default, write, compare), and checked by the one
// validator, validate_config (model/config.h).
//
// Parsing fails with one line that names the file (`where`) and the key. Unknown keys
// (auto_map, transformers_version, _name_or_path, ...) are ignored.
// - Required: vocab_size, num_hidden_layers, num_attention_heads, head_dim; with a learned G
//   (custom_G_type null) also A_dff, num_reslayerA, num_denseA. With a fixed G these three may be
//   missing or null (stored as 0, written back as null); when given they must be positive.
// - hidden_size: null or missing ⇒ H·head_dim; otherwise it must equal H·head_dim.
// - intermediate_size: null or missing ⇒ floor(H·head_dim·4·2/3).
// - custom_G_type ∈ {null, "identity", "random", "external"} (the fixed-G types of the registry);
// hidden_act must be "silu";
//   rope_scaling must be null when reference_rope is false (and is ignored when it is true);
//   attention_dropout must be 0 (no dropout is implemented); model_type, when present, must be
//   "pldrllm".
// - pad/bos/eos_token_id: a non-negative integer below vocab_size, or null (stored as -1);
//   missing ⇒ the §9.2 default (0, 2, 3).
// - dtype (or the older torch_dtype): float32, float64, float16 or bfloat16.
// - plga_positive_map, plga_coupling: a registered variant (ops/plga_variants.h); missing or
//   null ⇒ "iswiglu", "power" (the PLDR-LLM operator). Always written.
// - quantization: null or missing ⇒ none; else {"method": "q8_0", "block": 32} ("block"
//   optional, no other field). Written only for a quantized model (model/packed.h).
// Other missing or null optional keys take the §9.2 defaults (those of pldr::Config).
#pragma once
#include <string>
#include <vector>

#include "model/config.h"

namespace pldr {

// Parses config.json text; `where` (a path) prefixes every error message.
Config config_from_json(const std::string& json_text, const std::string& where);
// Reads and parses a config.json file.
Config load_config(const std::string& path);
// HF-style JSON text (2-space indent, keys in the order of the shipped configs), with the full
// §9.2 key set except auto_map and transformers_version (no custom code is written alongside).
std::string config_to_json(const Config& c);
// Validates the config and writes config_to_json atomically.
void save_config(const Config& c, const std::string& path);

// One row of the config table, as the tests see it: the key, whether a Config member holds it
// (false for the keys written as constants: architectures, model_type, use_cache, …), the
// comparison of that member, and `vary`, which sets the member of a valid learned-G config to
// another valid, non-default value (so that a round trip that drops the key is caught).
struct ConfigFieldInfo {
    const char* key;
    bool (*same)(const Config&, const Config&);  // null for constant keys
    void (*vary)(Config&);                       // null for constant keys
};
const std::vector<ConfigFieldInfo>& config_fields();

}  // namespace pldr
