// Model configuration: the keys of the Hugging Face PLDR-LLM config.json (spec §9.2, §11.6),
// resolved to concrete integers. The one validator lives here (validate_config); the one table
// of config.json fields (key, parse, default, write, compare) lives in io/config_json.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace pldr {

enum class GType { LEARNED, IDENTITY, RANDOM, EXTERNAL };  // custom_G_type null / identity / ...

// A fixed-G type: the config.json name of custom_G_type and its GType.
struct FixedGType {
    const char* name;
    GType type;
};
// The fixed-G types (every GType but LEARNED, which is custom_G_type null).
const std::vector<FixedGType>& fixed_g_types();

// The names of the registered PLGA variants (ops/plga_variants.h), the default first: the values
// config.json's "plga_positive_map" and "plga_coupling" may hold. The configuration reads and
// writes them by name and never needs the kernels themselves.
std::vector<std::string> plga_positive_map_names();
std::vector<std::string> plga_coupling_names();

struct Config {
    int64_t vocab_size = 32000;
    int64_t hidden_size = 896;         // d = num_heads * head_dim
    int64_t intermediate_size = 2389;  // dff
    int64_t num_layers = 5;            // num_hidden_layers
    int64_t num_heads = 14;            // H
    int64_t head_dim = 64;             // dk
    int64_t max_position = 1024;       // max_position_embeddings
    double layer_norm_eps = 1e-6;
    double rope_theta = 10000.0;
    bool reference_rope = true;  // interleaved pairs (true) or halves (false)
    bool attention_bias = true;
    bool glu_bias = true;
    bool final_bias = true;
    bool tie_word_embeddings = false;
    int64_t num_reslayerA = 8;  // R
    int64_t num_denseA = 2;     // N
    int64_t A_dff = 170;
    GType g_type = GType::LEARNED;
    bool cache_first_G = false;
    // The PLGA operator's variants, by their registry names (ops/plga_variants.h).
    std::string plga_positive_map = "iswiglu";  // A_LM = f(Z)
    std::string plga_coupling = "power";        // A_P = c(A_LM, P)
    int64_t pad_token_id = 0;  // token ids: -1 = null in config.json (no such token)
    int64_t bos_token_id = 2;
    int64_t eos_token_id = 3;
    std::string hidden_act = "silu";
    std::string dtype = "float32";  // storage dtype recorded in config.json
    // Weight quantization (config.json "quantization": {"method": "q8_0", "block": 32}): "" for
    // none, "q8_0" for the large linear weights stored as int8 blocks of 32 with float scales
    // (model/packed.h, docs/formats.md).
    std::string quantization;

    int64_t d() const { return hidden_size; }
    bool learned_g() const { return g_type == GType::LEARNED; }
};

// Upper bounds checked before anything is allocated (a config.json is untrusted input). Every
// product of sizes the code forms stays far inside int64 and the bounds sit far above any
// PLDR-LLM (the 110M model: 12 layers, 12 heads, dk 64, vocab 32000, context 1024).
struct ConfigLimits {
    static constexpr int64_t vocab = int64_t(1) << 24;
    static constexpr int64_t layers = 1024;
    static constexpr int64_t heads = 1024;
    static constexpr int64_t head_dim = 4096;
    static constexpr int64_t hidden = int64_t(1) << 16;
    static constexpr int64_t intermediate = int64_t(1) << 20;
    static constexpr int64_t positions = int64_t(1) << 22;
    static constexpr int64_t A_dff = int64_t(1) << 16;
    static constexpr int64_t res_units = 1024;    // num_reslayerA
    static constexpr int64_t dense_units = 1024;  // num_denseA
};

// Checks every rule of spec §9.2/§11.6 and the limits above; throws pldr::Error with one line
// that starts with `where` and names the config.json key. Token ids may be -1 (null).
void validate_config(const Config& c, const std::string& where);

// floor(H·dk·4·2/3), the default FFN width (spec §11.6).
int64_t default_intermediate_size(int64_t num_heads, int64_t head_dim);

inline const char* g_type_name(GType g) {
    switch (g) {
        case GType::LEARNED:
            return "null";
        case GType::IDENTITY:
            return "identity";
        case GType::RANDOM:
            return "random";
        case GType::EXTERNAL:
            return "external";
    }
    return "?";
}

}  // namespace pldr
