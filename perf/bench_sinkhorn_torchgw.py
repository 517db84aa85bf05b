#!/usr/bin/env python3
"""Sinkhorn on a Gromov–Wasserstein cost: softwave's low-rank and dense forms
beside TorchGW's Triton kernel, in one process on one CUDA device.

The cost is the one sampled GW hands its Sinkhorn every outer iteration:
for a source spiral and a target Swiss roll generated as in TorchGW's
examples/benchmark_scale.py (theta = linspace(0, 9, n), r = linspace(0.3, 1, n),
noise N(0, 0.05^2); the roll's height U(0, 1), columns (x, z, y)) and M = 80
anchors drawn in each set, with D_X (n, M) and D_Y (k, M) the Euclidean
distances to the anchors,

    C = rowmean(D_X^2) 1^T + 1 rowmean(D_Y^2)^T - (2/M) D_X D_Y^T,

a rank-82 matrix (u, v and an 80-column product), scaled to max C = 1 and
solved at eps = 0.005 (TorchGW's default epsilon) with uniform weights,
exactly --iterations iterations (no convergence test), rows then columns:

  torchgw_dense      torchgw._triton_sinkhorn.triton_sinkhorn_loop on
                     log_K = -C/eps (formed, n x k float32, not timed), tau = 1,
                     tol = 0: one Triton program a row, then one a column.
  softwave_dense     softwave.ot.sinkhorn(cost_matrix=C, ...): the same dense C.
  softwave_lowrank   softwave.ot.sinkhorn(factors=(u, v, p, q), ...), p = (2/M) D_X,
                     q = D_Y: C never formed (on CUDA the specialised passes,
                     exact FP32 products).
  softwave_lowrank_portable  the same with kernel="portable".

Records per row: mean and min ms over --repeats calls after --warmup, torch's
peak allocation over the timed calls (softwave's own allocations are Kokkos's
and are not in it; the factors or the dense C are the inputs either way), the
transport cost <pi, C> of each method's potentials (TorchGW's from its plan
exp(log_u + log_K + log_v), formed once after timing), and the largest
difference of its centred row potentials from softwave_dense's.

TorchGW's module is loaded from its file: the package's __init__ imports
scipy and scikit-learn, which this kernel does not need. The wheel is carried
to the GPU machine (no registry there):
    python3 perf/bench_sinkhorn_torchgw.py --install --out $OUT/torchgw.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_WHEELS = REPO / ".cache" / "peers" / "wheels"
METHODS = ["softwave_dense", "softwave_lowrank", "torchgw_dense", "softwave_lowrank_portable"]


def size_list(text):
    out = []
    for item in text.split(","):
        n, k = item.lower().split("x")
        out.append((int(n), int(k)))
    return out


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=size_list, default=size_list("5001x6001,10001x12001,40000x50000"),
                   help="comma-separated NxK (default 5001x6001,10001x12001,40000x50000)")
    p.add_argument("--anchors", type=int, default=80, help="M (default 80: rank M + 2 = 82)")
    p.add_argument("--eps", type=float, default=0.005, help="epsilon on the cost scaled to max 1")
    p.add_argument("--iterations", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--methods", default=",".join(METHODS[:3]),
                   help=f"comma-separated, from {','.join(METHODS)}")
    p.add_argument("--dense-limit", type=float, default=2.5e9,
                   help="largest n*k the dense methods run (default 2.5e9)")
    p.add_argument("--out", default=None, help="JSON file for the records (rewritten every row)")
    p.add_argument("--install", action="store_true",
                   help="pip install the torchgw wheel (--no-index --no-deps) into --target first")
    p.add_argument("--target", default="/tmp/peer-site")
    p.add_argument("--wheels", default=str(DEFAULT_WHEELS))
    return p.parse_args(argv)


def torchgw_kernels(args):
    if args.install:
        wheels = sorted(Path(args.wheels).glob("torchgw-*.whl"))
        if not wheels:
            raise SystemExit(f"--install: no torchgw wheel in {args.wheels}")
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                        "--upgrade", "--target", args.target, str(wheels[-1])], check=True)
    path = Path(args.target) / "torchgw" / "_triton_sinkhorn.py"
    if not path.exists():
        raise SystemExit(f"no {path}: run with --install (or pip install torchgw into --target)")
    spec = importlib.util.spec_from_file_location("torchgw_triton_sinkhorn", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gw_cost(torch, n, k, anchors, seed, device):
    """u (n,), v (k,), p (n, M), q (k, M) of the scaled sampled-GW cost."""
    def cloud(count, seed_, roll):
        g = torch.Generator().manual_seed(seed_)
        theta = torch.linspace(0, 9, count, dtype=torch.float64)
        r = torch.linspace(0.3, 1, count, dtype=torch.float64)
        e1 = 0.05 * torch.randn(count, generator=g, dtype=torch.float64)
        e2 = 0.05 * torch.randn(count, generator=g, dtype=torch.float64)
        cols = [(r + e1) * torch.cos(theta), (r + e2) * torch.sin(theta)]
        if roll:
            cols.insert(1, torch.rand(count, generator=g, dtype=torch.float64))
        return torch.stack(cols, 1)

    x, y = cloud(n, seed, False), cloud(k, seed + 1, True)
    g = torch.Generator().manual_seed(seed + 2)
    ia = torch.randperm(n, generator=g)[:anchors]
    ja = torch.randperm(k, generator=g)[:anchors]
    dx, dy = torch.cdist(x, x[ia]), torch.cdist(y, y[ja])
    u, v = (dx ** 2).mean(1), (dy ** 2).mean(1)
    p, q = (2.0 / anchors) * dx, dy
    # max C = max_i,j (u_i + v_j - p_i.q_j), in float64 on the device by row blocks.
    pd, qd, ud, vd = (t.to(device) for t in (p, q, u, v))
    top = max(float((ud[i:i + 4096, None] + vd[None, :] - pd[i:i + 4096] @ qd.T).max())
              for i in range(0, n, 4096))
    return [(t / top).to(torch.float32).contiguous() for t in (ud, vd, pd, qd)]


def main(argv=None):
    args = parse_args(argv)
    methods = [m for m in args.methods.split(",") if m]
    unknown = set(methods) - set(METHODS)
    if unknown:
        raise SystemExit(f"unknown methods {sorted(unknown)}")
    tgw = torchgw_kernels(args) if "torchgw_dense" in methods else None
    import torch
    import softwave.ot as ot

    device = torch.device("cuda")
    records = []
    print(f"device: {torch.cuda.get_device_name()}; M = {args.anchors}, eps {args.eps}, "
          f"{args.iterations} iterations; warmup {args.warmup}, repeats {args.repeats}")
    print(f"{'method':28s} {'n':>6s} {'k':>6s} {'mean ms':>10s} {'min ms':>10s} "
          f"{'peak MiB':>9s} {'transport':>12s} {'max |df|':>9s}")
    for n, k in args.sizes:
        u, v, p, q = gw_cost(torch, n, k, args.anchors, args.seed, device)
        a = torch.full((n,), 1.0 / n, device=device)
        b = torch.full((k,), 1.0 / k, device=device)
        dense_ok = n * k <= args.dense_limit
        cost = (u[:, None] + v[None, :] - p @ q.T).contiguous() if dense_ok else None
        reference_f = None
        for method in methods:
            if method != "softwave_lowrank" and method != "softwave_lowrank_portable" and not dense_ok:
                continue
            common = dict(epsilon=args.eps, max_iterations=args.iterations, tolerance=0.0)
            if method == "torchgw_dense":
                log_k = (-cost / args.eps).contiguous()
                log_a, log_b = a.log(), b.log()

                def call():
                    return tgw.triton_sinkhorn_loop(log_k, log_a, log_b, 1.0, args.iterations, 0.0,
                                                    args.iterations + 1, a)
            elif method == "softwave_dense":
                def call():
                    return ot.sinkhorn(cost_matrix=cost, a=a, b=b, **common)
            else:
                kernel = "portable" if method.endswith("portable") else "automatic"

                def call():
                    return ot.sinkhorn(factors=(u, v, p, q), a=a, b=b, kernel=kernel, **common)
            for _ in range(args.warmup):
                call()
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            times = []
            for _ in range(args.repeats):
                torch.cuda.synchronize()
                start = time.perf_counter()
                out = call()
                torch.cuda.synchronize()
                times.append(1e3 * (time.perf_counter() - start))
            peak = torch.cuda.max_memory_allocated() / 2 ** 20
            if method == "torchgw_dense":
                log_u, log_v = out
                f = args.eps * (log_u - log_a)
                transport = 0.0
                for i in range(0, n, 2048):  # the plan a block of rows at a time
                    block = torch.exp(log_u[i:i + 2048, None] + log_k[i:i + 2048] + log_v[None, :])
                    transport += float((block.double() * cost[i:i + 2048].double()).sum())
                del log_k
            else:
                f = out.f
                transport = float(out.transport_cost)
            f = (f - f.mean()).double()
            if method == "softwave_dense":
                reference_f = f
            df = float((f - reference_f).abs().max()) if reference_f is not None else float("nan")
            record = dict(method=method, n=n, k=k, rank=args.anchors + 2, eps=args.eps,
                          iterations=args.iterations, mean_ms=sum(times) / len(times),
                          min_ms=min(times), peak_mib=peak, transport_cost=transport,
                          max_centred_f_difference=df, device=torch.cuda.get_device_name())
            records.append(record)
            print(f"{method:28s} {n:6d} {k:6d} {record['mean_ms']:10.2f} {record['min_ms']:10.2f} "
                  f"{peak:9.1f} {transport:12.6e} {df:9.2e}", flush=True)
            if args.out:
                Path(args.out).write_text(json.dumps(records, indent=1))
        del cost
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
