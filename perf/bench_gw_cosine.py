#!/usr/bin/env python3
"""Matching embeddings by GW with dense cosine distances: softwave's
sampled GW beside POT's entropic GW on the same matrices, in one process.

Task (an analogue of cross-lingual word-embedding alignment, where the
distances are dense and concentrated, every pair near 1): source points
Z = A·B + 0.3·E (N points in d dimensions with a rank-r structure, A, B, E
standard normal), target points Z·Q + noise·std(Z)·E' (Q a random rotation),
their rows shuffled by a random permutation; each side's cosine distances
1 − cos(z_i, z_j). A method's precision at 1 (P@1) is the share of source
points whose plan row has its largest entry at their own shuffled row.
Also reported: the exact GW objective of each plan (square loss, by matrix
products) and the time.

  POT       ot.gromov.entropic_gromov_wasserstein(loss_fun="square_loss",
            epsilon, max_iter --pot-iterations, tol 1e-9) from the product
            coupling (its default solver, a Sinkhorn solve of the exact
            linearised cost an iteration: O(N²K + NK²) each);
  softwave  softwave.ot.sampled_gw(distance_mode="cosine", epsilon) on the
            points themselves: each solve's cost exact and of rank d + 2
            (no sampled anchors, no N×N matrix);
  sampled   softwave.ot.sampled_gw(distance_mode="precomputed", epsilon),
            its defaults (M = 50 anchors an iteration) with 1 restart and
            with --restarts (the lowest GW objective kept), both again
            with --exact exact entropic GW steps after the sampled ones
            (exact_iterations), and any --ema values as lambda_ema_beta.
--methods picks among pot, cosine and sampled (default all three).

POT is a peer, never a project dependency: install it into a throwaway
virtual environment that also sees softwave, e.g.
    python3 -m venv --system-site-packages /tmp/potenv
    /tmp/potenv/bin/pip install POT "numpy<2"
    PYTHONPATH=<softwave's site-packages> /tmp/potenv/bin/python \\
        perf/bench_gw_cosine.py --out gw-cosine.json
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np


def embeddings_task(n, dim, rank, noise, seed):
    """The two sides' cosine distances and, for each source point, the
    target row that holds its counterpart."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, rank)) @ rng.normal(size=(rank, dim)) + 0.3 * rng.normal(size=(n, dim))
    rotation, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    y = z @ rotation + noise * z.std() * rng.normal(size=(n, dim))
    order = rng.permutation(n)  # target row r holds source point order[r]

    def cosine_distances(points):
        unit = points / np.linalg.norm(points, axis=1, keepdims=True)
        return np.clip(1.0 - unit @ unit.T, 0.0, None)

    return (cosine_distances(z), cosine_distances(y[order]), np.argsort(order), z,
            np.ascontiguousarray(y[order]))


def gw_objective(dx, dy, plan):
    """Σ_ijkl (D_X(i,j) − D_Y(k,l))² T_ik T_jl, by matrix products."""
    a, b = plan.sum(1), plan.sum(0)
    return float(a @ (dx ** 2) @ a + b @ (dy ** 2) @ b - 2 * np.sum((dx @ plan @ dy) * plan))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="300,1000")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--epsilon", type=float, default=5e-3)
    parser.add_argument("--restarts", type=int, default=4)
    parser.add_argument("--exact", type=int, default=20, help="exact_iterations (0: those runs left out)")
    parser.add_argument("--ema", default="", help="comma-separated lambda_ema_beta values to add")
    parser.add_argument("--pot-iterations", type=int, default=200)
    parser.add_argument("--methods", default="pot,cosine,sampled")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    import ot as pot

    import softwave.ot as swot

    chosen = set(args.methods.split(","))
    methods = [("softwave cosine embeddings", {"distance_mode": "cosine"})] if "cosine" in chosen else []
    if "sampled" in chosen:
        methods += [("softwave", {}), (f"softwave restarts={args.restarts}", {"restarts": args.restarts})]
    if args.exact > 0 and "sampled" in chosen:
        methods += [(f"softwave exact_iterations={args.exact}", {"exact_iterations": args.exact}),
                    (f"softwave restarts={args.restarts}, exact={args.exact}",
                     {"restarts": args.restarts, "exact_iterations": args.exact})]
    methods += [(f"softwave lambda_ema_beta={b}", {"lambda_ema_beta": float(b)})
                for b in args.ema.split(",") if b and "sampled" in chosen]
    records = []
    print(f"threads {os.environ.get('OMP_NUM_THREADS', 'all')}; d = {args.dim}, rank {args.rank}, "
          f"noise {args.noise}, epsilon {args.epsilon}", flush=True)
    print(f"{'n':>6} {'seed':>4} {'method':34s} {'P@1':>6} {'objective':>11} {'seconds':>8}")
    for n in (int(s) for s in args.sizes.split(",")):
        for seed in range(args.seeds):
            dx, dy, truth, zx, zy = embeddings_task(n, args.dim, args.rank, args.noise, seed)
            weights = np.full(n, 1.0 / n)
            runs = []
            if "pot" in chosen:
                start = time.perf_counter()
                plan = pot.gromov.entropic_gromov_wasserstein(
                    dx, dy, weights, weights, "square_loss", epsilon=args.epsilon,
                    max_iter=args.pot_iterations, tol=1e-9)
                runs.append(("POT entropic GW", plan, time.perf_counter() - start, None))
            for name, options in methods:
                start = time.perf_counter()
                if options.get("distance_mode") == "cosine":
                    r = swot.sampled_gw(zx, zy, epsilon=args.epsilon, seed=seed, **options)
                else:
                    r = swot.sampled_gw(dist_source=dx, dist_target=dy, distance_mode="precomputed",
                                        epsilon=args.epsilon, seed=seed, **options)
                runs.append((name, r.plan, time.perf_counter() - start, r.iterations))
            for name, plan, seconds, iterations in runs:
                record = dict(n=n, seed=seed, method=name,
                              precision_at_1=float(np.mean(plan.argmax(1) == truth)),
                              objective=gw_objective(dx, dy, plan), seconds=seconds,
                              iterations=iterations)
                records.append(record)
                print(f"{n:6d} {seed:4d} {name:34s} {record['precision_at_1']:6.3f} "
                      f"{record['objective']:11.4e} {seconds:8.2f}", flush=True)
            if args.out:  # after every seed: a long run stopped early keeps what it did
                with open(args.out, "w") as f:
                    json.dump(dict(task=vars(args), records=records), f, indent=1)
    print("\nmean P@1 (all seeds):")
    for n in sorted({r["n"] for r in records}):
        for name in dict.fromkeys(r["method"] for r in records):
            values = [r["precision_at_1"] for r in records if r["n"] == n and r["method"] == name]
            print(f"{n:6d} {name:34s} {np.mean(values):6.3f}  "
                  f"({sum(v >= 0.9 for v in values)}/{len(values)} seeds >= 0.9)")


if __name__ == "__main__":
    main()
