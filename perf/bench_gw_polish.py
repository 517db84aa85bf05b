#!/usr/bin/env python3
"""Whether one more iteration with more anchors brings softwave's sampled
GW plan to POT's objective: the run as returned, then, from its plan, one
iteration (`--initial-plan`, momentum 1, at the run's last epsilon) with
each --polish-anchors count, each plan's exact GW objective against POT's
entropic GW at that plan's own regularised problem.

Task: perf/bench_gw_pot.py's (TorchGW's spiral -> Swiss roll, each side's
geodesic matrix divided by its largest entry, uniform marginals), through
softwave's command line (`softwave gw --mode precomputed` on float32 .npy
copies), POT on float64 NumPy arrays. A sampled plan's objective is a draw:
each iteration's M anchors are fresh, so the returned plan carries their
noise; the polishing iteration's cost averages more of them.

POT is a peer, never a project dependency: run this from a throwaway
virtual environment that has it (see perf/bench_gw_pot.py), e.g.
    /tmp/potenv/bin/python perf/bench_gw_polish.py --cli build/openmp/bin/softwave \\
        --sizes 1000x1250 --seeds 8 --out gw-polish.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gw_pot import geodesics, gw_objective, run_pot, signed_rho  # noqa: E402
from bench_gw_torchgw import cloud, size_list  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cli", required=True, help="softwave's command line")
    parser.add_argument("--sizes", type=size_list, default=size_list("1000x1250"))
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--epsilon", type=float, default=5e-3)
    parser.add_argument("--anchors", type=int, default=80)
    parser.add_argument("--polish-anchors", type=lambda text: [int(c) for c in text.split(",")],
                        default=[80, 640])
    parser.add_argument("--neighbours", type=int, default=5)
    parser.add_argument("--pot-iterations", type=int, default=200)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    import ot

    version = subprocess.run([args.cli, "--version"], capture_output=True, text=True).stdout.strip()
    meta = dict(pot=ot.__version__, softwave=version, epsilon=args.epsilon, anchors=args.anchors,
                polish_anchors=args.polish_anchors, pot_iterations=args.pot_iterations)
    records = []
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        for n, k in args.sizes:
            for seed in range(args.seeds):
                dx = geodesics(cloud(np, n, seed, False).astype(np.float64), args.neighbours, args.workers)
                dy = geodesics(cloud(np, k, seed + 1000, True).astype(np.float64), args.neighbours, args.workers)
                np.save(folder / "x.npy", dx.astype(np.float32))
                np.save(folder / "y.npy", dy.astype(np.float32))

                def gw(plan, anchors, epsilon, more=()):
                    command = [args.cli, "gw", "--source", str(folder / "x.npy"), "--target",
                               str(folder / "y.npy"), "--mode", "precomputed", "--seed", str(seed),
                               "--anchors", str(anchors), "--epsilon", repr(epsilon), "--no-objective",
                               "-o", str(folder / plan), *more]
                    summary = json.loads(subprocess.run(command, capture_output=True, text=True,
                                                        check=True).stdout)
                    return summary, np.load(folder / plan).astype(np.float64)

                runs = [("sampled", args.anchors, *gw("run.npy", args.anchors, args.epsilon))]
                last_epsilon = runs[0][2]["final_epsilon"]
                for anchors in args.polish_anchors:
                    runs.append((f"+1 at M={anchors}", anchors,
                                 *gw("polished.npy", anchors, last_epsilon,
                                     ("--initial-plan", str(folder / "run.npy"), "--alpha", "1",
                                      "--max-iterations", "1", "--min-iterations", "0"))))
                pot = {}
                for name, anchors, summary, plan in runs:
                    pot_epsilon = 2 * summary["final_epsilon"] * summary["source_scale"] * summary["target_scale"]
                    if pot_epsilon not in pot:
                        solved = run_pot(dx, dy, args, pot_epsilon)
                        pot[pot_epsilon] = (gw_objective(dx, dy, np.asarray(solved["plan"], dtype=np.float64)),
                                            solved["seconds"])
                    objective = gw_objective(dx, dy, plan)
                    record = dict(n=n, k=k, seed=seed, run=name, anchors=anchors, seconds=summary["seconds"],
                                  iterations=summary["iterations"], final_epsilon=summary["final_epsilon"],
                                  pot_epsilon=pot_epsilon, objective=objective, pot_objective=pot[pot_epsilon][0],
                                  pot_seconds=pot[pot_epsilon][1], relative=objective / pot[pot_epsilon][0] - 1,
                                  rho=signed_rho(plan.argmax(1)))
                    records.append(record)
                    print(f"{n}x{k} seed {seed} {name:14s} {record['seconds']:7.3f} s  objective "
                          f"{objective:.6f}  POT {record['pot_objective']:.6f} ({100 * record['relative']:+.2f} %)  "
                          f"rho {record['rho']:+.4f}", flush=True)
                if args.out:
                    Path(args.out).write_text(json.dumps(dict(meta=meta, records=records), indent=1))


if __name__ == "__main__":
    main()
