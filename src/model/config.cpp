// The one config validator (see config.h).
#include "model/config.h"

#include <cmath>

#include "core/error.h"
#include "ops/plga_variants.h"

namespace pldr {

const std::vector<FixedGType>& fixed_g_types() {
    static const std::vector<FixedGType> t = {
        {"identity", GType::IDENTITY},
        {"random", GType::RANDOM},
        {"external", GType::EXTERNAL},
    };
    return t;
}

std::vector<std::string> plga_positive_map_names() {
    std::vector<std::string> v;
    for (const PositiveMap* p : positive_maps()) v.push_back(p->name);
    return v;
}

std::vector<std::string> plga_coupling_names() {
    std::vector<std::string> v;
    for (const Coupling* c : couplings()) v.push_back(c->name);
    return v;
}

int64_t default_intermediate_size(int64_t num_heads, int64_t head_dim) {
    // HF: int(hidden_size * 4 * 2 / 3): an integer product, then a true division, floored.
    return num_heads * head_dim * 4 * 2 / 3;
}

void validate_config(const Config& c, const std::string& where) {
    using L = ConfigLimits;
    auto size = [&](const char* key, int64_t v, int64_t max) {
        PLDR_REQUIRE(v > 0 && v <= max, where, ": key '", key,
                     "' must be a positive integer of at most ", max, ", got ", v);
    };
    size("vocab_size", c.vocab_size, L::vocab);
    size("num_hidden_layers", c.num_layers, L::layers);
    size("num_attention_heads", c.num_heads, L::heads);
    size("head_dim", c.head_dim, L::head_dim);
    size("intermediate_size", c.intermediate_size, L::intermediate);
    size("max_position_embeddings", c.max_position, L::positions);
    PLDR_REQUIRE(c.head_dim % 2 == 0, where,
                 ": key 'head_dim' must be even (RoPE rotates pairs), got ", c.head_dim);
    PLDR_REQUIRE(c.hidden_size == c.num_heads * c.head_dim, where, ": key 'hidden_size' is ",
                 c.hidden_size, " but num_attention_heads*head_dim = ", c.num_heads, "*",
                 c.head_dim, " = ", c.num_heads * c.head_dim);
    size("hidden_size", c.hidden_size, L::hidden);
    if (c.learned_g()) {
        size("A_dff", c.A_dff, L::A_dff);
        size("num_reslayerA", c.num_reslayerA, L::res_units);
        size("num_denseA", c.num_denseA, L::dense_units);
    } else {
        // Unused with a fixed G: 0 means "not given" (null); anything else must still be sane.
        auto unused = [&](const char* key, int64_t v, int64_t max) {
            PLDR_REQUIRE(v >= 0 && v <= max, where, ": key '", key,
                         "' must be null or a positive integer of at most ", max, ", got ", v);
        };
        unused("A_dff", c.A_dff, L::A_dff);
        unused("num_reslayerA", c.num_reslayerA, L::res_units);
        unused("num_denseA", c.num_denseA, L::dense_units);
    }
    PLDR_REQUIRE(std::isfinite(c.layer_norm_eps) && c.layer_norm_eps > 0, where,
                 ": key 'layer_norm_eps' must be > 0, got ", c.layer_norm_eps);
    PLDR_REQUIRE(std::isfinite(c.rope_theta) && c.rope_theta > 0, where,
                 ": key 'rope_theta' must be > 0, got ", c.rope_theta);
    PLDR_REQUIRE(c.hidden_act == "silu", where, ": key 'hidden_act' is '", c.hidden_act,
                 "' but only 'silu' is implemented");
    PLDR_REQUIRE(c.dtype == "float32" || c.dtype == "float64" || c.dtype == "float16" ||
                     c.dtype == "bfloat16",
                 where, ": key 'dtype' is '", c.dtype,
                 "' (expected float32, float64, float16 or bfloat16)");
    PLDR_REQUIRE(c.quantization.empty() || c.quantization == "q8_0", where,
                 ": key 'quantization' has method '", c.quantization,
                 "', which pldr does not read (only q8_0)");
    PLDR_REQUIRE(find_positive_map(c.plga_positive_map), where, ": key 'plga_positive_map' is '",
                 c.plga_positive_map, "' (expected ", positive_map_names(), ")");
    PLDR_REQUIRE(find_coupling(c.plga_coupling), where, ": key 'plga_coupling' is '",
                 c.plga_coupling, "' (expected ", coupling_names(), ")");
    auto token = [&](const char* key, int64_t v) {
        PLDR_REQUIRE(v >= -1 && v < c.vocab_size, where, ": key '", key, "' is ", v,
                     ", outside the vocabulary [0,", c.vocab_size, ") (null means none)");
    };
    token("pad_token_id", c.pad_token_id);
    token("bos_token_id", c.bos_token_id);
    token("eos_token_id", c.eos_token_id);
}

}  // namespace pldr
