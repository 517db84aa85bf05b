#!/usr/bin/env python3
"""Sampled GW's solves held densely or low-rank, side by side: TorchGW's
random precomputed task (uniform points in the unit cube, each side's
geodesic distances, alpha 0.9, up to 300 iterations) and its scale task
(spiral -> Swiss roll, landmark mode, 50 landmarks), both with k = 5,
M = 80, epsilon 0.005, mixed precision, seed 0, no plan or objective, as
perf/bench_gw_torchgw.py runs softwave. Each line: one process, --calls
calls on the same arrays (the first warms up), every call's seconds, with
dense_cost_entries as given (omitted: the default) and the run's
dense_solves.

    python3 perf/bench_gw_solves.py random 2000 2500 --dense-cost-entries 0
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gw_torchgw import cloud  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("task", choices=["random", "scale"])
    p.add_argument("n", type=int)
    p.add_argument("k", type=int)
    p.add_argument("--max-iter", type=int, default=300)
    p.add_argument("--calls", type=int, default=2)
    p.add_argument("--dense-cost-entries", type=int, default=None)
    # TorchGW's distance-mode task in landmark mode is "scale 400 500
    # --alpha 0.8 --max-iter 200 --landmarks 20".
    p.add_argument("--alpha", type=float, default=0.9)
    p.add_argument("--landmarks", type=int, default=50)
    p.add_argument("--kernel", default="automatic", help="the solves' kernels (automatic, portable, specialised)")
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    import torch

    import softwave.ot as swot

    if args.task == "random":
        x = np.random.default_rng(0).uniform(size=(args.n, 3)).astype(np.float32)
        y = np.random.default_rng(1).uniform(size=(args.k, 3)).astype(np.float32)
        mode = dict(distance_mode="precomputed")
    else:
        x, y = cloud(np, args.n, 0, False), cloud(np, args.k, 1, True)
        mode = dict(distance_mode="landmark", n_landmarks=args.landmarks)
    x, y = torch.from_numpy(x).to(args.device), torch.from_numpy(y).to(args.device)
    extra = {} if args.dense_cost_entries is None else {"dense_cost_entries": args.dense_cost_entries}

    def sync():
        if x.is_cuda:
            torch.cuda.synchronize()
    for _ in range(args.calls):
        sync()
        begin = time.perf_counter()
        r = swot.sampled_gw(x, y, k=5, alpha=args.alpha, epsilon=0.005, M=80, max_iter=args.max_iter,
                            mixed_precision=True, seed=0, plan=False, objective=False, kernel=args.kernel,
                            **mode, **extra)
        sync()
        print(args.task, args.n, args.k, "kernel", args.kernel, "dense_cost_entries", args.dense_cost_entries,
              "dense_solves", r.dense_solves, "iterations", r.iterations,
              "seconds %.4f" % (time.perf_counter() - begin), flush=True)


if __name__ == "__main__":
    main()
