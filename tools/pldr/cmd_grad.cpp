// pldr grad MODEL_DIR --tokens IDS [...] [--dag c_A,c_Ap,c_G] --out FILE.safetensors: the loss,
// its parts and the gradient of every parameter (golden naming: loss.*, grad.<name>).
#include <cstdio>

#include "common.h"

namespace pldr::cli {

namespace {

struct GradArgs {
    std::string dir, out, dag;
    std::vector<std::string> tokens;
    bool force = false;
    ModelOptions mo;
};

// A one-element tensor of the compute dtype (the loss.* entries).
api::Tensor scalar(double v, api::DType dt) {
    api::Tensor t;
    t.dtype = dt;
    t.shape = {1};
    if (dt == api::DType::F64)
        t.storage = std::make_shared<const double>(v);
    else
        t.storage = std::make_shared<const float>(float(v));
    return t;
}

int run_grad(const GradArgs& a) {
    api::Inputs().dir(a.dir).check_file(a.out, "--out", a.force);
    int64_t B = 0, S1 = 0;
    std::vector<int64_t> tok = rows_to_batch(a.tokens, &B, &S1);
    const api::DagCoefficients dag = a.dag.empty() ? api::DagCoefficients{} : parse_dag(a.dag);
    const api::Model m = a.mo.open(a.dir);
    const api::Gradients g = m.loss_and_grads(tok, B, dag);
    const api::Loss& r = g.loss;
    const api::DType dt = m.info().dtype;
    std::vector<std::pair<std::string, api::Tensor>> out = {
        {"loss.value", scalar(r.value, dt)}, {"loss.ce", scalar(r.ce, dt)},
        {"loss.dagA", scalar(r.dagA, dt)},   {"loss.dagAp", scalar(r.dagAp, dt)},
        {"loss.dagG", scalar(r.dagG, dt)},   {"loss.accuracy", scalar(r.accuracy, dt)}};
    for (const auto& [name, t] : g.grads) out.emplace_back("grad." + name, t);
    out.emplace_back("batch.tokens", api::int_tensor({B, S1}, tok));
    api::save_safetensors(a.out, out, {{"format", "pldr-grad-1"}});
    std::printf("loss %.10g (ce %.10g, accuracy %.4f over %lld tokens)\n", r.value, r.ce,
                r.accuracy, (long long)r.scored);
    if (m.info().learned_g)
        std::printf("dag metrics: A_LM %.6g  A_P %.6g  G_LM %.6g  (coefficients %g,%g,%g)\n",
                    r.dagA, r.dagAp, r.dagG, dag.A, dag.Ap, dag.G);
    std::printf("wrote %zu gradients to %s\n", g.grads.size(), a.out.c_str());
    return 0;
}

}  // namespace

void add_grad(CLI::App& app) {
    auto a = std::make_shared<GradArgs>();
    auto* cmd = app.add_subcommand("grad", "loss and gradients of one training batch");
    cmd->add_option("MODEL_DIR", a->dir, "model directory")->required();
    cmd->add_option("--tokens", a->tokens,
                    "one training sequence (input = first n-1 ids, targets = last n-1); repeat "
                    "for a batch")
        ->required();
    cmd->add_option("--dag", a->dag, "DAG coefficients c_A,c_Ap,c_G (default 0,0,0)");
    cmd->add_option("--out", a->out, "output .safetensors file")->required()->check(output_path());
    add_force(cmd, &a->force);
    a->mo.add_to(cmd);
    cmd->callback([a]() { return run_grad(*a); });
}

}  // namespace pldr::cli
