// The C API (include/pldr/pldr.h) over the C++ API: every call catches every exception and
// turns it into a status code and the thread's last-error string.
#include "pldr/pldr.h"

#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <string>

#include "core/error.h"
#include "pldr/pldr.hpp"

struct pldr_model {
    pldr::api::Model m;
};
struct pldr_session {
    pldr::api::Session s;
};

namespace {

thread_local std::string g_last_error;

struct ArgError {
    std::string msg;
};

template <typename F>
pldr_status guarded(F&& f) {
    try {
        f();
        return PLDR_OK;
    } catch (const ArgError& e) {
        g_last_error = e.msg;
        return PLDR_ERR_INVALID_ARGUMENT;
    } catch (const std::bad_alloc&) {
        g_last_error = "out of memory";
        return PLDR_ERR_OUT_OF_MEMORY;
    } catch (const pldr::Error& e) {
        g_last_error = e.what();
        return pldr::api::is_internal_error(e) ? PLDR_ERR_INTERNAL : PLDR_ERR_FAILED;
    } catch (const std::exception& e) {
        g_last_error = e.what();
        return PLDR_ERR_INTERNAL;
    } catch (...) {
        g_last_error = "unknown error";
        return PLDR_ERR_INTERNAL;
    }
}

void need(const void* p, const char* what) {
    if (!p) throw ArgError{std::string(what) + " is NULL"};
}
char* dup(const std::string& s) {
    char* p = static_cast<char*>(std::malloc(s.size() + 1));
    if (!p) throw std::bad_alloc();
    std::memcpy(p, s.c_str(), s.size() + 1);
    return p;
}
void copy_logits(const pldr::api::Tensor& t, double* out) {
    if (!out) return;
    const auto v = t.to_vector();
    std::memcpy(out, v.data(), v.size() * sizeof(double));
}

}  // namespace

extern "C" {

const char* pldr_last_error(void) {
    return g_last_error.c_str();
}
const char* pldr_version(void) {
    return pldr::api::version();
}
void pldr_string_free(char* s) {
    std::free(s);
}

pldr_status pldr_model_load(const char* dir, const char* dtype, pldr_model** out) {
    return guarded([&] {
        need(dir, "dir");
        need(out, "out");
        *out = nullptr;
        pldr::api::LoadOptions o;
        o.dtype = pldr::api::dtype_from_name(dtype ? dtype : "f32");
        *out = new pldr_model{pldr::api::Model::load(dir, o)};
    });
}
void pldr_model_free(pldr_model* m) {
    delete m;
}

pldr_status pldr_model_get_info(const pldr_model* m, pldr_model_info* out) {
    return guarded([&] {
        need(m, "model");
        need(out, "out");
        const auto& i = m->m.info();
        *out = {i.vocab_size,
                i.num_layers,
                i.num_heads,
                i.head_dim,
                i.hidden_size,
                i.max_position,
                i.eos_id,
                i.pad_id,
                i.num_params,
                i.learned_g,
                m->m.has_tokenizer(),
                i.dtype == pldr::api::DType::F64};
    });
}

pldr_status pldr_tokenize(const pldr_model* m, const char* text, int64_t* ids, int64_t cap,
                          int64_t* n_out) {
    pldr_status st = PLDR_OK;
    const pldr_status g = guarded([&] {
        need(m, "model");
        need(text, "text");
        need(n_out, "n_out");
        if (cap > 0) need(ids, "ids");
        const auto v = m->m.tokenizer().encode(text);
        *n_out = int64_t(v.size());
        if (int64_t(v.size()) > cap) {
            g_last_error = "pldr_tokenize: " + std::to_string(v.size()) +
                           " ids do not fit in a buffer of " + std::to_string(cap);
            st = PLDR_ERR_BUFFER_TOO_SMALL;
            return;
        }
        std::copy(v.begin(), v.end(), ids);
    });
    return g != PLDR_OK ? g : st;
}

pldr_status pldr_detokenize(const pldr_model* m, const int64_t* ids, int64_t n, char** text_out) {
    return guarded([&] {
        need(m, "model");
        need(text_out, "text_out");
        if (n < 0) throw ArgError{"n must be >= 0"};
        if (n > 0) need(ids, "ids");
        *text_out = dup(m->m.tokenizer().decode(std::vector<int64_t>(ids, ids + n)));
    });
}

}  // extern "C"

// The C option structs from the tables of pldr/options.h: their defaults, and the C++ set of
// each (an unknown mode name or a negative string count is an invalid argument).
namespace {

#define PLDR_C_DEFAULT_F64(n, d) o.n = d;
#define PLDR_C_DEFAULT_I64(n, d) o.n = d;
#define PLDR_C_DEFAULT_U64(n, d) o.n = d;
#define PLDR_C_DEFAULT_BOOL(n, d) o.n = d;
#define PLDR_C_DEFAULT_STR(n, d) o.n = d;
#define PLDR_C_DEFAULT_STRS(n, d) \
    o.n = nullptr;                \
    o.n_##n = 0;
#define PLDR_C_DEFAULT_CACHE(n, d) o.n = d;
#define PLDR_C_DEFAULT_SCORE(n, d) o.n = d;
#define PLDR_C_DEFAULT_SAMPLING(n, d) o.n = pldr_sampling_default_options();
#define PLDR_C_DEFAULT_DTYPE(n, d) o.n = d;
#define PLDR_C_DEFAULT_CLIP(n, d) o.n = d;
#define PLDR_C_DEFAULT_DAG(n, d) o.n##_a = o.n##_ap = o.n##_g = 0;
#define PLDR_C_DEFAULT(K, n, d, r, s, cli, help) PLDR_C_DEFAULT_##K(n, d)

#define PLDR_FROM_C_F64(n) dst.n = src.n;
#define PLDR_FROM_C_I64(n) dst.n = src.n;
#define PLDR_FROM_C_U64(n) dst.n = src.n;
#define PLDR_FROM_C_BOOL(n) dst.n = src.n != 0;
#define PLDR_FROM_C_STR(n) dst.n = src.n ? src.n : "";
#define PLDR_FROM_C_STRS(n) dst.n = strings(src.n, src.n_##n, #n);
#define PLDR_FROM_C_CACHE(n) \
    if (src.n) dst.n = pldr::api::cache_mode_from_name(src.n);
#define PLDR_FROM_C_SCORE(n) \
    if (src.n) dst.n = pldr::api::score_mode_from_name(src.n);
#define PLDR_FROM_C_SAMPLING(n) from_c(src.n, dst.n);
#define PLDR_FROM_C_DTYPE(n) \
    if (src.n) dst.n = pldr::api::dtype_from_name(src.n);
#define PLDR_FROM_C_CLIP(n) \
    if (src.n) dst.n = pldr::api::clip_mode_from_name(src.n);
#define PLDR_FROM_C_DAG(n) dst.n = {src.n##_a, src.n##_ap, src.n##_g};
#define PLDR_FROM_C(K, n, d, r, s, cli, help) PLDR_FROM_C_##K(n)

std::vector<std::string> strings(const char* const* v, int64_t n, const char* what) {
    if (n < 0) throw ArgError{std::string("n_") + what + " must be >= 0"};
    if (n > 0 && !v) throw ArgError{std::string(what) + " is NULL but n_" + what + " > 0"};
    std::vector<std::string> out;
    for (int64_t i = 0; i < n; ++i) {
        if (!v[i]) throw ArgError{std::string(what) + "[" + std::to_string(i) + "] is NULL"};
        out.emplace_back(v[i]);
    }
    return out;
}
void from_c(const pldr_load_options& src, pldr::api::LoadOptions& dst) {
    PLDR_LOAD_OPTIONS(PLDR_FROM_C)
}
void from_c(const pldr_sampling& src, pldr::api::SamplingOptions& dst) {
    PLDR_SAMPLING_OPTIONS(PLDR_FROM_C)
}
void from_c(const pldr_generate_options& src, pldr::api::GenerateOptions& dst) {
    PLDR_GENERATE_OPTIONS(PLDR_FROM_C)
}
void from_c(const pldr_score_options& src, pldr::api::ScoreOptions& dst) {
    PLDR_SCORE_OPTIONS(PLDR_FROM_C)
}
void from_c(const pldr_train_options& src, pldr::api::TrainOptions& dst) {
    PLDR_TRAIN_OPTIONS(PLDR_FROM_C)
}
// The C++ set of a C struct (NULL: the defaults), its ranges checked.
template <typename Api, typename C>
Api options_of(const C* opt) {
    Api o;
    try {
        if (opt) from_c(*opt, o);
        pldr::api::check_options(o);
    } catch (const pldr::Error& e) {
        throw ArgError{e.what()};
    }
    return o;
}

}  // namespace

extern "C" {

pldr_load_options pldr_load_default_options(void) {
    pldr_load_options o;
    PLDR_LOAD_OPTIONS(PLDR_C_DEFAULT)
    return o;
}
pldr_status pldr_model_load_with(const char* dir, const pldr_load_options* opt, pldr_model** out) {
    return guarded([&] {
        need(dir, "dir");
        need(out, "out");
        *out = nullptr;
        *out = new pldr_model{pldr::api::Model::load(dir, options_of<pldr::api::LoadOptions>(opt))};
    });
}

pldr_sampling pldr_sampling_default_options(void) {
    pldr_sampling o;
    PLDR_SAMPLING_OPTIONS(PLDR_C_DEFAULT)
    return o;
}
pldr_generate_options pldr_generate_default_options(void) {
    pldr_generate_options o;
    PLDR_GENERATE_OPTIONS(PLDR_C_DEFAULT)
    return o;
}
pldr_score_options pldr_score_default_options(void) {
    pldr_score_options o;
    PLDR_SCORE_OPTIONS(PLDR_C_DEFAULT)
    return o;
}

pldr_status pldr_generate(const pldr_model* m, const char* prompt, const pldr_generate_options* opt,
                          pldr_token_callback cb, void* user, char** text_out) {
    return guarded([&] {
        need(m, "model");
        need(prompt, "prompt");
        need(text_out, "text_out");
        *text_out = nullptr;
        const auto g = options_of<pldr::api::GenerateOptions>(opt);
        pldr::api::TokenCallback f;
        if (cb)
            f = [&](const pldr::api::TokenInfo& t, const std::string&) {
                return cb(t.id, t.text.c_str(), t.logprob, user) != 0;
            };
        *text_out = dup(m->m.generate(prompt, g, f).text);
    });
}

pldr_status pldr_score(const pldr_model* m, const char* context, const char* continuation,
                       const char* mode, double* logprob, int* is_greedy) {
    pldr_score_options o = pldr_score_default_options();
    if (mode) o.mode = mode;
    return pldr_score_with(m, context, continuation, &o, logprob, is_greedy, nullptr, 0, nullptr);
}

pldr_status pldr_score_with(const pldr_model* m, const char* context, const char* continuation,
                            const pldr_score_options* opt, double* logprob, int* is_greedy,
                            double* token_logprobs, int64_t cap, int64_t* n_out) {
    pldr_status st = PLDR_OK;
    const pldr_status g = guarded([&] {
        need(m, "model");
        need(context, "context");
        need(continuation, "continuation");
        need(logprob, "logprob");
        if (token_logprobs) need(n_out, "n_out");
        if (cap < 0) throw ArgError{"cap must be >= 0"};
        const auto o = options_of<pldr::api::ScoreOptions>(opt);
        const auto r = m->m.score(context, continuation, o);
        *logprob = r.logprob;
        if (is_greedy) *is_greedy = r.is_greedy;
        if (n_out) *n_out = int64_t(r.token_logprobs.size());
        if (!token_logprobs) return;
        if (int64_t(r.token_logprobs.size()) > cap) {
            st = PLDR_ERR_BUFFER_TOO_SMALL;
            return;
        }
        std::copy(r.token_logprobs.begin(), r.token_logprobs.end(), token_logprobs);
    });
    return g != PLDR_OK ? g : st;
}

pldr_status pldr_forward_tensor(const pldr_model* m, const int64_t* ids, int64_t batch, int64_t seq,
                                const char* name, double* out, int64_t cap, int64_t* n_out,
                                int64_t* shape, int* ndim) {
    pldr_status st = PLDR_OK;
    const pldr_status g = guarded([&] {
        need(m, "model");
        need(ids, "ids");
        need(name, "name");
        need(n_out, "n_out");
        if (batch < 1 || seq < 1) throw ArgError{"batch and seq must be >= 1"};
        const auto r = m->m.forward(
            std::vector<int64_t>(ids, ids + pldr::checked_mul(batch, seq, "batch x seq")), batch);
        const auto& t = r.get(name);
        *n_out = t.numel();
        if (shape && ndim) {
            if (t.shape.size() > 8) throw ArgError{"tensor has more than 8 dimensions"};
            *ndim = int(t.shape.size());
            std::copy(t.shape.begin(), t.shape.end(), shape);
        }
        if (t.numel() > cap) {
            g_last_error = std::string("pldr_forward_tensor: ") + name + " has " +
                           std::to_string(t.numel()) + " values, the buffer " + std::to_string(cap);
            st = PLDR_ERR_BUFFER_TOO_SMALL;
            return;
        }
        need(out, "out");
        const auto v = t.to_vector();
        std::memcpy(out, v.data(), v.size() * sizeof(double));
    });
    return g != PLDR_OK ? g : st;
}

pldr_status pldr_loss_and_grad(const pldr_model* m, const int64_t* tokens, int64_t batch,
                               int64_t seq, double* loss, const char* grad_name, double* grads,
                               int64_t cap, int64_t* n_out) {
    pldr_status st = PLDR_OK;
    const pldr_status g = guarded([&] {
        need(m, "model");
        need(tokens, "tokens");
        need(loss, "loss");
        if (batch < 1 || seq < 2) throw ArgError{"batch must be >= 1 and seq >= 2"};
        const auto r = m->m.loss_and_grads(
            std::vector<int64_t>(tokens, tokens + pldr::checked_mul(batch, seq, "batch x seq")),
            batch);
        *loss = r.loss.value;
        if (!grads) return;
        need(grad_name, "grad_name");
        need(n_out, "n_out");
        const auto& t = r.get(grad_name);
        *n_out = t.numel();
        if (t.numel() > cap) {
            g_last_error = std::string("pldr_loss_and_grad: the gradient of ") + grad_name +
                           " has " + std::to_string(t.numel()) + " values, the buffer " +
                           std::to_string(cap);
            st = PLDR_ERR_BUFFER_TOO_SMALL;
            return;
        }
        const auto v = t.to_vector();
        std::memcpy(grads, v.data(), v.size() * sizeof(double));
    });
    return g != PLDR_OK ? g : st;
}

pldr_status pldr_session_new(const pldr_model* m, const char* cache, pldr_session** out) {
    return guarded([&] {
        need(m, "model");
        need(out, "out");
        *out = nullptr;
        *out = new pldr_session{
            pldr::api::Session(m->m, pldr::api::cache_mode_from_name(cache ? cache : "kvg"))};
    });
}
void pldr_session_free(pldr_session* s) {
    delete s;
}
pldr_status pldr_session_prefill(pldr_session* s, const int64_t* ids, int64_t n, double* logits) {
    return guarded([&] {
        need(s, "session");
        need(ids, "ids");
        if (n < 1) throw ArgError{"prefill needs n >= 1 tokens"};
        copy_logits(s->s.prefill(std::vector<int64_t>(ids, ids + n)), logits);
    });
}
pldr_status pldr_session_decode(pldr_session* s, int64_t id, double* logits) {
    return guarded([&] {
        need(s, "session");
        copy_logits(s->s.decode(id), logits);
    });
}
pldr_status pldr_session_reset(pldr_session* s) {
    return guarded([&] {
        need(s, "session");
        s->s.reset();
    });
}
int64_t pldr_session_length(const pldr_session* s) {
    return s ? s->s.length() : 0;
}

pldr_status pldr_inspect_model_dir(const char* dir, pldr_dir_info* out, char** config_json) {
    return guarded([&] {
        need(dir, "dir");
        need(out, "out");
        if (config_json) *config_json = nullptr;
        const pldr::api::ModelDirInfo i = pldr::api::inspect_model_dir(dir);
        *out = {i.num_params, int64_t(i.tensors.size()), i.sharded, i.learned_g,
                !i.tokenizer_path.empty()};
        if (config_json) *config_json = dup(i.config_json);
    });
}

pldr_status pldr_evaluate_shard(const pldr_model* m, const char* shard_path, int64_t batch,
                                int64_t batches, int64_t ctx, pldr_shard_eval* out) {
    return guarded([&] {
        need(m, "model");
        need(shard_path, "shard_path");
        need(out, "out");
        const pldr::api::ShardEval e =
            pldr::api::evaluate_shard(m->m, shard_path, batch, batches, ctx);
        *out = {e.ctx,  e.chunks, e.tokens, e.loss,           e.ce, e.accuracy, e.perplexity,
                e.dagA, e.dagAp,  e.dagG,   e.unigram_entropy};
    });
}

pldr_train_options pldr_train_default_options(void) {
    pldr_train_options o;
    PLDR_TRAIN_OPTIONS(PLDR_C_DEFAULT)
    return o;
}

pldr_status pldr_train(const pldr_train_options* opt, pldr_train_callback cb, void* user,
                       pldr_train_summary* out) {
    return guarded([&] {
        need(opt, "opt");
        need(out, "out");
        need(opt->data_dir, "opt->data_dir");
        need(opt->out_dir, "opt->out_dir");
        const auto o = options_of<pldr::api::TrainOptions>(opt);
        std::function<bool(const pldr::api::TrainStep&)> f;
        if (cb)
            f = [&](const pldr::api::TrainStep& s) {
                return cb(s.step, s.total, s.loss.value, s.lr, user) != 0;
            };
        const pldr::api::TrainSummary r = pldr::api::train(o, f);
        *out = {r.steps_done,
                r.start_step,
                r.num_params,
                r.stop_reason == "completed"  ? 0
                : r.stop_reason == "stop_at"  ? 1
                : r.stop_reason == "callback" ? 2
                                              : 3,
                r.has_eval,
                r.last_eval.value};
    });
}

}  // extern "C"
