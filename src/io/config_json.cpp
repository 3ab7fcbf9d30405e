// config.json <-> Config through one table of fields (see config_json.h).
#include "io/config_json.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/fs.h"
#include "io/json_util.h"

namespace pldr {

namespace {

using J = nlohmann::ordered_json;

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

// Typed access to one config.json object; every failure names `where` and the key.
struct Reader {
    const J& j;
    const std::string& where;

    bool present(const char* key) const { return j.contains(key) && !j[key].is_null(); }
    bool learned_g() const { return !present("custom_G_type"); }

    // Positive integer; `required` makes a missing or null key an error, else `def` is returned.
    // The upper bounds are validate_config's; this only keeps the value inside int64 products.
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
        if (v <= 0 || v > (int64_t(1) << 31))
            fail(where, ": key '", key, "' must be a positive integer (at most ", int64_t(1) << 31,
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

// "quantization": null or missing ⇒ none; else {"method": "q8_0", "block": 32} (block optional).
std::string quantization(const Reader& r) {
    if (!r.present("quantization")) return "";
    const J& q = r.j["quantization"];
    const char* form = " (expected {\"method\": \"q8_0\", \"block\": 32})";
    if (!q.is_object()) fail(r.where, ": key 'quantization' must be an object, got ", got(q), form);
    for (auto it = q.begin(); it != q.end(); ++it)
        if (it.key() != "method" && it.key() != "block")
            fail(r.where, ": key 'quantization' has an unknown field '", it.key(), "'", form);
    if (!q.contains("method") || !q["method"].is_string())
        fail(r.where, ": key 'quantization' needs a string 'method'", form);
    const std::string method = q["method"].get<std::string>();
    if (method != "q8_0")
        fail(r.where, ": key 'quantization' has method '", method,
             "', which pldr does not read (only q8_0)");
    int64_t block = 32;
    if (q.contains("block") && (!as_int(q["block"], &block) || block != 32))
        fail(r.where, ": key 'quantization' has block ", got(q["block"]),
             " but q8_0 blocks hold 32 weights");
    return method;
}

// One row of the table. `read` parses the key into c (missing/null ⇒ the default, from a
// default-constructed Config or derived in resolve()); `write` adds it to the object.
struct Field {
    ConfigFieldInfo info;
    void (*read)(const Reader&, Config&);
    void (*write)(const Config&, J&);
};

J id_or_null(int64_t v) {
    return v < 0 ? J(nullptr) : J(v);
}
J dim_or_null(const Config& c, int64_t v) {
    return (!c.learned_g() && v == 0) ? J(nullptr) : J(v);
}

// The first registered variant whose name is not `cur` (`cur` when there is no other).
std::string other_name(const std::vector<std::string>& names, const std::string& cur) {
    for (const std::string& n : names)
        if (cur != n) return n;
    return cur;
}

// A member compared and written as is.
#define PLDR_SAME(member) [](const Config& a, const Config& b) { return a.member == b.member; }

// The table, in the order of the shipped config.json files (the order config_to_json writes).
// size-limit: table
const std::vector<Field>& fields() {
    static const std::vector<Field> t = {
        {{"architectures", nullptr, nullptr},
         [](const Reader&, Config&) {},
         [](const Config&, J& j) { j["architectures"] = J::array({"PldrllmForCausalLM"}); }},
        {{"model_type", nullptr, nullptr},
         [](const Reader& r, Config&) {
             const std::string mt = r.string("model_type", "pldrllm");
             PLDR_REQUIRE(mt == "pldrllm", r.where, ": key 'model_type' is '", mt,
                          "', not a PLDR-LLM config (expected 'pldrllm')");
         },
         [](const Config&, J& j) { j["model_type"] = "pldrllm"; }},
        {{"vocab_size", PLDR_SAME(vocab_size), [](Config& c) { c.vocab_size += 7; }},
         [](const Reader& r, Config& c) { c.vocab_size = r.pos_int("vocab_size", true, 0); },
         [](const Config& c, J& j) { j["vocab_size"] = c.vocab_size; }},
        // hidden_size and intermediate_size: 0 until resolve() derives the default.
        {{"hidden_size", PLDR_SAME(hidden_size),
          [](Config& c) {
              c.num_heads *= 2;
              c.hidden_size = c.num_heads * c.head_dim;
          }},
         [](const Reader& r, Config& c) { c.hidden_size = r.pos_int("hidden_size", false, 0); },
         [](const Config& c, J& j) { j["hidden_size"] = c.hidden_size; }},
        {{"intermediate_size", PLDR_SAME(intermediate_size),
          [](Config& c) { c.intermediate_size += 5; }},
         [](const Reader& r, Config& c) {
             c.intermediate_size = r.pos_int("intermediate_size", false, 0);
         },
         [](const Config& c, J& j) { j["intermediate_size"] = c.intermediate_size; }},
        {{"num_hidden_layers", PLDR_SAME(num_layers), [](Config& c) { c.num_layers += 1; }},
         [](const Reader& r, Config& c) { c.num_layers = r.pos_int("num_hidden_layers", true, 0); },
         [](const Config& c, J& j) { j["num_hidden_layers"] = c.num_layers; }},
        {{"num_attention_heads", PLDR_SAME(num_heads),
          [](Config& c) {
              c.num_heads += 1;
              c.hidden_size = c.num_heads * c.head_dim;
          }},
         [](const Reader& r, Config& c) {
             c.num_heads = r.pos_int("num_attention_heads", true, 0);
         },
         [](const Config& c, J& j) { j["num_attention_heads"] = c.num_heads; }},
        {{"head_dim", PLDR_SAME(head_dim),
          [](Config& c) {
              c.head_dim += 2;
              c.hidden_size = c.num_heads * c.head_dim;
          }},
         [](const Reader& r, Config& c) {
             c.head_dim = r.pos_int("head_dim", true, 0);
             if (c.head_dim % 2 != 0)
                 fail(r.where, ": key 'head_dim' must be even (RoPE rotates pairs), got ",
                      c.head_dim);
         },
         [](const Config& c, J& j) { j["head_dim"] = c.head_dim; }},
        // hidden_act: only "silu" is valid, so there is no other value to vary to.
        {{"hidden_act", PLDR_SAME(hidden_act), nullptr},
         [](const Reader& r, Config& c) {
             c.hidden_act = r.string("hidden_act", Config{}.hidden_act);
         },
         [](const Config& c, J& j) { j["hidden_act"] = c.hidden_act; }},
        {{"max_position_embeddings", PLDR_SAME(max_position),
          [](Config& c) { c.max_position += 3; }},
         [](const Reader& r, Config& c) {
             c.max_position = r.pos_int("max_position_embeddings", false, Config{}.max_position);
         },
         [](const Config& c, J& j) { j["max_position_embeddings"] = c.max_position; }},
        {{"initializer_range", nullptr, nullptr},
         [](const Reader& r, Config&) { (void)r.number("initializer_range", 0.02); },
         [](const Config&, J& j) { j["initializer_range"] = 0.02; }},
        {{"layer_norm_eps", PLDR_SAME(layer_norm_eps), [](Config& c) { c.layer_norm_eps = 1e-5; }},
         [](const Reader& r, Config& c) {
             c.layer_norm_eps = r.number("layer_norm_eps", Config{}.layer_norm_eps);
         },
         [](const Config& c, J& j) { j["layer_norm_eps"] = c.layer_norm_eps; }},
        {{"use_cache", nullptr, nullptr},
         [](const Reader& r, Config&) { (void)r.boolean("use_cache", true); },
         [](const Config&, J& j) { j["use_cache"] = true; }},
        {{"output_pldr_attentions", nullptr, nullptr},
         [](const Reader& r, Config&) { (void)r.boolean("output_pldr_attentions", false); },
         [](const Config&, J& j) { j["output_pldr_attentions"] = false; }},
        {{"pad_token_id", PLDR_SAME(pad_token_id), [](Config& c) { c.pad_token_id = -1; }},
         [](const Reader& r, Config& c) {
             c.pad_token_id = r.token_id("pad_token_id", Config{}.pad_token_id);
         },
         [](const Config& c, J& j) { j["pad_token_id"] = id_or_null(c.pad_token_id); }},
        {{"bos_token_id", PLDR_SAME(bos_token_id), [](Config& c) { c.bos_token_id = 1; }},
         [](const Reader& r, Config& c) {
             c.bos_token_id = r.token_id("bos_token_id", Config{}.bos_token_id);
         },
         [](const Config& c, J& j) { j["bos_token_id"] = id_or_null(c.bos_token_id); }},
        {{"eos_token_id", PLDR_SAME(eos_token_id), [](Config& c) { c.eos_token_id = -1; }},
         [](const Reader& r, Config& c) {
             c.eos_token_id = r.token_id("eos_token_id", Config{}.eos_token_id);
         },
         [](const Config& c, J& j) { j["eos_token_id"] = id_or_null(c.eos_token_id); }},
        {{"tie_word_embeddings", PLDR_SAME(tie_word_embeddings),
          [](Config& c) { c.tie_word_embeddings = !c.tie_word_embeddings; }},
         [](const Reader& r, Config& c) {
             c.tie_word_embeddings = r.boolean("tie_word_embeddings", Config{}.tie_word_embeddings);
         },
         [](const Config& c, J& j) { j["tie_word_embeddings"] = c.tie_word_embeddings; }},
        {{"rope_theta", PLDR_SAME(rope_theta), [](Config& c) { c.rope_theta = 500000.0; }},
         [](const Reader& r, Config& c) {
             c.rope_theta = r.number("rope_theta", Config{}.rope_theta);
         },
         [](const Config& c, J& j) { j["rope_theta"] = c.rope_theta; }},
        {{"rope_scaling", nullptr, nullptr},
         [](const Reader& r, Config&) {
             // Checked against reference_rope in resolve().
             (void)r;
         },
         [](const Config&, J& j) { j["rope_scaling"] = nullptr; }},
        {{"attention_bias", PLDR_SAME(attention_bias),
          [](Config& c) { c.attention_bias = !c.attention_bias; }},
         [](const Reader& r, Config& c) {
             c.attention_bias = r.boolean("attention_bias", Config{}.attention_bias);
         },
         [](const Config& c, J& j) { j["attention_bias"] = c.attention_bias; }},
        {{"glu_bias", PLDR_SAME(glu_bias), [](Config& c) { c.glu_bias = !c.glu_bias; }},
         [](const Reader& r, Config& c) { c.glu_bias = r.boolean("glu_bias", Config{}.glu_bias); },
         [](const Config& c, J& j) { j["glu_bias"] = c.glu_bias; }},
        {{"final_bias", PLDR_SAME(final_bias), [](Config& c) { c.final_bias = !c.final_bias; }},
         [](const Reader& r, Config& c) {
             c.final_bias = r.boolean("final_bias", Config{}.final_bias);
         },
         [](const Config& c, J& j) { j["final_bias"] = c.final_bias; }},
        {{"reference_rope", PLDR_SAME(reference_rope),
          [](Config& c) { c.reference_rope = !c.reference_rope; }},
         [](const Reader& r, Config& c) {
             c.reference_rope = r.boolean("reference_rope", Config{}.reference_rope);
         },
         [](const Config& c, J& j) { j["reference_rope"] = c.reference_rope; }},
        {{"attention_dropout", nullptr, nullptr},
         [](const Reader& r, Config&) {
             const double dropout = r.number("attention_dropout", 0.0);
             if (dropout != 0.0)
                 fail(r.where, ": key 'attention_dropout' is ", dropout,
                      " but dropout is not implemented (only 0.0)");
         },
         [](const Config&, J& j) { j["attention_dropout"] = 0.0; }},
        {{"num_reslayerA", PLDR_SAME(num_reslayerA), [](Config& c) { c.num_reslayerA += 1; }},
         [](const Reader& r, Config& c) {
             c.num_reslayerA = r.pos_int("num_reslayerA", r.learned_g(), 0);
         },
         [](const Config& c, J& j) { j["num_reslayerA"] = dim_or_null(c, c.num_reslayerA); }},
        {{"num_denseA", PLDR_SAME(num_denseA), [](Config& c) { c.num_denseA += 1; }},
         [](const Reader& r, Config& c) {
             c.num_denseA = r.pos_int("num_denseA", r.learned_g(), 0);
         },
         [](const Config& c, J& j) { j["num_denseA"] = dim_or_null(c, c.num_denseA); }},
        {{"A_dff", PLDR_SAME(A_dff), [](Config& c) { c.A_dff += 4; }},
         [](const Reader& r, Config& c) { c.A_dff = r.pos_int("A_dff", r.learned_g(), 0); },
         [](const Config& c, J& j) { j["A_dff"] = dim_or_null(c, c.A_dff); }},
        {{"custom_G_type", PLDR_SAME(g_type), [](Config& c) { c.g_type = GType::RANDOM; }},
         [](const Reader& r, Config& c) {
             if (!r.present("custom_G_type")) {
                 c.g_type = GType::LEARNED;
                 return;
             }
             const std::string g = r.string("custom_G_type", "");
             for (const FixedGType& ft : fixed_g_types())
                 if (g == ft.name) {
                     c.g_type = ft.type;
                     return;
                 }
             std::string known = "null";
             const auto& types = fixed_g_types();
             for (size_t i = 0; i < types.size(); ++i)
                 known += (i + 1 == types.size() ? " or '" : ", '") + std::string(types[i].name) + "'";
             fail(r.where, ": key 'custom_G_type' is '", g, "' (expected ", known, ")");
         },
         [](const Config& c, J& j) {
             j["custom_G_type"] = c.learned_g() ? J(nullptr) : J(g_type_name(c.g_type));
         }},
        {{"cache_first_G", PLDR_SAME(cache_first_G),
          [](Config& c) { c.cache_first_G = !c.cache_first_G; }},
         [](const Reader& r, Config& c) {
             c.cache_first_G = r.boolean("cache_first_G", Config{}.cache_first_G);
         },
         [](const Config& c, J& j) { j["cache_first_G"] = c.cache_first_G; }},
        {{"dtype", PLDR_SAME(dtype), [](Config& c) { c.dtype = "bfloat16"; }},
         [](const Reader& r, Config& c) {
             // The older torch_dtype is read where dtype is absent.
             c.dtype = r.string(r.present("dtype") ? "dtype" : "torch_dtype", Config{}.dtype);
         },
         [](const Config& c, J& j) { j["dtype"] = c.dtype; }},
        // The PLGA variants (model/config.h, plga_*_names): read, checked and written by name, so a
        // registered variant cannot be dropped on save (tests: ConfigTable.EveryVariantRoundTrips).
        {{"plga_positive_map", PLDR_SAME(plga_positive_map),
          plga_positive_map_names().size() < 2
              ? nullptr
              : +[](Config& c) {
                    c.plga_positive_map = other_name(plga_positive_map_names(), c.plga_positive_map);
                }},
         [](const Reader& r, Config& c) {
             c.plga_positive_map = r.string("plga_positive_map", Config{}.plga_positive_map);
         },
         [](const Config& c, J& j) { j["plga_positive_map"] = c.plga_positive_map; }},
        {{"plga_coupling", PLDR_SAME(plga_coupling),
          plga_coupling_names().size() < 2
              ? nullptr
              : +[](Config& c) {
                    c.plga_coupling = other_name(plga_coupling_names(), c.plga_coupling);
                }},
         [](const Reader& r, Config& c) {
             c.plga_coupling = r.string("plga_coupling", Config{}.plga_coupling);
         },
         [](const Config& c, J& j) { j["plga_coupling"] = c.plga_coupling; }},
        // Weight quantization: written only for a quantized model (pldr convert --dtype q8).
        {{"quantization", PLDR_SAME(quantization), [](Config& c) { c.quantization = "q8_0"; }},
         [](const Reader& r, Config& c) { c.quantization = quantization(r); },
         [](const Config& c, J& j) {
             if (!c.quantization.empty())
                 j["quantization"] = {{"method", c.quantization}, {"block", 32}};
         }},
    };
    return t;
}

#undef PLDR_SAME

// The defaults that depend on other keys, and the checks across keys that name a key the
// validator does not see.
void resolve(const Reader& r, Config& c) {
    const int64_t d = c.num_heads * c.head_dim;
    if (c.hidden_size == 0) c.hidden_size = d;
    if (c.hidden_size != d)
        fail(r.where, ": key 'hidden_size' is ", c.hidden_size,
             " but num_attention_heads*head_dim = ", c.num_heads, "*", c.head_dim, " = ", d);
    if (c.intermediate_size == 0)
        c.intermediate_size = default_intermediate_size(c.num_heads, c.head_dim);
    if (r.present("rope_scaling") && !c.reference_rope)
        fail(r.where, ": key 'rope_scaling' is ", got(r.j["rope_scaling"]),
             " but RoPE scaling is not implemented (only null is supported when "
             "reference_rope is false)");
}

}  // namespace

const std::vector<ConfigFieldInfo>& config_fields() {
    static const std::vector<ConfigFieldInfo> t = [] {
        std::vector<ConfigFieldInfo> v;
        for (const auto& f : fields()) v.push_back(f.info);
        return v;
    }();
    return t;
}

Config config_from_json(const std::string& json_text, const std::string& where) {
    J j = parse_json_strict(json_text, where);
    if (!j.is_object()) fail(where, ": config.json must be a JSON object, got a ", j.type_name());
    const Reader r{j, where};
    Config c;
    for (const auto& f : fields()) f.read(r, c);
    resolve(r, c);
    validate_config(c, where);
    return c;
}

Config load_config(const std::string& path) {
    return config_from_json(read_file(path), path);
}

std::string config_to_json(const Config& c) {
    J j = J::object();
    for (const auto& f : fields()) f.write(c, j);
    return j.dump(2) + "\n";
}

void save_config(const Config& c, const std::string& path) {
    validate_config(c, path);
    write_file_atomic(path, config_to_json(c));
}

}  // namespace pldr
