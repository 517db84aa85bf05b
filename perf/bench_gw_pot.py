#!/usr/bin/env python3
"""softwave's sampled GW beside POT's entropic GW on the same distance
matrices, in one process: time, the exact GW objective of each returned
plan (square loss, one function for both) and the signed Spearman rho of
its row-argmax matching with the increasing one (1 forward, -1 reversed).

Task: TorchGW's spiral (n points) -> Swiss roll (k points) (the generator
of perf/bench_gw_torchgw.py), each side's geodesic distances (all shortest
paths of its symmetrised 5-NN graph, softwave.ot.knn_graph then scipy's
Dijkstra), each matrix divided by its largest entry. Both solvers get these
matrices and uniform marginals:
  softwave  ot.sampled_gw(distance_mode="precomputed", epsilon, M, restarts,
            restart_iterations, tol and max_iter as given), its defaults otherwise, once for
            each --sinkhorn-iterations count (a solve's iterations),
            --early-sinkhorn-iterations count (those of the solves while the
            plan forms), --exact-iterations count (0: the sampled plan as
            returned) and --polish-anchors count (the polishing
            iteration's anchors; 0: none, -1: softwave's default);
  POT       ot.gromov.entropic_gromov_wasserstein(loss_fun="square_loss",
            solver "PGD" (its default: a Sinkhorn solve of the
            linearised cost an iteration), max_iter --pot-iterations,
            tol 1e-9), from the product coupling (its default), at the
            epsilon of the same regularised problem as each softwave
            run's last solve (below).
The same epsilon means two problems in the two libraries. softwave's (and
TorchGW's) Sinkhorn cost is the linearised square loss L of the distances
divided by s_X and s_Y; POT's is its gradient 2 L of the distances as given.
So softwave's last solve, at final_epsilon, is POT's at
    epsilon_POT = 2 * final_epsilon * s_X * s_Y,
and softwave's exact iterations converge to POT's plan there (the same
fixed point, to rounding). softwave anneals epsilon down from the given
value, so its final one is below it. --pot-epsilon fixes POT's instead.
--device cuda runs both on the GPU, on torch CUDA tensors: POT on its torch
backend in --dtype (float64 by default: its Sinkhorn is not in the log
domain), softwave's Python API in float32 (its specialised kernels'
precision); the objective and rho on the GPU in float64.
--cli PATH runs softwave through its command line instead of its Python
package: `softwave gw --mode precomputed` on the same matrices written as
float32 .npy files (the time is the solve's own, as the command reports it:
the matrices' copy to the device included, reading and writing files not),
its plan read back from plan.npy, POT's epsilon from the final_epsilon and
scales the command reports. Without the Python package the k-NN graph is
SciPy's (a k-d tree's k nearest, each edge kept from either end, its
components joined by their closest pairs: softwave.ot.knn_graph's graph).
--workers N splits the all-pairs Dijkstra runs over N processes (a
20,000-point side takes minutes on one).
POT is a peer, never a project dependency: install it into a throwaway
virtual environment that also sees softwave, e.g.
    python3 -m venv --system-site-packages /tmp/potenv
    /tmp/potenv/bin/pip install POT "numpy<2"
    PYTHONPATH=<softwave's site-packages> /tmp/potenv/bin/python \\
        perf/bench_gw_pot.py --out gw-pot.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gw_torchgw import cloud, size_list  # noqa: E402


def knn_graph(points, k):
    """The symmetrised k-NN graph as a scipy.sparse matrix of distances:
    softwave's where its Python package is there, else SciPy's k-d tree's."""
    try:
        import softwave.ot as swot
    except ImportError:
        from scipy.sparse import csr_matrix
        from scipy.spatial import cKDTree

        distances, neighbours = cKDTree(points).query(points, k + 1)
        rows = np.repeat(np.arange(len(points)), k)
        graph = csr_matrix((distances[:, 1:].ravel(), (rows, neighbours[:, 1:].ravel())),
                           shape=(len(points),) * 2)
        graph = graph.maximum(graph.T).tolil()
        # Joined as softwave's: the closest pair between point 0's
        # component and the rest, until one component is left.
        from scipy.sparse.csgraph import connected_components

        while True:
            count, labels = connected_components(graph, directed=False)
            if count == 1:
                return graph.tocsr()
            inside, outside = np.flatnonzero(labels == labels[0]), np.flatnonzero(labels != labels[0])
            gap, nearest = cKDTree(points[outside]).query(points[inside])
            i = int(np.argmin(gap))
            a, b = inside[i], outside[nearest[i]]
            graph[a, b] = graph[b, a] = gap[i]
    return swot.knn_graph(points, k=k).to_scipy()


def _dijkstra_rows(graph, sources, out_path):
    from scipy.sparse.csgraph import dijkstra

    out = np.lib.format.open_memmap(out_path, mode="r+")
    out[sources] = dijkstra(graph, directed=False, indices=sources)
    out.flush()


def geodesics(points, k, workers=1):
    """All shortest paths of the symmetrised k-NN graph, divided by the largest."""
    from scipy.sparse.csgraph import dijkstra

    graph = knn_graph(points, k)
    if workers <= 1:
        d = dijkstra(graph, directed=False)
    else:
        import tempfile
        from concurrent.futures import ProcessPoolExecutor

        n = graph.shape[0]
        with tempfile.TemporaryDirectory() as folder:
            path = str(Path(folder) / "d.npy")
            np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=(n, n)).flush()
            chunks = np.array_split(np.arange(n), workers * 4)
            with ProcessPoolExecutor(workers) as pool:
                list(pool.map(_dijkstra_rows, [graph] * len(chunks), chunks, [path] * len(chunks)))
            d = np.array(np.load(path, mmap_mode="r"))
    if not np.isfinite(d).all():
        raise SystemExit("bench_gw_pot: a distance is not finite (a graph not joined into one component)")
    return d / d.max()


def gw_objective(dx, dy, plan):
    """Σ_ijkl (D_X(i,j) − D_Y(k,l))² T_ik T_jl, by matrix products (NumPy
    arrays or torch tensors alike, in their precision)."""
    a, b = plan.sum(1), plan.sum(0)
    return float(a @ (dx ** 2) @ a + b @ (dy ** 2) @ b - 2 * ((dx @ plan @ dy) * plan).sum())


def signed_rho(matching):
    from scipy.stats import spearmanr

    return float(spearmanr(np.arange(len(matching)), matching).statistic)


def synchronise(array):
    """Waits for the GPU's work on a torch CUDA tensor (timing); else nothing."""
    if getattr(array, "is_cuda", False):
        import torch

        torch.cuda.synchronize()


def run_softwave(dx, dy, args, seed, exact_iterations, sinkhorn_iterations, early_sinkhorn_iterations=None,
                 polish_anchors=None):
    import softwave.ot as swot

    synchronise(dx)
    start = time.perf_counter()
    r = swot.sampled_gw(dist_source=dx, dist_target=dy, distance_mode="precomputed", epsilon=args.epsilon,
                        M=args.anchors, restarts=args.restarts, restart_iterations=args.restart_iterations,
                        seed=seed, objective=False, tol=args.tol,
                        max_iter=args.max_iter, exact_iterations=exact_iterations,
                        sinkhorn_iterations=sinkhorn_iterations,
                        early_sinkhorn_iterations=early_sinkhorn_iterations, polish_anchors=polish_anchors,
                        **({} if args.exact_objective_entries is None
                           else dict(exact_objective_entries=args.exact_objective_entries)))
    synchronise(dx)
    seconds = time.perf_counter() - start
    plan = r.plan
    matched = 2 * r.final_epsilon * r.source_scale * r.target_scale
    return dict(seconds=seconds, iterations=r.iterations, exact_iterations=exact_iterations,
                sinkhorn_iterations=sinkhorn_iterations,
                early_sinkhorn_iterations=early_sinkhorn_iterations, polish_anchors=r.polish_anchors,
                chosen_seed=r.seed, final_epsilon=r.final_epsilon, pot_epsilon=matched, plan=plan)


def run_cli(dx, dy, args, seed, exact_iterations, sinkhorn_iterations, early_sinkhorn_iterations=None,
            polish_anchors=None):
    """One `softwave gw --mode precomputed` process on float32 copies of the
    matrices: its reported time, final epsilon and scales, and its plan."""
    import subprocess
    import tempfile

    to_host = (lambda d: d.cpu().numpy()) if hasattr(dx, "cpu") else np.asarray
    with tempfile.TemporaryDirectory(dir=args.scratch) as folder:
        folder = Path(folder)
        for name, d in (("x.npy", dx), ("y.npy", dy)):
            np.save(folder / name, to_host(d).astype(np.float32))
        command = [args.cli, "gw", "--source", str(folder / "x.npy"), "--target", str(folder / "y.npy"),
                   "--mode", "precomputed", "--epsilon", str(args.epsilon), "--anchors", str(args.anchors),
                   "--restarts", str(args.restarts), "--restart-iterations", str(args.restart_iterations),
                   "--seed", str(seed), "--tolerance", str(args.tol), "--max-iterations", str(args.max_iter),
                   "--exact-iterations", str(exact_iterations),
                   "--sinkhorn-iterations", str(sinkhorn_iterations), "--no-objective",
                   "-o", str(folder / "plan.npy")]
        if early_sinkhorn_iterations is not None:
            command += ["--early-sinkhorn-iterations", str(early_sinkhorn_iterations)]
        if args.exact_objective_entries is not None:
            command += ["--exact-objective-entries", str(args.exact_objective_entries)]
        if polish_anchors is not None:
            command += ["--polish-anchors", str(polish_anchors)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"bench_gw_pot: {' '.join(command)} failed: {done.stderr}")
        summary = json.loads(done.stdout)
        plan = np.load(folder / "plan.npy")
    matched = 2 * summary["final_epsilon"] * summary["source_scale"] * summary["target_scale"]
    return dict(seconds=summary["seconds"], iterations=summary["iterations"], exact_iterations=exact_iterations,
                sinkhorn_iterations=sinkhorn_iterations,
                early_sinkhorn_iterations=early_sinkhorn_iterations,
                polish_anchors=summary["polish_anchors"], chosen_seed=summary["seed"],
                final_epsilon=summary["final_epsilon"], pot_epsilon=matched, plan=plan, via="cli")


def run_pot(dx, dy, args, epsilon):
    import ot

    if getattr(dx, "is_cuda", False):
        import torch

        p = torch.full((dx.shape[0],), 1 / dx.shape[0], dtype=dx.dtype, device=dx.device)
        q = torch.full((dy.shape[0],), 1 / dy.shape[0], dtype=dy.dtype, device=dy.device)
    else:
        p, q = np.full(dx.shape[0], 1 / dx.shape[0]), np.full(dy.shape[0], 1 / dy.shape[0])
    synchronise(dx)
    start = time.perf_counter()
    plan, log = ot.gromov.entropic_gromov_wasserstein(dx, dy, p, q, loss_fun="square_loss", epsilon=epsilon,
                                                      solver="PGD", max_iter=args.pot_iterations, tol=1e-9,
                                                      log=True)
    synchronise(dx)
    seconds = time.perf_counter() - start
    return dict(seconds=seconds, iterations=len(log.get("err", [])) * 10, epsilon=epsilon, plan=plan)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=size_list, default=size_list("400x500,1000x1250,2000x2500"))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0, help="data seeds first-seed .. first-seed + seeds - 1")
    parser.add_argument("--epsilon", type=float, default=5e-3)
    parser.add_argument("--anchors", type=int, default=80)
    parser.add_argument("--restarts", type=int, default=1)
    # > 0: race the restarts over this many iterations (GwOptions::restart_iterations).
    parser.add_argument("--restart-iterations", type=int, default=0)
    parser.add_argument("--neighbours", type=int, default=5)
    parser.add_argument("--pot-iterations", type=int, default=200)
    # softwave's stop: the default relative change 0.05 ends the run early,
    # where ε is still near its start; --tol 0 runs the whole annealing
    # (ε down to a tenth over --max-iter).
    parser.add_argument("--tol", type=float, default=0.05)
    parser.add_argument("--max-iter", type=int, default=500)
    # softwave's runs: this many exact iterations after the sampled ones
    # (POT's iteration on the exact linearised cost, from the sampled plan).
    parser.add_argument("--exact-iterations", type=lambda text: [int(c) for c in text.split(",")], default=[0])
    # softwave's runs: each of these Sinkhorn iterations a solve (GwOptions::sinkhorn_iterations).
    parser.add_argument("--sinkhorn-iterations", type=lambda text: [int(c) for c in text.split(",")], default=[10])
    # ... and each of these a solve while the plan forms (GwOptions::early_sinkhorn_iterations;
    # -1: softwave's default, half of them).
    parser.add_argument("--early-sinkhorn-iterations",
                        type=lambda text: [None if int(c) < 0 else int(c) for c in text.split(",")],
                        default=[None])
    # softwave's runs: each of these polishing iterations' anchors (GwOptions::polish_anchors;
    # 0: none; -1: softwave's default).
    parser.add_argument("--polish-anchors",
                        type=lambda text: [None if int(c) < 0 else int(c) for c in text.split(",")],
                        default=[None])
    # POT's epsilon; by default that of softwave's last solve (see above).
    parser.add_argument("--pot-epsilon", type=float, default=None)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default="float64", choices=["float32", "float64"],
                        help="POT's precision on --device cuda")
    parser.add_argument("--cli", default=None, help="softwave's command line: run it instead of the Python API")
    parser.add_argument("--scratch", default=None, help="--cli: where its .npy files go (default: the system's)")
    parser.add_argument("--workers", type=int, default=1, help="processes for the all-pairs Dijkstra runs")
    parser.add_argument("--exact-objective-entries", type=int, default=None,
                        help="softwave's exact_objective_entries (exact iterations need N*K at most this)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    import ot

    if args.cli:
        import subprocess

        softwave_version = subprocess.run([args.cli, "--version"], capture_output=True, text=True).stdout.strip()
    else:
        import softwave

        softwave_version = getattr(softwave, "__version__", "?")
    solve = run_cli if args.cli else run_softwave

    records = []
    meta = dict(pot=ot.__version__, softwave=softwave_version, via="cli" if args.cli else "python",
                threads=os.environ.get("OMP_NUM_THREADS", "?"), device=args.device,
                dtype=args.dtype if args.device == "cuda" else "float64", epsilon=args.epsilon, anchors=args.anchors,
                restarts=args.restarts, restart_iterations=args.restart_iterations, pot_iterations=args.pot_iterations, tol=args.tol, max_iter=args.max_iter,
                exact_iterations=args.exact_iterations, sinkhorn_iterations=args.sinkhorn_iterations,
                early_sinkhorn_iterations=args.early_sinkhorn_iterations,
                polish_anchors=args.polish_anchors, pot_epsilon=args.pot_epsilon)
    print(json.dumps(meta))
    if args.device == "cuda":  # CUDA contexts, libraries and kernels loaded before any timed call
        import torch

        small = [torch.from_numpy(geodesics(cloud(np, m, 0, False), args.neighbours)).cuda() for m in (60, 70)]
        solve(*(d.float() for d in small), args, 0, 0, args.sinkhorn_iterations[0])
        run_pot(*(d.to(getattr(torch, args.dtype)) for d in small), args, 0.01)
    for n, k in args.sizes:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            dx = geodesics(cloud(np, n, seed, False).astype(np.float64), args.neighbours, args.workers)
            dy = geodesics(cloud(np, k, seed + 1000, True).astype(np.float64), args.neighbours, args.workers)
            exact = dx, dy  # the objective's matrices (float64)
            if args.device == "cuda":
                import torch

                exact = tuple(torch.from_numpy(d).cuda() for d in (dx, dy))
                dx, dy = (d.to(getattr(torch, args.dtype)) for d in exact)
                single = tuple(d.float() for d in exact)
            runs = [solve(*(single if args.device == "cuda" else (dx, dy)), args, seed, e, i, early, polish)
                    for i in args.sinkhorn_iterations
                    for early in args.early_sinkhorn_iterations
                    for e in args.exact_iterations
                    for polish in args.polish_anchors]
            def record(r):
                method = ("pot" if "pot_epsilon" not in r
                          else f"softwave+{r['exact_iterations']}/{r['sinkhorn_iterations']}"
                               f"/{r['early_sinkhorn_iterations'] if r['early_sinkhorn_iterations'] is not None else 'auto'}"
                               f"/p{r['polish_anchors']}")
                plan = r.pop("plan")
                plan = plan.double() if hasattr(plan, "double") else np.asarray(plan, dtype=np.float64)
                if args.device == "cuda" and not getattr(plan, "is_cuda", False):
                    import torch

                    plan = torch.as_tensor(plan).cuda()
                matching = plan.argmax(1)
                matching = matching.cpu().numpy() if hasattr(matching, "cpu") else matching
                r.update(method=method, n=n, k=k, seed=seed, objective=gw_objective(*exact, plan),
                         rho=signed_rho(matching), mass=float(plan.sum()))
                del plan
                records.append(r)
                if args.out:  # after each run: a long one stopped early keeps the rest
                    Path(args.out).write_text(json.dumps(dict(meta=meta, records=records), indent=1))
                print(f"{method:15s} {n}x{k} seed {seed}: {r['seconds']:8.3f} s  objective {r['objective']:.6f}  "
                      f"rho {r['rho']:+.4f}  iterations {r['iterations']}  "
                      f"epsilon {r.get('epsilon', r.get('final_epsilon')):.3e}", flush=True)

            # POT at each softwave run's last ε (runs that stop at another
            # iteration end at another ε), or at --pot-epsilon.
            epsilons = []
            for r in runs:
                r["pot_objective_at_epsilon"] = (args.pot_epsilon if args.pot_epsilon is not None
                                                 else r["pot_epsilon"])
                if r["pot_objective_at_epsilon"] not in epsilons:
                    epsilons.append(r["pot_objective_at_epsilon"])
                record(r)
            for epsilon in epsilons:
                record(run_pot(dx, dy, args, epsilon))
    if args.out:
        Path(args.out).write_text(json.dumps(dict(meta=meta, records=records), indent=1))


if __name__ == "__main__":
    main()
