// The lists of PLGA variants (see plga_variants.h). One line per variant; the kernels live in
// their own files (ops/positive_map_*.cpp, ops/coupling_*.cpp). The first entry is the default.
#include "ops/plga_variants.h"

#include "core/error.h"

namespace pldr {

extern const PositiveMap kPositiveMapIswiglu;   // ops/positive_map_iswiglu.cpp
extern const PositiveMap kPositiveMapSoftplus;  // ops/positive_map_softplus.cpp
extern const Coupling kCouplingPower;           // ops/coupling_power.cpp

const std::vector<const PositiveMap*>& positive_maps() {
    static const std::vector<const PositiveMap*> t = {
        &kPositiveMapIswiglu,
        &kPositiveMapSoftplus,
    };
    return t;
}

const std::vector<const Coupling*>& couplings() {
    static const std::vector<const Coupling*> t = {
        &kCouplingPower,
    };
    return t;
}

namespace {

template <typename V>
const V* find_named(const std::vector<const V*>& list, const std::string& name) {
    for (const V* v : list)
        if (name == v->name) return v;
    return nullptr;
}

template <typename V>
std::string names_of(const std::vector<const V*>& list) {
    std::string s;
    for (size_t i = 0; i < list.size(); ++i) {
        if (i) s += i + 1 == list.size() ? " or " : ", ";
        s += std::string("'") + list[i]->name + "'";
    }
    return s;
}

}  // namespace

const PositiveMap* find_positive_map(const std::string& name) {
    return find_named(positive_maps(), name);
}
const Coupling* find_coupling(const std::string& name) {
    return find_named(couplings(), name);
}
std::string positive_map_names() {
    return names_of(positive_maps());
}
std::string coupling_names() {
    return names_of(couplings());
}

const PositiveMap& positive_map(const std::string& name) {
    const PositiveMap* p = find_positive_map(name);
    PLDR_REQUIRE(p, "plga_positive_map '", name, "' is not a registered positive map (expected ",
                 positive_map_names(), ")");
    return *p;
}
const Coupling& coupling(const std::string& name) {
    const Coupling* p = find_coupling(name);
    PLDR_REQUIRE(p, "plga_coupling '", name, "' is not a registered coupling (expected ",
                 coupling_names(), ")");
    return *p;
}

}  // namespace pldr
