// Expected checkpoint tensors (see param_names.h).
#include "io/param_names.h"

#include <cstdio>
#include <functional>
#include <map>

#include "core/error.h"
#include "io/model_dir.h"
#include "model/layout.h"
#include "model/packed.h"

namespace pldr {

std::vector<ParamSpec> expected_params(const Config& c) {
    // The trained tensors are the model layout (model/layout.cpp, the single source of the
    // parameter list); a fixed G adds its two persistent buffers after the embedding.
    const Layout layout = make_layout(c);
    std::vector<ParamSpec> out;
    for (const ParamEntry& e : layout.entries) {
        out.push_back({e.name, e.shape, false});
        if (e.name == "decoder.embedding.weight" && !c.learned_g()) {
            out.push_back({"decoder.past_G_values", past_g_shape(c), true});
            out.push_back({"decoder.past_G_values_status", {c.num_layers}, true});
        }
    }
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

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() &&
           s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool is_q8_name(const std::string& n) {
    return ends_with(n, ".q8") || ends_with(n, ".q8_scale");
}

std::vector<std::string> problems_impl(
    const Config& c, const std::vector<const TensorInfo*>& tensors,
    const std::function<std::string(const std::string&)>& file_of,
    const std::string& missing_where) {
    std::map<std::string, const TensorInfo*> have;
    for (const TensorInfo* t : tensors) have[t->name] = t;
    std::vector<std::string> out;
    if (c.quantization.empty())
        for (const TensorInfo* t : tensors)
            if (is_q8_name(t->name))
                return {cat(file_of(t->name), ": tensor '", t->name,
                            "' holds q8_0 data but config.json has no \"quantization\" entry")};
    std::map<std::string, bool> expected;
    for (const ParamSpec& p : expected_params(c)) {
        expected[p.name] = true;
        if (!c.quantization.empty() && is_packable(c, p.name)) {
            // q8_0: NAME.q8 (I8, the parameter's shape) and NAME.q8_scale (F32 or F16,
            // [O, ceil(I/32)]) in place of NAME.
            const std::string qn = p.name + ".q8", sn = p.name + ".q8_scale";
            expected[qn] = expected[sn] = true;
            if (have.count(p.name))
                out.push_back(cat(file_of(p.name), ": tensor '", p.name,
                                  "' is stored both as float and as q8_0 (", qn, ")"));
            auto q = have.find(qn), sc = have.find(sn);
            if (q == have.end()) {
                out.push_back(cat(missing_where, ": missing tensor '", qn, "' (q8_0 values of ",
                                  p.name, ")"));
            } else {
                if (q->second->shape != p.shape)
                    out.push_back(cat(file_of(qn), ": tensor '", qn, "' has shape ",
                                      shape_str(q->second->shape), " but config.json implies ",
                                      shape_str(p.shape)));
                if (q->second->dtype != DType::I8)
                    out.push_back(cat(file_of(qn), ": tensor '", qn, "' has dtype ",
                                      dtype_name(q->second->dtype), " but q8_0 values are I8"));
            }
            const Shape want{p.shape[0], q8_blocks(p.shape[1])};
            if (sc == have.end()) {
                out.push_back(cat(missing_where, ": missing tensor '", sn, "' (q8_0 scales of ",
                                  p.name, ")"));
            } else {
                if (sc->second->shape != want)
                    out.push_back(cat(file_of(sn), ": tensor '", sn, "' has shape ",
                                      shape_str(sc->second->shape), " but config.json implies ",
                                      shape_str(want), " (one scale per block of 32 inputs)"));
                if (sc->second->dtype != DType::F32 && sc->second->dtype != DType::F16)
                    out.push_back(cat(file_of(sn), ": tensor '", sn, "' has dtype ",
                                      dtype_name(sc->second->dtype),
                                      " but q8_0 scales are F32 or F16"));
            }
            continue;
        }
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

double expected_tensor_count(const Config& c) {
    // The count is affine in the layer count L and, per layer, in the residual units R and
    // their dense layers N: probe small configs (cheap layouts) and extrapolate, so that a
    // config claiming 2^31 layers is never expanded into names.
    auto n = [&](int64_t L, int64_t R, int64_t N) {
        Config p = c;
        p.num_layers = L;
        if (c.learned_g()) {
            p.num_reslayerA = R;
            p.num_denseA = N;
        }
        return double(expected_params(p).size());
    };
    auto per_layer = [&](int64_t R, int64_t N) { return n(2, R, N) - n(1, R, N); };
    const double q11 = per_layer(1, 1), q12 = per_layer(1, 2);
    const double s1 = per_layer(2, 1) - q11, s2 = per_layer(2, 2) - q12;
    const double R = c.learned_g() ? double(c.num_reslayerA) : 1.0;
    const double N = c.learned_g() ? double(c.num_denseA) : 1.0;
    const double q = q11 + (N - 1) * (q12 - q11) + (R - 1) * (s1 + (N - 1) * (s2 - s1));
    return n(1, 1, 1) - q11 + double(c.num_layers) * q;
}

std::vector<std::string> param_problems(const ModelFiles& mf) {
    const std::vector<std::string> names = mf.names();
    const Config& c = mf.config();
    // Before any per-tensor work: a config that implies more tensors than the file holds is
    // reported from the counts alone (the name lists would be as large as the config claims).
    const double want = expected_tensor_count(c);
    if (want > double(names.size())) {
        char n[64];
        std::snprintf(n, sizeof n, "%.0f", want);
        return {cat(mf.weights_path(), ": config.json implies ", n, " tensors (num_hidden_layers ",
                    c.num_layers, ", num_reslayerA ", c.num_reslayerA, ", num_denseA ",
                    c.num_denseA, ") but the file holds ", names.size())};
    }
    std::vector<const TensorInfo*> ptrs;
    for (const auto& nm : names) ptrs.push_back(&mf.info(nm));
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

namespace pldr {

std::string param_group(const std::string& n) {
    auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
    if (has("past_G_values")) return "buffer";
    if (n == "decoder.embedding.weight") return "embedding";
    if (n.rfind("final_layer.", 0) == 0) return "head";
    if (has(".plgatt_layer.")) return "plga operator";
    if (has(".reslayerAs.") || has(".mha1.layernorm1.")) return "metric learner";
    if (has(".mha1.")) return "attention";
    if (has(".ffn.")) return "ffn";
    return "layernorm";
}

}  // namespace pldr
