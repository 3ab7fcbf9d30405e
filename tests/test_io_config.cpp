// config.json parsing, validation and writing (spec §9.2, §11.6).
#include <gtest/gtest.h>
#include <stdlib.h>
#include "error_util.h"
#include "golden_util.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "core/fs.h"
#include "io/config_json.h"
#include "model/layout.h"
#include "ops/plga_variants.h"

using namespace pldr;

namespace {

// Inline copies of golden configs (tests/golden/models/*/config.json).
const char* kTinyV510 = R"({
  "architectures": [
    "PldrllmForCausalLM"
  ],
  "model_type": "pldrllm",
  "vocab_size": 50,
  "hidden_size": 16,
  "intermediate_size": 42,
  "num_hidden_layers": 2,
  "num_attention_heads": 2,
  "head_dim": 8,
  "hidden_act": "silu",
  "max_position_embeddings": 64,
  "layer_norm_eps": 1e-06,
  "use_cache": true,
  "pad_token_id": 0,
  "bos_token_id": 2,
  "eos_token_id": 3,
  "tie_word_embeddings": false,
  "rope_theta": 10000.0,
  "rope_scaling": null,
  "attention_bias": true,
  "glu_bias": true,
  "final_bias": true,
  "reference_rope": true,
  "attention_dropout": 0.0,
  "num_reslayerA": 2,
  "num_denseA": 2,
  "A_dff": 12,
  "custom_G_type": null,
  "cache_first_G": false,
  "dtype": "float32"
})";

const char* kTinyExternalF64 = R"({
  "architectures": [
    "PldrllmForCausalLM"
  ],
  "model_type": "pldrllm",
  "vocab_size": 50,
  "hidden_size": 16,
  "intermediate_size": 42,
  "num_hidden_layers": 2,
  "num_attention_heads": 2,
  "head_dim": 8,
  "hidden_act": "silu",
  "max_position_embeddings": 64,
  "layer_norm_eps": 1e-06,
  "use_cache": true,
  "pad_token_id": 0,
  "bos_token_id": 2,
  "eos_token_id": 3,
  "tie_word_embeddings": false,
  "rope_theta": 10000.0,
  "rope_scaling": null,
  "attention_bias": true,
  "glu_bias": true,
  "final_bias": true,
  "reference_rope": true,
  "attention_dropout": 0.0,
  "num_reslayerA": 2,
  "num_denseA": 2,
  "A_dff": 12,
  "custom_G_type": "external",
  "cache_first_G": false,
  "dtype": "float64"
})";

const char* kEvalV510 = R"({
  "architectures": [
    "PldrllmForCausalLM"
  ],
  "model_type": "pldrllm",
  "vocab_size": 32000,
  "hidden_size": 32,
  "intermediate_size": 85,
  "num_hidden_layers": 2,
  "num_attention_heads": 2,
  "head_dim": 16,
  "hidden_act": "silu",
  "max_position_embeddings": 1024,
  "layer_norm_eps": 1e-06,
  "use_cache": true,
  "pad_token_id": 0,
  "bos_token_id": 2,
  "eos_token_id": 3,
  "tie_word_embeddings": false,
  "rope_theta": 10000.0,
  "rope_scaling": null,
  "attention_bias": true,
  "glu_bias": true,
  "final_bias": true,
  "reference_rope": true,
  "attention_dropout": 0.0,
  "num_reslayerA": 2,
  "num_denseA": 2,
  "A_dff": 24,
  "custom_G_type": null,
  "cache_first_G": false,
  "dtype": "float32"
})";

// kTinyV510 with one key replaced (value = JSON text) or removed (value = nullptr).
std::string tiny_with(const std::string& key, const char* value) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(kTinyV510);
    if (value)
        j[key] = nlohmann::ordered_json::parse(value);
    else
        j.erase(key);
    return j.dump();
}

Config parse(const std::string& text) {
    return config_from_json(text, "cfg.json");
}

// The keys of a shipped config.json, in their order (spec §9.2; auto_map and
// transformers_version are not written).
const std::vector<std::string> kHfKeys = {
    "architectures",
    "model_type",
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "head_dim",
    "hidden_act",
    "max_position_embeddings",
    "initializer_range",
    "layer_norm_eps",
    "use_cache",
    "output_pldr_attentions",
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
    "tie_word_embeddings",
    "rope_theta",
    "rope_scaling",
    "attention_bias",
    "glu_bias",
    "final_bias",
    "reference_rope",
    "attention_dropout",
    "num_reslayerA",
    "num_denseA",
    "A_dff",
    "custom_G_type",
    "cache_first_G",
    "dtype",
    "plga_positive_map",
    "plga_coupling",
};

// Every field of the config table compares equal (the table's own comparison: a field added
// to the table is compared here with no change to this test).
void expect_same(const Config& a, const Config& b) {
    for (const auto& f : config_fields())
        if (f.same) {
            EXPECT_TRUE(f.same(a, b)) << "config field " << f.key;
        }
}

}  // namespace

TEST(ConfigJson, ParsesGoldenTiny) {
    Config c = parse(kTinyV510);
    EXPECT_EQ(c.vocab_size, 50);
    EXPECT_EQ(c.hidden_size, 16);
    EXPECT_EQ(c.intermediate_size, 42);
    EXPECT_EQ(c.num_layers, 2);
    EXPECT_EQ(c.num_heads, 2);
    EXPECT_EQ(c.head_dim, 8);
    EXPECT_EQ(c.max_position, 64);
    EXPECT_EQ(c.layer_norm_eps, 1e-6);
    EXPECT_EQ(c.rope_theta, 10000.0);
    EXPECT_TRUE(c.reference_rope);
    EXPECT_EQ(c.num_reslayerA, 2);
    EXPECT_EQ(c.num_denseA, 2);
    EXPECT_EQ(c.A_dff, 12);
    EXPECT_EQ(c.g_type, GType::LEARNED);
    EXPECT_TRUE(c.learned_g());
    EXPECT_EQ(c.pad_token_id, 0);
    EXPECT_EQ(c.bos_token_id, 2);
    EXPECT_EQ(c.eos_token_id, 3);
    EXPECT_EQ(c.dtype, "float32");
}

TEST(ConfigJson, ParsesGoldenExternalAndEval) {
    Config c = parse(kTinyExternalF64);
    EXPECT_EQ(c.g_type, GType::EXTERNAL);
    EXPECT_FALSE(c.learned_g());
    EXPECT_EQ(c.dtype, "float64");
    EXPECT_EQ(c.A_dff, 12);  // given, kept even though unused
    Config e = parse(kEvalV510);
    EXPECT_EQ(e.vocab_size, 32000);
    EXPECT_EQ(e.hidden_size, 32);
    EXPECT_EQ(e.intermediate_size, 85);
    EXPECT_EQ(e.head_dim, 16);
    EXPECT_EQ(e.max_position, 1024);
    EXPECT_EQ(e.A_dff, 24);
}

// Every config.json of the golden set (all its model directories).
TEST(ConfigJson, ParsesEveryGoldenConfig) {
    GOLDEN_USE(golden::set().model_dirs, "model directory");
    for (const auto& d : golden::set().model_dirs) {
        const std::string p = golden::dir() + "/" + d + "/config.json";
        Config c = load_config(p);
        EXPECT_EQ(c.hidden_size, c.num_heads * c.head_dim) << p;
        expect_same(c, config_from_json(config_to_json(c), "round trip"));
    }
}

TEST(ConfigJson, DefaultsForMissingOptionalKeys) {
    Config c = parse(R"({"vocab_size": 32000, "num_hidden_layers": 5, "num_attention_heads": 14,
                         "head_dim": 64, "A_dff": 170, "num_reslayerA": 8, "num_denseA": 2})");
    Config def;
    EXPECT_EQ(c.hidden_size, 896);
    EXPECT_EQ(c.intermediate_size, 2389);  // floor(896*8/3)
    EXPECT_EQ(c.max_position, def.max_position);
    EXPECT_EQ(c.layer_norm_eps, 1e-6);
    EXPECT_EQ(c.rope_theta, 10000.0);
    EXPECT_TRUE(c.reference_rope);
    EXPECT_TRUE(c.attention_bias);
    EXPECT_TRUE(c.glu_bias);
    EXPECT_TRUE(c.final_bias);
    EXPECT_FALSE(c.tie_word_embeddings);
    EXPECT_FALSE(c.cache_first_G);
    EXPECT_EQ(c.g_type, GType::LEARNED);
    EXPECT_EQ(c.pad_token_id, 0);
    EXPECT_EQ(c.bos_token_id, 2);
    EXPECT_EQ(c.eos_token_id, 3);
    EXPECT_EQ(c.hidden_act, "silu");
    EXPECT_EQ(c.dtype, "float32");
}

TEST(ConfigJson, NullSizesAreDerived) {
    Config c = parse(tiny_with("hidden_size", "null"));
    EXPECT_EQ(c.hidden_size, 16);
    c = parse(tiny_with("intermediate_size", "null"));
    EXPECT_EQ(c.intermediate_size, 42);  // floor(16*8/3) = floor(42.67)
    c = parse(tiny_with("intermediate_size", nullptr));
    EXPECT_EQ(c.intermediate_size, 42);
    EXPECT_EQ(default_intermediate_size(14, 64), 2389);
    EXPECT_EQ(default_intermediate_size(2, 16), 85);
    EXPECT_EQ(default_intermediate_size(4, 16), 170);
    EXPECT_EQ(default_intermediate_size(1, 6), 16);  // 48/3 exactly
}

TEST(ConfigJson, OtherOptionalForms) {
    Config c = parse(tiny_with("pad_token_id", "null"));
    EXPECT_EQ(c.pad_token_id, -1);
    c = parse(tiny_with("rope_theta", "500000"));  // an integer is a number
    EXPECT_EQ(c.rope_theta, 500000.0);
    c = parse(tiny_with("rope_scaling", R"({"rope_type": "linear", "factor": 2.0})"));
    EXPECT_TRUE(c.reference_rope);  // ignored on the reference path
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(kTinyV510);
    j.erase("dtype");
    j["torch_dtype"] = "bfloat16";
    EXPECT_EQ(parse(j.dump()).dtype, "bfloat16");
    // Fixed G: the metric-learner sizes may be missing or null.
    j = nlohmann::ordered_json::parse(kTinyExternalF64);
    j.erase("A_dff");
    j["num_reslayerA"] = nullptr;
    j["custom_G_type"] = "identity";
    c = parse(j.dump());
    EXPECT_EQ(c.g_type, GType::IDENTITY);
    EXPECT_EQ(c.A_dff, 0);
    EXPECT_EQ(c.num_reslayerA, 0);
    EXPECT_EQ(c.num_denseA, 2);
    j["custom_G_type"] = "random";
    EXPECT_EQ(parse(j.dump()).g_type, GType::RANDOM);
    // Unknown keys are ignored.
    c = parse(tiny_with("transformers_version", R"("4.56.1")"));
    EXPECT_EQ(c.vocab_size, 50);
}

TEST(ConfigJson, RoundTrip) {
    Config c = parse(kTinyV510);
    expect_same(c, parse(config_to_json(c)));
    Config x = parse(kTinyExternalF64);
    expect_same(x, parse(config_to_json(x)));

    Config odd;
    odd.vocab_size = 97;
    odd.num_heads = 3;
    odd.head_dim = 6;
    odd.hidden_size = 18;
    odd.intermediate_size = 7;
    odd.num_layers = 4;
    odd.max_position = 33;
    odd.layer_norm_eps = 1.5e-5;
    odd.rope_theta = 12345.5;
    odd.reference_rope = false;
    odd.attention_bias = false;
    odd.glu_bias = false;
    odd.final_bias = false;
    odd.tie_word_embeddings = true;
    odd.num_reslayerA = 0;
    odd.num_denseA = 0;
    odd.A_dff = 0;
    odd.g_type = GType::RANDOM;
    odd.cache_first_G = true;
    odd.pad_token_id = -1;
    odd.bos_token_id = 96;
    odd.eos_token_id = 5;
    odd.dtype = "float64";
    std::string text = config_to_json(odd);
    expect_same(odd, parse(text));
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(text);
    EXPECT_TRUE(j["A_dff"].is_null());
    EXPECT_TRUE(j["pad_token_id"].is_null());
    EXPECT_EQ(j["custom_G_type"], "random");
}

TEST(ConfigJson, WritesHfStyleKeys) {
    std::string text = config_to_json(parse(kTinyV510));
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(text);
    std::vector<std::string> keys;
    for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());

    EXPECT_EQ(keys, kHfKeys);
    EXPECT_EQ(j["architectures"], nlohmann::ordered_json::array({"PldrllmForCausalLM"}));
    EXPECT_EQ(j["model_type"], "pldrllm");
    EXPECT_TRUE(j["custom_G_type"].is_null());
    EXPECT_TRUE(j["rope_scaling"].is_null());
    EXPECT_EQ(j["dtype"], "float32");
    // Python-compatible number text, 2-space indent.
    EXPECT_NE(text.find("\n  \"layer_norm_eps\": 1e-06,\n"), std::string::npos) << text;
    EXPECT_NE(text.find("\n  \"rope_theta\": 10000.0,\n"), std::string::npos) << text;
    EXPECT_NE(text.find("\n  \"custom_G_type\": null,\n"), std::string::npos) << text;
    EXPECT_NE(config_to_json(parse(kTinyExternalF64)).find("\"custom_G_type\": \"external\""),
              std::string::npos);
}

TEST(ConfigJson, SaveAndLoadFile) {
    std::string base = testing::TempDir();
    if (base.empty() || base.back() != '/') base += '/';
    std::string templ = base + "pldr_io_cfg_XXXXXX";
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    const std::string p = templ + "/config.json";
    Config c = parse(kEvalV510);
    save_config(c, p);
    expect_same(c, load_config(p));
    EXPECT_EQ(read_file(p), config_to_json(c));
    Config bad = c;
    bad.hidden_size = 33;
    EXPECT_ERROR_HAS(save_config(bad, templ + "/bad.json"),
                     templ + "/bad.json: key 'hidden_size' is 33 but num_attention_heads*head_dim");
    EXPECT_FALSE(file_exists(templ + "/bad.json"));
    EXPECT_ERROR_HAS(load_config(templ + "/missing.json"),
                     "cannot open " + templ + "/missing.json");
    std::filesystem::remove_all(templ);
}

TEST(ConfigJson, RejectsMalformed) {
    EXPECT_ERROR_HAS(parse("{\"vocab_size\": 50,"), "cfg.json: malformed JSON");
    EXPECT_ERROR_HAS(parse(""), "cfg.json: malformed JSON");
    EXPECT_ERROR_HAS(parse("[1, 2]"), "cfg.json: config.json must be a JSON object, got a array");
    EXPECT_ERROR_HAS(parse(R"({"vocab_size": 50, "vocab_size": 51})"),
                     "cfg.json: duplicate key 'vocab_size'");
}

TEST(ConfigJson, RejectsMissingRequiredKeys) {
    for (const char* k : {"vocab_size", "num_hidden_layers", "num_attention_heads", "head_dim",
                          "A_dff", "num_reslayerA", "num_denseA"}) {
        EXPECT_ERROR_HAS(parse(tiny_with(k, nullptr)),
                         std::string("cfg.json: key '") + k + "' is missing");
        EXPECT_ERROR_HAS(parse(tiny_with(k, "null")), std::string("key '") + k + "' is null");
    }
}

TEST(ConfigJson, RejectsWrongTypesAndValues) {
    EXPECT_ERROR_HAS(parse(tiny_with("vocab_size", R"("50")")),
                     "cfg.json: key 'vocab_size' must be a positive integer, got string \"50\"");
    EXPECT_ERROR_HAS(parse(tiny_with("vocab_size", "50.0")),
                     "key 'vocab_size' must be a positive integer, got number 50.0");
    EXPECT_ERROR_HAS(parse(tiny_with("vocab_size", "true")),
                     "key 'vocab_size' must be a positive integer, got boolean");
    EXPECT_ERROR_HAS(parse(tiny_with("vocab_size", "0")),
                     "key 'vocab_size' must be a positive integer");
    EXPECT_ERROR_HAS(parse(tiny_with("num_hidden_layers", "-2")),
                     "key 'num_hidden_layers' must be a positive integer");
    EXPECT_ERROR_HAS(parse(tiny_with("num_attention_heads", "[2]")),
                     "key 'num_attention_heads' must be a positive integer, got array");
    EXPECT_ERROR_HAS(parse(tiny_with("A_dff", "0")), "key 'A_dff' must be a positive integer");
    EXPECT_ERROR_HAS(parse(tiny_with("num_denseA", "1.5")), "key 'num_denseA'");
    EXPECT_ERROR_HAS(parse(tiny_with("intermediate_size", "0")), "key 'intermediate_size'");
    EXPECT_ERROR_HAS(parse(tiny_with("max_position_embeddings", "0")),
                     "key 'max_position_embeddings' must be a positive integer");
    EXPECT_ERROR_HAS(parse(tiny_with("vocab_size", "99999999999999999999")), "key 'vocab_size'");
    EXPECT_ERROR_HAS(parse(tiny_with("head_dim", "7")), "key 'head_dim' must be even");
    EXPECT_ERROR_HAS(parse(tiny_with("hidden_size", "17")),
                     "key 'hidden_size' is 17 but num_attention_heads*head_dim = 2*8 = 16");
    EXPECT_ERROR_HAS(
        parse(tiny_with("custom_G_type", R"("learned")")),
        "key 'custom_G_type' is 'learned' (expected null, 'identity', 'random' or 'external')");
    EXPECT_ERROR_HAS(parse(tiny_with("custom_G_type", "1")),
                     "key 'custom_G_type' must be a string");
    EXPECT_ERROR_HAS(parse(tiny_with("hidden_act", R"("gelu")")),
                     "key 'hidden_act' is 'gelu' but only 'silu' is implemented");
    EXPECT_ERROR_HAS(parse(tiny_with("layer_norm_eps", "0")), "key 'layer_norm_eps' must be > 0");
    EXPECT_ERROR_HAS(parse(tiny_with("layer_norm_eps", "-1e-6")),
                     "key 'layer_norm_eps' must be > 0");
    EXPECT_ERROR_HAS(parse(tiny_with("layer_norm_eps", R"("1e-6")")),
                     "key 'layer_norm_eps' must be a number");
    EXPECT_ERROR_HAS(parse(tiny_with("rope_theta", "0")), "key 'rope_theta' must be > 0");
    EXPECT_ERROR_HAS(parse(tiny_with("reference_rope", "1")),
                     "key 'reference_rope' must be true or false");
    EXPECT_ERROR_HAS(parse(tiny_with("glu_bias", R"("yes")")),
                     "key 'glu_bias' must be true or false");
    EXPECT_ERROR_HAS(parse(tiny_with("attention_dropout", "0.1")),
                     "key 'attention_dropout' is 0.1");
    EXPECT_ERROR_HAS(parse(tiny_with("model_type", R"("llama")")), "key 'model_type' is 'llama'");
    EXPECT_ERROR_HAS(parse(tiny_with("dtype", R"("int8")")), "key 'dtype' is 'int8'");
    EXPECT_ERROR_HAS(parse(tiny_with("eos_token_id", "50")),
                     "key 'eos_token_id' is 50, outside the vocabulary [0,50)");
    EXPECT_ERROR_HAS(parse(tiny_with("bos_token_id", "-3")),
                     "key 'bos_token_id' must be a non-negative integer or null");
    EXPECT_ERROR_HAS(parse(tiny_with("bos_token_id", "[2, 3]")), "key 'bos_token_id'");
}

TEST(ConfigJson, RopeScalingNeedsReferenceRope) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(kTinyV510);
    j["reference_rope"] = false;
    EXPECT_FALSE(parse(j.dump()).reference_rope);  // null scaling is fine on the halves path
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
    EXPECT_ERROR_HAS(parse(j.dump()), "key 'rope_scaling' is object");
    EXPECT_ERROR_HAS(parse(j.dump()), "not implemented");
}

TEST(ConfigJson, ValidateConfigInCode) {
    Config c = parse(kTinyV510);
    validate_config(c, "x");
    Config b = c;
    b.head_dim = 5;
    b.hidden_size = 10;
    EXPECT_ERROR_HAS(validate_config(b, "x"), "x: key 'head_dim' must be even");
    b = c;
    b.hidden_act = "relu";
    EXPECT_ERROR_HAS(validate_config(b, "x"), "key 'hidden_act' is 'relu'");
    b = c;
    b.A_dff = 0;
    EXPECT_ERROR_HAS(validate_config(b, "x"), "key 'A_dff' must be a positive integer");
    b.g_type = GType::EXTERNAL;  // unused with a fixed G
    validate_config(b, "x");
}

namespace {

// Every field of the config table survives write → read with a non-default value, and no
// other field moves: a key that config_to_json forgot, or that config_from_json reads into the
// wrong member, fails here.
TEST(ConfigTable, EveryFieldRoundTrips) {
    const Config base = parse(kTinyV510);
    int varied = 0;
    for (const auto& f : config_fields()) {
        if (!f.vary) continue;
        Config c = base;
        f.vary(c);
        ASSERT_NO_THROW(validate_config(c, f.key)) << f.key << ": vary() must stay valid";
        EXPECT_FALSE(f.same(c, base)) << f.key << ": vary() must change the field";
        const std::string text = config_to_json(c);
        EXPECT_NE(text.find(std::string("\"") + f.key + "\""), std::string::npos) << f.key;
        const Config back = config_from_json(text, f.key);
        expect_same(c, back);
        EXPECT_FALSE(f.same(back, base)) << f.key << " was dropped on the way";
        ++varied;
    }
    // The table is the whole key set of a shipped config.json, in its order (a Config member
    // without a row would never reach config.json), then "quantization", which only a quantized
    // model's config.json has (WritesHfStyleKeys: an unquantized one is exactly kHfKeys).
    std::vector<std::string> keys;
    for (const auto& f : config_fields()) keys.push_back(f.key);
    std::vector<std::string> want = kHfKeys;
    want.push_back("quantization");
    EXPECT_EQ(keys, want);
    EXPECT_GE(varied, 22);
}

// Every registered PLGA variant survives save → load, whatever its name: a variant that
// config_to_json dropped, or that config_from_json read back as another, fails here.
TEST(ConfigTable, EveryVariantRoundTrips) {
    const Config base = parse(kTinyV510);
    EXPECT_EQ(base.plga_positive_map, positive_maps().front()->name);  // absent ⇒ the default
    EXPECT_EQ(base.plga_coupling, couplings().front()->name);
    int n = 0;
    for (const PositiveMap* pm : positive_maps())
        for (const Coupling* cp : couplings()) {
            Config c = base;
            c.plga_positive_map = pm->name;
            c.plga_coupling = cp->name;
            const Config back = config_from_json(config_to_json(c), pm->name);
            EXPECT_EQ(back.plga_positive_map, pm->name);
            EXPECT_EQ(back.plga_coupling, cp->name);
            expect_same(c, back);
            ++n;
        }
    EXPECT_EQ(n, int(positive_maps().size() * couplings().size()));
    for (const FixedGType& t : fixed_g_types()) {
        Config c = base;
        c.g_type = t.type;
        EXPECT_EQ(config_from_json(config_to_json(c), t.name).g_type, t.type) << t.name;
    }
    // An unknown name is refused with the key and the registered names.
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(kTinyV510);
    j["plga_positive_map"] = "relu";
    EXPECT_ERROR_HAS(parse(j.dump()), "key 'plga_positive_map' is 'relu' (expected 'iswiglu'");
    j = nlohmann::ordered_json::parse(kTinyV510);
    j["plga_coupling"] = 3;
    EXPECT_ERROR_HAS(parse(j.dump()), "key 'plga_coupling' must be a string");
}

// Null and absent token ids behave as the spec says: null = no such token (-1, written back as
// null), absent = the §9.2 default. A model with a null pad id loads.
TEST(ConfigTable, NullAndAbsentTokenIds) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(kTinyV510);
    j["pad_token_id"] = nullptr;
    j["bos_token_id"] = nullptr;
    j.erase("eos_token_id");
    const Config c = parse(j.dump());
    EXPECT_EQ(c.pad_token_id, -1);
    EXPECT_EQ(c.bos_token_id, -1);
    EXPECT_EQ(c.eos_token_id, Config{}.eos_token_id);
    const auto back = nlohmann::json::parse(config_to_json(c));
    EXPECT_TRUE(back["pad_token_id"].is_null());
    EXPECT_TRUE(back["bos_token_id"].is_null());
    EXPECT_EQ(back["eos_token_id"], 3);
    EXPECT_NO_THROW(pldr::make_layout(c));
}

// The limits are checked before anything is allocated, with the key in the message.
TEST(ConfigTable, SizeLimits) {
    for (const auto& [key, value] :
         std::vector<std::pair<std::string, int64_t>>{{"num_hidden_layers", 100000},
                                                      {"num_reslayerA", 2147483647},
                                                      {"num_denseA", 5000},
                                                      {"vocab_size", int64_t(1) << 30},
                                                      {"max_position_embeddings", int64_t(1) << 30},
                                                      {"A_dff", int64_t(1) << 20}}) {
        nlohmann::ordered_json j = nlohmann::ordered_json::parse(kTinyV510);
        j[key] = value;
        EXPECT_ERROR_HAS(parse(j.dump()), "key '" + key + "' must be a positive integer");
    }
}

}  // namespace
