// Generation loop (see generate.h).
#include "infer/generate.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>

#include "core/parallel.h"  // parallel_for, kParallelWork

namespace pldr {

namespace {

double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

}  // namespace

template <typename T>
void check_generation_fits(const Model<T>& m, const std::vector<int64_t>& prompt, int64_t max_new) {
    PLDR_REQUIRE(!prompt.empty(), "empty prompt: give at least one token");
    PLDR_REQUIRE(max_new >= 1, "-n must be >= 1 (got ", max_new, ")");
    check_inputs(m, prompt.data(), 1, int64_t(prompt.size()));
    PLDR_REQUIRE(checked_add(int64_t(prompt.size()), max_new, "the prompt plus -n new tokens") <=
                     m.cfg.max_position,
                 "prompt of ", prompt.size(), " tokens plus ", max_new,
                 " new tokens is longer than the context (max_position_embeddings ",
                 m.cfg.max_position, ")");
}

template <typename T>
GenResult generate(const Model<T>& m, const std::vector<int64_t>& prompt,
                   const GenerateOptions& opt, const GCache<T>* preset,
                   const std::function<void(const GenResult&)>& on_token) {
    check_generation_fits(m, prompt, opt.max_new);
    Session<T> s(m, opt.cache,
                 std::min<int64_t>(m.cfg.max_position, int64_t(prompt.size()) + opt.max_new));
    s.keep_activations(false);
    if (preset) s.set_g_cache(*preset);
    Sampler sampler(opt.sampler);
    GenResult r;
    r.prompt_ids = prompt;
    std::vector<int64_t> history = prompt;
    std::vector<double> lp;
    double t0 = now();
    const std::vector<T>* logits = &s.prefill(prompt);
    r.prefill_seconds = now() - t0;
    const int64_t V = m.cfg.vocab_size;
    t0 = now();
    for (int64_t k = 0; k < opt.max_new; ++k) {
        if (k > 0) {
            logits = &s.decode(r.ids.back());
            ++r.decode_calls;
        }
        const int64_t id = sampler.sample(logits->data(), V, history);
        Sampler::log_softmax(logits->data(), V, lp);
        r.steps.push_back({id, lp[size_t(id)], Sampler::top_n(lp, opt.top_report)});
        r.ids.push_back(id);
        history.push_back(id);
        if (on_token) on_token(r);
        if (opt.stop_at_eos && id == m.cfg.eos_token_id) break;
    }
    r.decode_seconds = now() - t0;
    return r;
}

template <typename T>
std::vector<GenResult> generate_batch(const Model<T>& m,
                                      const std::vector<std::vector<int64_t>>& prompts,
                                      const std::vector<GenerateOptions>& opts,
                                      const GCache<T>* preset) {
    PLDR_REQUIRE(opts.size() == prompts.size(), "generate_batch: ", prompts.size(), " prompts but ",
                 opts.size(), " option sets");
    for (size_t i = 0; i < prompts.size(); ++i)
        check_generation_fits(m, prompts[i], opts[i].max_new);
    const size_t n = prompts.size();
    const int64_t V = m.cfg.vocab_size;
    std::vector<GenResult> out(n);
    std::vector<std::unique_ptr<Session<T>>> ss(n);
    std::vector<std::unique_ptr<Sampler>> samplers(n);
    std::vector<std::vector<int64_t>> history(n);
    for (size_t i = 0; i < n; ++i) {
        const GenerateOptions& o = opts[i];
        ss[i] = std::make_unique<Session<T>>(
            m, o.cache,
            std::min<int64_t>(m.cfg.max_position, int64_t(prompts[i].size()) + o.max_new));
        ss[i]->keep_activations(false);
        if (preset) ss[i]->set_g_cache(*preset);
        samplers[i] = std::make_unique<Sampler>(o.sampler);
        out[i].prompt_ids = prompts[i];
        history[i] = prompts[i];
        const double t0 = now();
        ss[i]->prefill(prompts[i]);
        out[i].prefill_seconds = now() - t0;
    }
    // Sample every live sequence from its logits (as generate does, each with its own sampler:
    // the sequences are independent, so they sample in parallel), then step the ones that go on
    // together.
    std::vector<size_t> live(n);
    for (size_t i = 0; i < n; ++i) live[i] = i;
    std::vector<char> goes_on(n);
    std::vector<std::string> errors(n);
    std::vector<Session<T>*> step;
    std::vector<int64_t> step_ids;
    const double t0 = now();
    while (!live.empty()) {
        const int64_t nl = int64_t(live.size());
        parallel_for(nl, nl * V * 16 > kParallelWork, [&](int64_t k) {
            const size_t i = live[size_t(k)];
            try {
                GenResult& r = out[i];
                const GenerateOptions& o = opts[i];
                const std::vector<T>& logits = ss[i]->logits();
                const int64_t id = samplers[i]->sample(logits.data(), V, history[i]);
                std::vector<double> lp;
                Sampler::log_softmax(logits.data(), V, lp);
                r.steps.push_back({id, lp[size_t(id)], Sampler::top_n(lp, o.top_report)});
                r.ids.push_back(id);
                history[i].push_back(id);
                goes_on[i] = int64_t(r.ids.size()) < o.max_new &&
                             !(o.stop_at_eos && id == m.cfg.eos_token_id);
                if (!goes_on[i]) r.decode_seconds = now() - t0;
            } catch (const std::exception& e) {
                errors[i] = e.what();
            }
        });
        for (size_t i : live) PLDR_REQUIRE(errors[i].empty(), "prompt ", i + 1, ": ", errors[i]);
        step.clear();
        step_ids.clear();
        std::vector<size_t> next;
        for (size_t i : live) {
            if (!goes_on[i]) continue;
            step.push_back(ss[i].get());
            step_ids.push_back(out[i].ids.back());
            next.push_back(i);
            ++out[i].decode_calls;
        }
        if (!step.empty()) decode_step(step, step_ids, false);
        live = std::move(next);
    }
    return out;
}

template <typename T>
std::vector<GenResult> generate_batch(const Model<T>& m,
                                      const std::vector<std::vector<int64_t>>& prompts,
                                      const GenerateOptions& opt, const GCache<T>* preset) {
    return generate_batch(m, prompts, std::vector<GenerateOptions>(prompts.size(), opt), preset);
}

template void check_generation_fits<float>(const Model<float>&, const std::vector<int64_t>&,
                                           int64_t);
template void check_generation_fits<double>(const Model<double>&, const std::vector<int64_t>&,
                                            int64_t);
template GenResult generate<float>(const Model<float>&, const std::vector<int64_t>&,
                                   const GenerateOptions&, const GCache<float>*,
                                   const std::function<void(const GenResult&)>&);
template GenResult generate<double>(const Model<double>&, const std::vector<int64_t>&,
                                    const GenerateOptions&, const GCache<double>*,
                                    const std::function<void(const GenResult&)>&);
template std::vector<GenResult> generate_batch<float>(const Model<float>&,
                                                      const std::vector<std::vector<int64_t>>&,
                                                      const GenerateOptions&, const GCache<float>*);
template std::vector<GenResult> generate_batch<double>(const Model<double>&,
                                                       const std::vector<std::vector<int64_t>>&,
                                                       const GenerateOptions&,
                                                       const GCache<double>*);
template std::vector<GenResult> generate_batch<float>(const Model<float>&,
                                                      const std::vector<std::vector<int64_t>>&,
                                                      const std::vector<GenerateOptions>&,
                                                      const GCache<float>*);
template std::vector<GenResult> generate_batch<double>(const Model<double>&,
                                                       const std::vector<std::vector<int64_t>>&,
                                                       const std::vector<GenerateOptions>&,
                                                       const GCache<double>*);

}  // namespace pldr
