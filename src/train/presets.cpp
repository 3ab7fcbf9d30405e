// Model presets (see presets.h).
#include "train/presets.h"

#include "core/error.h"
#include "io/config_json.h"

namespace pldr {

Config preset_config(const std::string& name, int64_t vocab_size) {
    PLDR_REQUIRE(vocab_size >= 2, "preset ", name, ": vocabulary size must be >= 2 (got ",
                 vocab_size, ")");
    Config c;
    c.vocab_size = vocab_size;
    if (name == "tiny") {
        c.num_layers = 2, c.num_heads = 2, c.head_dim = 16;
        c.A_dff = 16, c.num_reslayerA = 2, c.num_denseA = 2, c.max_position = 256;
    } else if (name == "small") {
        c.num_layers = 4, c.num_heads = 4, c.head_dim = 32;
        c.A_dff = 64, c.num_reslayerA = 4, c.num_denseA = 2, c.max_position = 512;
    } else if (name == "v51-110M") {
        c.num_layers = 5, c.num_heads = 14, c.head_dim = 64;
        c.A_dff = 170, c.num_reslayerA = 8, c.num_denseA = 2, c.max_position = 1024;
    } else {
        fail("unknown preset '", name, "' (choose tiny, small or v51-110M)");
    }
    c.hidden_size = c.num_heads * c.head_dim;
    c.intermediate_size = default_intermediate_size(c.num_heads, c.head_dim);
    // The special ids of the reference tokenizer (and of `pldr tokenizer train`), when they fit.
    c.pad_token_id = 0;
    c.bos_token_id = vocab_size > 2 ? 2 : -1;
    c.eos_token_id = vocab_size > 3 ? 3 : -1;
    validate_config(c, "preset " + name);
    return c;
}

Config sdpa_twin(Config c) {
    c.g_type = GType::IDENTITY;
    c.A_dff = 0, c.num_reslayerA = 0, c.num_denseA = 0;
    return c;
}

}  // namespace pldr
