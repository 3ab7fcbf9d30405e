// pldr dump MODEL_DIR (--tokens 5,17,3 [--tokens ...] | --prompt TEXT) --out OUT: one forward
// pass, every per-layer intermediate (the deductive outputs included) under the golden naming.
// OUT ending in .safetensors: one file; anything else: a directory of NAME.npy files.
#include <cstdio>
#include <filesystem>

#include "common.h"

namespace pldr::cli {

namespace {

struct DumpArgs {
    std::string dir, out, prompt;
    std::vector<std::string> tokens;
    bool force = false;
    ModelOptions mo;
};

int run_dump(const DumpArgs& a) {
    require(a.tokens.empty() != a.prompt.empty(), "give --tokens or --prompt (one of them)");
    const std::string ext = ".safetensors";
    // A path ending in .safetensors, or an existing non-directory (e.g. /dev/null): one file.
    const bool st = (a.out.size() >= ext.size() &&
                     a.out.compare(a.out.size() - ext.size(), ext.size(), ext) == 0) ||
                    (std::filesystem::exists(a.out) && !std::filesystem::is_directory(a.out));
    api::Inputs in;
    in.dir(a.dir);
    if (st)
        in.check_file(a.out, "--out", a.force);
    else
        in.check_dir(a.out, "--out", {}, a.force);
    int64_t B = 1, S = 0;
    std::vector<int64_t> ids;
    if (!a.prompt.empty()) {
        const std::string tp = a.dir + "/tokenizer.model";
        require(api::file_exists(tp), "--prompt needs ", tp, " (or give --tokens)");
    } else {
        ids = rows_to_batch(a.tokens, &B, &S);
    }
    const api::Model m = a.mo.open(a.dir);
    if (!a.prompt.empty()) {
        ids = m.tokenizer().encode_prompt(a.prompt);
        S = int64_t(ids.size());
    }
    const api::ForwardResult r = m.forward(ids, B);
    // A numerical blow-up is an error, not a dump of NaNs with exit 0.
    require(r.non_finite.empty(),
            "the forward pass produced non-finite values; they first appear in ", r.non_finite,
            "; nothing written");
    const api::Tensor input_ids = api::int_tensor({B, S}, ids);
    if (st) {
        auto all = r.tensors;
        all.emplace_back("fwd.input_ids", input_ids);
        api::save_safetensors(
            a.out, all,
            {{"format", "pldr-dump-1"}, {"model", a.dir}, {"dtype", api::name_of(m.info().dtype)}});
    } else {
        std::filesystem::create_directories(a.out);
        for (const auto& [name, t] : r.tensors) api::save_npy(a.out + "/" + name + ".npy", t);
        api::save_npy(a.out + "/fwd.input_ids.npy", input_ids);
    }

    const api::ModelInfo& info = m.info();
    std::printf("model %s (%s, %lld parameters), compute %s, batch %lld x %lld tokens\n",
                a.dir.c_str(), info.learned_g ? "v510" : "fixed G_LM", (long long)info.num_params,
                api::name_of(info.dtype), (long long)B, (long long)S);
    for (const api::GStats& g : api::g_lm_stats(r))
        std::printf("  layer %lld: G_LM [%lld,%lld,%lld,%lld] mean %.6g min %.6g max %.6g\n",
                    (long long)g.layer, (long long)g.shape[0], (long long)g.shape[1],
                    (long long)g.shape[2], (long long)g.shape[3], g.mean, g.min, g.max);
    const int64_t V = info.vocab_size;
    const api::Tensor& logits = r.logits();
    std::printf("  greedy next token per position (row 0):");
    for (int64_t s = 0; s < S; ++s) {
        int64_t best = 0;
        for (int64_t v = 1; v < V; ++v)
            if (logits.at(s * V + v) > logits.at(s * V + best)) best = v;
        std::printf(" %lld", (long long)best);
    }
    std::printf("\nwrote %zu tensors to %s%s\n", r.tensors.size() + 1, a.out.c_str(),
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
        ->required()
        ->check(output_path());
    add_force(cmd, &a->force);
    a->mo.add_to(cmd);
    cmd->callback([a]() { return run_dump(*a); });
}

}  // namespace pldr::cli
