// Model parameter loading (see model_load.h).
#include "io/model_load.h"

#include <algorithm>

#include "io/model_dir.h"
#include "io/param_names.h"

namespace pldr {

template <typename T>
void fill_params(Model<T>& m, const SafetensorsFile& f, const std::string& prefix) {
    for (const ParamEntry& e : m.layout.entries) {
        const std::string name = prefix + e.name;
        const TensorInfo* t = f.find(name);
        PLDR_REQUIRE(t, f.path(), ": missing tensor '", name, "'");
        PLDR_REQUIRE(t->shape == e.shape, f.path(), ": tensor '", name, "' has shape ",
                     shape_str(t->shape), " but config.json implies ", shape_str(e.shape));
        PLDR_REQUIRE(t->dtype != DType::BOOL, f.path(), ": tensor '", name, "' has dtype BOOL");
        convert_to<T>(t->dtype, f.raw(*t), e.numel, m.params.data() + e.offset);
    }
    if (!m.cfg.learned_g()) {
        const std::string name = prefix + "decoder.past_G_values";
        if (const TensorInfo* t = f.find(name)) {
            const Shape want = past_g_shape(m.cfg);
            PLDR_REQUIRE(t->shape == want, f.path(), ": tensor '", name, "' has shape ",
                         shape_str(t->shape), " but config.json implies ", shape_str(want));
            std::vector<T> all(static_cast<size_t>(shape_numel(want)));
            convert_to<T>(t->dtype, f.raw(*t), int64_t(all.size()), all.data());
            const int64_t per = m.cfg.num_heads * m.cfg.head_dim * m.cfg.head_dim;
            for (int64_t l = 0; l < m.cfg.num_layers; ++l)  // slot 2 of [L,3,1,H,D,D] is G
                std::copy(all.begin() + (l * 3 + 2) * per, all.begin() + (l * 3 + 3) * per,
                          m.G_fixed.begin() + l * per);
        } else {
            PLDR_REQUIRE(m.cfg.g_type == GType::IDENTITY, f.path(), ": missing tensor '", name,
                         "' (custom_G_type ", g_type_name(m.cfg.g_type), " needs it)");
        }
    }
}

template <typename T>
Model<T> load_model(const std::string& dir) {
    ModelFiles mf(dir);
    check_params_against_file(mf);
    Model<T> m(mf.config());
    for (const ParamEntry& e : m.layout.entries) {
        PLDR_CHECK(mf.info(e.name).shape == e.shape);  // check_params_against_file said so
        mf.read_into<T>(e.name, m.params.data() + e.offset);
    }
    if (!m.cfg.learned_g()) {
        Tensor<T> all = mf.read<T>("decoder.past_G_values");
        const int64_t per = m.cfg.num_heads * m.cfg.head_dim * m.cfg.head_dim;
        for (int64_t l = 0; l < m.cfg.num_layers; ++l)  // slot 2 of [L,3,1,H,D,D] is G
            std::copy(all.data.begin() + (l * 3 + 2) * per, all.data.begin() + (l * 3 + 3) * per,
                      m.G_fixed.begin() + l * per);
    }
    return m;
}

template <typename T>
void save_model(const Model<T>& m, const std::string& dir, DType dtype) {
    PLDR_REQUIRE(dtype == DType::F32 || dtype == DType::F64, "models are saved as F32 or F64 (got ",
                 dtype_name(dtype), ")");
    SafetensorsWriter w;
    for (const ParamEntry& e : m.layout.entries)
        w.add_as(e.name, dtype, e.shape, m.params.data() + e.offset);
    if (!m.cfg.learned_g()) {
        const Shape sh = past_g_shape(m.cfg);
        const int64_t per = m.cfg.num_heads * m.cfg.head_dim * m.cfg.head_dim;
        std::vector<T> all(static_cast<size_t>(shape_numel(sh)), T(0));
        for (int64_t l = 0; l < m.cfg.num_layers; ++l)
            std::copy(m.G_fixed.begin() + l * per, m.G_fixed.begin() + (l + 1) * per,
                      all.begin() + (l * 3 + 2) * per);
        w.add_as("decoder.past_G_values", dtype, sh, all.data());
        std::vector<uint8_t> status(static_cast<size_t>(m.cfg.num_layers), 1);
        w.add_raw("decoder.past_G_values_status", DType::BOOL, {m.cfg.num_layers}, status.data());
    }
    Config c = m.cfg;
    c.dtype = dtype == DType::F64 ? "float64" : "float32";
    save_model_dir(dir, c, w);
}

template Model<float> load_model<float>(const std::string&);
template Model<double> load_model<double>(const std::string&);
template void save_model<float>(const Model<float>&, const std::string&, DType);
template void save_model<double>(const Model<double>&, const std::string&, DType);
template void fill_params<float>(Model<float>&, const SafetensorsFile&, const std::string&);
template void fill_params<double>(Model<double>&, const SafetensorsFile&, const std::string&);

}  // namespace pldr
