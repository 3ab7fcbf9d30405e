// The pldr C++ API: PLDR-LLM language models (Power Law Graph Attention) for programs, servers
// and language bindings. Small and stable, in the spirit of llama.h: an opaque Model (the
// compute precision, float32 or float64, is chosen at load and hidden), value types for options
// and results, and pldr::Error (a one-line message) for every error. Everything else of the
// library is private. The C API over the same functions is pldr.h.
//
//   pldr::api::Model m = pldr::api::Model::load("models/pldr-sotu-small");
//   pldr::api::GenerateOptions o;
//   o.max_tokens = 16;
//   std::cout << m.generate("The state of the Union is", o).text << "\n";
//
// Thread safety: a Model is immutable after load and may be shared by threads (every const
// member function is thread-safe); a Session, a Sampler and a Trainer belong to one thread.
// Token ids are int64. Shapes are row-major; B = batch, S = sequence length, H = heads,
// D = head dimension (dk), V = vocabulary.
#pragma once
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pldr/device.hpp"
#include "pldr/error.hpp"
#include "pldr/options.hpp"

namespace pldr::api {

// The library's version, "MAJOR.MINOR.PATCH".
const char* version();
// Errors: every function throws pldr::Error (pldr/error.hpp) with a one-line message. A broken
// internal invariant (a bug in pldr, not bad input) is a pldr::Error too; is_internal_error
// tells it apart (tools exit with code 2 for it, 1 otherwise). internal_check throws such an
// error ("internal check failed: <what>") unless cond holds.
bool is_internal_error(const std::exception& e);
void internal_check(bool cond, const std::string& what);
// Process-wide allocator tuning for programs that run forward or training steps: freed memory
// is kept for reuse instead of being returned to the system after each step (fewer page
// faults; peak memory unchanged). Call once at program start.
void tune_allocator();

enum class DType { F32, F64, I64 };  // I64: token ids (files.hpp int_tensor)
// The KV-cache and G-cache of a session: kvg (both), kv (KV only; G_LM recomputed from the
// frozen metric), none (the whole sequence recomputed every step).
enum class CacheMode { KVG, KV, NONE };
// Log-likelihood scoring: block (one pass over context + continuation), sequential (one pass
// per proper prefix), cached (KV + G cache from the context, then token by token).
enum class ScoreMode { BLOCK, SEQUENTIAL, CACHED };
// Gradient clipping: per element, the global 2-norm, or none.
enum class ClipMode { VALUE, NORM, NONE };

// "f32" | "f64", "kvg" | "kv" | "none", "block" | "sequential" | "cached"; throw pldr::Error on
// anything else.
DType dtype_from_name(const std::string& s);
CacheMode cache_mode_from_name(const std::string& s);
ScoreMode score_mode_from_name(const std::string& s);
ClipMode clip_mode_from_name(const std::string& s);  // "value" | "norm" | "none"
const char* name_of(DType d);
const char* name_of(CacheMode m);
const char* name_of(ScoreMode m);
const char* name_of(ClipMode m);

// A dense array owned by the library (shared, immutable): float32 or float64 values in the
// model's compute precision, or float64 for reductions. Cheap to copy (reference counted); the
// Python module hands its storage to numpy without a copy.
struct Tensor {
    DType dtype = DType::F64;
    std::vector<int64_t> shape;
    std::shared_ptr<const void> storage;  // numel() values of `dtype`, row-major

    int64_t numel() const;
    const void* data() const { return storage.get(); }
    const float* f32() const;             // throws unless dtype is F32
    const double* f64() const;            // throws unless dtype is F64
    const int64_t* i64() const;           // throws unless dtype is I64
    double at(int64_t flat_index) const;  // any dtype, bounds-checked
    std::vector<double> to_vector() const;
};

// The option sets are declared once, in the tables of pldr/options.h: each member there has its
// default, its range, its help and the surfaces that set it (CLI flag, Python keyword, the
// server's JSON field). for_each_option visits the members; check_options checks their ranges.
#define PLDR_OPTION_SET(Type, visit)  \
    PLDR_FOR_EACH_OPTION(Type, visit) \
    template <>                       \
    struct is_option_set<Type> : std::true_type {};

// Loading (PLDR_LOAD_OPTIONS): the compute precision (float32 or float64, whatever the stored
// dtype), the reference's float32 islands in float64, the tokenizer, low-precision weights kept
// packed (a bf16 or q8_0 model's products dequantize while streaming; dequantize = true reads
// them as float32 parameters, needed for gradients; float64 models always dequantize), the
// weights file mapped as the parameters (copy-on-write: only the pages a computation reads are
// resident), and the device.
struct LoadOptions {
    PLDR_LOAD_OPTIONS(PLDR_CXX_OPTION)
};
PLDR_OPTION_SET(LoadOptions, visit_load_options)

struct ModelInfo {
    std::string dir;
    DType dtype = DType::F32;
    int64_t vocab_size = 0, num_layers = 0, num_heads = 0, head_dim = 0, hidden_size = 0;
    int64_t max_position = 0;  // context length
    int64_t eos_id = 0, pad_id = 0, bos_id = 0;
    bool learned_g = true;  // false: fixed-G_LM model (identity, random or external G)
    int64_t num_params = 0;
    // How the linear weights (q, k, v, o, FFN, head) are stored: "f32", "f64", "f16", "bf16" or
    // "q8_0" (int8 blocks of 32 with a float32 scale each); and whether the products read them
    // packed in that format (packed_bytes of them) rather than as dequantized parameters.
    std::string weights = "f32";
    bool packed = false;
    int64_t packed_bytes = 0;
    bool mapped = false;  // the parameters are a mapping of the weights file (LoadOptions)
};

class Model;

// The text each token of a sequence adds to the decoded text of the tokens before it, and the
// byte offset of each in that text (Tokenizer::pieces).
struct TokenPieces {
    std::vector<std::string> text;
    std::vector<int64_t> offset;
};

// The model's SentencePiece tokenizer.
class Tokenizer {
  public:
    // Plain ids, no BOS/EOS.
    std::vector<int64_t> encode(const std::string& text) const;
    // The reference's prompt encoding: encode(text), except that "" gives [EOS].
    std::vector<int64_t> encode_prompt(const std::string& text) const;
    // Text of ids; throws for an id outside the vocabulary.
    std::string decode(const std::vector<int64_t>& ids) const;
    // The piece of one id as text (SentencePiece's "▁" is a space; byte pieces <0xNN> are
    // their byte), so that the pieces of a sequence concatenate to its decoded text.
    std::string token_text(int64_t id) const;
    // The raw SentencePiece piece ("▁the", "<0x0A>").
    std::string piece(int64_t id) const;
    // The piece with "▁" as a space (" the", "<0x0A>"): valid UTF-8 for every id (the keys of
    // `pldr serve`'s top_logprobs).
    std::string piece_text(int64_t id) const;
    // The text that generated ids add after prompt: decode(prompt + ids) after decode(prompt)
    // (a leading space of the first token kept), or decode(ids) when decode(prompt) is not a
    // prefix of it (Generation::text).
    std::string continuation_text(const std::vector<int64_t>& prompt,
                                  const std::vector<int64_t>& ids) const;
    // Each token's text in context: text[i] is what ids[i] adds to decode(ids[:i]) (the texts
    // concatenate to decode(ids)), offset[i] the byte where it starts. A token that ends inside
    // a UTF-8 character (byte pieces) gets "", and the token that completes the character all
    // of it.
    TokenPieces pieces(const std::vector<int64_t>& ids) const;
    int64_t vocab_size() const;
    int64_t eos_id() const;
    int64_t pad_id() const;
    // Data preparation's encoding of a document: encode(text), then EOS (never BOS).
    std::vector<int64_t> encode_document(const std::string& text) const;
    // A SentencePiece .model file on its own (without a model).
    static Tokenizer load(const std::string& path);

    struct Impl;
    explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
    const std::shared_ptr<const Impl>& impl() const { return impl_; }

  private:
    std::shared_ptr<const Impl> impl_;
};

// Every deductive output and intermediate of one forward pass, under the golden naming:
// fwd.logits [B,S,V], fwd.embed_ln, fwd.mask, and per layer i fwd.layer{i}.{q_rope, k_rope, q, k,
// v, A_ln, A, A_LM, Ap, G_LM, Ep, scores_masked, E, attn_out, out1, ffn_out, hidden}. The
// metric tensors A, A_LM, Ap (= A_P), G_LM are [B,H,D,D], E [B,H,S,S]. Fixed-G models have no
// A, A_ln, A_LM, Ap.
struct ForwardResult {
    std::vector<std::pair<std::string, Tensor>> tensors;  // in forward order
    int64_t num_layers = 0;
    // "" when every value is finite; else the first tensor in forward order that holds a NaN or
    // an infinity, as "fwd.layer2.A_LM (nan at element 17)" (the masks' −inf do not count).
    std::string non_finite;
    const Tensor& logits() const { return get("fwd.logits"); }
    // Throws pldr::Error when the tensor is absent.
    const Tensor& get(const std::string& name) const;
    bool has(const std::string& name) const;
    // get("fwd.layer{layer}.{what}"), what = A | A_LM | A_P | G_LM | E | ...
    const Tensor& layer(int64_t layer, const std::string& what) const;
};

// Sampling (PLDR_SAMPLING_OPTIONS, whose comment gives the order of the logit transforms);
// temperature 0 or greedy = argmax.
struct SamplingOptions {
    PLDR_SAMPLING_OPTIONS(PLDR_CXX_OPTION)
};
PLDR_OPTION_SET(SamplingOptions, visit_sampling_options)

struct TopLogprob {
    int64_t id = 0;
    double logprob = 0;
};

// One generated token.
struct TokenInfo {
    int64_t id = 0;
    std::string text;             // Tokenizer::token_text(id) ("" for a model without tokenizer)
    double logprob = 0;           // log-softmax of the unmodified logits
    std::vector<TopLogprob> top;  // the best alternatives, best first
};

// Generation (PLDR_GENERATE_OPTIONS): max_tokens, sampling, cache, stop_at_eos, stop (the
// generated text is cut before the first stop string it contains), top_logprobs, g_cache_file
// (a saved G-cache, Session::save_g_cache, whose fixed operator every step uses).
struct GenerateOptions {
    PLDR_GENERATE_OPTIONS(PLDR_CXX_OPTION)
};
PLDR_OPTION_SET(GenerateOptions, visit_generate_options)

struct Generation {
    std::vector<int64_t> prompt_ids, ids;  // ids: the generated tokens
    // The generated text as it continues the prompt's text (a leading space kept), cut before a
    // stop string.
    std::string text;
    std::vector<TokenInfo> tokens;
    std::string finish_reason;  // "length" | "eos" | "stop" | "callback"
    double prefill_seconds = 0, decode_seconds = 0;
};

// Called after each generated token with the token and the text generated so far; return false
// to stop.
using TokenCallback = std::function<bool(const TokenInfo&, const std::string& text)>;

// Scoring (PLDR_SCORE_OPTIONS): mode, top_logprobs.
struct ScoreOptions {
    PLDR_SCORE_OPTIONS(PLDR_CXX_OPTION)
};
PLDR_OPTION_SET(ScoreOptions, visit_score_options)

struct ScoreResult {
    double logprob = 0;      // Σ token_logprobs
    bool is_greedy = false;  // every continuation token is its position's argmax
    std::vector<int64_t> context_ids, continuation_ids;
    std::vector<double> token_logprobs;        // one per continuation token
    std::vector<std::vector<TopLogprob>> top;  // per continuation token (top_logprobs > 0)
};

struct DagCoefficients {
    double A = 0, Ap = 0, G = 0;  // c_A, c_Ap, c_G (each ≥ 0)
};

struct Loss {
    double value = 0;  // ce + Σ c·dag
    double ce = 0, accuracy = 0;
    double dagA = 0, dagAp = 0, dagG = 0;  // unweighted DAG metrics (learned-G models)
    int64_t scored = 0;                    // target tokens scored
};

struct Gradients {
    Loss loss;
    // d loss / d parameter for every parameter, under the spec's names (Model::parameter_names).
    std::vector<std::pair<std::string, Tensor>> grads;
    const Tensor& get(const std::string& name) const;  // throws when absent
};

// The per-layer operator cache of a session: A, A_LM, A_P, G_LM, each [H,D,D] (A, A_LM, A_P
// absent for fixed-G models).
struct GCacheLayer {
    Tensor A, A_LM, A_P, G_LM;
};

class Session;

class Model {
  public:
    // Loads a model directory (config.json + model.safetensors or a sharded index, and
    // tokenizer.model when present). Throws pldr::Error naming the file at fault.
    static Model load(const std::string& dir, const LoadOptions& opt = {});

    const ModelInfo& info() const;
    bool has_tokenizer() const;
    // Throws pldr::Error when the model has no tokenizer.
    const Tokenizer& tokenizer() const;

    // One full forward pass (no cache) over a [batch, ids.size() / batch] block of token ids.
    ForwardResult forward(const std::vector<int64_t>& ids, int64_t batch = 1) const;

    // Generation with the KV-cache and the G-cache. The text prompt is encoded with
    // Tokenizer::encode_prompt.
    Generation generate(const std::string& prompt, const GenerateOptions& opt = {},
                        const TokenCallback& on_token = {}) const;
    Generation generate_ids(const std::vector<int64_t>& prompt, const GenerateOptions& opt = {},
                            const TokenCallback& on_token = {}) const;
    // Throws the error generate_ids would give for these settings (sampling options, an empty
    // prompt, ids outside the vocabulary, prompt + max_tokens longer than the context, an
    // unreadable or mismatched G-cache file) without generating.
    void check_generation(const std::vector<int64_t>& prompt, const GenerateOptions& opt) const;
    // Several prompts, each with its own session and sampler (seeded alike, so each result
    // equals its one-at-a-time generation), stepping together (one forward pass per step over
    // the unfinished sequences). Stop strings end each sequence as in generate; there is no
    // callback here. generate and generate_ids are the same loop with one prompt.
    std::vector<Generation> generate_batch(const std::vector<std::vector<int64_t>>& prompts,
                                           const GenerateOptions& opt = {}) const;

    // Log-likelihood of a continuation given a context (the lm-eval encoding: context "" is
    // [EOS], the context's trailing whitespace moves to the continuation). The input is cut on
    // the left to the context length.
    ScoreResult score(const std::string& context, const std::string& continuation,
                      const ScoreOptions& opt = {}) const;
    ScoreResult score_ids(const std::vector<int64_t>& context,
                          const std::vector<int64_t>& continuation,
                          const ScoreOptions& opt = {}) const;
    // The lm-eval encoding of a text request into (context ids, continuation ids).
    std::pair<std::vector<int64_t>, std::vector<int64_t>> encode_request(
        const std::string& context, const std::string& continuation) const;
    // Many requests, scored in parallel; results in order.
    std::vector<ScoreResult> score_batch(
        const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>& requests,
        const ScoreOptions& opt = {}) const;

    // The training loss of a batch of sequences tokens [batch, S1] (input = tokens[:, :-1],
    // targets = tokens[:, 1:]) and its gradient with respect to every parameter.
    Gradients loss_and_grads(const std::vector<int64_t>& tokens, int64_t batch = 1,
                             const DagCoefficients& dag = {}) const;

    // Parameter names (spec §9.1) in layout order, and a copy of one parameter.
    std::vector<std::string> parameter_names() const;
    Tensor parameter(const std::string& name) const;

    // Writes the model as a model directory (config.json + model.safetensors, stored as F32 or
    // F64), atomically; the tokenizer is not copied. Packed weights are written as their
    // dequantized values (convert_model keeps a format). The output rule of every writer
    // (docs/errors.md "Outputs"): never the directory the model was loaded from, and an existing
    // model directory or training checkpoint only with `force`.
    void save(const std::string& dir, DType stored = DType::F32, bool force = false) const;

    struct Impl;
    explicit Model(std::shared_ptr<const Impl> impl);
    const std::shared_ptr<const Impl>& impl() const { return impl_; }

  private:
    std::shared_ptr<const Impl> impl_;
};

// A decoding session (batch 1): prefill, then one token at a time, with its own KV-cache and
// G-cache. The session keeps the model alive.
class Session {
  public:
    // max_len: KV-cache capacity (0 = the model's context length).
    explicit Session(const Model& model, CacheMode mode = CacheMode::KVG, int64_t max_len = 0);
    ~Session();
    Session(Session&&) noexcept;
    Session& operator=(Session&&) noexcept;

    // Starts the sequence with ids (≥ 1) and returns the logits [V] of its last position.
    Tensor prefill(const std::vector<int64_t>& ids);
    // Appends one token; returns the logits [V] of the new last position.
    Tensor decode(int64_t id);
    // The logits [V] of the last call; log-softmax of them in float64.
    Tensor logits() const;
    std::vector<double> logprobs() const;
    // Forgets the sequence and the caches (a G-cache set by set_g_cache stays).
    void reset();

    const std::vector<int64_t>& tokens() const;
    int64_t length() const;
    int64_t capacity() const;
    const Model& model() const;

    // The G-cache after the prefill, per layer.
    std::vector<GCacheLayer> g_cache() const;
    // Runs every later call with a saved G-cache's fixed operator (before prefill).
    void load_g_cache(const std::string& path);
    // Never a file of the model's own directory; a file of another model directory or training
    // checkpoint only with `force` (the output rule, docs/errors.md "Outputs").
    void save_g_cache(const std::string& path, bool force = false) const;
    // The deductive outputs of the last call (prefill: the whole prompt) under the golden naming;
    // fwd.logits is the last position's row only, [1,1,V] (the session computes no other).
    ForwardResult last_outputs() const;
    // Off: later calls keep no deductive outputs (last_outputs and score_prompt then throw),
    // only the logits: less memory, and no copy of the operators per step (generation, servers).
    // On by default; decode_batch keeps a step's outputs when any of its sessions keeps them.
    // A session of a model on a GPU keeps none: off is accepted, on refuses in one line.
    void keep_outputs(bool on);
    // The log-probability of every prefilled token after the first (context = the first token,
    // continuation = the rest), with top_logprobs alternatives each, read from the prefill's own
    // pass (no other forward; A and G saw the whole prompt, the last token included — block
    // scoring of the same split, Model::score_ids, runs one pass over tokens[:-1]). The last
    // call must be the prefill, with outputs kept.
    ScoreResult score_prompt(int64_t top_logprobs = 0) const;

    struct Impl;

  private:
    friend std::vector<Tensor> decode_batch(const std::vector<Session*>&,
                                            const std::vector<int64_t>&);
    std::unique_ptr<Impl> impl_;
};

// One decode step for several sessions (one token each); returns their logits in order.
// Sessions must be distinct and may use different models. The sessions of one model step
// together in one forward pass (each weight read once for all of them; their attention runs
// each against its own caches), so the logits equal those of decode() up to the rounding of a
// matrix product against a matrix-vector one, and last_outputs() is each session's own step.
// Throws before any session changes when an input is invalid.
std::vector<Tensor> decode_batch(const std::vector<Session*>& sessions,
                                 const std::vector<int64_t>& ids);

// A seeded sampler over logits (one per sequence; see SamplingOptions).
class Sampler {
  public:
    explicit Sampler(const SamplingOptions& opt);  // throws on invalid settings
    ~Sampler();
    Sampler(Sampler&&) noexcept;
    Sampler& operator=(Sampler&&) noexcept;
    // logits [V]; history = the ids so far (for the repetition penalty).
    int64_t sample(const Tensor& logits, const std::vector<int64_t>& history);
    // The log-softmax of unmodified logits, and its n best entries.
    static std::vector<double> log_softmax(const Tensor& logits);
    static std::vector<TopLogprob> top(const std::vector<double>& logprobs, int64_t n);

    struct Impl;

  private:
    std::unique_ptr<Impl> impl_;
};

// lm-eval style score requests, one JSON object per line: {"context", "continuation"} (text)
// or {"context_ids", "continuation_ids"}. Errors name "<where>:<line>".
struct ScoreRequest {
    int64_t line = 0;
    bool has_ids = false;
    std::vector<int64_t> context_ids, continuation_ids;
    std::string context, continuation;
};
std::vector<ScoreRequest> parse_score_requests(const std::string& jsonl, const std::string& where);

// ---- Benchmarks and audits ------------------------------------------------------------------

struct McAccuracy {
    int64_t items = 0;
    double mc1 = 0, mc2 = 0;       // TruthfulQA: mean MC1 and MC2
    double acc = 0, acc_norm = 0;  // PIQA
    // Per item: the item's metrics, and the summed log-likelihood of each choice (lls: MC1 or
    // PIQA choices; lls_mc2: TruthfulQA MC2 choices).
    std::vector<double> item_mc1, item_mc2, item_acc, item_acc_norm;
    std::vector<std::vector<double>> lls, lls_mc2;
};
// TruthfulQA MC1/MC2 from mc_task.json (the harness's 6-shot preamble); limit 0 = all items.
McAccuracy eval_truthfulqa(const Model& m, const std::string& mc_task_json, ScoreMode mode,
                           int64_t limit = 0);
// PIQA acc and acc_norm from valid.jsonl + labels.
McAccuracy eval_piqa(const Model& m, const std::string& jsonl, const std::string& labels,
                     ScoreMode mode, int64_t limit = 0);

struct Perplexity {
    double loglikelihood = 0;
    int64_t tokens = 0, bytes = 0, words = 0;
    double token_perplexity = 0, word_perplexity = 0, bits_per_byte = 0;
};
Perplexity perplexity(const Model& m, const std::string& text);

// eps_G (docs/audit.md) of a token sequence after a prefix, the measure of `pldr audit`:
// result[t − 1][l] = RMS(G_u(t) − G_c) / RMS(G_u(t)) for t = 1 … ids.size() − prefix_len and
// each layer l (0 when the numerator is 0), where G_c is layer l's G_LM [H,D,D] of a forward over
// ids[:prefix_len] (the operator a KVG cache keeps frozen) and G_u(t) that of an uncached forward
// over ids[:prefix_len + t]. The denominator is the RMS of the uncached operator G_u(t).
// prefix_len in [1, ids.size()].
std::vector<std::vector<double>> eps_g(const Model& m, const std::vector<int64_t>& ids,
                                       int64_t prefix_len);

// Statistics of G_LM per layer over a forward pass (every batch row and head; the `pldr dump`
// summary): mean, min and max of its entries.
struct GStats {
    int64_t layer = 0;
    std::vector<int64_t> shape;  // [B,H,D,D]
    double mean = 0, min = 0, max = 0;
};
std::vector<GStats> g_lm_stats(const ForwardResult& r);

struct AuditPrompt {
    std::string text;          // encoded with the tokenizer when ids is empty
    std::vector<int64_t> ids;  // token ids (for id-only models)
};
struct AuditOptions {
    std::vector<AuditPrompt> prompts;  // empty = the built-in prompt set
    int64_t steps = 16;                // greedy decode steps for eps_G
    int64_t cont_len = 64;             // sampled continuation length (seeds 100/101)
    int64_t pad = 4;                   // pad tokens appended for the padding check
    // Held-out tokens for the loss vs the unigram entropy: ids, else text, else the built-in
    // paragraph (id-only models: the prompts, concatenated). Cut to 4 × the context.
    std::vector<int64_t> heldout_ids;
    std::string heldout_text, heldout_source;
    // TruthfulQA mc_task.json and the number of MC2 items scored block vs sequential (0 = none).
    std::string truthfulqa;
    int64_t items = 0;
    std::string out_dir;  // writes audit.json and report.html when not empty
    bool force = false;   // out_dir may be an existing model directory or training checkpoint
};
struct AuditResult {
    std::string json, html, summary;  // audit.json, report.html, the printed summary
};
// The collapse audit (spec §8.1, docs/audit.md).
AuditResult audit(const Model& m, const AuditOptions& opt);
// A line of digits, commas and blanks with at least one digit: token ids, not text.
bool is_id_line(const std::string& s);
// "5,17,3" → {5, 17, 3}; a one-line error naming `what` on anything else.
std::vector<int64_t> parse_ids(const std::string& s, const std::string& what);
// An audit prompt file (`pldr audit --prompts`, `pldr train --audit-prompts`): one prompt per
// line, text or comma-separated token ids; blank lines skipped. A text line needs a tokenizer:
// without one (`has_tokenizer` false) it is an error naming `tokenizer_path`.
std::vector<AuditPrompt> read_audit_prompts(const std::string& path, bool has_tokenizer,
                                            const std::string& tokenizer_path);

// ---- Model directories, tokenizers, token shards, collapse ---------------------------------

// A model directory as stored (`pldr inspect`): validated (config.json, the weights files, every
// expected tensor with its shape) without loading the weights.
struct ModelDirInfo {
    std::string dir, weights_path;
    std::string tokenizer_path;  // "" = none
    bool sharded = false;
    bool learned_g = true;
    std::string g_type;       // custom_G_type of a fixed-G_LM model ("" when learned)
    std::string config_json;  // the config as config.json holds it (normalised)
    // Trained parameters (buffers excluded) per group ("embedding", "layer.attn", ...), sorted
    // by group name, and their total.
    std::vector<std::pair<std::string, int64_t>> param_groups;
    int64_t num_params = 0;
    struct StoredTensor {
        std::string name, dtype;  // dtype as in safetensors: "F32", "BF16", ...
        std::vector<int64_t> shape;
    };
    std::vector<StoredTensor> tensors;  // sorted by name
};
ModelDirInfo inspect_model_dir(const std::string& dir);

// SentencePiece training with the reference's special pieces ([PAD]=0 [UNK]=1 [START]=2
// [END]=3 [SEP]=4 [CLS]=5). Writes <output_prefix>.model and .vocab.
struct TokenizerTrainOptions {
    std::vector<std::string> input_files;  // UTF-8 text, one sentence per line
    std::string output_prefix;
    int64_t vocab_size = 32000;
    std::string model_type = "unigram";  // unigram | bpe | char | word
    double character_coverage = 0.9995;
    int64_t input_sentence_size = 5000000;  // sentences sampled (0 = all)
    int num_threads = 0;                    // 0 = every core
    unsigned seed = 0;
    bool verbose = false;  // SentencePiece's log on stderr
    bool force = false;    // may replace a file of a model directory or training checkpoint
};
void train_tokenizer(const TokenizerTrainOptions& opt);

// Tokenize and pack a corpus into token shards (train.pldrtok, valid.pldrtok, meta.json).
struct PrepareOptions {
    std::string tokenizer_path;
    std::vector<std::string> input_files;
    bool one_doc_per_line = true;  // false: each whole file is one document
    int64_t ctx = 1024;            // chunk length in tokens (≥ 2)
    int64_t block_docs = 1600;     // documents per packing block
    // Every round(1/f)-th document to validation (f in [0, 0.5]), or explicit validation files.
    double valid_fraction = 0.0;
    std::vector<std::string> valid_files;
    std::string output_dir;
    int num_threads = 0;  // 0 = the OpenMP default
    bool force = false;   // output_dir may be an existing model directory or training checkpoint
};
struct SplitStats {
    int64_t documents = 0, tokens = 0, chunks = 0, dropped_tokens = 0;
    double unigram_entropy = 0;  // nats/token of the written shard, pad excluded
};
struct PrepareStats {
    SplitStats train, valid;
    bool has_valid = false;
    int64_t empty_documents = 0, vocab_size = 0, ctx = 0;
};
PrepareStats prepare_corpus(const PrepareOptions& opt);

// The loss of a model on a prepared shard (every chunk, or `batches` batches of `batch` chunks),
// next to the shard's unigram entropy (`pldr perplexity`).
struct ShardEval {
    int64_t ctx = 0, chunks = 0, tokens = 0;
    double loss = 0, ce = 0, accuracy = 0, perplexity = 0;
    double dagA = 0, dagAp = 0, dagG = 0;  // learned-G models
    double unigram_entropy = 0;            // nats/token of the shard, pad excluded
};
// ctx 0 = the shard's chunk length; batches 0 = every chunk.
ShardEval evaluate_shard(const Model& m, const std::string& shard_path, int64_t batch,
                         int64_t batches = 0, int64_t ctx = 0);

// The fixed-G_LM model of a learned-G model (custom_G_type external, the metric learner
// dropped), G_LM taken from the prefill of `g_prompt` or, when empty, the reference's v510Gi
// recipe (a pass over the single token EOS). A fixed-G model comes back unchanged. The result
// has no tokenizer.
Model collapse(const Model& m, const std::vector<int64_t>& g_prompt = {});
// KL(a || b) and top-1 agreement of two models (same vocabulary and precision) over the tokens,
// in windows of `window` tokens.
struct ModelComparison {
    int64_t tokens = 0;  // predicted positions compared
    double kl_mean = 0, kl_max = 0, top1_agree = 0, nll_a = 0, nll_b = 0;
};
ModelComparison compare_models(const Model& a, const Model& b, const std::vector<int64_t>& ids,
                               int64_t window);

// ---- Low-precision weights ---------------------------------------------------------------------

// `pldr convert`: writes the model directory `dir` (any stored format) to `out_dir` with its
// linear weights — the q, k, v and output projections, the FFN's three weights and the LM head
// (the embedding when tied to it) — as `dtype`:
//   "f32"  every tensor float32;
//   "bf16" bfloat16, rounded to nearest even (config.json "dtype": "bfloat16");
//   "q8"   q8_0: per row, blocks of 32 inputs (the last block holds I % 32 when I is not a
//          multiple of 32), scale = max|w|/127 as float32, q = round(w/scale) as int8; stored
//          as NAME.q8 (I8 [O,I]) and NAME.q8_scale (F32 [O,ceil(I/32)]), config.json
//          "quantization": {"method": "q8_0", "block": 32}.
// Everything else (embedding lookup, LayerNorms, biases, PLGA operator, metric learner) is
// float32. tokenizer.model is copied; files are written atomically; out_dir must not be dir, and
// may be an existing model directory or training checkpoint only with `force` (docs/errors.md
// "Outputs").
//
// A stored q8 value may be any int8, −128 included (pldr writes ±127 at most, as above; other
// writers may use −128): the loader accepts it and every kernel multiplies it exactly (the
// vector kernels take the weights as |q| ≤ 128 and put their sign on the inputs, which the
// input quantizer keeps within ±127).
struct ConvertResult {
    std::string dtype;  // "f32" | "bf16" | "q8_0"
    int64_t packed_tensors = 0, packed_params = 0, packed_bytes = 0;
    int64_t bytes_in = 0, bytes_out = 0;  // tensor bytes of the weights read and written
};
ConvertResult convert_model(const std::string& dir, const std::string& out_dir,
                            const std::string& dtype, bool force = false);

// ---- Training --------------------------------------------------------------------------------

// Training (PLDR_TRAIN_OPTIONS): the model source (a preset or config_path for a new run; with
// resume_dir either may be given and must then match the checkpoint), the data and output
// directories, the maths (stored in the checkpoint: a resumed run takes them from it and refuses
// a different value given explicitly, except steps), and the run control (may change on resume).
// The table's comments say what each member does.
struct TrainOptions {
    PLDR_TRAIN_OPTIONS(PLDR_CXX_OPTION)
    // The maths members set explicitly ("lr", "dag", "clip", "numerics", ...): on resume they
    // must equal the checkpoint's. The CLI fills it from the flags given.
    std::vector<std::string> given = {"steps"};
};
PLDR_OPTION_SET(TrainOptions, visit_train_options)

struct TrainStep {
    int64_t step = 0, total = 0;
    Loss loss;
    double lr = 0, grad_norm = 0, tokens_per_s = 0;
    double elapsed_s = 0, eta_s = 0;
};

struct TrainEval {
    int64_t step = 0;
    ShardEval result;  // unigram_entropy unset
};

struct TrainSummary {
    int64_t steps_done = 0, start_step = 0, num_params = 0;
    std::string stop_reason;  // "completed" | "stop_at" | "callback" | "interrupted"
    bool has_eval = false;
    Loss last_eval;
    double tokens_per_s = 0;            // this run
    double valid_unigram_entropy = -1;  // nats/token of the valid shard (−1: none)
    int ranks = 1;                      // data-parallel ranks
    bool root = true;                   // this process is rank 0 (it reports)
    double comm_s_per_step = 0;         // data parallel: seconds per step in the collectives
};

// What training reports: every step (return false to stop with a checkpoint), every
// validation, informational lines. stop_flag (optional) is polled after every step: a signal
// handler may set it (a checkpoint is written and training stops, "interrupted"); a stop asked
// by on_step sets it too.
struct TrainCallbacks {
    std::function<bool(const TrainStep&)> on_step;
    std::function<void(const TrainEval&)> on_eval;
    std::function<void(const std::string&)> on_message;
    std::atomic<bool>* stop_flag = nullptr;
};

// The loss curves of a metrics file written by training (JSON lines): "train" (the loss of each
// step) and "valid" (each validation), x = step. A line that is not a JSON object with a numeric
// step and loss is an error naming the line; so is a file with no training line.
struct LossCurve {
    std::string label;
    std::vector<double> x, y;
};
std::vector<LossCurve> read_loss_curves(const std::string& metrics_path);
// The collapse curves of a metrics file (its "audit" lines, `pldr train --audit-every`), x =
// tokens seen: "eps_G" (max over prompts, steps and layers), "G_LM order (prompts)",
// "G_LM order (continuations)", "A_P order (prompts)", "A order (prompts)" (the rms order
// parameters; absent for fixed-G models) and "block-seq gap" (max |Δ logprob|). Empty when the
// file has no audit line; a malformed audit line is an error naming it.
std::vector<LossCurve> read_audit_curves(const std::string& metrics_path);

// How far the training run of a checkpoint directory had gone: its step and the tokens seen,
// step x ranks x batch x accum x (ctx - 1) from its training state (both -1 for a plain model
// directory, without train_state.safetensors). A malformed state is an error naming it.
struct CheckpointProgress {
    int64_t step = -1;
    double tokens = -1;
};
CheckpointProgress checkpoint_progress(const std::string& dir);

// Trains (or resumes) with checkpoints; on_step runs after every step and may return false to
// stop (a checkpoint is then written).
TrainSummary train(const TrainOptions& opt,
                   const std::function<bool(const TrainStep&)>& on_step = {});
TrainSummary train(const TrainOptions& opt, const TrainCallbacks& callbacks);

}  // namespace pldr::api
