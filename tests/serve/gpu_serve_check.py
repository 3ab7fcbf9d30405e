"""`pldr serve --device cuda` against `--device cpu` (scripts/gpu-check.sh runs it on the GPU
machine; without a GPU it says so and exits 0).

Four prompts, greedy, 12 tokens each with their top-2 log-probabilities and the echoed prompt's
(block scoring): the CPU server answers them one by one, the GPU server all at once (its 4 slots
decode together: DeviceSession::decode_batch). The texts must be equal and every log-probability
within 1e-3 (float32 on both sides; the GPU's sums run in other orders). `--mode cached` on the
GPU must refuse to start in one line.

Usage: gpu_serve_check.py PLDR
"""
import concurrent.futures
import subprocess
import sys

from serve_util import EVAL_MODEL, Server, check

PROMPTS = ["The state of the union", "Four score and seven years", "We the people",
           "In the beginning"]


def ask(srv, prompt):
    st, r = srv.post("/v1/completions", {"prompt": prompt, "max_tokens": 12, "temperature": 0,
                                         "logprobs": 2, "echo": True})
    check(st == 200, f"status {st}: {r}")
    return r["choices"][0]


def main():
    pldr = sys.argv[1]
    probe = subprocess.run([pldr, "generate", EVAL_MODEL, "--ids", "5", "-n", "1", "--device",
                            "cuda"], capture_output=True, text=True)
    if probe.returncode != 0 and "no CUDA device" in probe.stderr:
        print("gpu_serve_check: skipped: no CUDA device (" + probe.stderr.strip() + ")")
        return 0
    cpu = Server(pldr, args=["--parallel", "4"])
    gpu = Server(pldr, args=["--parallel", "4", "--device", "cuda"])
    try:
        want = [ask(cpu, p) for p in PROMPTS]
        with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as ex:
            got = list(ex.map(lambda p: ask(gpu, p), PROMPTS))
        worst = 0.0
        for p, a, b in zip(PROMPTS, want, got):
            check(a["text"] == b["text"], f"{p!r}: cpu {a['text']!r} != cuda {b['text']!r}")
            la, lb = a["logprobs"]["token_logprobs"], b["logprobs"]["token_logprobs"]
            check(len(la) == len(lb), f"{p!r}: {len(la)} vs {len(lb)} log-probabilities")
            for x, y in zip(la, lb):
                if x is None or y is None:
                    check(x is None and y is None, f"{p!r}: {x} vs {y}")
                    continue
                worst = max(worst, abs(x - y))
        check(worst <= 1e-3, f"log-probabilities differ by {worst}")
        decoded = gpu.metric("pldr_decode_batched_tokens_total")
        check(decoded > 0, "the GPU server's slots never decoded together")
    finally:
        cpu.stop()
        gpu.stop()
    try:
        Server(pldr, args=["--mode", "cached", "--device", "cuda"]).stop()
        check(False, "--mode cached started on the GPU")
    except RuntimeError as e:
        check("--mode cached" in str(e), f"--mode cached: {e}")
    print(f"gpu_serve_check: {len(PROMPTS)} prompts, the CPU's texts, log-probabilities within "
          f"{worst:.2e}; {decoded:.0f} tokens decoded in batched steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
