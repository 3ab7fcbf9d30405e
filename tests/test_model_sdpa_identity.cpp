// PLGA contains SDPA exactly at G_LM = I (spec §7, Thm 5.4(i)): the fixed-G model with G = I
// equals an independent plain SDPA decoder, on random weights and inputs, for several shapes.
#include <gtest/gtest.h>

#include "core/rng.h"
#include "model/forward.h"
#include "model/init.h"

namespace {

struct Shape6 {
    int64_t L, H, D, V, B, S;
};

pldr::Config fixed_g_config(const Shape6& s) {
    pldr::Config c;
    c.num_layers = s.L;
    c.num_heads = s.H;
    c.head_dim = s.D;
    c.hidden_size = s.H * s.D;
    c.intermediate_size = int64_t(double(c.hidden_size) * 8 / 3);
    c.vocab_size = s.V;
    c.max_position = 64;
    c.g_type = pldr::GType::IDENTITY;
    return c;
}

template <typename T>
void randomize(pldr::Model<T>& m, uint64_t seed) {
    pldr::init_weights(m, seed);
    pldr::Rng r(seed + 1);
    for (auto& p : m.params) p += T(0.05 * r.normal());  // non-trivial LN params and biases
}

double max_rel(const pldr::Tensor<double>& a, const pldr::Tensor<double>& b) {
    double md = 0, mr = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
        md = std::max(md, std::abs(a[i] - b[i]));
        mr = std::max(mr, std::abs(b[i]));
    }
    return md / mr;
}

TEST(SdpaIdentity, FixedGAtIdentityEqualsPlainSdpa) {
    const Shape6 shapes[] = {
        {2, 2, 8, 50, 2, 12},   // H·dk = 16
        {1, 3, 10, 37, 1, 1},   // S = 1, H·dk = 30
        {3, 4, 16, 211, 2, 9},  // H·dk = 64
        {2, 5, 6, 64, 3, 17},   // H·dk = 30, odd S
    };
    for (const auto& s : shapes) {
        for (bool ref_numerics : {true, false}) {
            pldr::Model<double> m(fixed_g_config(s));
            m.set_reference_numerics(ref_numerics);
            randomize(m, 7 + uint64_t(s.S));
            std::vector<int64_t> ids(size_t(s.B * s.S));
            pldr::Rng r(99);
            for (auto& id : ids) id = int64_t(r.below(uint64_t(s.V)));
            if (s.S > 3) ids[size_t(s.S - 1)] = 0;  // a pad key in row 0
            pldr::Activations<double> a;
            pldr::forward(m, ids.data(), s.B, s.S, a);
            auto sdpa = pldr::sdpa_reference_forward(m, ids.data(), s.B, s.S);
            EXPECT_LE(max_rel(a.logits, sdpa), 1e-13)
                << "L" << s.L << " H" << s.H << " D" << s.D << " S" << s.S;
            // A non-identity G must be visibly different (the test can fail).
            for (auto& g : m.G_fixed) g *= 1.5;
            pldr::forward(m, ids.data(), s.B, s.S, a);
            if (s.S > 1) {
                EXPECT_GT(max_rel(a.logits, sdpa), 1e-6);
            }
        }
    }
}

}  // namespace
