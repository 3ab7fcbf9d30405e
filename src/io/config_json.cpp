// config.json <-> Config (see config_json.h).
#include "io/config_json.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/fs.h"
#include "io/json_util.h"

namespace pldr {

namespace {

using J = nlohmann::ordered_json;

constexpr int64_t kMaxDim = int64_t(1) << 31;  // keeps every product of sizes inside int64

std::string got(const J& v) {
    std::string s = v.dump();
    if (s.size() > 40) s = s.substr(0, 37) + "...";
    return std::string(v.type_name()) + " " + s;
}

// A JSON integer (not a float, not a bool) that fits int64.
bool as_int(const J& v, int64_t* out) {
    if (!v.is_number_integer()) return false;
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) return false;
    *out = v.get<int64_t>();
    return true;
}

struct Reader {
    const J& j;
    const std::string& where;

    bool present(const char* key) const { return j.contains(key) && !j[key].is_null(); }

    // Positive integer; `required` makes a missing or null key an error, else `def` is returned.
    int64_t pos_int(const char* key, bool required, int64_t def) const {
        if (!present(key)) {
            if (required)
                fail(where, ": key '", key, "' is ", j.contains(key) ? "null" : "missing",
                     " (a positive integer is required)");
            return def;
        }
        int64_t v;
        if (!as_int(j[key], &v))
            fail(where, ": key '", key, "' must be a positive integer, got ", got(j[key]));
        if (v <= 0 || v > kMaxDim)
            fail(where, ": key '", key, "' must be a positive integer (at most ", kMaxDim,
                 "), got ", v);
        return v;
    }
    // Token id: integer >= 0, null ⇒ -1, missing ⇒ def.
    int64_t token_id(const char* key, int64_t def) const {
        if (!j.contains(key)) return def;
        if (j[key].is_null()) return -1;
        int64_t v;
        if (!as_int(j[key], &v) || v < 0)
            fail(where, ": key '", key, "' must be a non-negative integer or null, got ",
                 got(j[key]));
        return v;
    }
    double number(const char* key, double def) const {
        if (!present(key)) return def;
        if (!j[key].is_number())
            fail(where, ": key '", key, "' must be a number, got ", got(j[key]));
        return j[key].get<double>();
    }
    bool boolean(const char* key, bool def) const {
        if (!present(key)) return def;
        if (!j[key].is_boolean())
            fail(where, ": key '", key, "' must be true or false, got ", got(j[key]));
        return j[key].get<bool>();
    }
    std::string string(const char* key, const std::string& def) const {
        if (!present(key)) return def;
        if (!j[key].is_string())
            fail(where, ": key '", key, "' must be a string, got ", got(j[key]));
        return j[key].get<std::string>();
    }
};

bool known_dtype(const std::string& s) {
    return s == "float32" || s == "float64" || s == "float16" || s == "bfloat16";
}

}  // namespace

int64_t default_intermediate_size(int64_t num_heads, int64_t head_dim) {
    // HF: int(hidden_size * 4 * 2 / 3) — an integer product, then a true division, floored.
    return num_heads * head_dim * 4 * 2 / 3;
}

void validate_config(const Config& c, const std::string& where) {
    auto positive = [&](const char* key, int64_t v) {
        PLDR_REQUIRE(v > 0 && v <= kMaxDim, where, ": key '", key,
                     "' must be a positive integer, got ", v);
    };
    positive("vocab_size", c.vocab_size);
    positive("num_hidden_layers", c.num_layers);
    positive("num_attention_heads", c.num_heads);
    positive("head_dim", c.head_dim);
    positive("hidden_size", c.hidden_size);
    positive("intermediate_size", c.intermediate_size);
    positive("max_position_embeddings", c.max_position);
    PLDR_REQUIRE(c.head_dim % 2 == 0, where,
                 ": key 'head_dim' must be even (RoPE rotates pairs), got ", c.head_dim);
    PLDR_REQUIRE(c.hidden_size == c.num_heads * c.head_dim, where, ": key 'hidden_size' is ",
                 c.hidden_size, " but num_attention_heads*head_dim = ", c.num_heads, "*",
                 c.head_dim, " = ", c.num_heads * c.head_dim);
    if (c.learned_g()) {
        positive("A_dff", c.A_dff);
        positive("num_reslayerA", c.num_reslayerA);
        positive("num_denseA", c.num_denseA);
    } else {
        // Unused with a fixed G: 0 means "not given"; anything else must still be sensible.
        PLDR_REQUIRE(c.A_dff >= 0 && c.num_reslayerA >= 0 && c.num_denseA >= 0, where,
                     ": keys 'A_dff', 'num_reslayerA', 'num_denseA' must not be negative");
    }
    PLDR_REQUIRE(std::isfinite(c.layer_norm_eps) && c.layer_norm_eps > 0, where,
                 ": key 'layer_norm_eps' must be > 0, got ", c.layer_norm_eps);
    PLDR_REQUIRE(std::isfinite(c.rope_theta) && c.rope_theta > 0, where,
                 ": key 'rope_theta' must be > 0, got ", c.rope_theta);
    PLDR_REQUIRE(c.hidden_act == "silu", where, ": key 'hidden_act' is '", c.hidden_act,
                 "' but only 'silu' is implemented");
    PLDR_REQUIRE(known_dtype(c.dtype), where, ": key 'dtype' is '", c.dtype,
                 "' (expected float32, float64, float16 or bfloat16)");
    auto token = [&](const char* key, int64_t v) {
        PLDR_REQUIRE(v >= -1 && v < c.vocab_size, where, ": key '", key, "' is ", v,
                     ", outside the vocabulary [0,", c.vocab_size, ")");
    };
    token("pad_token_id", c.pad_token_id);
    token("bos_token_id", c.bos_token_id);
    token("eos_token_id", c.eos_token_id);
}

Config config_from_json(const std::string& json_text, const std::string& where) {
    J j = parse_json_strict(json_text, where);
    if (!j.is_object()) fail(where, ": config.json must be a JSON object, got a ", j.type_name());
    Reader r{j, where};
    Config c;

    if (r.present("model_type")) {
        std::string mt = r.string("model_type", "pldrllm");
        PLDR_REQUIRE(mt == "pldrllm", where, ": key 'model_type' is '", mt,
                     "', not a PLDR-LLM config (expected 'pldrllm')");
    }

    // custom_G_type first: it decides which keys are required.
    if (r.present("custom_G_type")) {
        std::string g = r.string("custom_G_type", "");
        if (g == "identity")
            c.g_type = GType::IDENTITY;
        else if (g == "random")
            c.g_type = GType::RANDOM;
        else if (g == "external")
            c.g_type = GType::EXTERNAL;
        else
            fail(where, ": key 'custom_G_type' is '", g,
                 "' (expected null, 'identity', 'random' or 'external')");
    } else {
        c.g_type = GType::LEARNED;
    }

    c.vocab_size = r.pos_int("vocab_size", true, 0);
    c.num_layers = r.pos_int("num_hidden_layers", true, 0);
    c.num_heads = r.pos_int("num_attention_heads", true, 0);
    c.head_dim = r.pos_int("head_dim", true, 0);
    if (c.head_dim % 2 != 0)
        fail(where, ": key 'head_dim' must be even (RoPE rotates pairs), got ", c.head_dim);
    const int64_t d = c.num_heads * c.head_dim;
    c.hidden_size = r.pos_int("hidden_size", false, d);
    if (c.hidden_size != d)
        fail(where, ": key 'hidden_size' is ", c.hidden_size,
             " but num_attention_heads*head_dim = ", c.num_heads, "*", c.head_dim, " = ", d);
    c.intermediate_size =
        r.pos_int("intermediate_size", false, default_intermediate_size(c.num_heads, c.head_dim));
    c.max_position = r.pos_int("max_position_embeddings", false, c.max_position);

    const bool learned = c.learned_g();
    c.A_dff = r.pos_int("A_dff", learned, 0);
    c.num_reslayerA = r.pos_int("num_reslayerA", learned, 0);
    c.num_denseA = r.pos_int("num_denseA", learned, 0);

    c.hidden_act = r.string("hidden_act", c.hidden_act);
    if (c.hidden_act != "silu")
        fail(where, ": key 'hidden_act' is '", c.hidden_act, "' but only 'silu' is implemented");

    c.layer_norm_eps = r.number("layer_norm_eps", c.layer_norm_eps);
    if (!(c.layer_norm_eps > 0) || !std::isfinite(c.layer_norm_eps))
        fail(where, ": key 'layer_norm_eps' must be > 0, got ", j["layer_norm_eps"].dump());
    c.rope_theta = r.number("rope_theta", c.rope_theta);
    if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta))
        fail(where, ": key 'rope_theta' must be > 0, got ", j["rope_theta"].dump());

    c.reference_rope = r.boolean("reference_rope", c.reference_rope);
    if (r.present("rope_scaling") && !c.reference_rope)
        fail(where, ": key 'rope_scaling' is ", got(j["rope_scaling"]),
             " but RoPE scaling is not implemented (only null is supported when "
             "reference_rope is false)");

    double dropout = r.number("attention_dropout", 0.0);
    if (dropout != 0.0)
        fail(where, ": key 'attention_dropout' is ", dropout,
             " but dropout is not implemented (only 0.0)");
    (void)r.number("initializer_range", 0.02);
    (void)r.boolean("use_cache", true);
    (void)r.boolean("output_pldr_attentions", false);

    c.attention_bias = r.boolean("attention_bias", c.attention_bias);
    c.glu_bias = r.boolean("glu_bias", c.glu_bias);
    c.final_bias = r.boolean("final_bias", c.final_bias);
    c.tie_word_embeddings = r.boolean("tie_word_embeddings", c.tie_word_embeddings);
    c.cache_first_G = r.boolean("cache_first_G", c.cache_first_G);

    c.pad_token_id = r.token_id("pad_token_id", c.pad_token_id);
    c.bos_token_id = r.token_id("bos_token_id", c.bos_token_id);
    c.eos_token_id = r.token_id("eos_token_id", c.eos_token_id);

    const char* dkey = r.present("dtype") ? "dtype" : "torch_dtype";
    c.dtype = r.string(dkey, "float32");
    if (!known_dtype(c.dtype))
        fail(where, ": key '", dkey, "' is '", c.dtype,
             "' (expected float32, float64, float16 or bfloat16)");

    validate_config(c, where);
    return c;
}

Config load_config(const std::string& path) {
    return config_from_json(read_file(path), path);
}

std::string config_to_json(const Config& c) {
    auto id_or_null = [](int64_t v) { return v < 0 ? J(nullptr) : J(v); };
    auto dim_or_null = [&](int64_t v) { return (!c.learned_g() && v == 0) ? J(nullptr) : J(v); };
    J j = J::object();
    j["architectures"] = J::array({"PldrllmForCausalLM"});
    j["model_type"] = "pldrllm";
    j["vocab_size"] = c.vocab_size;
    j["hidden_size"] = c.hidden_size;
    j["intermediate_size"] = c.intermediate_size;
    j["num_hidden_layers"] = c.num_layers;
    j["num_attention_heads"] = c.num_heads;
    j["head_dim"] = c.head_dim;
    j["hidden_act"] = c.hidden_act;
    j["max_position_embeddings"] = c.max_position;
    j["initializer_range"] = 0.02;
    j["layer_norm_eps"] = c.layer_norm_eps;
    j["use_cache"] = true;
    j["output_pldr_attentions"] = false;
    j["pad_token_id"] = id_or_null(c.pad_token_id);
    j["bos_token_id"] = id_or_null(c.bos_token_id);
    j["eos_token_id"] = id_or_null(c.eos_token_id);
    j["tie_word_embeddings"] = c.tie_word_embeddings;
    j["rope_theta"] = c.rope_theta;
    j["rope_scaling"] = nullptr;
    j["attention_bias"] = c.attention_bias;
    j["glu_bias"] = c.glu_bias;
    j["final_bias"] = c.final_bias;
    j["reference_rope"] = c.reference_rope;
    j["attention_dropout"] = 0.0;
    j["num_reslayerA"] = dim_or_null(c.num_reslayerA);
    j["num_denseA"] = dim_or_null(c.num_denseA);
    j["A_dff"] = dim_or_null(c.A_dff);
    j["custom_G_type"] = c.learned_g() ? J(nullptr) : J(g_type_name(c.g_type));
    j["cache_first_G"] = c.cache_first_G;
    j["dtype"] = c.dtype;
    return j.dump(2) + "\n";
}

void save_config(const Config& c, const std::string& path) {
    validate_config(c, path);
    write_file_atomic(path, config_to_json(c));
}

}  // namespace pldr
