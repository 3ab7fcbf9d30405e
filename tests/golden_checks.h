// The quantities each single-step golden check evaluates on a model (forward tensors; loss and
// gradients), shared by the parity tests and the float32 mutation check.
#pragma once
#include "golden_util.h"
#include "model/forward.h"
#include "model/named_outputs.h"
#include "train/loss.h"

namespace golden {

// Every fwd.* tensor of the fixture file `f` that the forward pass produces.
template <typename T>
Quantities forward_quantities(const pldr::Model<T>& m, const pldr::SafetensorsFile& f) {
    const auto in = f.read_i64("fwd.input_ids");
    const auto& sh = f.at("fwd.input_ids").shape;
    pldr::Activations<T> acts;
    pldr::forward(m, in.data(), sh[0], sh[1], acts);
    Quantities q;
    for (const auto& nt : pldr::forward_tensors(m, acts))
        if (f.has(nt.name)) add(q, nt.name, nt.t.ptr(), nt.t.numel());
    return q;
}

// The number of fwd.* tensors of the file that forward_quantities must produce.
inline int forward_tensor_count(const pldr::SafetensorsFile& f) {
    int n = 0;
    for (const auto& t : f.tensors())
        if (t.name.rfind("fwd.", 0) == 0 && t.name != "fwd.input_ids" && t.name != "fwd.targets")
            ++n;
    return n;
}

inline pldr::DagCoeffs dag_of(const Fixture& fx) {
    pldr::DagCoeffs dag;
    if (fx.dag()) {
        const auto& c = fx.side["hyperparams_train_step"]["DAG_reg_coeffs"];
        dag = {c[0].get<double>(), c[1].get<double>(), c[2].get<double>()};
    }
    return dag;
}

// loss.value, loss.ce (DAG sets), the DAG terms (as "dag.loss.dagA" …: compared apart, the
// reference computes them in float32) and grad.<param> for every parameter.
template <typename T>
Quantities grad_quantities(const Fixture& fx, const pldr::Model<T>& m,
                           const pldr::SafetensorsFile& f, double* accuracy = nullptr) {
    const auto tok = f.read_i64("batch.tokens");
    const auto& sh = f.at("batch.tokens").shape;
    std::vector<T> grads(size_t(m.layout.total), T(0));
    pldr::Activations<T> acts;
    const auto r =
        pldr::loss_and_grads(m, tok.data(), sh[0], sh[1], dag_of(fx), acts, grads.data());
    if (accuracy) *accuracy = r.accuracy;
    Quantities q;
    q.push_back({"loss.value", {r.value}});
    if (fx.dag()) {
        q.push_back({"loss.ce", {r.ce}});
        q.push_back({"dag.loss.dagA", {r.dagA}});
        q.push_back({"dag.loss.dagAp", {r.dagAp}});
        q.push_back({"dag.loss.dagG", {r.dagG}});
    }
    for (const auto& e : m.layout.entries)
        add(q, "grad." + e.name, grads.data() + e.offset, e.numel);
    return q;
}

// The fixture's tensor for a quantity name ("dag.X" reads X).
inline std::function<std::vector<double>(const std::string&)> refs_of(
    const pldr::SafetensorsFile& f) {
    return [&f](const std::string& name) {
        const std::string n = name.rfind("dag.", 0) == 0 ? name.substr(4) : name;
        if (!f.has(n)) return std::vector<double>{};
        const auto d = f.read<double>(n).data;
        return std::vector<double>(d.begin(), d.end());
    };
}

// Everything a float32 check of one fixture needs, computed once: the exact (float64) model and
// file, and the measured float32 sensitivity σ of every forward and gradient quantity.
struct F32Check {
    Fixture fx;
    pldr::SafetensorsFile f32, f64;
    pldr::Model<double> m64;
    std::map<std::string, double> sigma_fwd, sigma_grad;

    explicit F32Check(const Fixture& fixture)
        : fx(fixture), f32(fx.path("f32")), f64(fx.path("f64")), m64(model_of<double>(fx, f64)) {
        sigma_fwd = f32_sensitivity(
            m64, [&](const pldr::Model<double>& m) { return forward_quantities(m, f64); });
        sigma_grad = f32_sensitivity(
            m64, [&](const pldr::Model<double>& m) { return grad_quantities(fx, m, f64); });
    }
    pldr::Model<float> model() const { return model_of<float>(fx, f32); }

    Report forward(const pldr::Model<float>& m) const {
        return compare_f32(fx.name + ".f32 forward", forward_quantities(m, f32), refs_of(f64),
                           sigma_fwd, kFloorForward);
    }
    // Loss parts under the forward floor, gradients under the gradient floor.
    Report grads(const pldr::Model<float>& m) const {
        Quantities all = grad_quantities(fx, m, f32), loss, grads;
        for (auto& q : all) (q.name.rfind("grad.", 0) == 0 ? grads : loss).push_back(q);
        Report r =
            compare_f32(fx.name + ".f32 loss", loss, refs_of(f64), sigma_grad, kFloorForward);
        Report g = compare_f32(fx.name + ".f32 grads", grads, refs_of(f64), sigma_grad, kFloorGrad);
        r.rows.insert(r.rows.end(), g.rows.begin(), g.rows.end());
        return r;
    }
};

}  // namespace golden
