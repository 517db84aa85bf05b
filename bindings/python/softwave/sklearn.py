"""scikit-learn estimators and tslearn-style functions on softwave's kernels.

For users of tslearn: the same names and parameters where they mean the
same, backed by softwave's exact pruned nearest-neighbour search (hard DTW)
and its all-pairs kernels (Soft-DTW).

Time-series datasets are (n_ts, sz, d) arrays, or (n_ts, sz) for univariate
series (scikit-learn's (n_samples, n_features)). A 3-D dataset may hold
series of different lengths padded at the end with NaN, as
tslearn.utils.to_time_series_dataset makes them. DTW values follow tslearn:
the square root of the summed squared Euclidean costs along the best path
(the library's hard DTW sums the squared costs); Soft-DTW values are the
library's (squared costs, no root).

Example::

    from sklearn.model_selection import GridSearchCV
    from softwave.sklearn import KNeighborsTimeSeriesClassifier
    search = GridSearchCV(KNeighborsTimeSeriesClassifier(n_neighbors=1),
                          {"metric_params": [{"sakoe_chiba_radius": r} for r in (0, 3, 10)]})
    search.fit(X_train, y_train).score(X_test, y_test)
"""

from __future__ import annotations

import numbers

import numpy as np

try:
    from sklearn.base import BaseEstimator, ClassifierMixin, ClusterMixin, TransformerMixin
    from sklearn.utils.multiclass import check_classification_targets
    from sklearn.utils import check_random_state
    from sklearn.utils.validation import check_array, check_consistent_length, check_is_fitted, column_or_1d
except ImportError as error:  # pragma: no cover
    raise ImportError("softwave.sklearn needs scikit-learn") from error

try:  # scikit-learn >= 1.6
    from sklearn.utils.validation import validate_data as _validate_data
except ImportError:  # pragma: no cover - older scikit-learn

    def _validate_data(estimator, *args, **kwargs):
        return estimator._validate_data(*args, **kwargs)


from . import numpy as _swn
from ._barycenter import barycenter as _soft_barycenter
from ._common import bandwidth_of

class _Kernels:
    """Where the distances are computed: softwave.numpy on the CPU (device
    None or "cpu"), or softwave.torch on a PyTorch device ("cuda",
    "cuda:1"), with the inputs copied there and the results brought back as
    NumPy arrays. The same kernels either way, so the same answers (bit for
    bit for hard DTW)."""

    def __init__(self, device):
        self.torch = None
        if device is None or (isinstance(device, str) and device == "cpu"):
            return
        try:
            import torch
            from . import torch as swt
        except ImportError as error:
            raise ValueError(f"softwave: device={device!r} needs PyTorch (device None or 'cpu' does not)") from error
        try:
            self.device = torch.device(device)
        except (RuntimeError, TypeError) as error:
            raise ValueError(f"softwave: device must be None, 'cpu' or a PyTorch device such as 'cuda' "
                             f"(got {device!r})") from error
        if self.device.type == "cpu":
            return
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"softwave: device={device!r}, but PyTorch sees no CUDA device")
        self.torch, self.swt = torch, swt

    def _to(self, a):
        return None if a is None else self.torch.from_numpy(np.ascontiguousarray(a)).to(self.device)

    def pairwise(self, X, Y, gamma, bandwidth=None, lengths_x=None, lengths_y=None):
        if self.torch is None:
            return _swn.pairwise(X, Y, gamma=gamma, bandwidth=bandwidth, lengths_x=lengths_x, lengths_y=lengths_y)
        with self.torch.no_grad():
            matrix = self.swt.pairwise(self._to(X), self._to(Y), gamma, bandwidth=bandwidth,
                                       lengths_x=self._to(lengths_x), lengths_y=self._to(lengths_y))
        return matrix.cpu().numpy()

    def nearest_neighbours(self, X, Y, k, bandwidth=None, lengths_x=None, lengths_y=None):
        if self.torch is None:
            return _swn.nearest_neighbours(X, Y, k, bandwidth=bandwidth, lengths_x=lengths_x, lengths_y=lengths_y)
        indices, distances = self.swt.nearest_neighbours(self._to(X), self._to(Y), k, bandwidth=bandwidth,
                                                         lengths_x=self._to(lengths_x),
                                                         lengths_y=self._to(lengths_y))
        return indices.cpu().numpy(), distances.cpu().numpy()


__all__ = [
    "KNeighborsTimeSeriesClassifier",
    "TimeSeriesKMeans",
    "dtw_barycenter_averaging",
    "cdist_dtw",
    "cdist_soft_dtw",
    "lb_keogh",
]


# ---------------------------------------------------------------- datasets

# check_array's argument that lets NaN through (renamed in scikit-learn 1.6).
_ALLOW_NAN = ({"ensure_all_finite": False}
              if "ensure_all_finite" in __import__("inspect").signature(check_array).parameters
              else {"force_all_finite": False})


def _dataset(name, X):
    """A 3-D float64 dataset and its series' lengths (None when none is
    padded). Only trailing NaN rows are padding; any other NaN or inf is a
    ValueError."""
    X = check_array(X, allow_nd=True, dtype=np.float64, **_ALLOW_NAN)
    if X.ndim == 2:
        X = X[:, :, None]
    if X.ndim != 3:
        raise ValueError(f"softwave: {name} must be (n_ts, sz, d) or (n_ts, sz) (got {X.ndim} dimensions)")
    missing = np.isnan(X).any(axis=2)
    lengths = None
    if missing.any():
        lengths = X.shape[1] - np.argmin(missing[:, ::-1], axis=1)
        lengths[missing.all(axis=1)] = 0
        padded = np.arange(X.shape[1])[None, :] >= lengths[:, None]
        if (missing != padded).any() or (lengths == 0).any():
            raise ValueError(f"softwave: {name} holds NaN that is not padding at the end of a series "
                             "(or a series with no values)")
        X = np.where(np.isnan(X), 0.0, X)
        lengths = lengths.astype(np.int32)
    if not np.isfinite(X).all():
        raise ValueError(f"softwave: {name} holds inf")
    return np.ascontiguousarray(X), lengths


def _integer(name, value, least):
    """value as an int, or a ValueError naming `name` unless it is an
    integer (not a bool) >= least."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        raise ValueError(f"softwave: {name} must be an integer >= {least} (got {value!r})")
    return int(value)


def _radius(metric_params, global_constraint=None, sakoe_chiba_radius=None, itakura_max_slope=None):
    """The Sakoe-Chiba radius (None: no band) from tslearn's arguments."""
    params = dict(metric_params or {})
    global_constraint = params.pop("global_constraint", global_constraint)
    sakoe_chiba_radius = params.pop("sakoe_chiba_radius", sakoe_chiba_radius)
    itakura_max_slope = params.pop("itakura_max_slope", itakura_max_slope)
    params.pop("gamma", None)
    if params:
        raise ValueError(f"softwave: unknown metric_params {sorted(params)}")
    if itakura_max_slope is not None or global_constraint == "itakura":
        raise ValueError("softwave: the Itakura parallelogram is not supported (itakura_max_slope); "
                         "use sakoe_chiba_radius")
    if global_constraint not in (None, "sakoe_chiba"):
        raise ValueError(f"softwave: global_constraint must be None or 'sakoe_chiba' (got {global_constraint!r})")
    if sakoe_chiba_radius is None:
        return 1 if global_constraint == "sakoe_chiba" else None  # tslearn's default radius
    return _integer("sakoe_chiba_radius", sakoe_chiba_radius, 0)


def _bandwidth(radius):
    return None if radius is None else bandwidth_of(radius)


def _gamma(metric_params, gamma=1.0):
    gamma = dict(metric_params or {}).get("gamma", gamma)
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real) or not gamma > 0:
        raise ValueError(f"softwave: gamma must be > 0 for Soft-DTW (got {gamma!r})")
    return float(gamma)


# ---------------------------------------------------------------- functions

def cdist_dtw(dataset1, dataset2=None, global_constraint=None, sakoe_chiba_radius=None, itakura_max_slope=None,
              n_jobs=None, verbose=0, be=None, device=None):
    """DTW between every series of dataset1 and every series of dataset2
    (default: dataset1), as tslearn.metrics.cdist_dtw: (n_ts1, n_ts2) of
    square roots of the summed squared costs. n_jobs and verbose are
    accepted for compatibility (the kernels use the OpenMP threads); be must
    be None or "numpy". device: None or "cpu", or a PyTorch device ("cuda")
    to compute there."""
    if be not in (None, "numpy"):
        raise ValueError(f"softwave: be must be None or 'numpy' (got {be!r})")
    radius = _radius(None, global_constraint, sakoe_chiba_radius, itakura_max_slope)
    X, lx = _dataset("dataset1", dataset1)
    Y, ly = (X, lx) if dataset2 is None else _dataset("dataset2", dataset2)
    matrix = _Kernels(device).pairwise(X, Y, 0.0, bandwidth=_bandwidth(radius), lengths_x=lx, lengths_y=ly)
    return np.sqrt(np.maximum(matrix, 0.0))


def cdist_soft_dtw(dataset1, dataset2=None, gamma=1.0, be=None, device=None):
    """Soft-DTW between every series of dataset1 and every series of
    dataset2 (default: dataset1), as tslearn.metrics.cdist_soft_dtw; device
    as in cdist_dtw."""
    if be not in (None, "numpy"):
        raise ValueError(f"softwave: be must be None or 'numpy' (got {be!r})")
    gamma = _gamma(None, gamma)
    X, lx = _dataset("dataset1", dataset1)
    Y, ly = (X, lx) if dataset2 is None else _dataset("dataset2", dataset2)
    return _Kernels(device).pairwise(X, Y, gamma, lengths_x=lx, lengths_y=ly)


def lb_keogh(ts_query, ts_candidate=None, radius=1, envelope_candidate=None):
    """LB_Keogh of a univariate query against a candidate's envelope of
    radius `radius` (or a given (lower, upper) envelope), as
    tslearn.metrics.lb_keogh: the root of the summed squared distances of the
    query's points to the envelope, a lower bound of cdist_dtw with
    sakoe_chiba_radius = radius for series of equal length."""
    query = np.asarray(ts_query, dtype=np.float64).reshape(-1)
    if envelope_candidate is None:
        if ts_candidate is None:
            raise ValueError("softwave: give ts_candidate or envelope_candidate")
        candidate = np.asarray(ts_candidate, dtype=np.float64).reshape(-1)
        if candidate.shape != query.shape:
            raise ValueError(f"softwave: ts_query and ts_candidate must have one length "
                             f"(got {query.size} and {candidate.size})")
        radius = _integer("radius", radius, 0)
        padded = np.pad(candidate, radius, mode="edge")
        windows = np.lib.stride_tricks.sliding_window_view(padded, 2 * int(radius) + 1)
        lower, upper = windows.min(axis=1), windows.max(axis=1)
    else:
        lower, upper = (np.asarray(e, dtype=np.float64).reshape(-1) for e in envelope_candidate)
        if lower.shape != query.shape or upper.shape != query.shape:
            raise ValueError("softwave: envelope_candidate must be (lower, upper) of the query's length")
    gap = np.where(query > upper, query - upper, np.where(query < lower, lower - query, 0.0))
    return float(np.sqrt(np.sum(gap * gap)))


# ---------------------------------------------------------------- estimators

class KNeighborsTimeSeriesClassifier(ClassifierMixin, BaseEstimator):
    """k-nearest-neighbour classifier for time series, as tslearn's.

    metric "dtw" (default) runs softwave's exact pruned search (LB_Kim,
    LB_Keogh both ways, pruned early-abandoned walks): the neighbours and
    distances of brute force, most pairs never computed in full.
    "euclidean" is DTW with a radius of 0 (series of one length);
    "softdtw" ranks every training series by its Soft-DTW value (gamma from
    metric_params, default 1). metric_params: sakoe_chiba_radius,
    global_constraint ("sakoe_chiba"), gamma. weights "uniform" or
    "distance" (inverse distance; a zero distance takes all the weight).
    A tie between classes goes to the smallest label, as in scikit-learn.
    n_jobs and verbose are accepted for compatibility (the kernels use the
    OpenMP threads). device: None or "cpu", or a PyTorch device ("cuda") on
    which the distances and the search run (the data are copied there at
    each call; softwave must be built for it).
    """

    def __init__(self, n_neighbors=5, weights="uniform", metric="dtw", metric_params=None, n_jobs=None, verbose=0,
                 device=None):
        self.n_neighbors = n_neighbors
        self.weights = weights
        self.metric = metric
        self.metric_params = metric_params
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.device = device

    # -- validation
    def _check_params(self):
        if self.metric not in ("dtw", "softdtw", "euclidean"):
            raise ValueError(f"softwave: metric must be 'dtw', 'softdtw' or 'euclidean' (got {self.metric!r})")
        if self.weights not in ("uniform", "distance"):
            raise ValueError(f"softwave: weights must be 'uniform' or 'distance' (got {self.weights!r})")
        if self.metric == "softdtw" and self.weights == "distance":
            raise ValueError("softwave: weights='distance' needs a metric whose values are distances "
                             "(Soft-DTW values can be negative)")
        _integer("n_neighbors", self.n_neighbors, 1)
        if self.metric == "softdtw":
            _gamma(self.metric_params)
            return None
        if self.metric == "euclidean":
            return 0
        return _radius(self.metric_params)

    def _input(self, X, y=None, *, reset):
        """(n_ts, sz, d) float64, its lengths, and y where given."""
        if np.asarray(X).ndim == 3:  # (asarray: any array-like, as scikit-learn tests it)
            if y is None and reset:
                raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None.")
            X, lengths = _dataset("X", X)
            if reset:
                self.n_features_in_ = X.shape[1]
            elif X.shape[2] != self._X_fit.shape[2]:
                raise ValueError(f"softwave: X has {X.shape[2]} features per point, but the training "
                                 f"series have {self._X_fit.shape[2]}")
            if y is not None:
                y = column_or_1d(y, warn=True)
                check_consistent_length(X, y)
            return X, lengths, y
        if reset:
            X, y = _validate_data(self, X, y, dtype=np.float64, y_numeric=False)
            y = column_or_1d(y, warn=True)
        else:
            X = _validate_data(self, X, dtype=np.float64, reset=False)
        X = np.ascontiguousarray(X[:, :, None])
        return X, None, y

    # -- scikit-learn API
    def fit(self, X, y):
        self._check_params()
        X, lengths, y = self._input(X, y, reset=True)
        check_classification_targets(y)
        self.classes_, self._y = np.unique(y, return_inverse=True)
        self._X_fit, self._lengths_fit = X, lengths
        self.n_samples_fit_ = X.shape[0]
        return self

    def _neighbours(self, X, lengths, k):
        """Indices (n, k) into the training series and distances (n, k)."""
        radius = self._check_params()
        kernels = _Kernels(self.device)
        if self.metric == "softdtw":
            matrix = kernels.pairwise(X, self._X_fit, _gamma(self.metric_params), lengths_x=lengths,
                                      lengths_y=self._lengths_fit)
            indices = np.argsort(matrix, axis=1, kind="stable")[:, :k]
            return indices, np.take_along_axis(matrix, indices, axis=1)
        indices, distances = kernels.nearest_neighbours(X, self._X_fit, k, bandwidth=_bandwidth(radius),
                                                        lengths_x=lengths, lengths_y=self._lengths_fit)
        return indices, np.sqrt(np.maximum(distances, 0.0))

    def kneighbors(self, X=None, n_neighbors=None, return_distance=True):
        """The n_neighbors nearest training series of every series of X,
        nearest first: (distances, indices), or indices alone. Without X,
        those of every training series, itself left out (as scikit-learn)."""
        check_is_fitted(self)
        k = _integer("n_neighbors", self.n_neighbors if n_neighbors is None else n_neighbors, 1)
        own = X is None
        n_fit = self.n_samples_fit_
        if own:
            X, lengths, k = self._X_fit, self._lengths_fit, k + 1
        else:
            X, lengths, _ = self._input(X, reset=False)
        if k > n_fit:
            raise ValueError(f"Expected n_neighbors <= n_samples_fit, but n_neighbors = {k - own}, "
                             f"n_samples_fit = {n_fit}, n_samples = {X.shape[0]}")
        indices, distances = self._neighbours(X, lengths, k)
        if own:  # drop each series itself (or, among equal series, the last)
            keep = indices != np.arange(n_fit)[:, None]
            keep[keep.all(axis=1), -1] = False
            indices = indices[keep].reshape(n_fit, k - 1)
            distances = distances[keep].reshape(n_fit, k - 1)
        return (distances, indices) if return_distance else indices

    def predict_proba(self, X):
        distances, indices = self.kneighbors(X)
        if self.weights == "uniform":
            weights = np.ones_like(distances)
        else:
            with np.errstate(divide="ignore"):
                weights = 1.0 / distances
            exact = np.isinf(weights)
            rows = exact.any(axis=1)
            weights[rows] = exact[rows].astype(np.float64)
        proba = np.zeros((indices.shape[0], self.classes_.size))
        np.add.at(proba, (np.repeat(np.arange(indices.shape[0]), indices.shape[1]), self._y[indices].ravel()),
                  weights.ravel())
        return proba / proba.sum(axis=1, keepdims=True)

    def predict(self, X):
        proba = self.predict_proba(X)  # checks that the model is fitted
        return self.classes_[np.argmax(proba, axis=1)]


def dtw_barycenter_averaging(X, barycenter_size=None, init_barycenter=None, max_iter=30, tol=1e-5, weights=None,
                             metric_params=None, verbose=False, n_jobs=None):
    """DTW Barycenter Averaging (Petitjean et al., Pattern Recognition 2011):
    each iteration aligns every series to the barycenter along its optimal
    hard-DTW path (softwave's, ties diagonal, then up, then left) and moves
    each barycenter point to the weighted mean of the points aligned to it;
    it stops when the mean squared DTW changes by less than tol, or grows.
    As tslearn's dtw_barycenter_averaging_petitjean (the one its
    TimeSeriesKMeans calls); barycenter_size applies without init_barycenter
    (the initial barycenter is then the point-wise mean of the series,
    resampled linearly to that size). Returns (barycenter_size, d)."""
    X, lengths = _dataset("X", X)
    n, sz, d = X.shape
    weights = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64).reshape(n)
    radius = _radius(metric_params)
    if init_barycenter is None:
        # The point-wise mean of the series (padding left out), resampled
        # linearly to barycenter_size, as tslearn starts.
        size = sz if barycenter_size is None else int(barycenter_size)
        present = np.ones((n, sz)) if lengths is None else \
            (np.arange(sz)[None, :] < lengths[:, None]).astype(np.float64)
        mean = np.einsum("nt,ntd->td", present, X) / present.sum(axis=0)[:, None]
        grid = np.linspace(0, 1, size)
        barycenter = np.stack([np.interp(grid, np.linspace(0, 1, sz), mean[:, k]) for k in range(d)], axis=1)
    else:
        barycenter = np.array(init_barycenter, dtype=np.float64).reshape(-1, d)
    size = barycenter.shape[0]
    cost_prev = np.inf
    for _ in range(max_iter):
        centers = np.ascontiguousarray(np.broadcast_to(barycenter, (n, size, d)))
        values, paths = _swn.dtw(X, centers, bandwidth=_bandwidth(radius), lengths_x=lengths)
        cost = float(np.sum(values * weights) / weights.sum())
        # The points aligned to each barycenter point, in series order and
        # along each path (a stable sort keeps that order).
        series = np.repeat(np.arange(n), [len(path) for path in paths])
        steps = np.concatenate(paths)
        order = np.argsort(steps[:, 1], kind="stable")
        series, points = series[order], steps[order, 0]
        starts = np.searchsorted(steps[order, 1], np.arange(size))
        w = weights[series]
        barycenter = np.add.reduceat(X[series, points] * w[:, None], starts, axis=0) / \
            np.add.reduceat(w, starts)[:, None]
        if verbose:
            print(f"[DBA] cost {cost:.6g}")
        if abs(cost_prev - cost) < tol or cost_prev < cost:
            break
        cost_prev = cost
    return barycenter


class TimeSeriesKMeans(TransformerMixin, ClusterMixin, BaseEstimator):
    """k-means for time series, as tslearn's.

    metric "euclidean" (series of one length, centres are means), "dtw"
    (centres by DTW Barycenter Averaging, as tslearn: dtw_barycenter_averaging
    with 30 iterations), or "softdtw" (centres are softwave's Soft-DTW
    barycenters, max_iter_barycenter L-BFGS iterations; gamma from
    metric_params, default 1). metric_params: sakoe_chiba_radius,
    global_constraint, gamma. init "k-means++" (greedy, with the metric's
    distances; it draws the centres tslearn draws from the same random_state),
    "random" (n_clusters distinct series) or an (n_clusters, sz, d) array.
    Each of n_init initialisations alternates assignment and centre updates
    until the inertia (mean squared distance to the assigned centre; the
    DTW of the distance for dtw_inertia) changes by less than tol or
    max_iter is reached; one that leaves a cluster empty is replaced by a
    fresh one (at most max(n_init, 10) tries), and the lowest inertia wins.
    device: None or "cpu", or a PyTorch device ("cuda") on which the
    assignments' distances run (the centres' updates stay on the CPU).
    Attributes: cluster_centers_, labels_, inertia_, n_iter_.
    """

    def __init__(self, n_clusters=3, max_iter=50, tol=1e-6, n_init=1, metric="euclidean", max_iter_barycenter=100,
                 metric_params=None, n_jobs=None, dtw_inertia=False, verbose=0, random_state=None, init="k-means++",
                 device=None):
        self.n_clusters = n_clusters
        self.max_iter = max_iter
        self.tol = tol
        self.n_init = n_init
        self.metric = metric
        self.max_iter_barycenter = max_iter_barycenter
        self.metric_params = metric_params
        self.n_jobs = n_jobs
        self.dtw_inertia = dtw_inertia
        self.verbose = verbose
        self.random_state = random_state
        self.init = init
        self.device = device

    def _check_params(self, n_samples=None):
        if self.metric not in ("euclidean", "dtw", "softdtw"):
            raise ValueError(f"softwave: metric must be 'euclidean', 'dtw' or 'softdtw' (got {self.metric!r})")
        for name in ("n_clusters", "max_iter", "n_init", "max_iter_barycenter"):
            _integer(name, getattr(self, name), 1)
        if n_samples is not None and self.n_clusters > n_samples:
            raise ValueError(f"softwave: n_samples={n_samples} should be >= n_clusters={self.n_clusters}")
        if isinstance(self.init, str) and self.init not in ("k-means++", "random"):
            raise ValueError(f"softwave: init must be 'k-means++', 'random' or an array (got {self.init!r})")
        if self.metric == "softdtw":
            return None, _gamma(self.metric_params)
        return (_radius(self.metric_params) if self.metric == "dtw" else None), None

    def _input(self, X, *, reset):
        """(n_ts, sz, d) float64 and its lengths. 2-D input is scikit-learn's
        (n_samples, n_features), checked as scikit-learn checks it (the same
        n_features after fit); 3-D input may be NaN-padded, and DTW takes
        other lengths after fit."""
        if np.asarray(X).ndim == 3:
            X, lengths = _dataset("X", X)
            if reset:
                self.n_features_in_ = X.shape[1]
        else:
            X = _validate_data(self, X, dtype=np.float64, reset=reset)
            X, lengths = np.ascontiguousarray(X[:, :, None]), None
        if self.metric == "euclidean" and lengths is not None:
            raise ValueError("softwave: metric='euclidean' needs series of one length (X is NaN-padded)")
        return X, lengths

    def _raw(self, X, lengths, centers):
        """Squared distances (Soft-DTW values for softdtw), (n, n_clusters)."""
        radius, gamma = self._check_params()
        if self.metric == "euclidean":
            if centers.shape[1:] != X.shape[1:]:
                raise ValueError(f"softwave: metric='euclidean' needs series of the centres' shape "
                                 f"{centers.shape[1:]} (got {X.shape[1:]})")
            diff = X[:, None] - centers[None]
            return np.einsum("nktd,nktd->nk", diff, diff)
        if self.metric == "dtw":
            return _Kernels(self.device).pairwise(X, centers, 0.0, bandwidth=_bandwidth(radius), lengths_x=lengths)
        return _Kernels(self.device).pairwise(X, centers, gamma, lengths_x=lengths)

    def _distances(self, raw):
        return raw if self.metric == "softdtw" else np.sqrt(np.maximum(raw, 0.0))

    def _initial_centers(self, X, lengths, random):
        n = X.shape[0]
        if not isinstance(self.init, str):
            centers = np.array(self.init, dtype=np.float64)
            centers = centers[:, :, None] if centers.ndim == 2 else centers
            if centers.ndim != 3 or centers.shape[0] != self.n_clusters or centers.shape[2] != X.shape[2]:
                raise ValueError(f"softwave: init must be (n_clusters, sz, d) = ({self.n_clusters}, sz, "
                                 f"{X.shape[2]}) (got {centers.shape})")
            return centers
        if self.init == "random":
            return X[random.choice(n, self.n_clusters, replace=False)].copy()
        if self.metric == "euclidean" and lengths is None:
            # scikit-learn's own k-means++, as tslearn takes it for this
            # metric: the same centres from the same seed.
            from sklearn.cluster import kmeans_plusplus
            _, chosen = kmeans_plusplus(X.reshape(n, -1), self.n_clusters, random_state=random)
            return X[chosen].copy()
        # k-means++ (Arthur and Vassilvitskii, 2007) with 2 + log(k) local
        # trials a centre, on the metric's squared distances, drawn as
        # tslearn draws them for dtw and softdtw.
        chosen = [random.randint(n)]
        closest = self._distances(self._raw(X, lengths, X[chosen]))[:, 0] ** 2
        trials = 2 + int(np.log(self.n_clusters))
        for _ in range(1, self.n_clusters):
            total = closest.sum()
            if not total > 0:  # every series is a centre already
                candidates = random.choice(n, trials)
            else:
                candidates = np.searchsorted(np.cumsum(closest), random.uniform(size=trials) * total)
                candidates = np.minimum(candidates, n - 1)
            candidate_distances = self._distances(self._raw(X, lengths, X[candidates])) ** 2
            potentials = np.minimum(closest[:, None], candidate_distances).sum(axis=0)
            best = int(np.argmin(potentials))
            chosen.append(int(candidates[best]))
            closest = np.minimum(closest, candidate_distances[:, best])
        return X[chosen].copy()

    def _update(self, X, lengths, labels, centers):
        radius, gamma = self._check_params()
        for c in range(self.n_clusters):
            members = labels == c
            if self.metric == "euclidean":
                centers[c] = X[members].mean(axis=0)
            elif self.metric == "dtw":
                part = X[members]
                if lengths is not None:  # NaN padding, as _dataset reads it
                    part = part.copy()
                    for b, n in enumerate(lengths[members]):
                        part[b, n:] = np.nan
                centers[c] = dtw_barycenter_averaging(part, init_barycenter=centers[c], metric_params=(
                    None if radius is None else {"sakoe_chiba_radius": radius}))
            else:
                centers[c] = _soft_barycenter(X[members], gamma, lengths=None if lengths is None else
                                              lengths[members], init=centers[c],
                                              max_iter=self.max_iter_barycenter)
        return centers

    def _inertia(self, X, lengths, raw, labels, centers):
        if self.dtw_inertia and self.metric != "dtw":
            raw = _Kernels(self.device).pairwise(X, centers, 0.0, lengths_x=lengths)
        else:
            raw = self._distances(raw) ** 2
        return float(np.mean(raw[np.arange(X.shape[0]), labels]))

    def fit(self, X, y=None):
        X, lengths = self._input(X, reset=True)
        self._check_params(X.shape[0])
        random = check_random_state(self.random_state)
        best = None
        successes = attempts = 0
        while successes < self.n_init and attempts < max(self.n_init, 10):
            attempts += 1
            centers = self._initial_centers(X, lengths, random)
            previous = np.inf
            for iteration in range(1, self.max_iter + 1):
                raw = self._raw(X, lengths, centers)
                labels = np.argmin(self._distances(raw), axis=1)
                if np.unique(labels).size < self.n_clusters:
                    break
                inertia = self._inertia(X, lengths, raw, labels, centers)
                if self.verbose:
                    print(f"{inertia:.3f}", end=" --> ")
                centers = self._update(X, lengths, labels, centers)
                if abs(previous - inertia) < self.tol:
                    break
                previous = inertia
            else:
                iteration = self.max_iter
            if np.unique(labels).size < self.n_clusters:
                continue  # an empty cluster: a fresh initialisation
            successes += 1
            if best is None or inertia < best[0]:
                best = (inertia, centers.copy(), iteration)
        if best is None:
            raise RuntimeError(f"softwave: every one of {attempts} initialisations left a cluster empty")
        self.inertia_, self.cluster_centers_, self.n_iter_ = best
        raw = self._raw(X, lengths, self.cluster_centers_)
        self.labels_ = np.argmin(self._distances(raw), axis=1)
        return self

    def transform(self, X):
        """Distances of every series to every centre (Soft-DTW values for
        softdtw), (n_ts, n_clusters)."""
        check_is_fitted(self, "cluster_centers_")
        X, lengths = self._input(X, reset=False)
        return self._distances(self._raw(X, lengths, self.cluster_centers_))

    def predict(self, X):
        return np.argmin(self.transform(X), axis=1)
