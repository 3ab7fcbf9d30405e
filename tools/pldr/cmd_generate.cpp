// pldr generate MODEL_DIR (-p TEXT | --ids 5,17,3)...: text generation with the KV-cache and the
// G-cache, sampling, streaming, JSON output, batched prompts and G-cache files.
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "common.h"
#include "core/fs.h"
#include "infer/generate.h"
#include "io/model_dir.h"
#include "io/tokenizer.h"

namespace pldr::cli {

namespace {

struct GenArgs {
    std::string dir, tokenizer, cache = "kvg", g_cache, save_g_cache, top_p_mode = "reference";
    std::vector<std::string> prompts, ids;
    int64_t max_new = 64;
    bool greedy = false, json = false, no_eos_stop = false;
    SamplerConfig sc;
    ModelOptions mo;
};

std::unique_ptr<Tokenizer> open_tokenizer(const GenArgs& a, bool needed) {
    std::string path = a.tokenizer;
    if (path.empty()) {
        const std::string p = a.dir + "/tokenizer.model";
        if (file_exists(p)) path = p;
    }
    if (path.empty()) {
        PLDR_REQUIRE(!needed, "no tokenizer: ", a.dir,
                     " has no tokenizer.model (give --tokenizer FILE, or token ids with --ids)");
        return nullptr;
    }
    return std::make_unique<Tokenizer>(path);
}

template <typename T>
int run_generate(const GenArgs& a) {
    PLDR_REQUIRE(a.prompts.empty() != a.ids.empty(),
                 "give prompts with -p TEXT or token ids with "
                 "--ids, not both (and at least one)");
    const bool text = !a.prompts.empty();
    {
        InputSet in;
        in.add_dir(a.dir);
        in.add_file(a.tokenizer);
        in.add_file(a.g_cache);
        require_not_input(a.save_g_cache, in, "--save-g-cache");
    }
    auto tok = open_tokenizer(a, text);
    Model<T> m = a.mo.load<T>(a.dir);
    if (tok)
        PLDR_REQUIRE(tok->vocab_size() == m.cfg.vocab_size, "tokenizer ", tok->path(), " has ",
                     tok->vocab_size(), " pieces but the model's vocab_size is ", m.cfg.vocab_size);
    std::vector<std::vector<int64_t>> prompts;
    if (text) {
        for (const auto& p : a.prompts) {
            // The reference runs an empty prompt on the single token EOS; here it is an error
            // (pass --ids <eos> to get that behaviour explicitly).
            PLDR_REQUIRE(!p.empty(), "empty prompt (-p \"\"): give some text, or --ids ",
                         m.cfg.eos_token_id, " to start from EOS");
            prompts.push_back(tok->encode_prompt(p));
        }
    } else {
        for (const auto& s : a.ids) prompts.push_back(parse_ids(s, "--ids"));
    }
    GenerateOptions opt;
    opt.max_new = a.max_new;
    opt.cache = cache_mode_from_name(a.cache);
    opt.stop_at_eos = !a.no_eos_stop;
    opt.sampler = a.sc;
    opt.sampler.greedy = a.greedy;
    opt.sampler.top_p_mode = a.top_p_mode == "hf" ? TopPMode::HF : TopPMode::REFERENCE;
    opt.sampler.validate();
    for (const auto& p : prompts) check_generation_fits(m, p, opt.max_new);
    std::unique_ptr<GCache<T>> preset;
    if (!a.g_cache.empty()) preset = std::make_unique<GCache<T>>(load_g_cache<T>(a.g_cache, m.cfg));

    std::vector<GenResult> results;
    const bool stream = prompts.size() == 1 && !a.json;
    if (stream) {
        // Stream: print the decoded text (or ids) as each token arrives.
        size_t printed = 0;
        std::string head;
        if (text) {
            head = tok->decode(prompts[0]);
            std::fputs(head.c_str(), stdout);
        } else {
            for (size_t i = 0; i < prompts[0].size(); ++i)
                std::printf("%s%lld", i ? " " : "", (long long)prompts[0][i]);
            std::fputs(" |", stdout);
        }
        std::fflush(stdout);
        auto on_token = [&](const GenResult& r) {
            if (text) {
                std::vector<int64_t> all = r.prompt_ids;
                all.insert(all.end(), r.ids.begin(), r.ids.end());
                const std::string s = tok->decode(all);
                if (s.size() > head.size() + printed && s.compare(0, head.size(), head) == 0) {
                    std::fputs(s.c_str() + head.size() + printed, stdout);
                    printed = s.size() - head.size();
                }
            } else {
                std::printf(" %lld", (long long)r.ids.back());
            }
            std::fflush(stdout);
        };
        results.push_back(generate(m, prompts[0], opt, preset.get(), on_token));
        std::printf("\n");
        std::fflush(stdout);
    } else {
        results = generate_batch(m, prompts, opt, preset.get());
    }
    for (size_t i = 0; i < results.size(); ++i) {
        const GenResult& r = results[i];
        if (a.json) {
            nlohmann::ordered_json j;
            j["prompt_ids"] = r.prompt_ids;
            j["ids"] = r.ids;
            if (text) j["text"] = tok->decode(r.ids);
            auto steps = nlohmann::ordered_json::array();
            for (const auto& s : r.steps) {
                auto top = nlohmann::ordered_json::array();
                for (const auto& [id, lp] : s.top) top.push_back({id, lp});
                steps.push_back({{"id", s.id}, {"logprob", s.logprob}, {"top", top}});
            }
            j["steps"] = steps;
            std::printf("%s\n", j.dump().c_str());
        } else if (!stream) {
            if (text) {
                std::printf("[%zu] %s%s\n", i, tok->decode(r.prompt_ids).c_str(),
                            tok->decode(r.ids).c_str());
            } else {
                std::printf("[%zu]", i);
                for (int64_t id : r.ids) std::printf(" %lld", (long long)id);
                std::printf("\n");
            }
        }
        std::fprintf(
            stderr,
            "[%zu] prompt: %zu tokens in %.3f s (%.1f tok/s); generation: %zu tokens, "
            "%.1f tok/s (cache %s, %s)\n",
            i, r.prompt_ids.size(), r.prefill_seconds,
            double(r.prompt_ids.size()) / std::max(r.prefill_seconds, 1e-9), r.ids.size(),
            r.decode_calls ? double(r.decode_calls) / std::max(r.decode_seconds, 1e-9) : 0.0,
            a.cache.c_str(), type_name<T>());
    }
    if (!a.save_g_cache.empty()) {
        Session<T> s(m, opt.cache);
        if (preset) s.set_g_cache(*preset);
        s.prefill(prompts[0]);
        save_g_cache(s.g_cache(), m.cfg, a.save_g_cache);
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
    cmd->add_option("-n,--max-new", a->max_new, "tokens to generate at most")
        ->capture_default_str();
    cmd->add_flag("--greedy", a->greedy, "argmax decoding");
    cmd->add_option("--temp", a->sc.temperature, "temperature (0 = greedy)")->capture_default_str();
    cmd->add_option("--top-k", a->sc.top_k, "keep the k best tokens (0 = off)")
        ->capture_default_str();
    cmd->add_option("--top-p", a->sc.top_p, "nucleus mass in (0,1] (1 = off)")
        ->capture_default_str();
    cmd->add_option("--top-p-mode", a->top_p_mode,
                    "reference: exclude the token that crosses p (spec §4.4); hf: include it")
        ->check(CLI::IsMember({"reference", "hf"}))
        ->capture_default_str();
    cmd->add_option("--min-p", a->sc.min_p, "drop tokens below min_p·p_max")->capture_default_str();
    cmd->add_option("--repeat-penalty", a->sc.repeat_penalty,
                    "penalty for repeated tokens (1 = off)")
        ->capture_default_str();
    cmd->add_option("--repeat-last-n", a->sc.repeat_last_n, "penalty window (-1 = all)")
        ->capture_default_str();
    cmd->add_option("--seed", a->sc.seed, "sampling seed")->capture_default_str();
    cmd->add_option("--cache", a->cache, "kvg (KV + G cache), kv (KV only) or none")
        ->check(CLI::IsMember({"kvg", "kv", "none"}))
        ->capture_default_str();
    cmd->add_option("--g-cache", a->g_cache, "run with the fixed operator of a saved G-cache");
    cmd->add_option("--save-g-cache", a->save_g_cache, "save prompt 0's G-cache to this file");
    cmd->add_flag("--no-eos-stop", a->no_eos_stop, "do not stop at EOS");
    cmd->add_flag("--json", a->json, "one JSON object per prompt on stdout (timings on stderr)");
    a->mo.add_to(cmd);
    cmd->callback([a]() {
        return with_dtype(a->mo.dtype, [&]<typename T>() { return run_generate<T>(*a); });
    });
}

}  // namespace pldr::cli
