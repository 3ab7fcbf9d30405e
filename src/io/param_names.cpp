// Expected checkpoint tensors (see param_names.h).
#include "io/param_names.h"

#include <functional>
#include <map>

#include "core/error.h"
#include "io/model_dir.h"

namespace pldr {

std::vector<ParamSpec> expected_params(const Config& c) {
    std::vector<ParamSpec> out;
    auto add = [&](const std::string& name, Shape s) {
        out.push_back({name, std::move(s), false});
    };
    auto linear = [&](const std::string& name, int64_t in, int64_t outd, bool bias) {
        add(name + ".weight", {outd, in});
        if (bias) add(name + ".bias", {outd});
    };
    auto layernorm = [&](const std::string& name, int64_t n) {
        add(name + ".weight", {n});
        add(name + ".bias", {n});
    };
    auto glu = [&](const std::string& name, int64_t io, int64_t hidden) {
        linear(name + ".gluw1", io, hidden, c.glu_bias);
        linear(name + ".gluw2", io, hidden, c.glu_bias);
        linear(name + ".gluw3", hidden, io, c.glu_bias);
    };
    const int64_t d = c.hidden_size, H = c.num_heads, dk = c.head_dim, V = c.vocab_size;
    const int64_t L = c.num_layers;

    add("decoder.embedding.weight", {V, d});
    if (!c.learned_g()) {
        out.push_back({"decoder.past_G_values", {L, 3, 1, H, dk, dk}, true});
        out.push_back({"decoder.past_G_values_status", {L}, true});
    }
    for (int64_t i = 0; i < L; ++i) {
        const std::string p = "decoder.dec_layers." + std::to_string(i) + ".";
        linear(p + "mha1.wq", d, d, c.attention_bias);
        linear(p + "mha1.wk", d, d, c.attention_bias);
        linear(p + "mha1.wv", d, d, c.attention_bias);
        if (c.learned_g())
            for (const char* w : {"Wlst", "blst", "pwlst", "alst", "balst"})
                add(p + "mha1.plgatt_layer." + w, {H, dk, dk});
        linear(p + "mha1.dense", d, d, c.attention_bias);
        if (c.learned_g()) {
            for (int64_t j = 0; j < c.num_reslayerA; ++j) {
                const std::string r = p + "mha1.reslayerAs." + std::to_string(j) + ".";
                for (int64_t n = 0; n < c.num_denseA; ++n)
                    glu(r + "denseAs." + std::to_string(n), dk, c.A_dff);
                layernorm(r + "layernormA", dk);
            }
            layernorm(p + "mha1.layernorm1", dk);
        }
        glu(p + "ffn", d, c.intermediate_size);
        layernorm(p + "layernorm1", d);
        layernorm(p + "layernorm2", d);
    }
    layernorm("decoder.layernorm1", d);
    if (!c.tie_word_embeddings) add("final_layer.weight", {V, d});
    if (c.final_bias) add("final_layer.bias", {V});
    return out;
}

int64_t count_params(const Config& c) {
    int64_t n = 0;
    for (const auto& p : expected_params(c))
        if (!p.buffer) n += shape_numel(p.shape);
    return n;
}

bool is_ignored_buffer(const std::string& name) {
    for (const char* suffix :
         {"rotary_embedding.theta", "rotary_embedding.cache", "rotary_embedding.inv_freq"}) {
        std::string s = suffix;
        if (name == s) return true;
        if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0 &&
            name[name.size() - s.size() - 1] == '.')
            return true;
    }
    return false;
}

namespace {

std::vector<std::string> problems_impl(
    const Config& c, const std::vector<const TensorInfo*>& tensors,
    const std::function<std::string(const std::string&)>& file_of,
    const std::string& missing_where) {
    std::map<std::string, const TensorInfo*> have;
    for (const TensorInfo* t : tensors) have[t->name] = t;
    std::vector<std::string> out;
    std::map<std::string, bool> expected;
    for (const ParamSpec& p : expected_params(c)) {
        expected[p.name] = true;
        auto it = have.find(p.name);
        if (it == have.end()) {
            out.push_back(cat(missing_where, ": missing tensor '", p.name, "'"));
            continue;
        }
        const TensorInfo& t = *it->second;
        if (t.shape != p.shape)
            out.push_back(cat(file_of(p.name), ": tensor '", p.name, "' has shape ",
                              shape_str(t.shape), " but config.json implies ", shape_str(p.shape)));
        if (p.name == "decoder.past_G_values_status") {
            if (dtype_is_float(t.dtype))
                out.push_back(cat(file_of(p.name), ": tensor '", p.name, "' has dtype ",
                                  dtype_name(t.dtype), " but a status flag is BOOL"));
        } else if (!dtype_is_float(t.dtype)) {
            out.push_back(cat(file_of(p.name), ": tensor '", p.name, "' has dtype ",
                              dtype_name(t.dtype), " but parameters are F32, F64, F16 or BF16"));
        }
    }
    for (const TensorInfo* t : tensors)
        if (!expected.count(t->name) && !is_ignored_buffer(t->name))
            out.push_back(cat(file_of(t->name), ": unexpected tensor '", t->name,
                              "' (not a parameter of this config; custom_G_type ",
                              g_type_name(c.g_type), ")"));
    return out;
}

}  // namespace

std::vector<std::string> param_problems(const Config& c, const std::vector<TensorInfo>& tensors,
                                        const std::string& where) {
    std::vector<const TensorInfo*> ptrs;
    for (const auto& t : tensors) ptrs.push_back(&t);
    return problems_impl(
        c, ptrs, [&](const std::string&) { return where; }, where);
}

std::vector<std::string> param_problems(const ModelFiles& mf) {
    std::vector<const TensorInfo*> ptrs;
    for (const auto& n : mf.names()) ptrs.push_back(&mf.info(n));
    return problems_impl(
        mf.config(), ptrs, [&](const std::string& n) { return mf.file_of(n); }, mf.weights_path());
}

void check_params_against_file(const ModelFiles& mf) {
    std::vector<std::string> p = param_problems(mf);
    if (p.empty()) return;
    if (p.size() == 1) throw Error(p[0]);
    fail(p[0], " (and ", p.size() - 1, " more problem", p.size() > 2 ? "s" : "", ")");
}

}  // namespace pldr
