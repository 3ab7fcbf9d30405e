#!/usr/bin/python3
"""The fits of the collapse study (docs/collapse-study.md): for each run directory (its
metrics.jsonl, written by `pldr train --audit-every`), the audit curves against tokens seen, a
power law y = a * tokens^b fitted by least squares in log-log over the second half of the run
(tokens > 0), the slope's standard error, and where the paper's levels would be reached: order
parameter <= 1e-8, eps_G <= 1e-6 (a range from the slope +- 2 standard errors; "never" for a
slope that is not negative). Prints markdown tables.
Usage: collapse-fit.py RUN_DIR..."""
import json
import math
import os
import sys

import numpy as np

CURVES = [  # label, keys, the paper's level
    ("eps_G", ("max_eps_G",), 1e-6),
    ("G_LM order (prompts)", ("order_prompts", "G_LM", "rms"), 1e-8),
    ("G_LM order (continuations)", ("order_continuations", "G_LM", "rms"), 1e-8),
    ("A_P order (prompts)", ("order_prompts", "A_P", "rms"), 1e-8),
    ("block-seq gap", ("max_token_gap",), None),
]


def dig(d, keys):
    for k in keys:
        if not isinstance(d, dict) or d.get(k) is None:
            return None
        d = d[k]
    return d


def read(run):
    audits, evals, train = [], [], []
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            if j["type"] == "audit":
                audits.append(j)
            elif j["type"] == "eval":
                evals.append(j)
            elif j["type"] == "train":
                train.append(j)
    return audits, evals, train


def fit(x, y):
    """log10 y = c + b log10 x: (b, stderr(b), c), or None with fewer than 3 points."""
    if len(x) < 3:
        return None
    lx, ly = np.log10(x), np.log10(y)
    A = np.vstack([lx, np.ones_like(lx)]).T
    coef, res, _, _ = np.linalg.lstsq(A, ly, rcond=None)
    b, c = coef
    r = ly - A @ coef
    s2 = float(r @ r) / max(1, len(x) - 2)
    se = math.sqrt(s2 / float(((lx - lx.mean()) ** 2).sum()))
    return b, se, c


def reach(b, c, level):
    """Tokens where c + b log10 x = log10 level, or None for b >= 0."""
    if b >= 0:
        return None
    return 10 ** ((math.log10(level) - c) / b)


def fmt(v):
    return "never" if v is None else f"{v:.1e}"


def main():
    print("| run | tokens | audits | valid loss (first → last) | " +
          " | ".join(c[0] + " (first → last)" for c in CURVES) + " |")
    print("|" + "---|" * (4 + len(CURVES)))
    fits = []
    for run in sys.argv[1:]:
        name = os.path.basename(os.path.normpath(run))
        audits, evals, _ = read(run)
        cells = [name, f"{audits[-1]['tokens']:.3g}", str(len(audits)),
                 f"{evals[0]['loss']:.3f} → {evals[-1]['loss']:.3f}" if evals else "-"]
        for label, keys, level in CURVES:
            pts = [(a["tokens"], dig(a["audit"], keys)) for a in audits]
            pts = [(t, v) for t, v in pts if v is not None]
            if not pts:
                cells.append("-")
                continue
            cells.append(f"{pts[0][1]:.3g} → {pts[-1][1]:.3g}")
            late = [(t, v) for t, v in pts if t > 0 and v > 0]
            late = late[len(late) // 2:]
            f = fit(np.array([p[0] for p in late], float), np.array([p[1] for p in late], float))
            if f and level:
                b, se, c = f
                lo, hi = reach(b - 2 * se, c, level), reach(b + 2 * se, c, level)
                fits.append((name, label, len(late), b, se, fmt(reach(b, c, level)),
                             f"{fmt(lo)} – {fmt(hi)}" if lo or hi else "never"))
            elif f:
                fits.append((name, label, len(late), f[0], f[1], "-", "-"))
        print("| " + " | ".join(cells) + " |")
    print()
    print("| run | curve | points fitted | slope b (y ∝ tokens^b) | ± 1 s.e. | tokens to the paper's level | with b ± 2 s.e. |")
    print("|---|---|---|---|---|---|---|")
    for name, label, n, b, se, t, rng in fits:
        print(f"| {name} | {label} | {n} | {b:+.3f} | {se:.3f} | {t} | {rng} |")


if __name__ == "__main__":
    main()
