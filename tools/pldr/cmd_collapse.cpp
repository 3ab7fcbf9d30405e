// pldr collapse MODEL_DIR --out DIR: the full PLGA model → the fixed-G_LM model (custom_G_type
// external, metric learner dropped) with the G-cache of a prompt, or by default the reference's
// v510Gi recipe (a pass over the single token EOS); then the KL divergence and top-1 agreement
// of the two models on a text.
#include <cstdio>

#include "common.h"

namespace pldr::cli {

namespace {

struct CollapseArgs {
    std::string dir, out, prompt, ids, text, eval_ids, save_dtype = "f32";
    int64_t window = 256;
    bool force = false;
    ModelOptions mo;
};

int run_collapse(const CollapseArgs& a) {
    {
        api::Inputs in;
        in.dir(a.dir);
        in.file(a.text);
        in.check_dir(a.out, "--out", {"config.json", "model.safetensors", "tokenizer.model"},
                     a.force);
    }
    const std::string tok_path = a.dir + "/tokenizer.model";
    const api::Model m = a.mo.open(a.dir);
    require(a.prompt.empty() || a.ids.empty(), "give --prompt or --ids, not both");
    std::string how = "v510Gi recipe (a pass over the single token EOS)";
    std::vector<int64_t> g_prompt;
    if (m.info().learned_g) {
        if (!a.prompt.empty()) {
            require(m.has_tokenizer(), "--prompt needs ", tok_path);
            g_prompt = m.tokenizer().encode_prompt(a.prompt);
            how = "the prompt's G-cache (" + std::to_string(g_prompt.size()) + " tokens)";
        } else if (!a.ids.empty()) {
            g_prompt = parse_ids(a.ids, "--ids");
            how = "the G-cache of --ids (" + std::to_string(g_prompt.size()) + " tokens)";
        }
    } else {
        how = "none needed: the model already has a fixed G_LM (exact no-op)";
    }
    const api::Model c = api::collapse(m, g_prompt);
    c.save(a.out, a.save_dtype == "f64" ? api::DType::F64 : api::DType::F32, a.force);
    if (m.has_tokenizer())
        api::write_file_atomic(a.out + "/tokenizer.model", api::read_file(tok_path));
    std::printf(
        "collapsed %s → %s (custom_G_type external, %lld → %lld parameters)\nG_LM from %s\n",
        a.dir.c_str(), a.out.c_str(), (long long)m.info().num_params,
        (long long)c.info().num_params, how.c_str());
    std::vector<int64_t> eval;
    if (!a.text.empty()) {
        require(m.has_tokenizer(), "--text needs a tokenizer (", tok_path, ")");
        eval = m.tokenizer().encode(api::read_file(a.text));
    } else if (!a.eval_ids.empty()) {
        eval = parse_ids(a.eval_ids, "--eval-ids");
    }
    if (!eval.empty()) {
        const api::ModelComparison r = api::compare_models(m, c, eval, a.window);
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
    cmd->add_option("--out", a->out, "output model directory")->required()->check(output_path());
    add_force(cmd, &a->force);
    cmd->add_option("--prompt", a->prompt, "take G_LM from this prompt's prefill");
    cmd->add_option("--ids", a->ids, "take G_LM from these token ids' prefill");
    cmd->add_option("--text", a->text, "text file for the KL / top-1 comparison");
    cmd->add_option("--eval-ids", a->eval_ids, "token ids for the comparison (no tokenizer)");
    cmd->add_option("--window", a->window, "comparison window in tokens")->capture_default_str();
    cmd->add_option("--save-dtype", a->save_dtype, "stored dtype of the new model")
        ->check(CLI::IsMember({"f32", "f64"}))
        ->capture_default_str();
    a->mo.add_to(cmd);
    cmd->callback([a]() { return run_collapse(*a); });
}

}  // namespace pldr::cli
