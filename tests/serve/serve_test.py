#!/usr/bin/python3
"""End-to-end test of `pldr serve` (CTest serve_e2e): starts the server on loopback and drives it
with http.client. Usage: serve_test.py PLDR_BINARY"""
import glob
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import EVAL_MODEL, ROOT, Server, check  # noqa: E402

PLDR = sys.argv[1]
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def err_ok(st, body, status, needle):
    check(st == status, f"expected {status}, got {st}: {body}")
    check(isinstance(body, dict) and "error" in body and isinstance(body["error"].get("message"), str)
          and isinstance(body["error"].get("type"), str), f"not a JSON error: {body}")
    check(needle in body["error"]["message"], f"'{needle}' not in '{body['error']['message']}'")


def score_block(ctx_ids, cont_ids):
    """`pldr score --mode block` on one request given by ids: its token_logprobs."""
    with tempfile.TemporaryDirectory() as d:
        req = os.path.join(d, "r.jsonl")
        with open(req, "w") as f:
            f.write(json.dumps({"context_ids": ctx_ids, "continuation_ids": cont_ids}) + "\n")
        out = subprocess.run([PLDR, "score", EVAL_MODEL, "--requests", req, "--mode", "block"],
                             capture_output=True, text=True, check=True).stdout
        return json.loads(out.splitlines()[0])


# --- lm-eval's parsers (re-implemented from lm_eval/models/openai_completions.py, cited in the
# fixtures): LocalCompletionsAPI.parse_logprobs and parse_generations.
def lm_eval_parse_logprobs(outputs, ctxlens):
    res = []
    if not isinstance(outputs, list):
        outputs = [outputs]
    for out in outputs:
        for choice, ctxlen in zip(sorted(out["choices"], key=lambda c: c["index"]), ctxlens):
            assert ctxlen > 0
            lps = choice["logprobs"]["token_logprobs"][ctxlen:-1]
            tops = choice["logprobs"]["top_logprobs"][ctxlen:-1]
            greedy = all(t == max(top.values()) for t, top in zip(lps, tops))
            res.append((sum(lps), greedy))
    return res


def lm_eval_parse_generations(outputs):
    res = []
    if not isinstance(outputs, list):
        outputs = [outputs]
    for out in outputs:
        tmp = [None] * len(out["choices"])
        for c in out["choices"]:
            tmp[c["index"]] = c["text"]
        res += tmp
    return res


def main():
    s = Server(PLDR, args=["--parallel", "2", "--queue", "8", "--max-body", "65536"])
    try:
        run_all(s)
    finally:
        code = s.stop()
    check(code == 0, f"SIGTERM exit code {code}")
    print("serve_e2e: all checks passed")


def run_all(s):
    # health, models
    st, b = s.get("/health")
    check(st == 200 and b["status"] == "ok", f"health {st} {b}")
    st, b = s.get("/v1/models")
    check(st == 200 and b["data"][0]["id"] == "eval_v510_s2024" and b["data"][0]["max_model_len"] == 1024,
          f"models {b}")

    # tokenize round trip, with pieces and offsets
    text = "The quick brown fox jumps over the lazy dog."
    st, t = s.post("/tokenize", {"prompt": text, "with_pieces": True})
    check(st == 200 and len(t["tokens"]) > 3 and t["count"] == len(t["tokens"]), f"tokenize {t}")
    check("".join(t["pieces"]) == text, f"pieces {t['pieces']}")
    check(all(text[o:].startswith(p) for o, p in zip(t["offsets"], t["pieces"])), "offsets")
    st, d = s.post("/detokenize", {"tokens": t["tokens"]})
    check(st == 200 and d["prompt"] == text, f"detokenize {d}")
    ids = t["tokens"]

    # characters made of byte pieces: the piece that completes one carries it whole (the tokens
    # before it carry ""), so pieces, offsets and echo text add up to the text (fuzz_serve_request)
    utext = "I like \U0001F600 and \u4e2d\u6587"
    st, u = s.post("/tokenize", {"prompt": utext, "with_pieces": True})
    check(st == 200 and "".join(u["pieces"]) == utext, f"pieces of byte pieces {u}")
    check(u["offsets"] == sorted(u["offsets"]) and
          all(utext.encode()[o:].startswith(p.encode()) for o, p in zip(u["offsets"], u["pieces"])),
          f"offsets of byte pieces {u}")
    st, e = s.post("/v1/completions", {"prompt": utext, "max_tokens": 0, "echo": True, "logprobs": 0})
    check(st == 200 and e["choices"][0]["text"] == utext, f"echo of byte pieces {e}")
    check("".join(e["choices"][0]["logprobs"]["tokens"]) == utext, f"echo tokens {e}")

    # completions: greedy is deterministic, a list of prompts gives one choice each, ids work
    body = {"prompt": text, "max_tokens": 12, "temperature": 0}
    st, a = s.post("/v1/completions", body)
    check(st == 200 and a["object"] == "text_completion", f"completion {st} {a}")
    c0 = a["choices"][0]
    check(c0["finish_reason"] in ("length", "stop") and a["usage"]["prompt_tokens"] == len(ids), f"{a}")
    st, a2 = s.post("/v1/completions", {**body, "prompt": ids})
    check(a2["choices"][0]["text"] == c0["text"], "token-id prompt differs from the text prompt")
    st, a3 = s.post("/v1/completions", {**body, "prompt": [text, "Hello"]})
    check(len(a3["choices"]) == 2 and a3["choices"][0]["text"] == c0["text"], f"list prompt {a3}")
    # sampling with a seed is reproducible; n=3 gives 3 choices
    sb = {"prompt": text, "max_tokens": 10, "temperature": 1.0, "top_p": 0.9, "top_k": 50,
          "min_p": 0.01, "repetition_penalty": 1.1, "seed": 7, "n": 3}
    st, r1 = s.post("/v1/completions", sb)
    st, r2 = s.post("/v1/completions", sb)
    check(st == 200 and len(r1["choices"]) == 3, f"n=3 {r1}")
    check([c["text"] for c in r1["choices"]] == [c["text"] for c in r2["choices"]], "seeded sampling differs")
    # logprobs without echo: one entry per generated token, top-n dicts of n entries
    st, lp = s.post("/v1/completions", {**body, "max_tokens": 5, "logprobs": 3})
    L = lp["choices"][0]["logprobs"]
    check(len(L["tokens"]) == 5 and all(len(d) <= 3 and len(d) >= 1 for d in L["top_logprobs"]), f"{L}")
    check(all(abs(v - max(d.values())) < 1e-12 for v, d in zip(L["token_logprobs"], L["top_logprobs"])),
          "greedy token is not its top logprob")
    g5 = lp["choices"][0]["text"]
    check("".join(L["tokens"]) == g5 and all(g5[o:].startswith(t) for o, t in zip(L["text_offset"], L["tokens"])),
          f"generated tokens/offsets {L['tokens']} {L['text_offset']} vs {g5!r}")
    evs = s.stream("/v1/completions", {**body, "max_tokens": 5, "logprobs": 3, "stream": True})
    st_toks = [t for e in evs[:-1] for ch in e["choices"] if ch.get("logprobs") for t in ch["logprobs"]["tokens"]]
    st_offs = [o for e in evs[:-1] for ch in e["choices"] if ch.get("logprobs") for o in ch["logprobs"]["text_offset"]]
    check(st_toks == L["tokens"] and st_offs == L["text_offset"], f"streamed logprobs {st_toks} {st_offs}")

    # streaming: the deltas add up to the non-streamed text; ends with [DONE]
    evs = s.stream("/v1/completions", {**body, "stream": True})
    check(evs[-1] == "[DONE]", "stream does not end with [DONE]")
    text_s = "".join(ch.get("text", "") for e in evs[:-1] for ch in e["choices"])
    check(text_s == c0["text"], f"stream text {text_s!r} != {c0['text']!r}")
    fins = [ch["finish_reason"] for e in evs[:-1] for ch in e["choices"] if ch["finish_reason"]]
    check(fins == [c0["finish_reason"]], f"finish reasons {fins}")

    # stop strings: cut at the first occurrence, finish_reason stop, also when streaming
    full = c0["text"]
    cut = None
    for k in range(2, len(full) - 2):
        if full[k] not in " " and full[k:k + 2].strip() and full.find(full[k:k + 2]) == k:
            cut = k
            break
    check(cut is not None, f"no stop candidate in {full!r}")
    stop = full[cut:cut + 2]
    st, sr = s.post("/v1/completions", {**body, "stop": [stop, "zzzqqq"]})
    check(sr["choices"][0]["text"] == full[:cut] and sr["choices"][0]["finish_reason"] == "stop",
          f"stop {stop!r}: {sr['choices'][0]} vs {full!r}")
    evs = s.stream("/v1/completions", {**body, "stop": stop, "stream": True})
    check("".join(ch.get("text", "") for e in evs[:-1] for ch in e["choices"]) == full[:cut], "streamed stop")
    # logprobs end where a stop string cut the text: the unstopped response's tokens that start
    # before the cut (they once ran on to the token that completed the stop string). Sampled, so
    # that the text does not repeat one token; stops that are a whole token's text (the cut at a
    # token's start) and a token's text without its first byte (the cut inside a token).
    lb = {"prompt": text, "max_tokens": 16, "temperature": 1.0, "seed": 11}
    _, fl = s.post("/v1/completions", {**lb, "logprobs": 1})
    lfull, FL = fl["choices"][0]["text"], fl["choices"][0]["logprobs"]
    cands = [(p, o) for p, o in zip(FL["tokens"][1:], FL["text_offset"][1:])] + \
            [(p[1:], o + 1) for p, o in zip(FL["tokens"][1:], FL["text_offset"][1:])]
    cands = [(p, o) for p, o in cands if p.strip() and lfull.find(p) == o]
    check(any(o in FL["text_offset"] for _, o in cands) and any(o not in FL["text_offset"] for _, o in cands),
          f"no stop candidates of both kinds in {FL['tokens']}")
    for (stop_s, cut_s), echo in [(c, e) for c in cands[:6] for e in (False, True)]:
        want = [t for t, o in zip(FL["tokens"], FL["text_offset"]) if o < cut_s]
        _, sl = s.post("/v1/completions", {**lb, "stop": stop_s, "logprobs": 1, "echo": echo})
        SL = sl["choices"][0]["logprobs"]
        got = SL["tokens"][len(ids):] if echo else SL["tokens"]
        # the tokens cover the text, the last one perhaps past the cut (its start is before it)
        txt = sl["choices"][0]["text"]
        check(got == want and "".join(SL["tokens"]).startswith(txt) and
              len("".join(SL["tokens"][:-1])) < len(txt) and
              len(SL["token_logprobs"]) == len(SL["tokens"]) == len(SL["top_logprobs"]) == len(SL["text_offset"]),
              f"logprobs after stop {stop_s!r} (echo {echo}): {got} vs {want}")
        if not echo:  # streamed: the same tokens and logprobs, held until their text is sent
            evs = s.stream("/v1/completions", {**lb, "stop": stop_s, "logprobs": 1, "stream": True})
            chs = [ch for e in evs[:-1] for ch in e["choices"] if ch.get("logprobs")]
            st_toks = [t for ch in chs for t in ch["logprobs"]["tokens"]]
            st_lps = [v for ch in chs for v in ch["logprobs"]["token_logprobs"]]
            check(st_toks == SL["tokens"] and st_lps == SL["token_logprobs"],
                  f"streamed logprobs after stop {stop_s!r}: {st_toks} vs {SL['tokens']}")
    print("logprobs end at the stop string's cut")

    # chat, plain and streamed
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi"}]
    st, ch = s.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 8, "temperature": 0})
    check(st == 200 and ch["object"] == "chat.completion" and ch["choices"][0]["message"]["role"] == "assistant",
          f"chat {ch}")
    evs = s.stream("/v1/chat/completions", {"messages": msgs, "max_tokens": 8, "temperature": 0, "stream": True})
    check(evs[-1] == "[DONE]" and evs[0]["choices"][0]["delta"]["role"] == "assistant", "chat stream start")
    content = "".join(c["delta"].get("content", "") for e in evs[:-1] for c in e["choices"])
    check(content.lstrip(" ") == ch["choices"][0]["message"]["content"], f"chat stream {content!r}")

    # echo logprobs equal `pldr score --mode block` within 1e-6, for several splits
    st, t2 = s.post("/tokenize", {"prompt": "Alice went to the market to buy some fresh bread and milk."})
    p = t2["tokens"]
    for mt in (0, 1):
        st, e = s.post("/v1/completions", {"prompt": p, "max_tokens": mt, "echo": True, "logprobs": 1,
                                           "temperature": 0})
        ch0 = e["choices"][0]
        tl = ch0["logprobs"]["token_logprobs"]
        check(tl[0] is None and len(tl) == len(p) + mt, f"echo shape {len(tl)} for {len(p)}+{mt}")
        check(len(ch0["logprobs"]["text_offset"]) == len(tl) and len(ch0["logprobs"]["tokens"]) == len(tl),
              "echo tokens/offsets")
        for k in (1, 4, len(p) - 1):
            ref = score_block(p[:k], p[k:])["token_logprobs"]
            got = tl[k:len(p)]
            worst = max(abs(a - b) for a, b in zip(got, ref))
            check(len(got) == len(ref) and worst <= 1e-6, f"echo vs score block, split {k}: {worst}")
    print("echo == pldr score --mode block within 1e-6")

    # the lm-eval fixtures: each request body replayed, its answer run through lm-eval's parser
    lm_eval_fixtures(s)

    # every 4xx case
    big = {"prompt": "x" * 70000}
    cases = [
        ("/v1/completions", None, "{not json", 400, "not valid JSON"),
        ("/v1/completions", [1, 2], None, 400, "JSON object"),
        ("/v1/completions", {}, None, 400, "'prompt' is required"),
        ("/v1/completions", {"prompt": 5}, None, 400, "'prompt' must be"),
        ("/v1/completions", {"prompt": []}, None, 400, "empty list"),
        ("/v1/completions", {"prompt": [[]]}, None, 400, "empty token list"),
        ("/v1/completions", {"prompt": [1, 99999999]}, None, 400, "outside the vocabulary"),
        ("/v1/completions", {"prompt": [1, -1]}, None, 400, "outside the vocabulary"),
        ("/v1/completions", {"prompt": [1.5]}, None, 400, "integer token ids"),
        ("/v1/completions", {"prompt": list(range(10, 1100))}, None, 400, "longer than the context"),
        ("/v1/completions", {"prompt": "a", "max_tokens": -1}, None, 400, "'max_tokens' must be in"),
        ("/v1/completions", {"prompt": "a", "max_tokens": 5000}, None, 400, "'max_tokens' must be in"),
        ("/v1/completions", {"prompt": "a", "max_tokens": "3"}, None, 400, "'max_tokens' must be an integer"),
        ("/v1/completions", {"prompt": "a", "max_tokens": 0}, None, 400, "without 'echo'"),
        ("/v1/completions", {"prompt": "a", "temperature": -1}, None, 400, "'temperature' must be in"),
        ("/v1/completions", {"prompt": "a", "temperature": "hot"}, None, 400, "'temperature' must be a number"),
        ("/v1/completions", {"prompt": "a", "top_p": 0}, None, 400, "'top_p' must be in"),
        ("/v1/completions", {"prompt": "a", "top_p": 1.5}, None, 400, "'top_p' must be in"),
        ("/v1/completions", {"prompt": "a", "top_k": -2}, None, 400, "'top_k' must be in"),
        ("/v1/completions", {"prompt": "a", "min_p": 1}, None, 400, "'min_p' must be in"),
        ("/v1/completions", {"prompt": "a", "repetition_penalty": 0}, None, 400, "'repetition_penalty'"),
        ("/v1/completions", {"prompt": "a", "seed": "x"}, None, 400, "'seed' must be an integer"),
        ("/v1/completions", {"prompt": "a", "n": 0}, None, 400, "'n' must be in"),
        ("/v1/completions", {"prompt": "a", "n": 100}, None, 400, "'n' must be in"),
        ("/v1/completions", {"prompt": ["a"] * 5, "n": 2}, None, 400, "more than the queue holds"),
        ("/v1/completions", {"prompt": "a", "stop": 3}, None, 400, "'stop' must be"),
        ("/v1/completions", {"prompt": "a", "stop": ["x" * 300]}, None, 400, "at most 256 bytes"),
        ("/v1/completions", {"prompt": "a", "stream": "yes"}, None, 400, "'stream' must be a boolean"),
        ("/v1/completions", {"prompt": "a", "echo": 1}, None, 400, "'echo' must be a boolean"),
        ("/v1/completions", {"prompt": "a", "logprobs": 50}, None, 400, "'logprobs' must be in"),
        ("/v1/completions", big, None, 413, "larger than the limit"),
        ("/v1/chat/completions", {"messages": []}, None, 400, "'messages'"),
        ("/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]}, None, 400, "role"),
        ("/v1/chat/completions", {"messages": [{"role": "user"}]}, None, 400, "'content'"),
        ("/tokenize", {"prompt": 3}, None, 400, "'prompt' must be a string"),
        ("/detokenize", {"tokens": "abc"}, None, 400, "'tokens' must be"),
        ("/detokenize", {"tokens": [32000]}, None, 400, "outside the vocabulary"),
        ("/v1/deductive", {}, None, 400, "'prompt' is required"),
        ("/v1/deductive", {"prompt": []}, None, 400, "non-empty list"),
        ("/v1/deductive", {"prompt": "a b c", "prefix_len": 99}, None, 400, "'prefix_len' must be in"),
        # nested deeper than 64 (issue 36: 100,000 deep once ended the server; hardening_test.py
        # sends 10^6), and an error that quotes a megabyte value quotes its start only
        ("/v1/completions", None, '{"prompt": %s}' % ("[" * 20000 + "]" * 20000), 400, "deeper than 64"),
        ("/v1/completions", None, '{"prompt": "a", "stop": %s}' % ("[" * 65 + "]" * 65), 400, "deeper than 64"),
        ("/v1/chat/completions", None, '{"messages": %s}' % ('{"a":' * 10000), 400, "deeper than 64"),
        ("/detokenize", None, '{"tokens": %s}' % ("[" * 30000), 400, "deeper than 64"),
        ("/v1/completions", {"prompt": "a", "max_tokens": ["x" * 60000]}, None, 400, '["xxxxxxxxxx'),
        # fields the server does not implement: refused by name, as OpenAI refuses unknown ones
        *[("/v1/completions", {"prompt": "a", k: v}, None, 400, f"unrecognized request argument '{k}'")
          for k, v in (("logit_bias", {"1": 5}), ("response_format", {"type": "json_object"}),
                       ("grammar", "root ::= x"), ("tools", []), ("tool_choice", "auto"), ("best_of", 2),
                       ("suffix", "x"), ("functions", []), ("top_logprobs", 2))],
        *[("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], k: v}, None, 400,
           f"unrecognized request argument '{k}'")
          for k, v in (("top_logprobs", 2), ("tools", []), ("echo", True), ("prompt", "a"))],
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "logprobs": True}, None, 400,
         "'logprobs' is not implemented for chat"),
        ("/tokenize", {"prompt": "a", "add_special_tokens": True}, None, 400, "'add_special_tokens'"),
        ("/detokenize", {"tokens": [1], "skip_special_tokens": True}, None, 400, "'skip_special_tokens'"),
        ("/v1/deductive", {"prompt": "a", "layers": 1}, None, 400, "'layers'"),
        ("/v1/completions", {"prompt": "a", "model": "gpt-4"}, None, 404, "the model 'gpt-4' does not exist"),
        ("/v1/chat/completions", {"messages": [], "model": "x"}, None, 404, "does not exist"),
        ("/v1/completions", {"prompt": "a", "model": 3}, None, 400, "'model' must be a string"),
        ("/nowhere", {}, None, 404, "no route"),
        # bytes that are not UTF-8, quoted in the error (as U+FFFD): once a 500 (fuzz_serve_request)
        ("/v1/completions", None, '{"prompt": ["a"\xa3]}', 400, "not valid JSON"),
        ("/v1/completions", None, '{"prompt": "\xff"}', 400, "not valid JSON"),
    ]
    for path, body, raw, status, needle in cases:
        st, b = s.post(path, body, raw)
        err_ok(st, b, status, needle)
        check(len(b["error"]["message"]) < 400, f"a long error message: {b['error']['message'][:500]}")
    # a body that does not say it is JSON: 415 (curl -d sends application/x-www-form-urlencoded)
    for ct in ("text/plain", "application/x-www-form-urlencoded"):
        c = s.conn()
        c.request("POST", "/v1/completions", body=json.dumps({"prompt": "a"}), headers={"Content-Type": ct})
        r = c.getresponse()
        err_ok(r.status, json.loads(r.read()), 415, "Content-Type must be application/json")
        c.close()
    # the fields that change nothing are accepted: user, stream_options, the served model's name;
    # the penalties of the sampling table are read
    st, b = s.post("/v1/completions", {"prompt": "a", "max_tokens": 2, "user": "u1", "model": "eval_v510_s2024",
                                       "stream_options": {"include_usage": True}, "presence_penalty": 0.5,
                                       "frequency_penalty": 0.5})
    check(st == 200 and len(b["choices"]) == 1, f"accepted fields {st} {b}")
    st, b = s.get("/v1/nothing")
    err_ok(st, b, 404, "no route")
    # a path that decodes to bytes that are not UTF-8: once an uncaught exception that ended the
    # server (fuzz_serve_request)
    st, b = s.get("/%FF%FE")
    err_ok(st, b, 404, "no route")
    check(s.get("/health")[0] == 200, "the server is up after GET /%FF%FE")
    print(f"{len(cases) + 2} bad requests: each a JSON 4xx error")

    # deductive: shapes; eps_G is 0 for every step of a fixed prefix? No: it is the G change.
    st, d = s.post("/v1/deductive", {"prompt": "The quick brown fox jumps", "prefix": "The quick"})
    check(st == 200 and d["layers"] == 2 and d["heads"] == 2 and d["head_dim"] == 16, f"deductive {d.keys()}")
    check(len(d["G_LM"]) == 2 and len(d["G_LM"][0]) == 2 and len(d["G_LM"][0][0]) == 16, "G_LM shape")
    check(len(d["eps_G"]) == d["tokens"] - d["prefix_len"] and all(len(e) == 2 for e in d["eps_G"]), "eps_G shape")
    check(all(v > 0 for e in d["eps_G"] for v in e), "learned-G model: G moves with the text")

    # a client that disconnects frees its slot
    before = s.metric("pldr_jobs_cancelled_total")
    sock = socket.create_connection(("127.0.0.1", s.port))
    req = json.dumps({"prompt": "Once upon a time", "max_tokens": 1000, "stream": True, "temperature": 0,
                      "ignore_eos": True})
    sock.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(req)}\r\n\r\n{req}").encode())
    got = sock.recv(4096)
    check(b"200" in got.split(b"\r\n")[0], f"stream start {got[:80]}")
    sock.close()
    t0 = time.time()
    while time.time() - t0 < 30:
        if s.metric("pldr_jobs_cancelled_total") > before and s.metric("pldr_active_slots") == 0:
            break
        time.sleep(0.1)
    check(s.metric("pldr_jobs_cancelled_total") > before, "disconnect did not cancel the job")
    check(s.metric("pldr_active_slots") == 0, "slot not freed after disconnect")
    # same for a non-streamed request (noticed by the keep-alive write)
    before = s.metric("pldr_jobs_cancelled_total")
    sock = socket.create_connection(("127.0.0.1", s.port))
    # Eight jobs of the whole context on two slots: several seconds even on a fast machine, so the
    # server's keep-alive writes (every 250 ms) see the closed socket before the jobs end.
    req = json.dumps({"prompt": ["Once upon a time"] * 4, "n": 2, "max_tokens": 1000, "temperature": 0,
                      "ignore_eos": True})
    sock.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(req)}\r\n\r\n{req}").encode())
    # Close as soon as the job holds its slot: a fast machine generates the whole context in
    # well under a second, so a fixed sleep could outlast the job.
    t0 = time.time()
    while s.metric("pldr_active_slots") < 1 and time.time() - t0 < 20:
        time.sleep(0.005)
    sock.close()
    t0 = time.time()
    while time.time() - t0 < 30 and s.metric("pldr_jobs_cancelled_total") == before:
        time.sleep(0.1)
    check(s.metric("pldr_jobs_cancelled_total") > before, "non-streamed disconnect did not cancel")
    print("client disconnects free their slots")

    # metrics
    _, m = s.get("/metrics")
    for k in ("pldr_requests_total{", "pldr_tokens_per_second", "pldr_queue_depth", "pldr_active_slots",
              "pldr_generated_tokens_total"):
        check(k in m, f"metrics lack {k}")


def queue_full_and_drain(pldr):
    """--parallel 1 --queue 1: a third concurrent request gets 429. SIGTERM drains a running
    stream to its end ([DONE]) and exits 0."""
    s = Server(pldr, args=["--parallel", "1", "--queue", "1"])
    results = {}

    def long_stream(key):  # the whole context (512): the longest job the default model allows
        results[key] = s.stream("/v1/completions", {"prompt": "Once", "max_tokens": 500, "temperature": 0,
                                                   "ignore_eos": True, "stream": True})

    # No fixed sleeps: on a fast machine a job ends in a fraction of a second, so each next step
    # starts the moment the metrics show the previous one in place.
    t1 = threading.Thread(target=long_stream, args=("a",))
    t1.start()
    t0 = time.time()
    while s.metric("pldr_active_slots") < 1 and time.time() - t0 < 20:
        time.sleep(0.002)
    t2 = threading.Thread(target=long_stream, args=("b",))
    t2.start()
    t0 = time.time()
    while s.metric("pldr_queue_depth") < 1 and time.time() - t0 < 20:
        time.sleep(0.002)
    st, b = s.post("/v1/completions", {"prompt": "x", "max_tokens": 2})
    err_ok(st, b, 429, "queue is full")
    code_holder = {}
    s.p.send_signal(15)
    time.sleep(0.2)
    try:
        st, b = s.post("/v1/completions", {"prompt": "x", "max_tokens": 2})
        err_ok(st, b, 503, "shutting down")
    except OSError:
        pass  # the listener may already be closed
    t1.join(120)
    t2.join(120)
    code_holder["code"] = s.stop(60)
    check(results.get("a", [None])[-1] == "[DONE]" and results.get("b", [None])[-1] == "[DONE]",
          "SIGTERM did not drain the running streams")
    check(code_holder["code"] == 0, f"exit code after SIGTERM: {code_holder['code']}")
    print("429 when the queue is full; SIGTERM drains and exits 0")


def lm_eval_fixtures(s):
    for path in sorted(glob.glob(os.path.join(FIXTURES, "lm_eval_*.json"))):
        fx = json.load(open(path))
        st, out = s.post("/v1/completions", fx["request"])
        check(st == 200, f"{os.path.basename(path)}: {st} {out}")
        kind = fx["request_type"]
        if kind in ("loglikelihood", "loglikelihood_rolling"):
            parsed = lm_eval_parse_logprobs(out, fx["ctxlens"])
            check(len(parsed) == len(fx["ctxlens"]), f"{path}: {parsed}")
            for (lp, greedy), prompt, ctxlen in zip(parsed, fx["request"]["prompt"], fx["ctxlens"]):
                ref = score_block(prompt[:ctxlen], prompt[ctxlen:])
                check(abs(lp - ref["logprob"]) <= 1e-5 and greedy == ref["is_greedy"],
                      f"{path}: ({lp}, {greedy}) vs pldr score ({ref['logprob']}, {ref['is_greedy']})")
        else:
            gens = lm_eval_parse_generations(out)
            check(len(gens) == len(fx["request"]["prompt"]) and all(isinstance(g, str) for g in gens),
                  f"{path}: {gens}")
            for g in gens:
                for stop in fx["request"]["stop"]:
                    check(stop not in g, f"{path}: stop {stop!r} in {g!r}")
        print(f"lm-eval fixture {os.path.basename(path)}: accepted by the parser")


if __name__ == "__main__":
    main()
    queue_full_and_drain(PLDR)
