/* The pldr C API: PLDR-LLM models through opaque handles, for C programs and foreign-function
 * bindings. The same functions as the C++ API (pldr.hpp).
 *
 * Errors: every function that can fail returns a pldr_status; PLDR_OK is 0. On failure the
 * calling thread's pldr_last_error() holds the one-line message (until its next failing call).
 * No C++ exception crosses this API. Strings returned by the library are freed with
 * pldr_string_free; handles with their *_free function (NULL is accepted). A model handle may
 * be used by several threads at once; a session handle by one thread at a time. */
#ifndef PLDR_PLDR_H
#define PLDR_PLDR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pldr_status {
    PLDR_OK = 0,
    PLDR_ERR_INVALID_ARGUMENT = 1, /* a NULL handle or pointer, a bad option or value */
    PLDR_ERR_FAILED = 2,           /* the library refused: bad input, files, configs */
    PLDR_ERR_BUFFER_TOO_SMALL = 3, /* the output buffer is too small; *n_out has the size */
    PLDR_ERR_OUT_OF_MEMORY = 4,
    PLDR_ERR_INTERNAL = 5 /* a bug in pldr */
} pldr_status;

typedef struct pldr_model pldr_model;
typedef struct pldr_session pldr_session;

/* The message of the calling thread's last failure ("" if none). */
const char* pldr_last_error(void);
/* "MAJOR.MINOR.PATCH". */
const char* pldr_version(void);
void pldr_string_free(char* s);

/* Loads a model directory; dtype "f32" or "f64" (NULL = "f32"). */
pldr_status pldr_model_load(const char* dir, const char* dtype, pldr_model** out);
void pldr_model_free(pldr_model* m);

typedef struct pldr_model_info {
    int64_t vocab_size, num_layers, num_heads, head_dim, hidden_size, max_position;
    int64_t eos_id, pad_id, num_params;
    int learned_g, has_tokenizer, is_f64;
} pldr_model_info;
pldr_status pldr_model_get_info(const pldr_model* m, pldr_model_info* out);

/* Token ids of text (plain encoding, no BOS/EOS). Writes at most cap ids; *n_out = the count
 * (PLDR_ERR_BUFFER_TOO_SMALL when it exceeds cap). */
pldr_status pldr_tokenize(const pldr_model* m, const char* text, int64_t* ids, int64_t cap,
                          int64_t* n_out);
/* Text of ids, a new string (pldr_string_free). */
pldr_status pldr_detokenize(const pldr_model* m, const int64_t* ids, int64_t n, char** text_out);

typedef struct pldr_sampling {
    double temperature; /* >= 0; 0 = greedy */
    double top_p;       /* (0, 1]; 1 = off */
    int64_t top_k;      /* >= 0; 0 = off */
    double min_p;       /* [0, 1) */
    double repetition_penalty;
    uint64_t seed;
    int greedy;
} pldr_sampling;

typedef struct pldr_generate_options {
    int64_t max_tokens;
    pldr_sampling sampling;
    int stop_at_eos;
    const char* cache; /* "kvg" | "kv" | "none"; NULL = "kvg" */
} pldr_generate_options;

/* Defaults: temperature 1, top_p 1, top_k 0, min_p 0, penalty 1, seed 0; 64 tokens, EOS stop. */
pldr_generate_options pldr_generate_default_options(void);

/* Called after each token with its id, its text and the log-probability; return 0 to stop. */
typedef int (*pldr_token_callback)(int64_t id, const char* piece, double logprob, void* user);

/* Generates a continuation of prompt; *text_out = the generated text (pldr_string_free). */
pldr_status pldr_generate(const pldr_model* m, const char* prompt, const pldr_generate_options* opt,
                          pldr_token_callback cb, void* user, char** text_out);

/* Log-likelihood of continuation given context; mode "block" | "sequential" | "cached". */
pldr_status pldr_score(const pldr_model* m, const char* context, const char* continuation,
                       const char* mode, double* logprob, int* is_greedy);

/* Forward pass over [batch, seq] ids; copies the tensor `name` (golden naming, e.g.
 * "fwd.logits", "fwd.layer0.G_LM") as float64 into out (cap values; *n_out = its size) and its
 * shape into shape[0..*ndim) (at most 8 dimensions). */
pldr_status pldr_forward_tensor(const pldr_model* m, const int64_t* ids, int64_t batch, int64_t seq,
                                const char* name, double* out, int64_t cap, int64_t* n_out,
                                int64_t* shape, int* ndim);

/* The loss of [batch, seq] training tokens; when grads != NULL, the gradient of the parameter
 * grad_name (a spec name) is copied into grads (cap values; *n_out = its size). */
pldr_status pldr_loss_and_grad(const pldr_model* m, const int64_t* tokens, int64_t batch,
                               int64_t seq, double* loss, const char* grad_name, double* grads,
                               int64_t cap, int64_t* n_out);

/* A decoding session with the KV-cache and the G-cache; cache "kvg" | "kv" | "none". */
pldr_status pldr_session_new(const pldr_model* m, const char* cache, pldr_session** out);
void pldr_session_free(pldr_session* s);
/* prefill / decode: run the tokens; the new last position's logits are copied into logits
 * (vocab_size values; NULL skips the copy). */
pldr_status pldr_session_prefill(pldr_session* s, const int64_t* ids, int64_t n, double* logits);
pldr_status pldr_session_decode(pldr_session* s, int64_t id, double* logits);
pldr_status pldr_session_reset(pldr_session* s);
int64_t pldr_session_length(const pldr_session* s);

/* ---- Model directories, evaluation, training ---- */

typedef struct pldr_dir_info {
    int64_t num_params;  /* trained parameters (buffers excluded) */
    int64_t num_tensors; /* stored tensors */
    int sharded, learned_g, has_tokenizer;
} pldr_dir_info;
/* Validates a model directory without loading its weights (`pldr inspect`); when config_json is
 * not NULL, *config_json = its normalised config.json (pldr_string_free). */
pldr_status pldr_inspect_model_dir(const char* dir, pldr_dir_info* out, char** config_json);

typedef struct pldr_shard_eval {
    int64_t ctx, chunks, tokens;
    double loss, ce, accuracy, perplexity;
    double dag_a, dag_ap, dag_g;
    double unigram_entropy; /* nats/token of the shard, pad excluded */
} pldr_shard_eval;
/* The loss of the model on a prepared shard (a .pldrtok file): batches of `batch` chunks,
 * `batches` of them (0 = every chunk), chunks of ctx tokens (0 = the shard's). */
pldr_status pldr_evaluate_shard(const pldr_model* m, const char* shard_path, int64_t batch,
                                int64_t batches, int64_t ctx, pldr_shard_eval* out);

typedef struct pldr_train_options {
    const char* preset;                       /* "tiny", ... or NULL */
    const char* config_path;                  /* a config.json for a new model, or NULL */
    const char* data_dir;                     /* train.pldrtok [+ valid.pldrtok] */
    const char* out_dir;                      /* checkpoint directory */
    const char* resume_dir;                   /* NULL = a new run */
    const char* dtype;                        /* "f32" | "f64"; NULL = "f32" */
    int64_t steps, batch, accum, ctx, warmup; /* ctx 0 = the shard's; warmup -1 = default */
    uint64_t seed;
    double lr;
    double dag_a, dag_ap, dag_g; /* DAG loss coefficients */
    int64_t eval_every, eval_batches, save_every, stop_at;
    int force; /* nonzero: out_dir may be another model directory or checkpoint (replaced) */
} pldr_train_options;
/* Defaults as pldr train: 1000 steps, batch 16, lr 1e-3, seed 1234, eval every 100 over 8
 * batches, checkpoints every 500. */
pldr_train_options pldr_train_default_options(void);

typedef struct pldr_train_summary {
    int64_t steps_done, start_step, num_params;
    int stopped;  /* 0: completed; 1: stop_at; 2: the callback; 3: interrupted */
    int has_eval; /* last_eval_loss is set */
    double last_eval_loss;
} pldr_train_summary;
/* Called after every step with the step, the total, the loss and the learning rate; return 0
 * to stop (a checkpoint is written). */
typedef int (*pldr_train_callback)(int64_t step, int64_t total, double loss, double lr, void* user);
pldr_status pldr_train(const pldr_train_options* opt, pldr_train_callback cb, void* user,
                       pldr_train_summary* out);

#ifdef __cplusplus
}
#endif

#endif /* PLDR_PLDR_H */
