// Weight initialisation (see init.h).
#include "model/init.h"

#include <cmath>
#include <string>

#include "core/rng.h"

namespace pldr {

namespace {

bool ends_with(const std::string& s, const std::string& suf) {
    return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

}  // namespace

template <typename T>
void init_weights(Model<T>& m, uint64_t seed, InitLaw law) {
    Rng rng(seed);
    const Config& c = m.cfg;
    const int64_t H = c.num_heads, D = c.head_dim;
    for (const ParamEntry& e : m.layout.entries) {
        T* p = m.params.data() + e.offset;
        const std::string& n = e.name;
        auto fill_uniform = [&](double bound) {
            for (int64_t i = 0; i < e.numel; ++i) p[i] = T(rng.uniform(-bound, bound));
        };
        auto fill_normal = [&](double stdv) {
            for (int64_t i = 0; i < e.numel; ++i) p[i] = T(stdv * rng.normal());
        };
        const bool plga_wpa =
            ends_with(n, ".Wlst") || ends_with(n, ".pwlst") || ends_with(n, ".alst");
        if (n == "decoder.embedding.weight") {
            fill_normal(1.0);
        } else if (plga_wpa) {
            // PyTorch 3-D fan rule on [H, D, D]: fan_in = D·D, fan_out = H·D.
            const double fi = double(D * D), fo = double(H * D);
            if (law == InitLaw::REFERENCE)
                fill_normal(std::sqrt(2.0 / (fi + fo)));
            else
                fill_uniform(std::sqrt(6.0 / (fi + fo)));
        } else if (ends_with(n, ".blst") || ends_with(n, ".balst")) {
            // zeros (already)
        } else if (e.shape.size() == 2) {  // Linear weight [out, in]
            const double fo = double(e.shape[0]), fi = double(e.shape[1]);
            if (law == InitLaw::REFERENCE && ends_with(n, ".wv.weight"))
                fill_uniform(1.0 / std::sqrt(fi));  // reference bug: PyTorch default init
            else
                fill_uniform(std::sqrt(6.0 / (fi + fo)));
        } else if (ends_with(n, ".weight")) {  // LayerNorm γ
            for (int64_t i = 0; i < e.numel; ++i) p[i] = T(1);
        } else if (law == InitLaw::REFERENCE && ends_with(n, ".wv.bias")) {
            const int64_t fi = c.hidden_size;
            fill_uniform(1.0 / std::sqrt(double(fi)));
        }
        // remaining biases (Linear and LayerNorm β) stay zero
    }
}

template void init_weights<float>(Model<float>&, uint64_t, InitLaw);
template void init_weights<double>(Model<double>&, uint64_t, InitLaw);

}  // namespace pldr
