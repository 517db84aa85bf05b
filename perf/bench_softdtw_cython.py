"""softwave's pair-parallel CPU kernels beside Blondel's Cython soft-dtw (the
reference implementation of Cuturi & Blondel 2017), one core each, in one run.

The peer (``sdtw``, installed into a throwaway virtual environment) runs as
../shared/perf/peers-softdtw-cpu.md describes: float64, γ = 1, M = N, x, y
~ N(0, 1), its own squared Euclidean cost; fwd is the value, fwd+bwd the
value, the expected alignment and the gradient with respect to x; best of 3
on one pair. softwave is ``softwave_bench``'s BM_Forward_pairs and
BM_ForwardBackward_pairs (16 pairs, float32 inputs, float64 sums; values
and the gradients of x and y) with OMP_NUM_THREADS=1, median of 3.

    python3 -m venv /tmp/peers && /tmp/peers/bin/pip install numpy cython wheel setuptools scikit-learn
    /tmp/peers/bin/pip install --no-build-isolation soft-dtw
    /tmp/peers/bin/python perf/bench_softdtw_cython.py --bench build/openmp/bin/softwave_bench --out cython.json
"""

import argparse
import json
import os
import subprocess
import tempfile
import time

import numpy as np
from sdtw import SoftDTW
from sdtw.distance import SquaredEuclidean

SHAPES = [(128, 1), (512, 1), (1024, 1), (512, 64), (1024, 64)]  # N, d
PAIRS = 16  # softwave_bench's batch


def peer_ms(n, d, backward, rng):
    x, y = rng.standard_normal((n, d)), rng.standard_normal((n, d))
    best = float("inf")
    for _ in range(3):
        begin = time.perf_counter()
        distances = SquaredEuclidean(x, y)
        solver = SoftDTW(distances, gamma=1.0)
        solver.compute()
        if backward:
            distances.jacobian_product(solver.grad())
        best = min(best, time.perf_counter() - begin)
    return 1e3 * best


def softwave_ms(bench):
    sizes = "|".join(str(n) for n in sorted({n for n, _ in SHAPES}))
    features = "|".join(str(d) for d in sorted({d for _, d in SHAPES}))
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([bench, f"--benchmark_filter=BM_(Forward|ForwardBackward)_pairs/{PAIRS}/({sizes})/({features})/",
                        "--benchmark_repetitions=3", "--benchmark_report_aggregates_only=true",
                        f"--benchmark_out={out.name}", "--benchmark_out_format=json"],
                       env=dict(os.environ, OMP_NUM_THREADS="1", OMP_PROC_BIND="false"), check=True,
                       stdout=subprocess.DEVNULL)
        report = json.load(open(out.name))
    times = {}
    for b in report["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        kind, _, n, d = b["run_name"].split("/")[:4]
        times[(kind.endswith("ForwardBackward_pairs"), int(n), int(d))] = b["real_time"]
    return times


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bench", default="build/openmp/bin/softwave_bench")
    parser.add_argument("--out", default="softdtw-cython.json")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    ours = softwave_ms(args.bench)
    rows = []
    for n, d in SHAPES:
        for backward in (False, True):
            peer = peer_ms(n, d, backward, rng)
            mine = ours[(backward, n, d)]
            row = {"N": n, "d": d, "backward": backward, "peer_ms": peer,
                   "peer_mcells": n * n / peer / 1e3, "softwave_ms": mine,
                   "softwave_mcells": PAIRS * n * n / mine / 1e3}
            row["per_core_vs_peer"] = row["softwave_mcells"] / row["peer_mcells"]
            rows.append(row)
    with open(args.out, "w") as f:
        json.dump({"rows": rows, "cpu": os.uname().machine}, f, indent=1)
    print("| N/d | what | peer ms (1 pair) | peer Mcells/s | softwave ms (16 pairs) | softwave Mcells/s | per core vs peer |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['N']}/{r['d']} | {'fwd+bwd' if r['backward'] else 'fwd'} | {r['peer_ms']:.1f} "
              f"| {r['peer_mcells']:.1f} | {r['softwave_ms']:.1f} | {r['softwave_mcells']:.1f} "
              f"| {r['per_core_vs_peer']:.1f}× |")


if __name__ == "__main__":
    main()
