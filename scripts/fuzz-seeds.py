#!/usr/bin/python3
"""Builds the seed corpora of the fuzz targets (fuzz/corpus/<target>/) from real files: the
golden models, the bundled data, and files written by the built `pldr` (G-caches, a training
checkpoint, a small tokenizer). Run once from the repository root after building `build/pldr`:
    python3 scripts/fuzz-seeds.py [build/pldr]
    python3 scripts/fuzz-seeds.py --serve       # only fuzz/corpus/serve_request
The output is committed; rerunning it rewrites the same seeds (the pldr outputs are
deterministic)."""
import json, os, shutil, struct, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLDR = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build/pldr"))
CORPUS = os.path.join(ROOT, "fuzz/corpus")
SEP = b"\n--PLDR-FILE--\n"
G = os.path.join(ROOT, "tests/golden/models")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def read(p):
    with open(p, "rb") as f:
        return f.read()


def st_parse(b):
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    return h, b[8 + n:]


def st_write(tensors, meta=None):
    """tensors: list of (name, dtype, shape, bytes)."""
    h, off, data = {}, 0, b""
    if meta:
        h["__metadata__"] = meta
    for name, dt, shape, raw in sorted(tensors):
        h[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        data += raw
    hb = json.dumps(h, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    return struct.pack("<Q", len(hb)) + hb + data


def st_tensors(b):
    h, data = st_parse(b)
    out = []
    for k, v in h.items():
        if k == "__metadata__":
            continue
        a, e = v["data_offsets"]
        out.append((k, v["dtype"], v["shape"], data[a:e]))
    return out, h.get("__metadata__")


def fnv1a64(b):
    h = 0xcbf29ce484222325
    for c in b:
        h = ((h ^ c) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def shard(tokens, vocab, ctx, dtype=2):
    payload = b"".join(struct.pack("<H" if dtype == 2 else "<I", t) for t in tokens)
    return (b"PLDRTOK\0" + struct.pack("<IIII", 1, vocab, dtype, ctx) +
            struct.pack("<QQ", len(tokens), fnv1a64(payload)) + payload)


def run(*args, **kw):
    subprocess.run([PLDR, *args], check=True, stdout=subprocess.DEVNULL, **kw)


def serve_seeds():
    """serve_request: `METHOD PATH`, a newline, then the body. The lm-eval payloads of the serve
    tests (tests/serve/fixtures), and valid and refused bodies of every route, under the limits
    of the fuzz target (context 64, max_tokens 16, n 2, queue 4, body 1,000,064 bytes)."""
    d = os.path.join(CORPUS, "serve_request")
    shutil.rmtree(d, ignore_errors=True)

    def req(name, route, body=b""):
        if not isinstance(body, bytes):
            body = json.dumps(body, ensure_ascii=False).encode()
        put("serve_request", name, route.encode() + b"\n" + body)

    C, CH, D = "POST /v1/completions", "POST /v1/chat/completions", "POST /v1/deductive"
    fx = os.path.join(ROOT, "tests/serve/fixtures")
    for f in sorted(os.listdir(fx)):
        r = json.loads(read(os.path.join(fx, f)))["request"]
        req(f.replace(".json", ""), C, json.dumps(r, indent=1).encode())
        if r.get("max_tokens", 0) > 16:
            req(f.replace(".json", "") + "_16", C, dict(r, max_tokens=16))
    t = "The state of the Union"
    req("cmpl_text", C, {"prompt": t, "max_tokens": 4, "temperature": 0})
    req("cmpl_sampling", C, {"prompt": t, "max_tokens": 5, "temperature": 0.8, "top_p": 0.9,
                             "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.3, "seed": 7})
    req("cmpl_list", C, {"prompt": ["Hello", "", "x"], "n": 1, "max_tokens": 2, "seed": -3})
    req("cmpl_n2_stop", C, {"prompt": t, "n": 2, "max_tokens": 8, "stop": [" the", "\n"],
                            "ignore_eos": True})
    req("cmpl_ids_logprobs", C, {"prompt": [[5, 17, 3], [9]], "max_tokens": 3, "logprobs": 5})
    req("cmpl_echo_only", C, {"prompt": t, "max_tokens": 0, "echo": True, "logprobs": 2})
    req("cmpl_stream", C, {"prompt": t, "max_tokens": 6, "stream": True, "stop": "Union"})
    req("cmpl_stream_echo_lp", C, {"prompt": [t, "Hi"], "max_tokens": 3, "stream": True,
                                   "echo": True, "logprobs": 1, "temperature": 0})
    req("cmpl_stream_n2_queued", C, {"prompt": [t, "a"], "n": 2, "max_tokens": 4,
                                     "stream": True, "logprobs": 0, "seed": 1})
    req("cmpl_unicode", C, {"prompt": "caf\u00e9 \u2581 \U0001F600 \u00e9\u00e9",
                            "max_tokens": 2, "stop": ["\u00e9"]})
    req("bad_not_json", C, b'{"prompt": "a",')
    req("bad_array_body", C, b'["prompt"]')
    req("bad_no_prompt", C, {"max_tokens": 2})
    req("bad_empty_list", C, {"prompt": []})
    req("bad_prompt_mixed", C, {"prompt": ["a", 3]})
    req("bad_temperature", C, {"prompt": "a", "temperature": "hot"})
    req("bad_top_p_zero", C, {"prompt": "a", "top_p": 0})
    req("bad_n3", C, {"prompt": "a", "n": 3})
    req("bad_max_tokens_17", C, {"prompt": "a", "max_tokens": 17})
    req("bad_max_tokens_0", C, {"prompt": "a", "max_tokens": 0})
    req("bad_too_long", C, {"prompt": list(range(10, 80))})
    req("bad_id_vocab", C, {"prompt": [1, 32000]})
    req("bad_id_huge", C, b'{"prompt": [18446744073709551615]}')
    req("bad_stop_17", C, {"prompt": "a", "stop": ["s%d" % i for i in range(17)]})
    req("bad_logprobs_21", C, {"prompt": "a", "logprobs": 21})
    req("bad_echo", C, {"prompt": "a", "echo": 1})
    req("bad_jobs_over_queue", C, {"prompt": ["a", "b", "c"], "n": 2})
    req("chat", CH, {"messages": [{"role": "system", "content": "Be brief."},
                                  {"role": "user", "content": "Hello?"}],
                     "max_tokens": 4, "temperature": 0})
    req("chat_stream", CH, {"messages": [{"role": "user", "content": "Tell me"}],
                            "stream": True, "max_completion_tokens": 5, "logprobs": False,
                            "model": "eval_v510_s2024", "user": "u", "presence_penalty": 0.5})
    req("chat_assistant_n2", CH, {"messages": [{"role": "user", "content": "a"},
                                               {"role": "assistant", "content": "b"}],
                                  "n": 2, "max_tokens": 3, "stop": "User"})
    req("bad_chat_logprobs_true", CH, {"messages": [{"role": "user", "content": "x"}], "logprobs": True})
    req("bad_unknown_field", C, {"prompt": "a", "logit_bias": {"1": 5}})
    req("bad_unknown_model", C, {"prompt": "a", "model": "gpt-4"})
    req("bad_chat_role", CH, {"messages": [{"role": "tool", "content": "x"}]})
    req("bad_chat_empty", CH, {"messages": []})
    req("bad_chat_logprobs", CH, {"messages": [{"role": "user", "content": "x"}], "logprobs": 2})
    req("tokenize", "POST /tokenize", {"prompt": t, "with_pieces": True})
    req("tokenize_content", "POST /tokenize", {"content": "caf\u00e9\n\tx"})
    req("tokenize_eos", "POST /tokenize", {"prompt": "[END]"})
    req("bad_tokenize", "POST /tokenize", {"prompt": 5})
    req("detokenize", "POST /detokenize", {"tokens": [6348, 281, 2805, 270, 3]})
    req("bad_detokenize_id", "POST /detokenize", {"tokens": [-1]})
    req("bad_detokenize_list", "POST /detokenize", {"tokens": "6348"})
    req("deductive", D, {"prompt": t})
    req("deductive_prefix", D, {"prompt": t + " is strong", "prefix": t})
    req("deductive_ids", D, {"prompt": [5, 17, 3, 9], "prefix_len": 2})
    req("bad_deductive_prefix_len", D, {"prompt": "a b", "prefix_len": 9})
    for p in ("/v1/models", "/tokenizer_info", "/health", "/metrics", "/"):
        req("get" + (p.replace("/", "_") if p != "/" else "_page"), "GET " + p)
    req("head_health", "HEAD /health")
    req("bad_no_route", "POST /v1/embeddings", {"input": "a"})
    req("bad_get_post_route", "GET /v1/completions")
    req("bad_method", "BREW /v1/completions", {"prompt": "a"})
    req("bad_too_large", C, json.dumps({"prompt": "a" * 1_000_100}).encode())
    # nested a million deep (under libFuzzer's -max_len of 1 MiB): once a SIGSEGV at 10^5
    req("bad_deep_prompt", C, b'{"prompt":' + b"[" * 1_000_000)
    req("bad_deep_stop", C, b'{"prompt": "a", "stop": ' + b"[" * 100 + b"]" * 100 + b"}")
    req("bad_deep_chat", CH, b'{"messages": ' + b'{"a":' * 100_000)
    req("bad_deep_detokenize", "POST /detokenize", b'{"tokens": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    req("deep_64", C, b'{"prompt": ' + b"[" * 63 + b"1" + b"]" * 63 + b"}")


def main():
    shutil.rmtree(CORPUS, ignore_errors=True)
    tmp = tempfile.mkdtemp(prefix="pldr-seeds-")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")

    # safetensors: real model files, and small hand-made ones of every dtype.
    put("safetensors", "a_tiny.f32", read(f"{G}/a_tiny_v510.f32/model.safetensors"))
    put("safetensors", "c_tiny.f64", read(f"{G}/c_tiny_v510G_identity.f64/model.safetensors"))
    small = [("b", "BF16", [2], b"\x80\x3f\x00\x40"), ("f", "F16", [2, 1], b"\x00\x3c\x00\xc0"),
             ("i", "I64", [1], struct.pack("<q", -7)), ("m", "BOOL", [3], b"\x01\x00\x01"),
             ("u", "U8", [0], b""), ("x", "F32", [], struct.pack("<f", 1.5)),
             ("y", "I32", [1], struct.pack("<i", 5)), ("z", "I16", [1], struct.pack("<h", 2)),
             ("w", "I8", [1], b"\xff"), ("d", "F64", [1], struct.pack("<d", 2.0))]
    put("safetensors", "dtypes", st_write(small, {"format": "pt"}))
    put("safetensors", "empty", st_write([]))

    # config.json: every config of the repository.
    for d in sorted(os.listdir(G)):
        p = os.path.join(G, d, "config.json")
        if os.path.exists(p):
            put("config_json", d, read(p))
    for d in ("pldr-sotu-small", "sdpa-sotu-small"):
        put("config_json", d, read(os.path.join(ROOT, "models", d, "config.json")))

    # model directories: single file (fixed G) and sharded (learned G, two shards).
    c = f"{G}/c_tiny_v510G_identity.f32"
    put("model_dir", "single_fixed_g",
        read(f"{c}/config.json") + SEP + b"" + SEP + read(f"{c}/model.safetensors"))
    a = f"{G}/a_tiny_v510.f32"
    ts, _ = st_tensors(read(f"{a}/model.safetensors"))
    half = len(ts) // 2
    s1, s2 = st_write(ts[:half], {"format": "pt"}), st_write(ts[half:], {"format": "pt"})
    wm = {t[0]: "s1.safetensors" for t in ts[:half]}
    wm.update({t[0]: "s2.safetensors" for t in ts[half:]})
    index = json.dumps({"metadata": {"total_size": len(s1) + len(s2)}, "weight_map": wm},
                       indent=1).encode()
    put("model_dir", "sharded_learned", read(f"{a}/config.json") + SEP + index + SEP + s1 + SEP + s2)

    # token shards.
    put("shard", "packed_u16", shard([(7 * i) % 50 for i in range(72)], 50, 9))
    put("shard", "unpacked_u16", shard([3, 1, 4, 1, 5, 9, 2, 6], 10, 0))
    put("shard", "packed_u32", shard([(i * 4099) % 70000 for i in range(32)], 70000, 8, 4))

    # G-caches written by pldr generate.
    for name, d in (("learned", a), ("fixed", f"{G}/c_tiny_v510G_identity.f32")):
        out = os.path.join(tmp, f"g_{name}.safetensors")
        run("generate", d, "--ids", "5,17,3,9", "-n", "1", "--greedy", "--save-g-cache", out,
            env=env)
        put("gcache", name, read(out))

    # score requests, TruthfulQA, PIQA: the bundled data and the documented forms.
    put("score_requests", "ids", b'{"context_ids": [5, 17, 3], "continuation_ids": [9, 2]}\n'
        b'{"context_ids": [1], "continuation_ids": [4]}\n')
    put("score_requests", "text", b'{"context": "The state of the Union", "continuation": " is"}\n'
        b'\n{"context": "", "continuation": "Hello"}\r\n')
    tqa = json.loads(read(os.path.join(ROOT, "data/eval/truthfulqa/mc_task.dev.json")))
    put("truthfulqa", "dev3", json.dumps(tqa[:3], indent=1).encode())
    put("truthfulqa", "dev1", json.dumps(tqa[3:4]).encode())
    pj = read(os.path.join(ROOT, "data/eval/piqa/valid.jsonl")).split(b"\n")[:4]
    pl = read(os.path.join(ROOT, "data/eval/piqa/valid-labels.lst")).split(b"\n")[:4]
    put("piqa", "valid4", b"\n".join(pj) + b"\n" + SEP + b"\n".join(pl) + b"\n")

    # tokenizer: a small one trained by pldr, and the shipped SOTU one.
    txt = os.path.join(tmp, "t.txt")
    with open(txt, "wb") as f:
        f.write(read(os.path.join(ROOT, "data/corpus/tinyshakespeare/valid.txt"))[:60000])
    run("tokenizer", "train", "--input", txt, "--out", os.path.join(tmp, "tok"),
        "--vocab-size", "400", "--threads", "1", env=env)
    put("tokenizer", "small400", read(os.path.join(tmp, "tok.model")))
    run("tokenizer", "train", "--input", txt, "--out", os.path.join(tmp, "tokc"),
        "--vocab-size", "400", "--model-type", "char", "--threads", "1", env=env)
    put("tokenizer", "char", read(os.path.join(tmp, "tokc.model")))

    # A training checkpoint of a_tiny's shape (vocab 50) on a hand-made shard; its model is the
    # fixed directory the train_state target loads beside the fuzzed state.
    data = os.path.join(tmp, "data")
    os.makedirs(data)
    with open(os.path.join(data, "train.pldrtok"), "wb") as f:
        f.write(shard([(11 * i + i // 7) % 50 for i in range(9 * 24)], 50, 9))
    ck = os.path.join(tmp, "ck")
    # (a relative --config from the repository root: the checkpoint records the path it was given)
    run("train", "--config", os.path.relpath(f"{a}/config.json", ROOT), "--data", data, "--out",
        ck, "--steps", "3", "--batch", "2", "--stop-at", "2", "--eval-batches", "1", env=env,
        cwd=ROOT)
    put("train_state", "step2", read(os.path.join(ck, "train_state.safetensors")))
    dd = os.path.join(ROOT, "fuzz/data/train_state_model")
    os.makedirs(dd, exist_ok=True)
    for f in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(ck, f), os.path.join(dd, f))
    serve_seeds()
    shutil.rmtree(tmp)
    for t in sorted(os.listdir(CORPUS)):
        print(t, len(os.listdir(os.path.join(CORPUS, t))), "seeds")


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:  # only the serve_request seeds (no pldr needed)
        serve_seeds()
    else:
        main()
