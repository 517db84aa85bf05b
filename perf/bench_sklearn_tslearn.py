#!/usr/bin/env python3
"""softwave.sklearn's KNeighborsTimeSeriesClassifier and TimeSeriesKMeans
beside tslearn's, in one process, on the shipped UCR sets. The classifier:
fit + predict of the test split, best of --repeats after a warm-up call
(tslearn compiles its numba kernels on the first), the error counts side by
side (hard DTW must agree exactly). k-means: fit on the training split from
the same initial centres (n_clusters series drawn with RandomState(0)), at
most 10 iterations, the labels compared (they must agree for euclidean and
DBA). All pairs: cdist_soft_dtw (γ = 1) of each listed set's training and
test series together, the largest difference relative to the largest value.

tslearn is a peer, never a dependency: install it into a throwaway virtual
environment with softwave built for the same interpreter, e.g.
    python3 -m venv /tmp/peers && /tmp/peers/bin/pip install tslearn==0.10.0
    PYTHONPATH=<dir holding the built softwave package> /tmp/peers/bin/python perf/bench_sklearn_tslearn.py
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
CASES = [  # set, n_neighbors, Sakoe-Chiba radius (None: full window), metric
    ("GunPoint", 1, None, "dtw"),
    ("GunPoint", 1, 15, "dtw"),
    ("ECG200", 3, None, "dtw"),
    ("ECG200", 5, 10, "dtw"),
    ("ItalyPowerDemand", 3, 3, "dtw"),
    ("Beef", 1, None, "euclidean"),
    ("Coffee", 1, None, "softdtw"),
]


KMEANS = [  # set, n_clusters, metric, metric_params
    ("GunPoint", 2, "dtw", None),
    ("SyntheticControl", 6, "dtw", {"sakoe_chiba_radius": 6}),
    ("Trace", 4, "euclidean", None),
    ("GunPoint", 2, "softdtw", {"gamma": 1.0}),
]

CDIST = ["GunPoint", "Coffee"]  # all-pairs Soft-DTW of train + test


def load(data, name, split):
    table = np.loadtxt(data / name / f"{name}_{split}.tsv")
    return table[:, 1:, None], table[:, 0]


def timed(make, X_train, y_train, X_test, repeats):
    make().fit(X_train, y_train).predict(X_test)  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        predicted = make().fit(X_train, y_train).predict(X_test)
        best = min(best, time.perf_counter() - start)
    return best, predicted


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "ucr"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    from softwave.sklearn import KNeighborsTimeSeriesClassifier as Ours
    from tslearn.neighbors import KNeighborsTimeSeriesClassifier as Theirs

    records = []
    print(f"{'set':18s} {'k':>2s} {'radius':>6s} {'metric':>9s} {'softwave s':>11s} {'tslearn s':>10s} "
          f"{'ratio':>8s} {'errors':>9s}")
    for name, k, radius, metric in CASES:
        X_train, y_train = load(Path(args.data), name, "TRAIN")
        X_test, y_test = load(Path(args.data), name, "TEST")
        params = {"gamma": 1.0} if metric == "softdtw" else (
            None if radius is None else {"sakoe_chiba_radius": radius})
        ours, ours_pred = timed(lambda: Ours(n_neighbors=k, metric=metric, metric_params=params),
                                X_train, y_train, X_test, args.repeats)
        theirs, theirs_pred = timed(lambda: Theirs(n_neighbors=k, metric=metric, metric_params=params),
                                    X_train, y_train, X_test, args.repeats)
        errors = (int((ours_pred != y_test).sum()), int((theirs_pred != y_test).sum()))
        records.append(dict(set=name, k=k, radius=radius, metric=metric, softwave_s=ours, tslearn_s=theirs,
                            ratio=theirs / ours, softwave_errors=errors[0], tslearn_errors=errors[1],
                            same_predictions=bool((ours_pred == theirs_pred).all())))
        print(f"{name:18s} {k:2d} {str(radius):>6s} {metric:>9s} {ours:11.4f} {theirs:10.4f} "
              f"{theirs / ours:8.1f} {errors[0]:>4d}/{errors[1]:<4d}", flush=True)
    from softwave.sklearn import TimeSeriesKMeans as OursKMeans
    from tslearn.clustering import TimeSeriesKMeans as TheirsKMeans

    print(f"\n{'k-means set':18s} {'k':>2s} {'metric':>9s} {'softwave s':>11s} {'tslearn s':>10s} {'ratio':>8s} same")
    for name, k, metric, params in KMEANS:
        X, _ = load(Path(args.data), name, "TRAIN")
        init = X[np.random.RandomState(0).choice(len(X), k, replace=False)]
        runs = {}
        for who, Model in (("softwave", OursKMeans), ("tslearn", TheirsKMeans)):
            # Warm-up (tslearn compiles its kernels): centres among the
            # series fitted, so that no cluster starts empty.
            Model(n_clusters=k, metric=metric, metric_params=params, init=X[:k].copy(), max_iter=1).fit(X[:2 * k])
            best = float("inf")
            for _ in range(args.repeats):
                start = time.perf_counter()
                model = Model(n_clusters=k, metric=metric, metric_params=params, init=init.copy(),
                              max_iter=10).fit(X)
                best = min(best, time.perf_counter() - start)
            runs[who] = (best, model.labels_, float(model.inertia_))
        same = bool((runs["softwave"][1] == runs["tslearn"][1]).all())
        records.append(dict(kmeans_set=name, n_clusters=k, metric=metric, params=params,
                            softwave_s=runs["softwave"][0], tslearn_s=runs["tslearn"][0],
                            ratio=runs["tslearn"][0] / runs["softwave"][0], same_labels=same,
                            softwave_inertia=runs["softwave"][2], tslearn_inertia=runs["tslearn"][2]))
        print(f"{name:18s} {k:2d} {metric:>9s} {runs['softwave'][0]:11.4f} {runs['tslearn'][0]:10.4f} "
              f"{runs['tslearn'][0] / runs['softwave'][0]:8.1f} {same}", flush=True)
    from softwave.sklearn import cdist_soft_dtw as ours_cdist
    from tslearn.metrics import cdist_soft_dtw as theirs_cdist

    print(f"\n{'all pairs set':18s} {'series':>6s} {'softwave s':>11s} {'tslearn s':>10s} {'ratio':>8s} difference")
    for name in CDIST:
        X = np.concatenate([load(Path(args.data), name, split)[0] for split in ("TRAIN", "TEST")])
        runs = {}
        for who, cdist in (("softwave", ours_cdist), ("tslearn", theirs_cdist)):
            cdist(X[:2], gamma=1.0)  # warm-up (tslearn compiles its kernels)
            best = float("inf")
            for _ in range(args.repeats):
                start = time.perf_counter()
                matrix = cdist(X, gamma=1.0)
                best = min(best, time.perf_counter() - start)
            runs[who] = (best, matrix)
        difference = float(np.abs(runs["softwave"][1] - runs["tslearn"][1]).max() /
                           np.abs(runs["tslearn"][1]).max())
        records.append(dict(cdist_set=name, series=len(X), softwave_s=runs["softwave"][0],
                            tslearn_s=runs["tslearn"][0], ratio=runs["tslearn"][0] / runs["softwave"][0],
                            relative_difference=difference))
        print(f"{name:18s} {len(X):6d} {runs['softwave'][0]:11.4f} {runs['tslearn'][0]:10.4f} "
              f"{runs['tslearn'][0] / runs['softwave'][0]:8.1f} {difference:.1e}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
