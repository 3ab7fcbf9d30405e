// Model parameter loading (see model_load.h).
#include "io/model_load.h"

#include <algorithm>

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

template void fill_params<float>(Model<float>&, const SafetensorsFile&, const std::string&);
template void fill_params<double>(Model<double>&, const SafetensorsFile&, const std::string&);

}  // namespace pldr
