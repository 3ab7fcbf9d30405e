// pldr generate MODEL_DIR (-p TEXT | --ids 5,17,3)...: text generation with the KV-cache and the
// G-cache, sampling, streaming, JSON output, batched prompts and G-cache files.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "common.h"
#include "options_cli.h"

namespace pldr::cli {

namespace {

struct GenArgs {
    std::string dir, tokenizer, save_g_cache;
    std::vector<std::string> prompts, ids;
    bool json = false, force = false;
    api::GenerateOptions opt;  // the flags of PLDR_GENERATE_OPTIONS (pldr/options.h)
    ModelOptions mo;
};

int run_generate(const GenArgs& a) {
    require(a.prompts.empty() != a.ids.empty(),
            "give prompts with -p TEXT or token ids with "
            "--ids, not both (and at least one)");
    const bool text = !a.prompts.empty();
    // A G-cache comes from a session on the CPU only so far: refused before anything runs.
    if (!a.save_g_cache.empty())  // the output rule (docs/errors.md "Outputs")
        api::Inputs()
            .dir(a.dir)
            .file(a.tokenizer)
            .file(a.opt.g_cache_file)
            .check_file(a.save_g_cache, "--save-g-cache", a.force);
    if (a.tokenizer.empty() && !api::file_exists(a.dir + "/tokenizer.model"))
        require(!text, "no tokenizer: ", a.dir,
                " has no tokenizer.model (give --tokenizer FILE, or token ids with --ids)");
    const api::Model m = a.mo.open(a.dir, a.tokenizer);
    std::vector<std::vector<int64_t>> prompts;
    if (text) {
        for (const auto& p : a.prompts) {
            // The reference runs an empty prompt on the single token EOS; here it is an error
            // (pass --ids <eos> to get that behaviour explicitly).
            require(!p.empty(), "empty prompt (-p \"\"): give some text, or --ids ",
                    m.info().eos_id, " to start from EOS");
            prompts.push_back(m.tokenizer().encode_prompt(p));
        }
    } else {
        for (const auto& s : a.ids) prompts.push_back(parse_ids(s, "--ids"));
    }
    const api::GenerateOptions& opt = a.opt;
    for (const auto& p : prompts) m.check_generation(p, opt);

    std::vector<api::Generation> results;
    const bool stream = prompts.size() == 1 && !a.json;
    if (stream) {
        // Stream: print the decoded text (or ids) as each token arrives.
        size_t printed = 0;
        std::string head;
        if (text) {
            head = m.tokenizer().decode(prompts[0]);
            std::fputs(head.c_str(), stdout);
        } else {
            for (size_t i = 0; i < prompts[0].size(); ++i)
                std::printf("%s%lld", i ? " " : "", (long long)prompts[0][i]);
            std::fputs(" |", stdout);
        }
        std::fflush(stdout);
        std::vector<int64_t> all = prompts[0];
        auto on_token = [&](const api::TokenInfo& t, const std::string&) {
            all.push_back(t.id);
            if (text) {
                const std::string s = m.tokenizer().decode(all);
                if (s.size() > head.size() + printed && s.compare(0, head.size(), head) == 0) {
                    std::fputs(s.c_str() + head.size() + printed, stdout);
                    printed = s.size() - head.size();
                }
            } else {
                std::printf(" %lld", (long long)t.id);
            }
            std::fflush(stdout);
            return true;
        };
        results.push_back(m.generate_ids(prompts[0], opt, on_token));
        std::printf("\n");
        std::fflush(stdout);
    } else {
        results = m.generate_batch(prompts, opt);
    }
    for (size_t i = 0; i < results.size(); ++i) {
        const api::Generation& r = results[i];
        if (a.json) {
            nlohmann::ordered_json j;
            j["prompt_ids"] = r.prompt_ids;
            j["ids"] = r.ids;
            // The text that continues the prompt's (Generation::text: its leading space kept),
            // as the streamed output prints it after the prompt and as Python returns it.
            if (text) j["text"] = r.text;
            auto steps = nlohmann::ordered_json::array();
            for (const auto& s : r.tokens) {
                auto top = nlohmann::ordered_json::array();
                for (const auto& t : s.top) top.push_back({t.id, t.logprob});
                steps.push_back({{"id", s.id}, {"logprob", s.logprob}, {"top", top}});
            }
            j["steps"] = steps;
            std::printf("%s\n", j.dump().c_str());
        } else if (!stream) {
            if (text) {
                std::printf("[%zu] %s%s\n", i, m.tokenizer().decode(r.prompt_ids).c_str(),
                            r.text.c_str());
            } else {
                std::printf("[%zu]", i);
                for (int64_t id : r.ids) std::printf(" %lld", (long long)id);
                std::printf("\n");
            }
        }
        const size_t decode_calls = r.ids.empty() ? 0 : r.ids.size() - 1;
        std::fprintf(stderr,
                     "[%zu] prompt: %zu tokens in %.3f s (%.1f tok/s); generation: %zu tokens, "
                     "%.1f tok/s (cache %s, %s)\n",
                     i, r.prompt_ids.size(), r.prefill_seconds,
                     double(r.prompt_ids.size()) / std::max(r.prefill_seconds, 1e-9), r.ids.size(),
                     decode_calls ? double(decode_calls) / std::max(r.decode_seconds, 1e-9) : 0.0,
                     api::name_of(opt.cache), api::name_of(m.info().dtype));
    }
    if (!a.save_g_cache.empty()) {
        api::Session s(m, opt.cache);
        if (!opt.g_cache_file.empty()) s.load_g_cache(opt.g_cache_file);
        s.prefill(prompts[0]);
        s.save_g_cache(a.save_g_cache, a.force);
        std::fprintf(stderr, "saved the G-cache of prompt 0 to %s\n", a.save_g_cache.c_str());
    }
    return 0;
}

}  // namespace

void add_generate(CLI::App& app) {
    auto a = std::make_shared<GenArgs>();
    auto* cmd = app.add_subcommand("generate", "generate text with the KV-cache and the G-cache");
    cmd->add_option("MODEL_DIR", a->dir, "model directory")->required();
    cmd->add_option("-p,--prompt", a->prompts, "prompt text (repeat for a batch)");
    cmd->add_option("--ids", a->ids, "prompt token ids, comma separated (repeat for a batch)");
    cmd->add_option("--tokenizer", a->tokenizer,
                    "SentencePiece model (default MODEL_DIR/tokenizer.model)");
    add_option_flags(cmd, a->opt);
    cmd->add_option("--save-g-cache", a->save_g_cache, "save prompt 0's G-cache to this file")
        ->check(output_path());
    add_force(cmd, &a->force);
    cmd->add_flag("--json", a->json, "one JSON object per prompt on stdout (timings on stderr)");
    a->mo.add_to(cmd);
    cmd->callback([a]() { return run_generate(*a); });
}

}  // namespace pldr::cli
