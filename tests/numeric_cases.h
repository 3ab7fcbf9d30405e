// The one list of model cases that every numeric harness runs over (llama.cpp's
// test-backend-ops style): the registered PLGA variants (ops/plga_variants.h) × the shapes
// below × learned / fixed G × DAG on / off. The harnesses instantiate a parameterized GoogleTest
// suite over numeric_cases():
//   - tests/test_grad_fd.cpp      FdModel        finite-difference gradients, float64;
//   - tests/test_precision.cpp    PrecisionModel float32 against float64, tolerances from the
//                                               measured conditioning;
//   - tests/test_cache_cases.cpp  CacheModel     cached (kvg, kv) and uncached (none) sessions
//                                               against full forwards;
//   - tests/test_loss_memory.cpp  MemoryPlan     the training forward's memory plan (what it
//                                               recomputes) against keep-everything, bit for bit.
// A new registry entry, or a new line in kShapes, is checked by all four with no other change.
#pragma once
#include <algorithm>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/init.h"
#include "model/metric_learner.h"
#include "model/model.h"
#include "ops/plga_variants.h"

namespace numeric {

// A model shape: dk, heads, tokens, vocabulary, metric-learner residual units (R) and GLUs per
// unit (N), layers, batch.
struct Shape {
    int64_t dk, H, S, V, R, N, L, B;
};

// The shapes. One line adds one to every harness.
inline const std::vector<Shape>& shapes() {
    static const std::vector<Shape> s = {
        // dk  H  S   V  R  N  L  B
        {4, 2, 5, 13, 2, 2, 2, 2},
        {6, 3, 7, 29, 2, 2, 1, 1},
        {8, 1, 3, 17, 2, 2, 2, 3},
        {24, 3, 4, 19, 3, 2, 1, 1},
        // causal blocks of 64 queries (ops/attention.cpp): 3, the last one partial
        {4, 2, 150, 11, 1, 2, 1, 1},
    };
    return s;
}

struct Case {
    std::string name;  // readable and a valid GoogleTest parameter name
    Shape shape;
    pldr::GType g = pldr::GType::LEARNED;
    std::string positive_map = pldr::Config{}.plga_positive_map;  // learned G only
    std::string coupling = pldr::Config{}.plga_coupling;
    bool dag = false;  // the DAG regularizer in the loss (learned G only)
};

inline std::string shape_name(const Shape& s) {
    auto n = [](int64_t v) { return std::to_string(v); };
    return "dk" + n(s.dk) + "_H" + n(s.H) + "_S" + n(s.S) + "_V" + n(s.V) + "_R" + n(s.R) + "_N" +
           n(s.N) + "_L" + n(s.L) + "_B" + n(s.B);
}

// Every case: per shape, each positive map × coupling with a learned G, without and with the
// DAG regularizer; and the fixed-G types identity and random (the variants and the DAG do not
// apply to a constant G; "external" is "random" read from a file).
inline std::vector<Case> cases() {
    std::vector<Case> v;
    for (const Shape& s : shapes()) {
        for (const pldr::PositiveMap* pm : pldr::positive_maps())
            for (const pldr::Coupling* cp : pldr::couplings())
                for (bool dag : {false, true}) {
                    Case c;
                    c.shape = s;
                    c.positive_map = pm->name;
                    c.coupling = cp->name;
                    c.dag = dag;
                    c.name = shape_name(s) + "_" + pm->name + "_" + cp->name + (dag ? "_dag" : "");
                    v.push_back(c);
                }
        for (const pldr::FixedGType& t : pldr::fixed_g_types()) {
            if (t.type == pldr::GType::EXTERNAL) continue;
            Case c;
            c.shape = s;
            c.g = t.type;
            c.name = shape_name(s) + "_G_" + t.name;
            v.push_back(c);
        }
    }
    return v;
}

// GoogleTest prints a case by its name.
inline void PrintTo(const Case& c, std::ostream* os) {
    *os << c.name;
}

// For INSTANTIATE_TEST_SUITE_P(..., testing::ValuesIn(cases()), CaseName()).
struct CaseName {
    template <typename P>
    std::string operator()(const P& info) const {
        return info.param.name;
    }
};

// A stable seed per case (FNV-1a of the name).
inline uint64_t seed_of(const Case& c) {
    uint64_t h = 1469598103934665603ull;
    for (char ch : c.name) h = (h ^ uint8_t(ch)) * 1099511628211ull;
    return h % 100000 + 1;
}

inline pldr::Config config_of(const Case& k) {
    const Shape& s = k.shape;
    pldr::Config c;
    c.num_layers = s.L;
    c.num_heads = s.H;
    c.head_dim = s.dk;
    c.hidden_size = s.H * s.dk;
    c.intermediate_size = 2 * c.hidden_size - 3;
    c.vocab_size = s.V;
    c.max_position = std::max<int64_t>(32, 2 * s.S);  // room for the cache harness's decode steps
    c.num_reslayerA = s.R;
    c.num_denseA = s.N;
    c.A_dff = 2 * s.dk;
    c.g_type = k.g;
    c.plga_positive_map = k.positive_map;
    c.plga_coupling = k.coupling;
    return c;
}

// The model of a case in float64, pure (exact numerics), at a well-conditioned point: reference
// init + 0.05·N(0,1) on every parameter, P entries ±U(0.1, 1) (about 30% negative) and, when
// `regular`, the PLGA bias b shifted by +1.5 so that every Z = W·A + b stays away from 0 (see
// tests/test_grad_fd.cpp). A random fixed G: 0.5·N(0,1), plus 1 on ~20% of the entries.
inline pldr::Model<double> make_model(const Case& k, uint64_t seed, bool regular = true,
                                      bool halves = false, bool tied = false) {
    pldr::Config c = config_of(k);
    c.reference_rope = !halves;
    c.tie_word_embeddings = tied;
    pldr::Model<double> m(c);
    m.set_reference_numerics(false);  // pure float64, EXACT DAG mode
    pldr::init_weights(m, seed);
    pldr::Rng r(seed * 7 + 1);
    for (auto& p : m.params) p += 0.05 * r.normal();
    if (c.learned_g()) {
        const int64_t n = c.num_heads * c.head_dim * c.head_dim;
        for (const auto& lw : m.w.layers)
            for (int64_t i = 0; i < n; ++i) {
                lw.P[i] = (r.uniform() < 0.3 ? -1.0 : 1.0) * r.uniform(0.1, 1.0);
                if (regular) lw.b[i] += 1.5;
            }
    }
    if (k.g == pldr::GType::RANDOM)
        for (auto& g : m.G_fixed) g = 0.5 * r.normal() + (r.uniform() < 0.2 ? 1.0 : 0.0);
    return m;
}

// For its lifetime, the metric learner splits its rows into n blocks (model/metric_learner.h),
// each through the whole chain, as it does on n threads: the suite runs on one thread, where
// the learner would never split them otherwise.
struct LearnerRowBlocks {
    explicit LearnerRowBlocks(int64_t n) : prev(pldr::metric_learner_row_blocks()) {
        pldr::metric_learner_row_blocks() = n;
    }
    ~LearnerRowBlocks() { pldr::metric_learner_row_blocks() = prev; }
    LearnerRowBlocks(const LearnerRowBlocks&) = delete;
    LearnerRowBlocks& operator=(const LearnerRowBlocks&) = delete;
    int64_t prev;
};

// The case's model in T with the parameters `params` (the model's own, or perturbed ones).
template <typename T>
pldr::Model<T> cast_model(const pldr::Model<double>& m, const std::vector<double>& params) {
    pldr::Model<T> out(m.cfg);
    out.set_reference_numerics(false);
    std::copy(params.begin(), params.end(), out.params.begin());
    out.G_fixed.assign(m.G_fixed.begin(), m.G_fixed.end());
    return out;
}
// The same with the model's own parameters.
template <typename T>
pldr::Model<T> cast_model(const pldr::Model<double>& m) {
    return cast_model<T>(m, std::vector<double>(m.params.begin(), m.params.end()));
}

// tokens [B, S+1]: random ids in [1, V) with pad (0) at position 2 of row 0 (an input key and a
// target at once) and as the last target of the last row. Position 0 is never pad.
inline std::vector<int64_t> make_tokens(const Shape& s, uint64_t seed) {
    pldr::Rng r(seed);
    const int64_t S1 = s.S + 1;
    std::vector<int64_t> t(static_cast<size_t>(s.B * S1));
    for (auto& x : t) x = 1 + int64_t(r.below(uint64_t(s.V - 1)));
    t[size_t(std::min<int64_t>(2, s.S))] = 0;
    t[size_t(s.B * S1 - 1)] = 0;
    return t;
}

}  // namespace numeric
