// The serving engine over the public C++ API (see engine.h): the server is a client of
// include/pldr/pldr.hpp like the CLI and the Python module.
#include "serve/engine.h"

#include <algorithm>
#include <filesystem>

#include "pldr/pldr.hpp"

namespace pldr::serve {

namespace {

// A pldr::Error with the message unless the condition holds.
TokenLogprob token_logprob(int64_t id, double logprob, const std::vector<api::TopLogprob>& top) {
    TokenLogprob t;
    t.id = id;
    t.logprob = logprob;
    for (const auto& x : top) t.top.emplace_back(x.id, x.logprob);
    return t;
}

// Layer l's tensor `what` of a forward result, batch element 0 in double ([H,D,D] values;
// empty when the model has no such tensor).
std::vector<double> head_values(const api::ForwardResult& r, int64_t l, const char* what,
                                int64_t n) {
    const std::string name = "fwd.layer" + std::to_string(l) + "." + what;
    std::vector<double> v;
    if (!r.has(name)) return v;
    const api::Tensor& t = r.get(name);
    if (t.numel() < n) return v;
    v.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = t.at(i);
    return v;
}

}  // namespace

struct Engine::Impl {
    api::Model m;
};

struct Slot::Impl {
    const Engine& e;
    api::Session s;
    std::unique_ptr<api::Sampler> sampler;
    api::Tensor logits;  // of the last call; empty before prefill
    Impl(const Engine& eng) : e(eng), s(eng.p_->m, api::CacheMode::KVG, eng.ctx()) {}
};

// ---- Slot ----

Slot::Slot(const Engine& e) : p_(std::make_unique<Impl>(e)) {}
Slot::~Slot() = default;

void Slot::prefill(const std::vector<int64_t>& ids, const SamplingParams& sp) {
    p_->sampler = std::make_unique<api::Sampler>(sp);  // sp.top_p_hf: the server sets it
    p_->s.reset();
    // Cached echo reads the prompt's scores from the prefill's own pass; the decode steps keep
    // only their logits.
    p_->s.keep_outputs(p_->e.echo_mode() == EchoMode::CACHED);
    p_->logits = p_->s.prefill(ids);
    p_->s.keep_outputs(false);
}

TokenLogprob Slot::sample(int64_t top_n) {
    api::internal_check(p_->logits.storage && p_->sampler, "Slot::sample after prefill");
    const int64_t id = p_->sampler->sample(p_->logits, p_->s.tokens());
    const std::vector<double> lp = api::Sampler::log_softmax(p_->logits);
    return token_logprob(id, lp[size_t(id)],
                         top_n > 0 ? api::Sampler::top(lp, top_n) : std::vector<api::TopLogprob>{});
}

void Slot::reset() {
    p_->s.reset();
    p_->logits = {};
    p_->sampler.reset();
}

int64_t Slot::length() const {
    return p_->s.length();
}
const std::vector<int64_t>& Slot::tokens() const {
    return p_->s.tokens();
}

// ---- Engine ----

namespace {

// The model in float32 with the reference's numerics, on `device`, and its tokenizer (MODEL_DIR's,
// or the one given); whether it has one is checked after the context (serving needs it).
api::Model load_for_serving(const std::string& model_dir, const std::string& tokenizer,
                            const std::string& device, EchoMode echo) {
    require(echo != EchoMode::CACHED || api::describe_device(device) == "cpu",
            "--mode cached reads the prompt's scores from the prefill's outputs, which the CUDA "
            "backend does not keep yet: use --mode block with --device ",
            device);
    api::LoadOptions lo;
    lo.dtype = api::DType::F32;
    lo.reference_numerics = true;
    lo.tokenizer = tokenizer;
    lo.device = device;
    return api::Model::load(model_dir, lo);
}

}  // namespace

Engine::Engine(const std::string& model_dir, int64_t ctx, EchoMode echo,
               const std::string& tokenizer, const std::string& device)
    : p_(std::make_unique<Impl>(Impl{load_for_serving(model_dir, tokenizer, device, echo)})),
      echo_(echo) {
    const int64_t L = p_->m.info().max_position;
    require(ctx >= 0 && ctx <= L, "--ctx must be in [0, ", std::to_string(L),
            "] (max_position_embeddings; 0 = all of it), got ", std::to_string(ctx));
    ctx_ = ctx > 0 ? ctx : L;
    require(p_->m.has_tokenizer(), "serving needs a tokenizer: ",
            tokenizer.empty() ? model_dir + "/tokenizer.model" : tokenizer,
            " not found (give --tokenizer)");
    name_ = std::filesystem::path(model_dir).lexically_normal().filename().string();
    if (name_.empty()) name_ = std::filesystem::path(model_dir).parent_path().filename().string();
    if (name_.empty()) name_ = "pldr";
}

Engine::~Engine() = default;

int64_t Engine::vocab_size() const {
    return p_->m.info().vocab_size;
}
int64_t Engine::eos_id() const {
    return p_->m.info().eos_id;
}
int64_t Engine::bos_id() const {
    return p_->m.info().bos_id;
}
int64_t Engine::pad_id() const {
    return p_->m.info().pad_id;
}

std::vector<int64_t> Engine::tokenize(const std::string& text) const {
    return p_->m.tokenizer().encode(text);
}

std::string Engine::detokenize(const std::vector<int64_t>& ids) const {
    check_ids(ids);
    return p_->m.tokenizer().decode(ids);
}

std::string Engine::continuation_text(const std::vector<int64_t>& prompt,
                                      const std::vector<int64_t>& ids) const {
    check_ids(prompt);
    check_ids(ids);
    return p_->m.tokenizer().continuation_text(prompt, ids);
}

std::string Engine::piece(int64_t id) const {
    check_ids({id});
    return p_->m.tokenizer().piece(id);
}

std::string Engine::piece_text(int64_t id) const {
    check_ids({id});
    return p_->m.tokenizer().piece_text(id);
}

void Engine::pieces(const std::vector<int64_t>& ids, std::vector<std::string>* out,
                    std::vector<int64_t>* offsets) const {
    check_ids(ids);
    api::TokenPieces p = p_->m.tokenizer().pieces(ids);
    *out = std::move(p.text);
    *offsets = std::move(p.offset);
}

void Engine::check_ids(const std::vector<int64_t>& ids) const {
    const int64_t V = vocab_size();
    for (int64_t id : ids)
        require(id >= 0 && id < V, "token id ", std::to_string(id),
                " is outside the vocabulary [0, ", std::to_string(V), ")");
}

std::unique_ptr<Slot> Engine::new_slot() const {
    return std::unique_ptr<Slot>(new Slot(*this));
}

void Engine::decode_batch(const std::vector<Slot*>& slots, const std::vector<int64_t>& ids,
                          std::vector<std::string>* errors) const {
    api::internal_check(slots.size() == ids.size(), "decode_batch: one id per slot");
    errors->assign(slots.size(), {});
    // The slots that can step (the others get their error and stay as they were) run one shared
    // step: one forward pass over their new tokens, each slot attending over its own caches.
    std::vector<api::Session*> ss;
    std::vector<int64_t> step_ids;
    std::vector<size_t> at;
    const int64_t V = vocab_size();
    for (size_t i = 0; i < slots.size(); ++i) {
        const api::Session& s = slots[i]->p_->s;
        const int64_t id = ids[i];
        std::string& err = (*errors)[i];
        if (s.length() == 0)
            err = "decode before prefill";
        else if (s.length() >= s.capacity())
            err = "the context is full (" + std::to_string(s.capacity()) + " tokens)";
        else if (id < 0 || id >= V)
            err = "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                  std::to_string(V) + ")";
        if (!err.empty()) continue;
        for (size_t j : at)
            api::internal_check(slots[j] != slots[i], "decode_batch: a slot steps once");
        ss.push_back(&slots[i]->p_->s);
        step_ids.push_back(id);
        at.push_back(i);
    }
    if (ss.empty()) return;
    std::vector<api::Tensor> logits;
    try {
        logits = api::decode_batch(ss, step_ids);
    } catch (const std::exception& e) {
        for (size_t i : at) (*errors)[i] = e.what();
        return;
    }
    for (size_t k = 0; k < at.size(); ++k) slots[at[k]]->p_->logits = std::move(logits[k]);
}

std::vector<TokenLogprob> Engine::prompt_logprobs(const std::vector<int64_t>& ids, int64_t top_n,
                                                  const Slot* slot) const {
    std::vector<TokenLogprob> out;
    if (ids.size() < 2) return out;
    api::ScoreResult r;
    if (echo_ == EchoMode::BLOCK || !slot) {
        // The published evaluations' pass (spec §6.2): block scoring of (ids[:1], ids[1:]), one
        // pass over prompt[:-1].
        api::ScoreOptions o;
        o.mode = api::ScoreMode::BLOCK;
        o.top_logprobs = top_n;
        r = p_->m.score_ids({ids.front()}, {ids.begin() + 1, ids.end()}, o);
    } else {
        api::internal_check(slot->p_->s.tokens() == ids, "cached echo: the slot holds the prompt");
        r = slot->p_->s.score_prompt(top_n);
    }
    for (size_t i = 0; i < r.token_logprobs.size(); ++i)
        out.push_back(token_logprob(ids[i + 1], r.token_logprobs[i],
                                    i < r.top.size() ? r.top[i] : std::vector<api::TopLogprob>{}));
    return out;
}

Deductive Engine::deductive(const std::vector<int64_t>& ids, int64_t prefix_len) const {
    const api::ModelInfo& info = p_->m.info();
    const int64_t n = int64_t(ids.size());
    const int64_t hn = info.num_heads * info.head_dim * info.head_dim;
    require(n >= 1, "empty text: the deductive outputs need at least one token");
    require(n <= ctx_, "text of ", std::to_string(n), " tokens is longer than the context (",
            std::to_string(ctx_), ")");
    require(prefix_len >= 0 && prefix_len <= n, "prefix_len must be in [0, ", std::to_string(n),
            "], got ", std::to_string(prefix_len));
    check_ids(ids);
    Deductive d;
    d.layers = info.num_layers;
    d.heads = info.num_heads;
    d.head_dim = info.head_dim;
    d.tokens = n;
    d.prefix_len = prefix_len;
    const api::ForwardResult r = p_->m.forward(ids);
    for (int64_t l = 0; l < info.num_layers; ++l) {
        d.A.push_back(head_values(r, l, "A", hn));
        d.A_LM.push_back(head_values(r, l, "A_LM", hn));
        d.A_P.push_back(head_values(r, l, "Ap", hn));
        d.G.push_back(head_values(r, l, "G_LM", hn));
    }
    if (prefix_len > 0 && prefix_len < n) d.eps_G = api::eps_g(p_->m, ids, prefix_len);
    return d;
}

}  // namespace pldr::serve
