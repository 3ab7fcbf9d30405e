// The registry of PLGA variants: every replaceable piece of the operator G_LM (spec §1.8) is a
// named entry here, and config.json names it. Three axes:
//   - the positive map, A_LM = f(Z) with Z = W·A + b ("plga_positive_map"; default "iswiglu");
//   - the coupling, A_P = c(A_LM, P) ("plga_coupling"; default "power", A_P = A_LM^∘P);
//   - the fixed-G types ("custom_G_type": "identity", "random", "external"; null = learned G).
// Adding a positive map or a coupling: one kernel file with its forward and backward (see
// ops/positive_map_iswiglu.cpp), one line in the list of ops/plga_variants.cpp, a paragraph of
// docs/plga.md. validate_config, config.json reading and writing (through model/config.h's
// plga_*_names), and the numeric harnesses (tests/numeric_cases.h) take the names from here.
// The fixed-G types are the model's (model/config.h: GType, fixed_g_types): the operator's
// kernels do not know the model's config.
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace pldr {

// A_LM = f(Z), element-wise and strictly positive (A_LM^P needs A_LM > 0).
struct PositiveMap {
    const char* name;     // the config.json value
    const char* formula;  // one line, e.g. "Z·silu(Z) + 1e-9"
    // A_LM[i] = f(Z[i]) for n entries; the operator is evaluated in double (ops/plga.cpp).
    void (*forward)(const double* Z, double* A_LM, int64_t n);
    // dZ[i] ← dZ[i]·f'(Z[i]): dZ holds dA_LM on entry; Z and A_LM are the forward's.
    void (*backward_f32)(float* dZ, const float* Z, const float* A_LM, int64_t n);
    void (*backward_f64)(double* dZ, const double* Z, const double* A_LM, int64_t n);
    // The forward of the float32 path (its operator is evaluated in double and rounded once to
    // float32): the same formula with vectorized ≤ 1-ulp exponentials (core/vmath.h), or null
    // for `forward`. The float64 path always takes `forward`.
    void (*forward_f32_path)(const double* Z, double* A_LM, int64_t n) = nullptr;

    template <typename T>
    void backward(T* dZ, const T* Z, const T* A_LM, int64_t n) const {
        if constexpr (std::is_same_v<T, float>)
            backward_f32(dZ, Z, A_LM, n);
        else
            backward_f64(dZ, Z, A_LM, n);
    }
};

// A_P = c(A_LM, P), element-wise, P the learned exponents of the head.
struct Coupling {
    const char* name;
    const char* formula;
    void (*forward)(const double* A_LM, const double* P, double* A_P, int64_t n);
    // dA_LM[i] = dA_P[i]·∂c/∂A_LM (overwritten); dP[i] += dA_P[i]·∂c/∂P.
    void (*backward_f32)(float* dA_LM, float* dP, const float* dA_P, const float* A_LM,
                         const float* A_P, const float* P, int64_t n);
    void (*backward_f64)(double* dA_LM, double* dP, const double* dA_P, const double* A_LM,
                         const double* A_P, const double* P, int64_t n);
    // As PositiveMap::forward_f32_path.
    void (*forward_f32_path)(const double* A_LM, const double* P, double* A_P, int64_t n) = nullptr;

    template <typename T>
    void backward(T* dA_LM, T* dP, const T* dA_P, const T* A_LM, const T* A_P, const T* P,
                  int64_t n) const {
        if constexpr (std::is_same_v<T, float>)
            backward_f32(dA_LM, dP, dA_P, A_LM, A_P, P, n);
        else
            backward_f64(dA_LM, dP, dA_P, A_LM, A_P, P, n);
    }
};

// The registered variants, the default first.
const std::vector<const PositiveMap*>& positive_maps();
const std::vector<const Coupling*>& couplings();

// By name: null when unknown.
const PositiveMap* find_positive_map(const std::string& name);
const Coupling* find_coupling(const std::string& name);
// By name: throws pldr::Error naming the known ones when unknown.
const PositiveMap& positive_map(const std::string& name);
const Coupling& coupling(const std::string& name);
// "'a', 'b' or 'c'": the registered names, for messages.
std::string positive_map_names();
std::string coupling_names();

// Defines a registry entry from a kernel file: KernelFwd is instantiated for double, KernelBwd
// for float and double. Used as PLDR_POSITIVE_MAP(kPositiveMapIswiglu, "iswiglu", "...", f, b);
#define PLDR_POSITIVE_MAP(ident, name, formula, fwd, bwd)   \
    extern const PositiveMap ident;                         \
    const PositiveMap ident {                               \
        name, formula, fwd<double>, bwd<float>, bwd<double> \
    }
#define PLDR_COUPLING(ident, name, formula, fwd, bwd)       \
    extern const Coupling ident;                            \
    const Coupling ident {                                  \
        name, formula, fwd<double>, bwd<float>, bwd<double> \
    }
// The same with a vectorized forward for the float32 path (PositiveMap::forward_f32_path).
#define PLDR_POSITIVE_MAP_VEC(ident, name, formula, fwd, bwd, fwd_vec) \
    extern const PositiveMap ident;                                    \
    const PositiveMap ident {                                          \
        name, formula, fwd<double>, bwd<float>, bwd<double>, fwd_vec   \
    }
#define PLDR_COUPLING_VEC(ident, name, formula, fwd, bwd, fwd_vec)   \
    extern const Coupling ident;                                     \
    const Coupling ident {                                           \
        name, formula, fwd<double>, bwd<float>, bwd<double>, fwd_vec \
    }

}  // namespace pldr
