// pldr grad MODEL_DIR --tokens IDS [...] [--dag c_A,c_Ap,c_G] --out FILE.safetensors: the loss,
// its parts and the gradient of every parameter (golden naming: loss.*, grad.<name>).
#include <cstdio>

#include "audit/dump.h"
#include "common.h"
#include "core/fs.h"
#include "train/loss.h"

namespace pldr::cli {

namespace {

struct GradArgs {
    std::string dir, out, dag;
    std::vector<std::string> tokens;
    ModelOptions mo;
};

template <typename T>
int run_grad(const GradArgs& a) {
    InputSet in;
    in.add_dir(a.dir);
    require_not_input(a.out, in, "--out");
    int64_t B = 0, S1 = 0;
    std::vector<int64_t> tok = rows_to_batch(a.tokens, &B, &S1);
    const DagCoeffs dag = a.dag.empty() ? DagCoeffs{} : parse_dag_coeffs(a.dag);
    Model<T> m = a.mo.load<T>(a.dir);
    std::vector<T> grads(static_cast<size_t>(m.layout.total), T(0));
    Activations<T> acts;
    LossResult r = loss_and_grads(m, tok.data(), B, S1, dag, acts, grads.data());
    if (!std::isfinite(r.value)) {
        // Name the first activation that went bad, in forward order.
        const std::string bad = first_non_finite(forward_tensors(m, acts));
        fail("the loss is not finite (", r.value, ")",
             bad.empty() ? std::string() : "; non-finite values first appear in " + bad);
    }
    for (const ParamEntry& e : m.layout.entries)
        for (int64_t i = 0; i < e.numel; ++i)
            PLDR_REQUIRE(std::isfinite(double(grads[size_t(e.offset + i)])), "the gradient of ",
                         e.name, " is not finite (element ", i, ")");
    SafetensorsWriter w;
    auto scalar = [&](const std::string& n, double v) {
        Tensor<T> t({1}, T(v));
        w.add(n, t);
    };
    scalar("loss.value", r.value);
    scalar("loss.ce", r.ce);
    scalar("loss.dagA", r.dagA);
    scalar("loss.dagAp", r.dagAp);
    scalar("loss.dagG", r.dagG);
    scalar("loss.accuracy", r.accuracy);
    for (const ParamEntry& e : m.layout.entries)
        w.add_as("grad." + e.name, std::is_same_v<T, double> ? DType::F64 : DType::F32, e.shape,
                 grads.data() + e.offset);
    w.add_i64("batch.tokens", {B, S1}, tok.data());
    w.set_metadata("format", "pldr-grad-1");
    w.write(a.out);
    std::printf("loss %.10g (ce %.10g, accuracy %.4f over %lld tokens)\n", r.value, r.ce,
                r.accuracy, (long long)r.scored);
    if (m.cfg.learned_g())
        std::printf("dag metrics: A_LM %.6g  A_P %.6g  G_LM %.6g  (coefficients %g,%g,%g)\n",
                    r.dagA, r.dagAp, r.dagG, dag.A, dag.Ap, dag.G);
    std::printf("wrote %zu gradients to %s\n", m.layout.entries.size(), a.out.c_str());
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
    cmd->add_option("--out", a->out, "output .safetensors file")->required();
    a->mo.add_to(cmd);
    cmd->callback(
        [a]() { return with_dtype(a->mo.dtype, [&]<typename T>() { return run_grad<T>(*a); }); });
}

}  // namespace pldr::cli
