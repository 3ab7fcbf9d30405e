// The serving engine over the internal library (see engine.h).
#include "serve/engine.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "infer/sampler.h"
#include "infer/session.h"
#include "io/model_load.h"
#include "io/tokenizer.h"
#include "model/forward.h"
#include "ops/ops.h"

namespace pldr::serve {

using Real = float;

struct Engine::Impl {
    Model<Real> m;
    std::unique_ptr<Tokenizer> tok;
};

struct Slot::Impl {
    const Engine& e;
    Session<Real> s;
    std::unique_ptr<Sampler> sampler;
    const std::vector<Real>* logits = nullptr;
    Impl(const Engine& eng) : e(eng), s(eng.p_->m, CacheMode::KVG, eng.ctx()) {}
};

namespace {

// log-softmax of a row in double, and the chosen id's entry with the top_n alternatives.
TokenLogprob take(const Real* row, int64_t V, int64_t id, int64_t top_n,
                  std::vector<double>& scratch) {
    Sampler::log_softmax(row, V, scratch);
    TokenLogprob t;
    t.id = id;
    t.logprob = scratch[size_t(id)];
    if (top_n > 0) t.top = Sampler::top_n(scratch, top_n);
    return t;
}

double rel_rms(const std::vector<double>& x, const std::vector<double>& ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        num += (x[i] - ref[i]) * (x[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    if (num == 0) return 0;
    return den > 0 ? std::sqrt(num / den) : INFINITY;
}

}  // namespace

// ---- Slot ----

Slot::Slot(const Engine& e) : p_(std::make_unique<Impl>(e)) {}
Slot::~Slot() = default;

void Slot::prefill(const std::vector<int64_t>& ids, const SamplingParams& sp) {
    SamplerConfig c;
#define PLDR_COPY_OPTION(K, n, d, r, s, cli, help) c.n = sp.n;
    PLDR_SAMPLING_OPTIONS(PLDR_COPY_OPTION)
#undef PLDR_COPY_OPTION
    c.validate();
    p_->sampler = std::make_unique<Sampler>(c);
    p_->s.reset();
    p_->logits = &p_->s.prefill(ids);
}

TokenLogprob Slot::sample(int64_t top_n) {
    PLDR_CHECK(p_->logits && p_->sampler);
    const int64_t V = p_->e.vocab_size();
    const int64_t id = p_->sampler->sample(p_->logits->data(), V, p_->s.tokens());
    std::vector<double> lp;
    return take(p_->logits->data(), V, id, top_n, lp);
}

void Slot::reset() {
    p_->s.reset();
    p_->logits = nullptr;
    p_->sampler.reset();
}

int64_t Slot::length() const {
    return p_->s.length();
}
const std::vector<int64_t>& Slot::tokens() const {
    return p_->s.tokens();
}

// ---- Engine ----

Engine::Engine(const std::string& model_dir, int64_t ctx, EchoMode echo,
               const std::string& tokenizer)
    : p_(std::make_unique<Impl>()), echo_(echo) {
    p_->m = load_model<Real>(model_dir, true, /*map_file=*/true);
    p_->m.set_reference_numerics(true);
    const int64_t L = p_->m.cfg.max_position;
    PLDR_REQUIRE(ctx >= 0 && ctx <= L, "--ctx must be in [0, ", L,
                 "] (max_position_embeddings; 0 = all of it), got ", ctx);
    ctx_ = ctx > 0 ? ctx : L;
    const std::string tp = tokenizer.empty() ? model_dir + "/tokenizer.model" : tokenizer;
    PLDR_REQUIRE(std::filesystem::exists(tp), "serving needs a tokenizer: ", tp,
                 " not found (give --tokenizer)");
    p_->tok = std::make_unique<Tokenizer>(tp);
    PLDR_REQUIRE(p_->tok->vocab_size() <= p_->m.cfg.vocab_size, tp, ": tokenizer has ",
                 p_->tok->vocab_size(), " pieces but the model's vocabulary is ",
                 p_->m.cfg.vocab_size);
    name_ = std::filesystem::path(model_dir).lexically_normal().filename().string();
    if (name_.empty()) name_ = std::filesystem::path(model_dir).parent_path().filename().string();
    if (name_.empty()) name_ = "pldr";
}

Engine::~Engine() = default;

int64_t Engine::vocab_size() const {
    return p_->m.cfg.vocab_size;
}
int64_t Engine::eos_id() const {
    return p_->m.cfg.eos_token_id;
}
int64_t Engine::bos_id() const {
    return p_->m.cfg.bos_token_id;
}
int64_t Engine::pad_id() const {
    return p_->m.cfg.pad_token_id;
}

std::vector<int64_t> Engine::tokenize(const std::string& text) const {
    return p_->tok->encode(text);
}

std::string Engine::detokenize(const std::vector<int64_t>& ids) const {
    check_ids(ids);
    std::vector<int64_t> known;
    known.reserve(ids.size());
    for (int64_t id : ids)
        if (id < p_->tok->vocab_size()) known.push_back(id);
    return p_->tok->decode(known);
}

std::string Engine::piece(int64_t id) const {
    check_ids({id});
    return id < p_->tok->vocab_size() ? p_->tok->piece(id) : std::string();
}

void Engine::pieces(const std::vector<int64_t>& ids, std::vector<std::string>* out,
                    std::vector<int64_t>* offsets) const {
    out->clear();
    offsets->clear();
    static const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD
    std::string prev;
    std::vector<int64_t> prefix;
    for (size_t i = 0; i < ids.size(); ++i) {
        prefix.push_back(ids[i]);
        std::string cur = detokenize(prefix);
        // A prefix that ends inside a character (byte pieces) decodes with a U+FFFD for each of
        // its bytes so far, which the next token's text replaces: give such a token no text, and
        // the whole character to the token that completes it (the last token gives what is left).
        if (i + 1 < ids.size() && cur.size() >= kReplacement.size() &&
            cur.compare(cur.size() - kReplacement.size(), kReplacement.size(), kReplacement) == 0) {
            offsets->push_back(int64_t(prev.size()));
            out->push_back({});
            continue;
        }
        // Otherwise the decoded text of a prefix extends the previous one; should it not, take
        // the common prefix as the previous text's length.
        size_t k = 0;
        while (k < prev.size() && k < cur.size() && prev[k] == cur[k]) ++k;
        offsets->push_back(int64_t(k));
        out->push_back(cur.substr(k));
        prev = std::move(cur);
    }
}

void Engine::check_ids(const std::vector<int64_t>& ids) const {
    const int64_t V = vocab_size();
    for (int64_t id : ids)
        PLDR_REQUIRE(id >= 0 && id < V, "token id ", id, " is outside the vocabulary [0, ", V, ")");
}

std::unique_ptr<Slot> Engine::new_slot() const {
    return std::unique_ptr<Slot>(new Slot(*this));
}

void Engine::decode_batch(const std::vector<Slot*>& slots, const std::vector<int64_t>& ids,
                          std::vector<std::string>* errors) const {
    PLDR_CHECK(slots.size() == ids.size());
    errors->assign(slots.size(), {});
    // The slots that can step (the others get their error and stay as they were) run one shared
    // step: one forward pass over their new tokens, each slot attending over its own caches.
    std::vector<Session<Real>*> ss;
    std::vector<int64_t> step_ids;
    std::vector<size_t> at;
    const int64_t V = vocab_size();
    for (size_t i = 0; i < slots.size(); ++i) {
        Session<Real>& s = slots[i]->p_->s;
        const int64_t id = ids[i];
        std::string& err = (*errors)[i];
        if (s.length() == 0)
            err = "decode before prefill";
        else if (s.length() >= s.capacity())
            err = cat("the context is full (", s.capacity(), " tokens)");
        else if (id < 0 || id >= V)
            err = cat("token id ", id, " is outside the vocabulary [0, ", V, ")");
        if (!err.empty()) continue;
        for (size_t j : at) PLDR_CHECK(slots[j] != slots[i]);
        ss.push_back(&s);
        step_ids.push_back(id);
        at.push_back(i);
    }
    try {
        decode_step(ss, step_ids, false);  // nothing reads a slot's activations after a decode
    } catch (const std::exception& e) {
        for (size_t i : at) (*errors)[i] = e.what();
        return;
    }
    for (size_t i : at) slots[i]->p_->logits = &slots[i]->p_->s.logits();
}

std::vector<TokenLogprob> Engine::prompt_logprobs(const std::vector<int64_t>& ids, int64_t top_n,
                                                  const Slot* slot) const {
    const Model<Real>& m = p_->m;
    const int64_t n = int64_t(ids.size()), V = m.cfg.vocab_size, d = m.cfg.hidden_size;
    std::vector<TokenLogprob> out;
    if (n < 2) return out;
    std::vector<Real> logits(size_t((n - 1) * V));
    if (echo_ == EchoMode::BLOCK || !slot) {
        // The published evaluations' pass (spec §6.2): prompt[:-1], every row through the head.
        check_inputs(m, ids.data(), 1, n - 1);
        Activations<Real> a;
        forward_layers(m, ids.data(), 1, n - 1, a);
        linear_forward(logits.data(), a.final_hidden().ptr(), m.lw.head, m.w.head_b, n - 1, d, V);
    } else {
        const Activations<Real>& a = slot->p_->s.last();
        PLDR_CHECK(a.S == n && slot->p_->s.tokens() == ids);
        linear_forward(logits.data(), a.final_hidden().ptr(), m.lw.head, m.w.head_b, n - 1, d, V);
    }
    std::vector<double> scratch;
    for (int64_t i = 1; i < n; ++i)
        out.push_back(take(logits.data() + (i - 1) * V, V, ids[size_t(i)], top_n, scratch));
    return out;
}

Deductive Engine::deductive(const std::vector<int64_t>& ids, int64_t prefix_len) const {
    const Model<Real>& m = p_->m;
    const Config& c = m.cfg;
    const int64_t n = int64_t(ids.size()), DD = c.head_dim * c.head_dim;
    const int64_t hn = c.num_heads * DD;
    PLDR_REQUIRE(n >= 1, "empty text: the deductive outputs need at least one token");
    PLDR_REQUIRE(n <= ctx_, "text of ", n, " tokens is longer than the context (", ctx_, ")");
    PLDR_REQUIRE(prefix_len >= 0 && prefix_len <= n, "prefix_len must be in [0, ", n, "], got ",
                 prefix_len);
    check_inputs(m, ids.data(), 1, n);
    Deductive d;
    d.layers = c.num_layers;
    d.heads = c.num_heads;
    d.head_dim = c.head_dim;
    d.tokens = n;
    d.prefix_len = prefix_len;
    auto widen = [&](const Tensor<Real>& t) {
        std::vector<double> v;
        if (t.numel() >= hn) v.assign(t.data.begin(), t.data.begin() + hn);
        return v;
    };
    auto gs = [&](int64_t len) {
        Activations<Real> a;
        forward_layers(m, ids.data(), 1, len, a);
        std::vector<std::vector<double>> g;
        for (const auto& la : a.layers) g.push_back(widen(la.G));
        return std::make_pair(std::move(a), std::move(g));
    };
    auto full = gs(n);
    const Activations<Real>& a = full.first;
    const std::vector<std::vector<double>>& gfull = full.second;
    for (const auto& la : a.layers) {
        d.A.push_back(widen(la.A));
        d.A_LM.push_back(widen(la.A_LM));
        d.A_P.push_back(widen(la.A_P));
        d.G.push_back(widen(la.G));
    }
    if (prefix_len > 0 && prefix_len < n) {
        const auto g0 = gs(prefix_len).second;
        const int64_t steps = n - prefix_len;
        d.eps_G.assign(size_t(steps), {});
#pragma omp parallel for schedule(dynamic, 1)
        for (int64_t t = 0; t < steps; ++t) {
            const auto g = t + 1 == steps ? gfull : gs(prefix_len + 1 + t).second;
            std::vector<double> e;
            for (int64_t l = 0; l < c.num_layers; ++l)
                e.push_back(rel_rms(g[size_t(l)], g0[size_t(l)]));
            d.eps_G[size_t(t)] = std::move(e);
        }
    }
    return d;
}

}  // namespace pldr::serve
