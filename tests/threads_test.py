#!/usr/bin/python3
"""Threading test: with OMP_NUM_THREADS=2, pldr never runs more than 2 busy threads.

OpenBLAS is its OpenMP build and pldr's own loops use OpenMP, so both share one pool of 2
threads. A pthreads OpenBLAS, a nested parallel region or a stray thread pool would show up as a
third runnable thread. The test runs training, prefill/decode generation (batched) and block
scoring under OMP_NUM_THREADS=2, samples /proc/PID/task/*/stat every millisecond, and checks:
- no sample sees more than 2 threads in state R (running or runnable);
- no more than 2 distinct threads are ever seen in state R over the whole run.

Usage: threads_test.py PLDR SOURCE_DIR
"""
import os
import subprocess
import sys
import tempfile
import time


def sample_threads(pid):
    """Returns the set of thread ids of pid in state R, or None when the process is gone."""
    running = set()
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                s = f.read()
        except OSError:
            continue
        # the state follows the parenthesised command name, which may contain spaces
        state = s[s.rfind(")") + 2]
        if state == "R":
            running.add(int(tid))
    return running


def watch(cmd, env):
    """Runs cmd, sampling its threads until it exits. Returns (max per sample, distinct, rc)."""
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    most, ever, n = 0, set(), 0
    while p.poll() is None:
        r = sample_threads(p.pid)
        if r is None:
            break
        most = max(most, len(r))
        ever |= r
        n += 1
        time.sleep(0.001)
    err = p.communicate()[1].decode(errors="replace")
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}: {err.strip()[-400:]}")
    return most, len(ever), n


def main():
    pldr, src = os.path.realpath(sys.argv[1]), sys.argv[2]
    model = f"{src}/models/pldr-sotu-small"
    env = dict(os.environ, OMP_NUM_THREADS="2")
    env.pop("OPENBLAS_NUM_THREADS", None)
    with tempfile.TemporaryDirectory(prefix="pldr-threads.") as w:
        subprocess.run([pldr, "prepare", "--tokenizer", f"{model}/tokenizer.model", "--out",
                        f"{w}/shards", "--ctx", "65", "--valid-fraction", "0.1",
                        f"{src}/data/corpus/sotu/valid.txt"],
                       check=True, stdout=subprocess.DEVNULL)
        with open(f"{w}/req.jsonl", "w") as f:
            for i in range(8):
                f.write('{"context": "The state of the Union is", "continuation": " strong %d"}\n'
                        % i)
        runs = {
            "train (small preset, batch 8 x 64)":
                [pldr, "train", "--preset", "small", "--data", f"{w}/shards", "--out",
                 f"{w}/ck", "--steps", "6", "--batch", "8", "--eval-every", "0",
                 "--save-every", "0", "--log-every", "100"],
            "generate (8 prompts, 24 tokens)":
                [pldr, "generate", model, "-n", "24", "--seed", "1"]
                + [a for i in range(8) for a in ("-p", f"The state of the Union is {i}")],
            "score (block)":
                [pldr, "score", model, "--requests", f"{w}/req.jsonl", "--mode", "block"],
        }
        bad = []
        for what, cmd in runs.items():
            most, distinct, n = watch(cmd, env)
            print(f"{what}: {n} samples, at most {most} threads in state R at once, "
                  f"{distinct} distinct threads ever in state R")
            if n < 20:
                bad.append(f"{what}: only {n} samples (the run was too short to watch)")
            if most > 2 or distinct > 2:
                bad.append(f"{what}: {most} busy at once, {distinct} distinct busy threads (> 2)")
        if bad:
            sys.exit("FAIL: " + "; ".join(bad))
    print("OK: never more than 2 busy threads")


if __name__ == "__main__":
    main()
