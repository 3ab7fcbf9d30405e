// pldr dump MODEL_DIR --tokens 5,17,3 [--tokens ...] --out FILE.safetensors: one forward pass,
// every per-layer intermediate (the deductive outputs included) under the golden naming.
#include <cmath>
#include <cstdio>

#include "audit/dump.h"
#include "common.h"

namespace pldr::cli {

namespace {

struct DumpArgs {
    std::string dir, out;
    std::vector<std::string> tokens;
    ModelOptions mo;
};

template <typename T>
int run_dump(const DumpArgs& a) {
    int64_t B = 0, S = 0;
    std::vector<int64_t> ids = rows_to_batch(a.tokens, &B, &S);
    Model<T> m = a.mo.load<T>(a.dir);
    Activations<T> acts;
    forward(m, ids.data(), B, S, acts);
    SafetensorsWriter w;
    auto named = forward_tensors(m, acts);
    for (const auto& nt : named) w.add(nt.name, nt.t);
    w.add_i64("fwd.input_ids", {B, S}, ids.data());
    w.set_metadata("format", "pldr-dump-1");
    w.set_metadata("model", a.dir);
    w.set_metadata("dtype", type_name<T>());
    w.write(a.out);

    std::printf("model %s (%s, %lld parameters), compute %s, batch %lld x %lld tokens\n",
                a.dir.c_str(), m.cfg.learned_g() ? "v510" : "fixed G_LM", (long long)m.num_params(),
                type_name<T>(), (long long)B, (long long)S);
    for (size_t l = 0; l < acts.layers.size(); ++l) {
        const Tensor<T>& G = acts.layers[l].G;
        double lo = INFINITY, hi = -INFINITY, sum = 0;
        for (T v : G.data) lo = std::min(lo, double(v)), hi = std::max(hi, double(v)), sum += v;
        std::printf("  layer %zu: G_LM [%lld,%lld,%lld,%lld] mean %.6g min %.6g max %.6g\n", l,
                    (long long)G.shape[0], (long long)G.shape[1], (long long)G.shape[2],
                    (long long)G.shape[3], sum / double(G.numel()), lo, hi);
    }
    const int64_t V = m.cfg.vocab_size;
    std::printf("  greedy next token per position (row 0):");
    for (int64_t s = 0; s < S; ++s) {
        const T* lg = acts.logits.ptr() + s * V;
        std::printf(" %lld", (long long)(std::max_element(lg, lg + V) - lg));
    }
    std::printf("\nwrote %zu tensors to %s\n", named.size() + 1, a.out.c_str());
    return 0;
}

}  // namespace

void add_dump(CLI::App& app) {
    auto a = std::make_shared<DumpArgs>();
    auto* cmd = app.add_subcommand("dump", "run one forward pass and write every intermediate");
    cmd->add_option("MODEL_DIR", a->dir, "model directory")->required();
    cmd->add_option("--tokens", a->tokens, "token ids, comma separated; repeat for a batch")
        ->required();
    cmd->add_option("--out", a->out, "output .safetensors file")->required();
    a->mo.add_to(cmd);
    cmd->callback(
        [a]() { return with_dtype(a->mo.dtype, [&]<typename T>() { return run_dump<T>(*a); }); });
}

}  // namespace pldr::cli
