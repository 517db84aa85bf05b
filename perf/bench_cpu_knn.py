#!/usr/bin/env python3
"""1-NN hard-DTW classification on the shipped UCR sets: the `softwave knn`
command beside dtaidistance, on this machine's cores, in one run.

For every set under ../shared/data/ucr (or --data) and every window in
--bands (percent of the series length; "full" for no band):

  softwave      `softwave knn --train … --test … --gamma 0 [--band W]`; its
                JSON report's `seconds` (distances and classification, files
                read before) and `errors`.
  dtaidistance  dtaidistance.dtw.distance_matrix_fast over the test and the
                training series with block = (test rows, training columns),
                window = W + 1 (its window keeps |i − j| < window, softwave's
                band |i − j| <= W), parallel=True, then the argmin of each
                row; timed from the call to the labels.

W = ceil(P/100 · L), as `softwave knn --band-pct P`. Both use the squared
Euclidean cost summed along the path (dtaidistance reports its square root,
which orders neighbours the same way), and the error counts must agree.
Ties: softwave takes the first training series; so does numpy's argmin.

dtaidistance is a peer, never a dependency: install it into a throwaway
virtual environment and run this script with that interpreter, e.g.
    python3 -m venv /tmp/peers && /tmp/peers/bin/pip install dtaidistance==2.5.1
    /tmp/peers/bin/python perf/bench_cpu_knn.py --softwave build/openmp/bin/softwave
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "ucr"))
    p.add_argument("--sets", default=None, help="comma-separated set names (default: all)")
    p.add_argument("--bands", default="10,full", help="comma-separated percents or 'full'")
    p.add_argument("--softwave", default=str(REPO / "build" / "openmp" / "bin" / "softwave"))
    p.add_argument("--baseline", default=None,
                   help="a second softwave binary to time in the same run (e.g. an older build)")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--repeats", type=int, default=3, help="best of this many runs each")
    p.add_argument("--out", default=None, help="JSON file for the records")
    return p.parse_args(argv)


def load(path):
    rows = [line.split() for line in Path(path).read_text().splitlines() if line.strip()]
    labels = np.array([float(r[0]) for r in rows])
    series = np.array([[float(v) for v in r[1:]] for r in rows], dtype=np.float64)
    return labels, series


def softwave_knn(binary, train, test, band, threads):
    cmd = [binary, "knn", "--train", str(train), "--test", str(test), "--gamma", "0",
           "--threads", str(threads)]
    if band is not None:
        cmd += ["--band", str(band)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    report = json.loads(out.strip().splitlines()[-1])
    return report["seconds"], int(report["errors"])


def dtaidistance_knn(train, test, band, threads):
    from dtaidistance import dtw
    (train_labels, train_series), (test_labels, test_series) = train, test
    n_test = len(test_series)
    everything = [np.ascontiguousarray(s) for s in test_series] + \
                 [np.ascontiguousarray(s) for s in train_series]
    kwargs = dict(block=((0, n_test), (n_test, len(everything))), parallel=True,
                  use_c=True, compact=False)
    if band is not None:
        kwargs["window"] = band + 1
    start = time.perf_counter()
    matrix = dtw.distance_matrix_fast(everything, **kwargs)
    nearest = np.argmin(matrix[:n_test, n_test:], axis=1)
    predicted = train_labels[nearest]
    seconds = time.perf_counter() - start
    return seconds, int(np.sum(predicted != test_labels))


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    data = Path(args.data)
    sets = args.sets.split(",") if args.sets else sorted(
        d.name for d in data.iterdir() if (d / f"{d.name}_TRAIN.tsv").exists())
    records = []
    print(f"threads {args.threads}; best of {args.repeats}")
    print(f"{'set':18s} {'band':>6s} {'softwave s':>11s} {'dtaidistance s':>15s} "
          f"{'speed-up':>9s} {'errors':>10s}")
    for name in sets:
        train_path, test_path = data / name / f"{name}_TRAIN.tsv", data / name / f"{name}_TEST.tsv"
        train, test = load(train_path), load(test_path)
        length = train[1].shape[1]
        for band_text in args.bands.split(","):
            band = None if band_text == "full" else math.ceil(float(band_text) / 100 * length)
            ours = [softwave_knn(args.softwave, train_path, test_path, band, args.threads)
                    for _ in range(args.repeats)]
            peer = [dtaidistance_knn(train, test, band, args.threads) for _ in range(args.repeats)]
            base = [softwave_knn(args.baseline, train_path, test_path, band, args.threads)
                    for _ in range(args.repeats)] if args.baseline else []
            s_time, s_errors = min(t for t, _ in ours), ours[0][1]
            p_time, p_errors = min(t for t, _ in peer), peer[0][1]
            record = dict(set=name, length=length, n_train=len(train[1]), n_test=len(test[1]),
                          band=band, band_text=band_text, softwave_s=s_time,
                          dtaidistance_s=p_time, speedup=p_time / s_time,
                          softwave_errors=s_errors, dtaidistance_errors=p_errors,
                          threads=args.threads)
            if base:
                record.update(baseline_s=min(t for t, _ in base), baseline_errors=base[0][1])
            records.append(record)
            print(f"{name:18s} {band_text:>6s} {s_time:11.4f} {p_time:15.4f} "
                  f"{p_time / s_time:9.2f} {s_errors:>4d}/{p_errors:<4d}"
                  + (f"  baseline {record['baseline_s']:.4f} s" if base else ""), flush=True)
            if args.out:
                Path(args.out).write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
