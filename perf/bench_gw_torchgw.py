#!/usr/bin/env python3
"""TorchGW's sampled GW on its scale task, timed as softwave_bench's
BM_SampledGw times softwave (perf/bench_gw.cpp), for the side-by-side table.

Task (TorchGW's examples/benchmark_scale.py): spiral (n points) -> Swiss roll
(k points), theta = linspace(0, 9, .), r = linspace(0.3, 1, .), noise
N(0, 0.05^2), the roll's height U(0, 1), columns (x, z, y); landmark distance
mode, k = 5 neighbours, 50 landmarks, epsilon = 0.005, M = 80, max_iter = 300,
mixed precision. The time includes TorchGW's kNN graph and landmark
preprocessing. Per size and seed: seconds (after one warm-up call at the
first size), outer iterations, torch's peak allocation, and the signed
Spearman rho of the row-argmax matching with the increasing one (1 forward,
-1 reversed).

--mode, --landmarks, --alpha and --max-iter replace the task's settings for
both (TorchGW's examples/benchmark_distance_modes.py: 400x500, alpha 0.8,
max_iter 200, 20 landmarks, in each mode); --data random draws uniform points
in the unit cube instead (rho then means nothing).

--methods softwave,torchgw runs softwave's Python sampled_gw (the CUDA build,
torch tensors on the GPU, the same options, its own stop rule) on the same
arrays beside TorchGW, so that both meet the same data. Method "cli" runs the
command line on them instead, one cold process a run as a batch job would
(`softwave gw --mode landmark --k 5 ... --no-objective --matching m.npy`,
the arrays written as .npy first; --cli names the executable), and records
its own `seconds` (points to the device, graphs, landmark embeddings,
iterations, matching back). --sinkhorn-iterations, --early-sinkhorn-iterations,
--min-iter and --tol set softwave's solves, its earliest stop and its stop
rule (both front ends)
where a run must bound its time, as the million-point runs do (a huge --tol
stops at iteration --min-iter, with epsilon on the --max-iter schedule as in
the runs that stop at 50-75 by themselves; --no-warm-up times each method's
first call, for sizes where a second call would not fit a job's time):
    python3 perf/bench_gw_torchgw.py --methods cli --cli build/cuda/bin/softwave \
        --sizes 1000000x1000000 --min-iter 50 --tol 1e9 --sinkhorn-iterations 5
--objective has softwave's Python runs report the plan's GW objective too
(exact where N*K <= 2^24, else estimated from 2048 pairs drawn from the plan,
with its standard error), from a second call after the timed one.

Each record also counts the instance's shortcut edges: 5-NN edges between
points whose angles differ by more than pi, which only a noise outlier can
make and which make the graph's geodesics cut across the spiral's arms (the
increasing matching is then no longer the GW optimum the rho above assumes).

The wheel is carried to the GPU machine (no registry there; scipy and
scikit-learn are on its image):
    python3 perf/bench_gw_torchgw.py --install --out $OUT/torchgw-gw.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_WHEELS = REPO / ".cache" / "peers" / "wheels"


def size_list(text):
    return [tuple(int(v) for v in item.lower().split("x")) for item in text.split(",")]


def cloud(np, count, seed, roll):
    rng = np.random.default_rng(seed)
    theta = np.linspace(0, 9, count)
    r = np.linspace(0.3, 1.0, count)
    e = rng.normal(size=(2, count)) * 0.05
    x, y = (r + e[0]) * np.cos(theta), (r + e[1]) * np.sin(theta)
    if roll:
        return np.stack((x, rng.uniform(size=count), y), 1).astype(np.float32)
    return np.stack((x, y), 1).astype(np.float32)


def run_cli(args, np, spearmanr, x, y, n, k, seed):
    """One cold `softwave gw` process on the arrays; its summary and rho."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        np.save(folder / "x.npy", x)
        np.save(folder / "y.npy", y)
        command = [args.cli, "gw", "--source", str(folder / "x.npy"), "--target", str(folder / "y.npy"),
                   "--mode", args.mode, "--k", "5", "--landmarks", str(args.landmarks),
                   "--anchors", "80", "--alpha", str(args.alpha), "--epsilon", "0.005",
                   "--max-iterations", str(args.max_iter), "--restarts", str(args.restarts),
                   "--restart-iterations", str(args.restart_iterations), "--seed", str(seed),
                   "--no-objective", "--matching", str(folder / "m.npy")]
        if args.sinkhorn_iterations is not None:
            command += ["--sinkhorn-iterations", str(args.sinkhorn_iterations)]
        if args.early_sinkhorn_iterations is not None:
            command += ["--early-sinkhorn-iterations", str(args.early_sinkhorn_iterations)]
        if args.min_iter is not None:
            command += ["--min-iterations", str(args.min_iter)]
        if args.tol is not None:
            command += ["--tolerance", str(args.tol)]
        begin = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        wall = time.perf_counter() - begin
        if done.returncode != 0:
            raise SystemExit(f"softwave gw failed ({done.returncode}): {done.stderr.strip()}")
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        matching = np.load(folder / "m.npy").reshape(-1)
    return {"method": "cli", "n": n, "k": k, "seed": seed, "mode": args.mode, "data": args.data,
            "seconds": summary.get("seconds"), "process_seconds": wall,
            "iterations": summary.get("iterations"), "sinkhorn_iterations": args.sinkhorn_iterations,
            "early_sinkhorn_iterations": args.early_sinkhorn_iterations,
            "min_iter": args.min_iter, "tol": args.tol, "restarts": args.restarts,
            "rho": float(spearmanr(np.arange(n), matching)[0]), "summary": summary}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=size_list, default=size_list("4000x5000,10000x12000,40000x50000"))
    p.add_argument("--seeds", default="0")
    p.add_argument("--methods", default="torchgw")
    p.add_argument("--device", default="cuda")
    p.add_argument("--mode", default="landmark", help="distance_mode of both")
    p.add_argument("--landmarks", type=int, default=50)
    p.add_argument("--alpha", type=float, default=0.9)
    p.add_argument("--max-iter", type=int, default=300)
    p.add_argument("--data", default="spiral", choices=["spiral", "random"],
                   help="random: uniform points in the unit cube (3-D), seeds 0 and 1")
    # softwave's restarts: whole, or raced over their first iterations.
    p.add_argument("--restarts", type=int, default=1)
    p.add_argument("--restart-iterations", type=int, default=0)
    # softwave's Sinkhorn iterations a solve and earliest stop; unset: its defaults.
    p.add_argument("--sinkhorn-iterations", type=int, default=None)
    p.add_argument("--early-sinkhorn-iterations", type=int, default=None)
    p.add_argument("--min-iter", type=int, default=None)
    # softwave's stop on the plan's relative change; a huge value stops at the
    # first check from --min-iter on, with ε on the --max-iter schedule.
    p.add_argument("--tol", type=float, default=None)
    p.add_argument("--no-warm-up", dest="warm_up", action="store_false",
                   help="time each method's first call too (no untimed call before it)")
    p.add_argument("--objective", action="store_true",
                   help="softwave (Python): the plan's GW objective, from a second, untimed call")
    p.add_argument("--cli", default="softwave", help="the softwave executable (method cli)")
    p.add_argument("--out", default=None)
    p.add_argument("--install", action="store_true")
    p.add_argument("--target", default="/tmp/peer-site")
    p.add_argument("--wheels", default=str(DEFAULT_WHEELS))
    args = p.parse_args(argv)
    if args.install and "torchgw" in args.methods.split(","):
        wheels = sorted(Path(args.wheels).glob("torchgw-*.whl"))
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                        "--upgrade", "--target", args.target, str(wheels[-1])], check=True)
    sys.path.insert(0, args.target)
    import numpy as np
    import torch
    from scipy.stats import spearmanr
    from scipy.spatial import cKDTree

    methods = args.methods.split(",")
    if "torchgw" in methods:
        import torchgw
    if "softwave" in methods:
        import softwave.ot as swot

    def shortcuts(points):
        count = len(points)
        _, neighbours = cKDTree(points).query(points, k=6)
        angle = 9.0 * np.arange(count) / max(count - 1, 1)
        return int((np.abs(angle[:, None] - angle[neighbours[:, 1:]]) > np.pi).sum())

    device = torch.device(args.device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()
    records = []
    warm = set()
    for n, k in args.sizes:
        if args.data == "spiral":
            x, y = cloud(np, n, 0, False), cloud(np, k, 1, True)
        else:
            x = np.random.default_rng(0).uniform(size=(n, 3)).astype(np.float32)
            y = np.random.default_rng(1).uniform(size=(k, 3)).astype(np.float32)
        cuts = ({"source_shortcuts": shortcuts(x), "target_shortcuts": shortcuts(y)}
                if args.data == "spiral" else {})
        xt, yt = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
        solver_options = {}
        if args.sinkhorn_iterations is not None:
            solver_options["sinkhorn_iterations"] = args.sinkhorn_iterations
        if args.early_sinkhorn_iterations is not None:
            solver_options["early_sinkhorn_iterations"] = args.early_sinkhorn_iterations
        if args.min_iter is not None:
            solver_options["min_iter_before_converge"] = args.min_iter
        if args.tol is not None:
            solver_options["tol"] = args.tol
        for seed, method in [(int(s), m) for s in args.seeds.split(",") for m in methods]:
            if method == "cli":
                record = run_cli(args, np, spearmanr, x, y, n, k, seed)
                record.update(cuts)
                print(json.dumps(record), flush=True)
                records.append(record)
                if args.out:
                    Path(args.out).write_text(json.dumps(records, indent=1))
                continue
            if method == "softwave":
                def solve(objective=False):
                    r = swot.sampled_gw(xt, yt, distance_mode=args.mode, k=5,
                                        n_landmarks=args.landmarks, alpha=args.alpha,
                                        epsilon=0.005, M=80, max_iter=args.max_iter,
                                        mixed_precision=True, restarts=args.restarts,
                                        restart_iterations=args.restart_iterations,
                                        seed=seed, plan=False, objective=objective, **solver_options)
                    return r.matching, {"n_iter": r.iterations, "kept_seed": r.seed,
                                        "objective": r.objective, "objective_error": r.objective_error}
                if method not in warm and args.warm_up:
                    solve()
                    warm.add(method)
                sync()
                begin = time.perf_counter()
                matching, log = solve()
                sync()
                seconds = time.perf_counter() - begin
                matching = torch.as_tensor(matching).cpu().numpy()
                record = {"method": "softwave", "n": n, "k": k, "seed": seed, "mode": args.mode,
                          "data": args.data,
                          "seconds": seconds, "iterations": int(log["n_iter"]),
                          "restarts": args.restarts, "restart_iterations": args.restart_iterations,
                          "kept_seed": int(log["kept_seed"]),
                          "sinkhorn_iterations": args.sinkhorn_iterations,
                          "early_sinkhorn_iterations": args.early_sinkhorn_iterations,
                          "rho": float(spearmanr(np.arange(n), matching)[0]),
                          "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                          **cuts}
                if args.objective:
                    _, log = solve(objective=True)
                    record.update(objective=float(log["objective"]),
                                  objective_error=float(log["objective_error"]))
                print(json.dumps(record), flush=True)
                records.append(record)
                if args.out:
                    Path(args.out).write_text(json.dumps(records, indent=1))
                continue

            def solve():
                torch.manual_seed(seed)
                np.random.seed(seed)
                return torchgw.sampled_gw(x, y, distance_mode=args.mode, k=5,
                                          n_landmarks=args.landmarks, alpha=args.alpha,
                                          epsilon=0.005, M=80, max_iter=args.max_iter,
                                          mixed_precision=True,
                                          device=device, log=True)
            if method not in warm and args.warm_up:
                solve()
                warm.add(method)
            sync()
            torch.cuda.reset_peak_memory_stats()
            begin = time.perf_counter()
            plan, log = solve()
            sync()
            seconds = time.perf_counter() - begin
            matching = plan.argmax(1).cpu().numpy()
            rho = float(spearmanr(np.arange(n), matching)[0])
            record = {"method": "torchgw", "n": n, "k": k, "seed": seed, "mode": args.mode,
                      "data": args.data, "seconds": seconds,
                      "iterations": int(log["n_iter"]), "rho": rho,
                      "peak_MB": torch.cuda.max_memory_allocated() / 2**20,
                      "device": torch.cuda.get_device_name(), "torchgw": getattr(torchgw, "__version__", "?"),
                      **cuts}
            print(json.dumps(record), flush=True)
            records.append(record)
            del plan
            torch.cuda.empty_cache()
            if args.out:
                Path(args.out).write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
