// Generation loop (see generate.h).
#include "infer/generate.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "core/parallel.h"  // parallel_for, kParallelWork
#include "io/tokenizer.h"

namespace pldr {

namespace {

double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// One sequence of a generation: its session, sampler and history, and the per-token logic
// (sampling, log-probabilities, text, EOS and stop strings) that decides whether it goes on.
template <typename T>
class Sequence {
  public:
    Sequence(const Model<T>& m, const std::vector<int64_t>& prompt, const GenerateOptions& o,
             const GCache<T>* preset, const Tokenizer* tok, const DeviceDecoders<T>* device)
        : m_(m), o_(o), tok_(tok), sampler_(o.sampler), history_(prompt) {
        const int64_t len =
            std::min<int64_t>(m.cfg.max_position, int64_t(prompt.size()) + o.max_new);
        if (device) {
            dev_ = (*device)(o.cache, len);
            if (preset) dev_->set_g_cache(*preset);
        } else {
            s_.emplace(m, o.cache, len);
            s_->keep_activations(false);  // only the logits are read
            s_->keep_g_only(true);
            if (preset) s_->set_g_cache(*preset);
        }
        r.prompt_ids = prompt;
    }

    void prefill() {
        const double t0 = now();
        if (dev_)
            dev_->prefill(r.prompt_ids);
        else
            s_->prefill(r.prompt_ids);
        r.prefill_seconds = now() - t0;
        if (tok_) prompt_text_ = tok_->decode(r.prompt_ids);
    }

    // Samples the next token from the session's logits and records it with its log-probability,
    // its best alternatives and the text so far; ends the sequence at EOS, at a stop string (the
    // text cut before the earliest one) or at the token limit.
    void next() {
        const std::vector<T>& logits = dev_ ? dev_->logits() : s_->logits();
        const int64_t V = m_.cfg.vocab_size;
        const int64_t id = sampler_.sample(logits.data(), V, history_);
        Sampler::log_softmax(logits.data(), V, lp_);
        GenStep st{id, lp_[size_t(id)], {}};
        if (o_.top_report > 0) st.top = Sampler::top_n(lp_, o_.top_report);
        r.steps.push_back(std::move(st));
        r.ids.push_back(id);
        history_.push_back(id);
        if (tok_) r.text = tok_->continuation_text(r.prompt_ids, r.ids, prompt_text_);
        size_t cut = std::string::npos;
        for (const auto& s : o_.stop) cut = std::min(cut, r.text.find(s));
        if (cut != std::string::npos) {
            r.text.resize(cut);
            end("stop");
        } else if (o_.stop_at_eos && id == m_.cfg.eos_token_id) {
            end("eos");
        } else if (int64_t(r.ids.size()) >= o_.max_new) {
            end("length");
        }
    }

    // The caller's callback asked to stop: the reason unless EOS or a stop string ended it.
    void stop_by_callback() {
        if (!done_ || r.finish_reason == "length") end("callback");
    }

    bool done() const { return done_; }
    // The CPU's session (null on a device), which steps with the others in decode_step.
    Session<T>* session() { return s_ ? &*s_ : nullptr; }
    // The device's decoder (null on the CPU), which steps with the others in decode_group.
    DeviceDecoder<T>* device_decoder() { return dev_.get(); }

    GenResult r;

  private:
    void end(const char* reason) {
        r.finish_reason = reason;
        done_ = true;
    }

    const Model<T>& m_;
    const GenerateOptions& o_;
    const Tokenizer* tok_;
    std::optional<Session<T>> s_;
    std::unique_ptr<DeviceDecoder<T>> dev_;
    Sampler sampler_;
    std::vector<int64_t> history_;  // prompt + generated ids (the repetition penalty's window)
    std::string prompt_text_;       // decode(prompt), with a tokenizer
    std::vector<double> lp_;
    bool done_ = false;
};

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
std::vector<GenResult> generate_batch(const Model<T>& m,
                                      const std::vector<std::vector<int64_t>>& prompts,
                                      const std::vector<GenerateOptions>& opts,
                                      const GCache<T>* preset, const Tokenizer* tok,
                                      const GenCallback& on_token,
                                      const DeviceDecoders<T>* device) {
    PLDR_REQUIRE(opts.size() == prompts.size(), "generate_batch: ", prompts.size(), " prompts but ",
                 opts.size(), " option sets");
    const size_t n = prompts.size();
    for (size_t i = 0; i < n; ++i) {
        check_generation_fits(m, prompts[i], opts[i].max_new);
        for (const auto& s : opts[i].stop) PLDR_REQUIRE(!s.empty(), "empty stop string");
        PLDR_REQUIRE(opts[i].stop.empty() || tok, "stop strings need a tokenizer");
    }
    const int64_t V = m.cfg.vocab_size;
    std::vector<std::unique_ptr<Sequence<T>>> seqs;
    for (size_t i = 0; i < n; ++i) {
        seqs.push_back(std::make_unique<Sequence<T>>(m, prompts[i], opts[i], preset, tok, device));
        seqs.back()->prefill();
    }
    // Every live sequence takes its next token from its logits (each with its own sampler: the
    // sequences are independent, so they sample in parallel); the callbacks run after them on
    // this thread, then the sequences that go on step together.
    std::vector<size_t> live(n);
    for (size_t i = 0; i < n; ++i) live[i] = i;
    std::vector<std::string> errors(n);
    std::vector<Session<T>*> step;
    std::vector<DeviceDecoder<T>*> dev_step;
    std::vector<int64_t> step_ids, dev_ids;
    const double t0 = now();
    while (!live.empty()) {
        const int64_t nl = int64_t(live.size());
        parallel_for(nl, nl * V * 16 > kParallelWork, [&](int64_t k) {
            const size_t i = live[size_t(k)];
            try {
                seqs[i]->next();
            } catch (const std::exception& e) {
                errors[i] = e.what();
            }
        });
        for (size_t i : live)
            PLDR_REQUIRE(errors[i].empty(), n > 1 ? cat("prompt ", i + 1, ": ") : std::string(),
                         errors[i]);
        step.clear();
        step_ids.clear();
        dev_step.clear();
        dev_ids.clear();
        std::vector<size_t> next;
        for (size_t i : live) {
            Sequence<T>& q = *seqs[i];
            if (on_token && !on_token(i, q.r)) q.stop_by_callback();
            if (q.done()) {
                q.r.decode_seconds = now() - t0;
                continue;
            }
            if (Session<T>* cpu = q.session()) {
                step.push_back(cpu);
                step_ids.push_back(q.r.ids.back());
            } else {  // a device's sessions step together too
                dev_step.push_back(q.device_decoder());
                dev_ids.push_back(q.r.ids.back());
            }
            next.push_back(i);
            ++q.r.decode_calls;
        }
        if (!step.empty()) decode_step(step, step_ids, false);
        if (!dev_step.empty()) dev_step[0]->decode_group(dev_step, dev_ids);
        live = std::move(next);
    }
    std::vector<GenResult> out;
    out.reserve(n);
    for (auto& q : seqs) out.push_back(std::move(q->r));
    return out;
}

template <typename T>
std::vector<GenResult> generate_batch(const Model<T>& m,
                                      const std::vector<std::vector<int64_t>>& prompts,
                                      const GenerateOptions& opt, const GCache<T>* preset,
                                      const Tokenizer* tok, const GenCallback& on_token,
                                      const DeviceDecoders<T>* device) {
    return generate_batch(m, prompts, std::vector<GenerateOptions>(prompts.size(), opt), preset,
                          tok, on_token, device);
}

template <typename T>
GenResult generate(const Model<T>& m, const std::vector<int64_t>& prompt,
                   const GenerateOptions& opt, const GCache<T>* preset, const Tokenizer* tok,
                   const GenCallback& on_token) {
    return std::move(
        generate_batch(m, {prompt}, std::vector<GenerateOptions>{opt}, preset, tok, on_token)
            .front());
}

#define PLDR_INSTANTIATE(T)                                                                        \
    template void check_generation_fits<T>(const Model<T>&, const std::vector<int64_t>&, int64_t); \
    template GenResult generate<T>(const Model<T>&, const std::vector<int64_t>&,                   \
                                   const GenerateOptions&, const GCache<T>*, const Tokenizer*,     \
                                   const GenCallback&);                                            \
    template std::vector<GenResult> generate_batch<T>(                                             \
        const Model<T>&, const std::vector<std::vector<int64_t>>&, const GenerateOptions&,         \
        const GCache<T>*, const Tokenizer*, const GenCallback&, const DeviceDecoders<T>*);         \
    template std::vector<GenResult> generate_batch<T>(                                             \
        const Model<T>&, const std::vector<std::vector<int64_t>>&,                                 \
        const std::vector<GenerateOptions>&, const GCache<T>*, const Tokenizer*,                   \
        const GenCallback&, const DeviceDecoders<T>*);
PLDR_INSTANTIATE(float)
PLDR_INSTANTIATE(double)
#undef PLDR_INSTANTIATE

}  // namespace pldr
