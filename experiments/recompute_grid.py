"""Independent recomputation of the ablation grid's numbers from its raw committed files.

Reads only `experiments/results/<grid>/*/eval.json` (each cell's 200 per-rollout evaluation
rewards before and after RL) and `cell.json` (its setting and seed), and recomputes with the
Python standard library alone — its own Student-t quantile (regularized incomplete beta by
Lentz's continued fraction, inverted by bisection), no code shared with the TypeScript side —
every figure the grid reports: each setting's final evaluation reward with its 95% t-CI, the
difference to the reference with Welch's CI and the Bonferroni family-wise CI, the pooled SD and
the detectable difference at 80% power, the per-factor contrasts (advantage level; normalization
among rollout-level settings), and each setting's paired gain with two CIs: over cells only
(the shared before-RL evaluation taken as exact) and with that evaluation's own sampling noise.

Like the TypeScript side, it scores the grid on the held-out evaluation (`heldout_start`,
`heldout_final`) when every cell recorded one, else on the training questions' (`start`,
`final`), and prints `heldout: 1` or `heldout: 0` to say which; a third argument `train` scores
it on the training questions whatever it has (the second figure).

Usage: /usr/bin/python3 experiments/recompute_grid.py [results_dir] [grid] [auto|train]
Prints `name: value` lines (tests/experiments_recompute_test.ts compares them with the
TypeScript results).
"""

import json
import math
import os
import sys

REFERENCE = "rollout/rollout_token_mean"


def betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-16:
            return h
    raise ArithmeticError("betacf did not converge")


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return front * betacf(a, b, x) / a
    return 1.0 - front * betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Student-t cumulative distribution function."""
    x = df / (df + t * t)
    tail = 0.5 * betainc(df / 2.0, 0.5, x)
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """Student-t quantile by bisection on the CDF (to machine precision)."""
    lo, hi = -1e3, 1e3
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def mean(xs):
    return sum(xs) / len(xs)


def var(xs):
    m = mean(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def mean_ci(xs):
    n = len(xs)
    return mean(xs), t_quantile(0.975, n - 1) * math.sqrt(var(xs) / n)


def welch(xs, ys, level=0.975):
    va, vb = var(xs) / len(xs), var(ys) / len(ys)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(xs) - 1) + vb**2 / (len(ys) - 1))
    return mean(xs) - mean(ys), t_quantile(level, df) * se, se, df


def read_grid(results, grid, score="auto"):
    root = os.path.join(results, grid)
    cells = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if not os.path.isfile(os.path.join(path, "eval.json")):
            continue
        with open(os.path.join(path, "cell.json"), encoding="utf-8") as f:
            cell = json.load(f)
        with open(os.path.join(path, "eval.json"), encoding="utf-8") as f:
            ev = json.load(f)
        c = cell.get("cell", cell)
        heldout = ev.get("heldout_final") or {}
        cells.append(
            {
                "setting": c["setting"],
                "seed": c["seed"],
                "start": ev["start"]["rewards"],
                "final": ev["final"]["rewards"],
                "heldout_start": (ev.get("heldout_start") or {}).get("rewards"),
                "heldout_final": heldout.get("rewards"),
            }
        )
    # One evaluation for every figure: the held-out one when every cell has it (or "train":
    # the training questions' whatever the grid has, the second figure).
    measured = bool(cells) and all(c["heldout_final"] is not None for c in cells)
    heldout = score != "train" and measured
    if heldout:
        for c in cells:
            c["start"], c["final"] = c["heldout_start"], c["heldout_final"]
    return cells, heldout


def main():
    default_results = os.path.join(os.path.dirname(__file__), "results")
    results = sys.argv[1] if len(sys.argv) > 1 else default_results
    grid = sys.argv[2] if len(sys.argv) > 2 else "ablation"
    score = sys.argv[3] if len(sys.argv) > 3 else "auto"
    if score not in ("auto", "train"):
        sys.exit(f"score: expected auto or train, got {score!r}")
    cells, heldout = read_grid(results, grid, score)
    settings = sorted({c["setting"] for c in cells})
    finals = {s: [mean(c["final"]) for c in cells if c["setting"] == s] for s in settings}
    gains = {
        s: [mean(c["final"]) - mean(c["start"]) for c in cells if c["setting"] == s]
        for s in settings
    }
    start = cells[0]["start"]
    assert all(c["start"] == start for c in cells), "one shared before-RL evaluation"
    comparisons = len(settings) - 1
    out = {"cells": len(cells), "heldout": int(heldout), "start_mean": mean(start)}
    for s in settings:
        m, ci = mean_ci(finals[s])
        out[f"final[{s}]"] = m
        out[f"final_ci95[{s}]"] = ci
        g, gci = mean_ci(gains[s])
        out[f"gain[{s}]"] = g
        out[f"gain_ci95[{s}]"] = gci
        # The shared start evaluation is itself a 200-rollout estimate: its variance adds to
        # every cell's gain alike (Welch–Satterthwaite df for the two variance parts).
        a, b = var(gains[s]) / len(gains[s]), var(start) / len(start)
        df = (a + b) ** 2 / (a**2 / (len(gains[s]) - 1) + b**2 / (len(start) - 1))
        out[f"gain_with_start_ci95[{s}]"] = t_quantile(0.975, df) * math.sqrt(a + b)
        if s != REFERENCE:
            d, dci, se, ddf = welch(finals[s], finals[REFERENCE])
            out[f"diff[{s}]"] = d
            out[f"diff_ci95[{s}]"] = dci
            out[f"diff_ci_family[{s}]"] = se * t_quantile(1 - 0.025 / comparisons, ddf)
    ss = sum(sum((x - mean(v)) ** 2 for x in v) for v in finals.values())
    df = sum(len(v) - 1 for v in finals.values())
    sd = math.sqrt(ss / df)
    n = min(len(v) for v in finals.values())
    alpha = 0.05 / comparisons
    out["sd"] = sd
    out["detectable"] = (
        t_quantile(1 - alpha / 2, 2 * n - 2) + t_quantile(0.8, 2 * n - 2)
    ) * sd * math.sqrt(2 / n)
    # Per factor: the advantage level at the same normalization, and the normalization among
    # the rollout-level settings.
    contrasts = {
        "advantage_level": ("rollout/seq_mean_token_mean", "sample/seq_mean_token_mean"),
        "normalization_rtm_vs_smtm": ("rollout/rollout_token_mean", "rollout/seq_mean_token_mean"),
        "normalization_token_mean_vs_rtm": ("rollout/token_mean", "rollout/rollout_token_mean"),
    }
    for name, (x, y) in contrasts.items():
        d, dci, _, _ = welch(finals[x], finals[y])
        out[f"contrast[{name}]"] = d
        out[f"contrast_ci95[{name}]"] = dci
    for k, v in out.items():
        print(f"{k}: {v!r}")


if __name__ == "__main__":
    main()
