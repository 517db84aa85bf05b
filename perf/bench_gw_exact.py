#!/usr/bin/env python3
"""What the exact GW objective and exact iterations cost softwave's sampled
GW, on the task of perf/bench_gw_pot.py (TorchGW's spiral -> Swiss roll,
each side's geodesic distances as a matrix divided by its largest entry,
uniform marginals, epsilon 5e-3, M = 80, the default stop), in one process:
per size and seed, sampled_gw without the objective, with it, and with
--exact-iterations counts of exact iterations after the sampled ones (each
with the objective). Records the seconds of each call (after one warm-up
call), the objective softwave reports, the same objective of the returned
plan in float64 NumPy (a check of the device's products) and the signed
Spearman rho of the matching.

--device cuda runs softwave on torch CUDA tensors (its CUDA build); cpu on
NumPy arrays (the host backend).
    python3 perf/bench_gw_exact.py --device cuda --sizes 2000x2500,3000x3750 --out gw-exact.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gw_pot import geodesics, gw_objective, signed_rho  # noqa: E402
from bench_gw_torchgw import cloud, size_list  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=size_list, default=size_list("1000x1250,2000x2500"))
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--exact-iterations", type=lambda text: [int(c) for c in text.split(",")], default=[1])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    import softwave.ot as swot

    if args.device == "cuda":
        import torch

        def to_device(a):
            return torch.tensor(a, dtype=torch.float32, device="cuda")

        def synchronise():
            torch.cuda.synchronize()
    else:
        def to_device(a):
            return a.astype(np.float32)

        def synchronise():
            pass

    def call(dx, dy, seed, objective, exact):
        synchronise()
        start = time.perf_counter()
        r = swot.sampled_gw(dist_source=dx, dist_target=dy, distance_mode="precomputed", epsilon=5e-3, M=80,
                            seed=seed, objective=objective, exact_iterations=exact)
        synchronise()
        return r, time.perf_counter() - start

    records = []
    warmed = False
    for n, k in args.sizes:
        for seed in range(args.seeds):
            dx = geodesics(cloud(np, n, seed, False).astype(np.float64), 5)
            dy = geodesics(cloud(np, k, seed + 1000, True).astype(np.float64), 5)
            ddx, ddy = to_device(dx), to_device(dy)
            if not warmed:
                call(ddx, ddy, seed, True, 0)
                warmed = True
            runs = [("sampled", False, 0), ("sampled + objective", True, 0)]
            runs += [(f"{e} exact + objective", True, e) for e in args.exact_iterations]
            for name, objective, exact in runs:
                r, seconds = call(ddx, ddy, seed, objective, exact)
                plan = r.plan.cpu().numpy() if hasattr(r.plan, "cpu") else np.asarray(r.plan)
                plan = plan.astype(np.float64)
                record = dict(n=n, k=k, seed=seed, run=name, exact_iterations=exact, seconds=seconds,
                              iterations=r.iterations, objective=float(r.objective),
                              objective_float64=gw_objective(dx, dy, plan), rho=signed_rho(plan.argmax(1)),
                              device=args.device)
                records.append(record)
                print(f"{n}x{k} seed {seed} {name:22s} {seconds:8.3f} s  iterations {r.iterations:3d}  "
                      f"objective {record['objective']:.6f} (float64 {record['objective_float64']:.6f})  "
                      f"rho {record['rho']:+.4f}", flush=True)
    if args.out:
        meta = dict(device=args.device)
        if args.device == "cuda":
            import torch

            meta.update(gpu=torch.cuda.get_device_name(), torch=torch.__version__)
        Path(args.out).write_text(json.dumps(dict(meta=meta, records=records), indent=1))


if __name__ == "__main__":
    main()
