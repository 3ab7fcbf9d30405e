// The benchmark configs of PERF-TARGETS.md (S, M and the released 110M shape), shared by the
// benchmark programs.
#pragma once
#include <cstdint>

#include "model/config.h"

namespace pldr::bench {

struct Shape {
    const char* name;
    int64_t L, H, dk, A_dff, R, N, V;
};
constexpr Shape kShapes[] = {
    {"S", 2, 4, 16, 24, 2, 2, 4096},
    {"M", 5, 8, 32, 48, 4, 2, 8192},
    {"110M", 5, 14, 64, 170, 8, 2, 32000},
};

inline pldr::Config make_config(const Shape& s) {
    pldr::Config c;
    c.num_layers = s.L;
    c.num_heads = s.H;
    c.head_dim = s.dk;
    c.hidden_size = s.H * s.dk;
    c.intermediate_size = c.hidden_size * 8 / 3;  // floor(d·8/3)
    c.A_dff = s.A_dff;
    c.num_reslayerA = s.R;
    c.num_denseA = s.N;
    c.vocab_size = s.V;
    c.max_position = 256;
    c.g_type = pldr::GType::LEARNED;  // v510: learned G
    return c;
}

}  // namespace pldr::bench
