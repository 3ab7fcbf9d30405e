// pldr collapse MODEL_DIR --out DIR: the full PLGA model → the fixed-G_LM model (custom_G_type
// external, metric learner dropped) with the G-cache of a prompt, or by default the reference's
// v510Gi recipe (a pass over the single token EOS); then the KL divergence and top-1 agreement
// of the two models on a text.
#include <cstdio>
#include <filesystem>

#include "core/fs.h"
#include "infer/collapse.h"
#include "io/tokenizer.h"
#include "legacy.h"

namespace pldr::cli {

namespace {

struct CollapseArgs {
    std::string dir, out, prompt, ids, text, eval_ids, save_dtype = "f32";
    int64_t window = 256;
    ModelOptions mo;
};

template <typename T>
int run_collapse(const CollapseArgs& a) {
    {
        InputSet in;
        in.add_dir(a.dir);
        in.add_file(a.text);
        require_dir_not_input(a.out, in, "--out",
                              {"config.json", "model.safetensors", "tokenizer.model"});
    }
    Model<T> m = a.mo.load<T>(a.dir);
    const std::string tok_path = a.dir + "/tokenizer.model";
    std::unique_ptr<Tokenizer> tok;
    if (file_exists(tok_path)) tok = std::make_unique<Tokenizer>(tok_path);
    PLDR_REQUIRE(a.prompt.empty() || a.ids.empty(), "give --prompt or --ids, not both");
    std::string how = "v510Gi recipe (a pass over the single token EOS)";
    GCache<T> g;
    if (m.cfg.learned_g()) {
        if (!a.prompt.empty()) {
            PLDR_REQUIRE(tok, "--prompt needs ", tok_path);
            auto p = tok->encode_prompt(a.prompt);
            g = prompt_g_cache(m, p);
            how = "the prompt's G-cache (" + std::to_string(p.size()) + " tokens)";
        } else if (!a.ids.empty()) {
            auto p = parse_ids(a.ids, "--ids");
            check_inputs(m, p.data(), 1, int64_t(p.size()));
            g = prompt_g_cache(m, p);
            how = "the G-cache of --ids (" + std::to_string(p.size()) + " tokens)";
        } else {
            g = reference_g_cache(m);
        }
    } else {
        how = "none needed: the model already has a fixed G_LM (exact no-op)";
    }
    Model<T> c = collapse_model(m, g);
    save_model(c, a.out, a.save_dtype == "f64" ? DType::F64 : DType::F32);
    if (tok) write_file_atomic(a.out + "/tokenizer.model", read_file(tok_path));
    std::printf(
        "collapsed %s → %s (custom_G_type external, %lld → %lld parameters)\nG_LM from %s\n",
        a.dir.c_str(), a.out.c_str(), (long long)m.num_params(), (long long)c.num_params(),
        how.c_str());
    std::vector<int64_t> eval;
    if (!a.text.empty()) {
        PLDR_REQUIRE(tok, "--text needs a tokenizer (", tok_path, ")");
        eval = tok->encode(read_file(a.text));
    } else if (!a.eval_ids.empty()) {
        eval = parse_ids(a.eval_ids, "--eval-ids");
    }
    if (!eval.empty()) {
        check_inputs(m, eval.data(), 1, 1);
        for (int64_t id : eval)
            PLDR_REQUIRE(id >= 0 && id < m.cfg.vocab_size, "token id ", id,
                         " outside the vocabulary");
        CompareReport r = compare_models(m, c, eval, a.window);
        std::printf(
            "on %lld positions (windows of %lld tokens): KL(full || collapsed) mean %.6g nats, "
            "max %.6g; top-1 agreement %.4f; NLL full %.5f, collapsed %.5f\n",
            (long long)r.tokens, (long long)a.window, r.kl_mean, r.kl_max, r.top1_agree, r.nll_a,
            r.nll_b);
    } else {
        std::printf("(no --text or --eval-ids: KL and top-1 agreement not measured)\n");
    }
    return 0;
}

}  // namespace

void add_collapse(CLI::App& app) {
    auto a = std::make_shared<CollapseArgs>();
    auto* cmd = app.add_subcommand(
        "collapse", "turn a PLGA model into its fixed-G_LM model and measure the difference");
    cmd->add_option("MODEL_DIR", a->dir, "model directory")->required();
    cmd->add_option("--out", a->out, "output model directory")->required();
    cmd->add_option("--prompt", a->prompt, "take G_LM from this prompt's prefill");
    cmd->add_option("--ids", a->ids, "take G_LM from these token ids' prefill");
    cmd->add_option("--text", a->text, "text file for the KL / top-1 comparison");
    cmd->add_option("--eval-ids", a->eval_ids, "token ids for the comparison (no tokenizer)");
    cmd->add_option("--window", a->window, "comparison window in tokens")->capture_default_str();
    cmd->add_option("--save-dtype", a->save_dtype, "stored dtype of the new model")
        ->check(CLI::IsMember({"f32", "f64"}))
        ->capture_default_str();
    a->mo.add_to(cmd);
    cmd->callback([a]() {
        return with_dtype(a->mo.dtype, [&]<typename T>() { return run_collapse<T>(*a); });
    });
}

}  // namespace pldr::cli
