#!/usr/bin/env python3
"""1-NN hard-DTW classification on the shipped UCR sets: the `softwave knn`
command beside dtaidistance, on this machine's cores, in one run.

For every set under ../shared/data/ucr (or --data) and every window in
--bands (percent of the series length; "full" for no band):

  softwave      `softwave knn --train … --test … --gamma 0 [--band W]`
                (the pruned search: the UCR Suite's lower bounds and early
                abandoning); its JSON report's `seconds` (neighbour search
                and classification, files read before), `errors` and
                `pruning_rate`.
  every pair    the same with `--search brute`: every distance, with the
                pair-parallel kernel.
  dtaidistance  dtaidistance.dtw.distance_matrix_fast over the test and the
                training series with block = (test rows, training columns),
                window = W + 1 (its window keeps |i − j| < window, softwave's
                band |i − j| <= W), parallel=True, then the argmin of each
                row; timed from the call to the labels. Run plain and with
                use_pruning=True (each pair abandoned past its Euclidean
                distance), and its own lower-bound search besides:
                dtaidistance.subsequence.subsequencesearch.SubsequenceSearch
                (query, training series, use_lb=True, use_c=True) per test
                series, best_match() (LB_Keogh, then DTW abandoned past the
                best so far; one thread). The fastest of the three is the
                peer's time.

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


def softwave_knn(binary, train, test, band, threads, search="auto"):
    cmd = [binary, "knn", "--train", str(train), "--test", str(test), "--gamma", "0",
           "--threads", str(threads), "--search", search]
    if band is not None:
        cmd += ["--band", str(band)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    report = json.loads(out.strip().splitlines()[-1])
    return report["seconds"], int(report["errors"]), report.get("pruning_rate")


def dtaidistance_knn(train, test, band, threads, use_pruning=False):
    from dtaidistance import dtw
    (train_labels, train_series), (test_labels, test_series) = train, test
    n_test = len(test_series)
    everything = [np.ascontiguousarray(s) for s in test_series] + \
                 [np.ascontiguousarray(s) for s in train_series]
    kwargs = dict(block=((0, n_test), (n_test, len(everything))), parallel=True,
                  use_c=True, compact=False, use_pruning=use_pruning)
    if band is not None:
        kwargs["window"] = band + 1
    start = time.perf_counter()
    matrix = dtw.distance_matrix_fast(everything, **kwargs)
    nearest = np.argmin(matrix[:n_test, n_test:], axis=1)
    predicted = train_labels[nearest]
    seconds = time.perf_counter() - start
    return seconds, int(np.sum(predicted != test_labels))


def dtaidistance_search(train, test, band):
    from dtaidistance.subsequence.subsequencesearch import SubsequenceSearch
    (train_labels, train_series), (test_labels, test_series) = train, test
    candidates = [np.ascontiguousarray(s) for s in train_series]
    options = {"use_c": True}
    if band is not None:
        options["window"] = band + 1
    start = time.perf_counter()
    nearest = [SubsequenceSearch(np.ascontiguousarray(q), candidates, dists_options=dict(options),
                                 use_lb=True, use_c=True).best_match().idx
               for q in test_series]
    predicted = train_labels[np.array(nearest)]
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
    print(f"{'set':18s} {'band':>6s} {'softwave s':>11s} {'pruned':>7s} {'every pair s':>13s} "
          f"{'dtaidistance s':>15s} {'speed-up':>9s} {'errors':>10s}")
    for name in sets:
        train_path, test_path = data / name / f"{name}_TRAIN.tsv", data / name / f"{name}_TEST.tsv"
        train, test = load(train_path), load(test_path)
        length = train[1].shape[1]
        for band_text in args.bands.split(","):
            band = None if band_text == "full" else math.ceil(float(band_text) / 100 * length)
            ours = [softwave_knn(args.softwave, train_path, test_path, band, args.threads)
                    for _ in range(args.repeats)]
            brute = [softwave_knn(args.softwave, train_path, test_path, band, args.threads,
                                  "brute") for _ in range(args.repeats)]
            plain = [dtaidistance_knn(train, test, band, args.threads)
                     for _ in range(args.repeats)]
            pruning = [dtaidistance_knn(train, test, band, args.threads, use_pruning=True)
                       for _ in range(args.repeats)]
            searched = [dtaidistance_search(train, test, band) for _ in range(args.repeats)]
            base = [softwave_knn(args.baseline, train_path, test_path, band, args.threads)
                    for _ in range(args.repeats)] if args.baseline else []
            s_time, s_errors, rate = min(r[0] for r in ours), ours[0][1], ours[0][2]
            b_time, b_errors = min(r[0] for r in brute), brute[0][1]
            plain_s, pruning_s = min(t for t, _ in plain), min(t for t, _ in pruning)
            search_s = min(t for t, _ in searched)
            p_time, p_errors = min(plain_s, pruning_s, search_s), plain[0][1]
            assert pruning[0][1] == p_errors and b_errors == s_errors
            record = dict(set=name, length=length, n_train=len(train[1]), n_test=len(test[1]),
                          band=band, band_text=band_text, softwave_s=s_time,
                          pruning_rate=rate, softwave_every_pair_s=b_time,
                          dtaidistance_s=p_time, dtaidistance_plain_s=plain_s,
                          dtaidistance_use_pruning_s=pruning_s,
                          dtaidistance_search_s=search_s,
                          dtaidistance_search_errors=searched[0][1], speedup=p_time / s_time,
                          softwave_errors=s_errors, dtaidistance_errors=p_errors,
                          threads=args.threads)
            if base:
                record.update(baseline_s=min(r[0] for r in base), baseline_errors=base[0][1])
            records.append(record)
            print(f"{name:18s} {band_text:>6s} {s_time:11.4f} {rate:7.3f} {b_time:13.4f} "
                  f"{p_time:15.4f} {p_time / s_time:9.2f} {s_errors:>4d}/{p_errors:<4d}"
                  + (f"  baseline {record['baseline_s']:.4f} s" if base else ""), flush=True)
            if args.out:
                Path(args.out).write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
