/* The option sets of pldr, each declared once. Every surface is derived from these tables: the
 * C++ structs (pldr.hpp), the C structs and their defaults (pldr.h), the range checks, the CLI
 * flags with their help (tools/pldr), the Python keywords (python/) and the server's JSON fields
 * (src/serve). Adding an option to a set is one line here, plus the code that uses it.
 *
 * Each row is X(KIND, name, default, range, surfaces, cli, help):
 *   KIND      F64 (double), I64 (int64_t), U64 (uint64_t), BOOL (bool; int in C), STR (a string;
 *             const char* in C, NULL = ""), STRS (a list of strings; in C a pointer and a count
 *             n_<name>), CACHE, SCORE, DTYPE and CLIP (the enums CacheMode, ScoreMode, DType,
 *             ClipMode; their names in C, NULL = the default), SAMPLING (the nested sampling
 *             set), DAG (the DAG coefficients c_A, c_Ap, c_G: "a,b,c" on the CLI, a sequence
 *             of three numbers in Python, <name>_a, <name>_ap, <name>_g in C).
 *   default   a number (0 / 1 for BOOL), a string literal (STR and the enums), or 0 (STRS,
 *             SAMPLING, DAG: empty / the set's defaults / zeros).
 *   range     the accepted values of a number as an interval: "[0, inf)", "(0, 1]", "[-2, 2]"
 *             (finite values only, except where an end is inf); the choices of a string:
 *             "fp32|bf16" (a leading | admits ""); "" = any value of the type.
 *   surfaces  where a user sets it besides C and C++: PLDR_OPT_CLI (a flag of the commands that
 *             take the set), PLDR_OPT_PY (a Python keyword), PLDR_OPT_JSON (a field of the
 *             server's request bodies); PLDR_OPT_ALL = all three. PLDR_OPT_MATHS marks a
 *             training option that is part of the maths (see below).
 *   cli       the flag ("--temp"; "" = none).
 *   help      one line: what it does, in the CLI's help, the Python docstrings and the docs.
 * The Python keyword and the JSON field are `name`. */
#ifndef PLDR_OPTIONS_H
#define PLDR_OPTIONS_H

#define PLDR_OPT_CLI 1u
#define PLDR_OPT_PY 2u
#define PLDR_OPT_JSON 4u
#define PLDR_OPT_ALL 7u
/* Not a surface: a training option that is part of the maths, stored in the checkpoint; a
 * resumed run refuses a different value given explicitly. */
#define PLDR_OPT_MATHS 8u

/* Loading a model (Model::load): every command that runs a model takes these. */
#define PLDR_LOAD_OPTIONS(X)                                                                      \
    X(DTYPE, dtype, "f32", "", PLDR_OPT_CLI | PLDR_OPT_PY, "--dtype",                             \
      "compute precision, whatever the stored dtype: f32 or f64")                                 \
    X(BOOL, reference_numerics, 1, "", PLDR_OPT_PY, "",                                           \
      "float64: the reference's float32 islands (golden parity), else pure float64 (the CLI's "   \
      "--numerics reference|exact)")                                                              \
    X(STR, tokenizer, "", "", PLDR_OPT_PY, "",                                                    \
      "SentencePiece model (\"\" = DIR/tokenizer.model when present)")                            \
    X(BOOL, dequantize, 0, "", PLDR_OPT_CLI | PLDR_OPT_PY, "--dequantize",                        \
      "read bf16 / q8_0 weights as float32 parameters instead of streaming them packed (needed "  \
      "for gradients)")                                                                           \
    X(BOOL, map_file, 1, "", PLDR_OPT_PY, "",                                                     \
      "map the weights file as the parameters (copy-on-write) where it stores them as the model " \
      "does; else read it into memory")                                                           \
    X(STR, device, "cpu", "", PLDR_OPT_CLI | PLDR_OPT_PY, "--device",                             \
      "where the model runs: cpu, or cuda[:N] (docs/gpu.md)")

/* Sampling (infer/sampler.h gives the exact arithmetic). The logit transforms run in this order:
 * the repetition, presence and frequency penalties, temperature, top-p, top-k, min-p, then a
 * seeded draw; temperature 0 or greedy = argmax. */
#define PLDR_SAMPLING_OPTIONS(X)                                                               \
    X(F64, temperature, 1.0, "[0, inf)", PLDR_OPT_ALL, "--temp", "temperature (0 = greedy)")   \
    X(F64, top_p, 1.0, "(0, 1]", PLDR_OPT_ALL, "--top-p", "nucleus mass in (0, 1] (1 = off)")  \
    X(I64, top_k, 0, "[-1, inf)", PLDR_OPT_ALL, "--top-k",                                     \
      "keep the k best tokens (0 or -1 = off)")                                                \
    X(F64, min_p, 0.0, "[0, 1)", PLDR_OPT_ALL, "--min-p",                                      \
      "drop tokens whose probability is below min_p times the best one's")                     \
    X(F64, repetition_penalty, 1.0, "(0, inf)", PLDR_OPT_ALL, "--repeat-penalty",              \
      "divide positive logits of recent tokens by this, multiply negative ones (1 = off)")     \
    X(I64, repeat_last_n, 64, "[-1, inf)", PLDR_OPT_ALL, "--repeat-last-n",                    \
      "the repetition penalty's window of recent tokens (-1 = all)")                           \
    X(F64, presence_penalty, 0.0, "[-2, 2]", PLDR_OPT_ALL, "--presence-penalty",               \
      "subtract this from the logit of every token generated so far (OpenAI)")                 \
    X(F64, frequency_penalty, 0.0, "[-2, 2]", PLDR_OPT_ALL, "--frequency-penalty",             \
      "subtract this times its count from the logit of every token generated so far (OpenAI)") \
    X(U64, seed, 0, "", PLDR_OPT_ALL, "--seed", "sampling seed")                               \
    X(BOOL, greedy, 0, "", PLDR_OPT_CLI | PLDR_OPT_PY, "--greedy", "argmax decoding")          \
    X(BOOL, top_p_hf, 0, "", PLDR_OPT_CLI | PLDR_OPT_PY, "--top-p-hf",                         \
      "top-p keeps the token that crosses p (Hugging Face; the server's rule) instead of "     \
      "dropping it (the reference)")

/* Generation (Model::generate). */
#define PLDR_GENERATE_OPTIONS(X)                                                                   \
    X(I64, max_tokens, 64, "[1, inf)", PLDR_OPT_ALL, "-n,--max-new", "tokens to generate at most") \
    X(SAMPLING, sampling, 0, "", PLDR_OPT_ALL, "", "the sampling settings")                        \
    X(CACHE, cache, "kvg", "", PLDR_OPT_CLI | PLDR_OPT_PY, "--cache",                              \
      "kvg (KV + G cache), kv (KV only) or none (recompute everything)")                           \
    X(BOOL, stop_at_eos, 1, "", PLDR_OPT_CLI | PLDR_OPT_PY, "--no-eos-stop",                       \
      "stop after the EOS token")                                                                  \
    X(STRS, stop, 0, "", PLDR_OPT_PY, "",                                                          \
      "stop when the generated text contains one of these (the text is cut before it)")            \
    X(I64, top_logprobs, 5, "[0, inf)", PLDR_OPT_PY, "", "alternatives kept per token")            \
    X(STR, g_cache_file, "", "", PLDR_OPT_CLI | PLDR_OPT_PY, "--g-cache",                          \
      "run every step with the fixed operator of a saved G-cache")

/* Log-likelihood scoring (Model::score). */
#define PLDR_SCORE_OPTIONS(X)                                                                \
    X(SCORE, mode, "block", "", PLDR_OPT_CLI | PLDR_OPT_PY, "--mode",                        \
      "block (one pass), sequential (one pass per prefix) or cached (KV + G cache from the " \
      "context)")                                                                            \
    X(I64, top_logprobs, 0, "[0, inf)", PLDR_OPT_CLI | PLDR_OPT_PY, "--top-logprobs",        \
      "alternatives per continuation token (0 = none)")

/* Training (pldr::api::train, `pldr train`). The rows marked PLDR_OPT_MATHS are stored in the
 * checkpoint: on resume they come from it, and one given explicitly must equal it (steps may
 * change the schedule's length). */
#define PLDR_TRAIN_CP (PLDR_OPT_CLI | PLDR_OPT_PY)
#define PLDR_TRAIN_MATHS (PLDR_OPT_CLI | PLDR_OPT_PY | PLDR_OPT_MATHS)
#define PLDR_TRAIN_OPTIONS(X)                                                                   \
    X(STR, preset, "", "|tiny|small|v51-110M", PLDR_TRAIN_CP, "--preset",                       \
      "model shape of a new run: tiny, small or v51-110M")                                      \
    X(STR, config_path, "", "", PLDR_TRAIN_CP, "--config", "config.json of a new model")        \
    X(STR, data_dir, "", "", PLDR_TRAIN_CP, "--data",                                           \
      "shard directory from pldr prepare (train.pldrtok [+ valid.pldrtok])")                    \
    X(STR, out_dir, "", "", PLDR_TRAIN_CP, "--out",                                             \
      "checkpoint directory (a loadable model directory)")                                      \
    X(BOOL, force, 0, "", PLDR_TRAIN_CP, "--force",                                             \
      "out_dir may be an existing model directory or another training checkpoint (replaced)")   \
    X(STR, resume_dir, "", "", PLDR_TRAIN_CP, "--resume", "continue from this checkpoint")      \
    X(STR, init_dir, "", "", PLDR_TRAIN_CP, "--init",                                           \
      "fine-tune: start from this model directory's config and weights (fresh optimizer)")      \
    X(STR, device, "cpu", "", PLDR_TRAIN_CP, "--device",                                        \
      "where the model trains: cpu, or cuda[:N] (docs/gpu.md)")                                 \
    X(STR, metrics_path, "", "", PLDR_TRAIN_CP, "--metrics",                                    \
      "metrics JSON lines (default OUT/metrics.jsonl)")                                         \
    X(BOOL, fixed_g_identity, 0, "", PLDR_OPT_PY | PLDR_OPT_MATHS, "",                          \
      "train the SDPA baseline (G_LM = I; the CLI's --fixed-g identity)")                       \
    X(DTYPE, dtype, "f32", "", PLDR_TRAIN_MATHS, "--dtype", "compute precision: f32 or f64")    \
    X(BOOL, reference_numerics, 1, "", PLDR_OPT_PY, "",                                         \
      "f64: the reference's float32 islands, else pure float64 (the CLI's --numerics)")         \
    X(STR, precision, "fp32", "fp32|bf16", PLDR_TRAIN_MATHS, "--precision",                     \
      "fp32, or bf16: bf16 products with float32 master weights (float32 where the CPU has no " \
      "bf16)")                                                                                  \
    X(I64, steps, 1000, "[1, inf)", PLDR_TRAIN_MATHS, "--steps", "total optimizer steps")       \
    X(I64, batch, 16, "[1, inf)", PLDR_TRAIN_MATHS, "--batch", "chunks per micro-batch")        \
    X(I64, accum, 1, "[1, inf)", PLDR_TRAIN_MATHS, "--accum", "micro-batches per step")         \
    X(I64, ctx, 0, "[0, inf)", PLDR_TRAIN_MATHS, "--ctx", "tokens per chunk (0 = the shard's)") \
    X(U64, seed, 1234, "", PLDR_TRAIN_MATHS, "--seed", "init and data-order seed")              \
    X(BOOL, shuffle, 1, "", PLDR_TRAIN_MATHS, "--no-shuffle",                                   \
      "shuffle the chunks (off: file order, the reference's)")                                  \
    X(F64, lr, 1e-3, "(0, inf)", PLDR_TRAIN_MATHS, "--lr", "peak learning rate")                \
    X(I64, warmup, -1, "[-1, inf)", PLDR_TRAIN_MATHS, "--warmup",                               \
      "warmup steps (-1 = min(2000, steps / 10))")                                              \
    X(F64, lr_alpha, 0.1, "[0, 1]", PLDR_TRAIN_MATHS, "--lr-alpha",                             \
      "final learning rate as a fraction of the peak (cosine)")                                 \
    X(F64, weight_decay, 0.1, "[0, inf)", PLDR_TRAIN_MATHS, "--weight-decay",                   \
      "AdamW weight decay")                                                                     \
    X(DAG, dag, 0, "", PLDR_TRAIN_MATHS, "--dag",                                               \
      "DAG loss coefficients c_A,c_Ap,c_G (each >= 0)")                                         \
    X(CLIP, clip, "value", "", PLDR_OPT_PY | PLDR_OPT_MATHS, "",                                \
      "gradient clipping: value (per element), norm (global 2-norm) or none")                   \
    X(F64, clip_value, 1.0, "(0, inf)", PLDR_TRAIN_MATHS, "--clip-value",                       \
      "clip each gradient element to this")                                                     \
    X(F64, clip_norm, 1.0, "(0, inf)", PLDR_TRAIN_MATHS, "--clip-norm",                         \
      "clip the gradient's global 2-norm to this")                                              \
    X(I64, eval_every, 100, "[0, inf)", PLDR_TRAIN_CP, "--eval-every",                          \
      "validation period in steps (0 = only at the end)")                                       \
    X(I64, eval_batches, 8, "[1, inf)", PLDR_TRAIN_CP, "--eval-batches", "validation batches")  \
    X(I64, audit_every, 0, "[0, inf)", PLDR_TRAIN_CP, "--audit-every",                          \
      "every N steps (and at the start and the end), the collapse measurements of pldr audit "  \
      "--steps 8 --cont-len 32 into metrics.jsonl (0 = never; docs/audit.md)")                  \
    X(STR, audit_prompts, "", "", PLDR_TRAIN_CP, "--audit-prompts",                             \
      "prompts of --audit-every, one per line (text, or comma-separated ids); default: "        \
      "pldr audit's")                                                                           \
    X(I64, save_every, 500, "[0, inf)", PLDR_TRAIN_CP, "--save-every",                          \
      "checkpoint period in steps (0 = at the end and on a stop)")                              \
    X(I64, stop_at, 0, "[0, inf)", PLDR_TRAIN_CP, "--stop-at",                                  \
      "stop with a checkpoint after this step (0 = run to the end)")                            \
    X(BOOL, zero1, 0, "", PLDR_TRAIN_CP, "--zero1",                                             \
      "under mpirun: shard the AdamW moments across ranks (ZeRO-1, same result)")               \
    X(F64, dist_timeout, 0.0, "[0, inf)", PLDR_TRAIN_CP, "--dist-timeout",                      \
      "under mpirun: seconds a collective may wait (0 = PLDR_DIST_TIMEOUT or 300)")             \
    X(STR, recompute, "selective", "none|selective|full", PLDR_TRAIN_CP, "--recompute",         \
      "what the backward recomputes: none (keep every activation), selective (the cheap ones) " \
      "or full (each layer again: least memory, about a fifth more FLOPs); the same bits")

/* The server (`pldr serve`, pldr/serve.hpp). */
#define PLDR_SERVE_OPTIONS(X)                                                                \
    X(STR, host, "127.0.0.1", "", PLDR_OPT_CLI, "--host", "address to listen on")            \
    X(I64, port, 8080, "[0, 65535]", PLDR_OPT_CLI, "--port",                                 \
      "port (0 = any free port, printed on stdout)")                                         \
    X(I64, parallel, 4, "[1, 256]", PLDR_OPT_CLI, "--parallel",                              \
      "slots: sequences decoded together")                                                   \
    X(I64, ctx, 0, "[0, inf)", PLDR_OPT_CLI, "--ctx",                                        \
      "context limit (0 = max_position_embeddings)")                                         \
    X(STR, mode, "block", "block|cached", PLDR_OPT_CLI, "--mode",                            \
      "echo log-probabilities: block (= pldr score) or cached")                              \
    X(I64, queue, 64, "[1, 100000]", PLDR_OPT_CLI, "--queue",                                \
      "jobs that may wait for a slot (then 429)")                                            \
    X(I64, max_body, 1048576, "[1024, inf)", PLDR_OPT_CLI, "--max-body",                     \
      "request body limit in bytes (then 413)")                                              \
    X(I64, max_tokens, 0, "[0, inf)", PLDR_OPT_CLI, "--max-tokens",                          \
      "limit of a request's max_tokens (0 = the context)")                                   \
    X(I64, max_n, 8, "[1, 128]", PLDR_OPT_CLI, "--max-n", "limit of n (choices per prompt)") \
    X(I64, threads, 0, "[0, 4096]", PLDR_OPT_CLI, "--threads",                               \
      "HTTP worker threads (0 = parallel + queue + 4)")                                      \
    X(STR, tokenizer, "", "", PLDR_OPT_CLI, "--tokenizer",                                   \
      "SentencePiece model (default MODEL_DIR/tokenizer.model)")                             \
    X(STR, device, "cpu", "", PLDR_OPT_CLI, "--device", "where the model runs: cpu, or cuda[:N]")

#endif /* PLDR_OPTIONS_H */
