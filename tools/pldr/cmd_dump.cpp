// pldr dump MODEL_DIR (--tokens 5,17,3 [--tokens ...] | --prompt TEXT) --out OUT: one forward
// pass, every per-layer intermediate (the deductive outputs included) under the golden naming.
// OUT ending in .safetensors: one file; anything else: a directory of NAME.npy files.
#include <cmath>
#include <cstdio>

#include <filesystem>
#include "audit/dump.h"
#include "common.h"
#include "core/fs.h"
#include "io/npy.h"
#include "io/tokenizer.h"

namespace pldr::cli {

namespace {

struct DumpArgs {
    std::string dir, out, prompt;
    std::vector<std::string> tokens;
    ModelOptions mo;
};

template <typename T>
int run_dump(const DumpArgs& a) {
    PLDR_REQUIRE(a.tokens.empty() != a.prompt.empty(), "give --tokens or --prompt (one of them)");
    const std::string ext = ".safetensors";
    // A path ending in .safetensors, or an existing non-directory (e.g. /dev/null): one file.
    const bool st = (a.out.size() >= ext.size() &&
                     a.out.compare(a.out.size() - ext.size(), ext.size(), ext) == 0) ||
                    (std::filesystem::exists(a.out) && !std::filesystem::is_directory(a.out));
    InputSet in;
    in.add_dir(a.dir);
    if (st)
        require_not_input(a.out, in, "--out");
    else
        require_dir_not_input(a.out, in, "--out");
    int64_t B = 1, S = 0;
    std::vector<int64_t> ids;
    if (!a.prompt.empty()) {
        const std::string tp = a.dir + "/tokenizer.model";
        PLDR_REQUIRE(file_exists(tp), "--prompt needs ", tp, " (or give --tokens)");
        ids = Tokenizer(tp).encode_prompt(a.prompt);
        S = int64_t(ids.size());
    } else {
        ids = rows_to_batch(a.tokens, &B, &S);
    }
    Model<T> m = a.mo.load<T>(a.dir);
    Activations<T> acts;
    forward(m, ids.data(), B, S, acts);
    auto named = forward_tensors(m, acts);
    {
        // A numerical blow-up is an error, not a dump of NaNs with exit 0.
        const std::string bad = first_non_finite(named);
        PLDR_REQUIRE(bad.empty(),
                     "the forward pass produced non-finite values; they first appear in ", bad,
                     "; nothing written");
    }
    if (st) {
        SafetensorsWriter w;
        for (const auto& nt : named) w.add(nt.name, nt.t);
        w.add_i64("fwd.input_ids", {B, S}, ids.data());
        w.set_metadata("format", "pldr-dump-1");
        w.set_metadata("model", a.dir);
        w.set_metadata("dtype", type_name<T>());
        w.write(a.out);
    } else {
        std::filesystem::create_directories(a.out);
        for (const auto& nt : named) save_npy(a.out + "/" + nt.name + ".npy", nt.t);
        save_npy<int64_t>(a.out + "/fwd.input_ids.npy", {B, S}, ids.data());
    }

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
    std::printf("\nwrote %zu tensors to %s%s\n", named.size() + 1, a.out.c_str(),
                st ? "" : " (one .npy file per tensor)");
    return 0;
}

}  // namespace

void add_dump(CLI::App& app) {
    auto a = std::make_shared<DumpArgs>();
    auto* cmd = app.add_subcommand("dump", "run one forward pass and write every intermediate");
    cmd->add_option("MODEL_DIR", a->dir, "model directory")->required();
    cmd->add_option("--tokens", a->tokens, "token ids, comma separated; repeat for a batch");
    cmd->add_option("--prompt", a->prompt,
                    "text prompt, encoded with MODEL_DIR/tokenizer.model (instead of --tokens)");
    cmd->add_option("--out", a->out,
                    "FILE.safetensors (one file; also any existing non-directory), or any other "
                    "path: a directory (created) with one NAME.npy per tensor (e.g. "
                    "fwd.layer0.G_LM.npy, fwd.input_ids.npy)")
        ->required();
    a->mo.add_to(cmd);
    cmd->callback(
        [a]() { return with_dtype(a->mo.dtype, [&]<typename T>() { return run_dump<T>(*a); }); });
}

}  // namespace pldr::cli
