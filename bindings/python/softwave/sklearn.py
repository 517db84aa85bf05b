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
    from sklearn.base import BaseEstimator, ClassifierMixin
    from sklearn.utils.multiclass import check_classification_targets
    from sklearn.utils.validation import check_array, check_consistent_length, check_is_fitted, column_or_1d
except ImportError as error:  # pragma: no cover
    raise ImportError("softwave.sklearn needs scikit-learn") from error

try:  # scikit-learn >= 1.6
    from sklearn.utils.validation import validate_data as _validate_data
except ImportError:  # pragma: no cover - older scikit-learn

    def _validate_data(estimator, *args, **kwargs):
        return estimator._validate_data(*args, **kwargs)


from . import numpy as _swn
from ._common import bandwidth_of

__all__ = [
    "KNeighborsTimeSeriesClassifier",
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
    if isinstance(sakoe_chiba_radius, bool) or not isinstance(sakoe_chiba_radius, numbers.Integral) \
            or sakoe_chiba_radius < 0:
        raise ValueError(f"softwave: sakoe_chiba_radius must be an integer >= 0 (got {sakoe_chiba_radius!r})")
    return int(sakoe_chiba_radius)


def _bandwidth(radius):
    return None if radius is None else bandwidth_of(radius)


def _gamma(metric_params, gamma=1.0):
    gamma = dict(metric_params or {}).get("gamma", gamma)
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real) or not gamma > 0:
        raise ValueError(f"softwave: gamma must be > 0 for Soft-DTW (got {gamma!r})")
    return float(gamma)


# ---------------------------------------------------------------- functions

def cdist_dtw(dataset1, dataset2=None, global_constraint=None, sakoe_chiba_radius=None, itakura_max_slope=None,
              n_jobs=None, verbose=0, be=None):
    """DTW between every series of dataset1 and every series of dataset2
    (default: dataset1), as tslearn.metrics.cdist_dtw: (n_ts1, n_ts2) of
    square roots of the summed squared costs. n_jobs and verbose are
    accepted for compatibility (the kernels use the OpenMP threads); be must
    be None or "numpy"."""
    if be not in (None, "numpy"):
        raise ValueError(f"softwave: be must be None or 'numpy' (got {be!r})")
    radius = _radius(None, global_constraint, sakoe_chiba_radius, itakura_max_slope)
    X, lx = _dataset("dataset1", dataset1)
    Y, ly = (X, lx) if dataset2 is None else _dataset("dataset2", dataset2)
    matrix = _swn.pairwise(X, Y, gamma=0.0, bandwidth=_bandwidth(radius), lengths_x=lx, lengths_y=ly)
    return np.sqrt(np.maximum(matrix, 0.0))


def cdist_soft_dtw(dataset1, dataset2=None, gamma=1.0, be=None):
    """Soft-DTW between every series of dataset1 and every series of
    dataset2 (default: dataset1), as tslearn.metrics.cdist_soft_dtw."""
    if be not in (None, "numpy"):
        raise ValueError(f"softwave: be must be None or 'numpy' (got {be!r})")
    gamma = _gamma(None, gamma)
    X, lx = _dataset("dataset1", dataset1)
    Y, ly = (X, lx) if dataset2 is None else _dataset("dataset2", dataset2)
    return _swn.pairwise(X, Y, gamma=gamma, lengths_x=lx, lengths_y=ly)


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
        if isinstance(radius, bool) or not isinstance(radius, numbers.Integral) or radius < 0:
            raise ValueError(f"softwave: radius must be an integer >= 0 (got {radius!r})")
        padded = np.pad(candidate, int(radius), mode="edge")
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
    OpenMP threads).
    """

    def __init__(self, n_neighbors=5, weights="uniform", metric="dtw", metric_params=None, n_jobs=None, verbose=0):
        self.n_neighbors = n_neighbors
        self.weights = weights
        self.metric = metric
        self.metric_params = metric_params
        self.n_jobs = n_jobs
        self.verbose = verbose

    # -- validation
    def _check_params(self):
        if self.metric not in ("dtw", "softdtw", "euclidean"):
            raise ValueError(f"softwave: metric must be 'dtw', 'softdtw' or 'euclidean' (got {self.metric!r})")
        if self.weights not in ("uniform", "distance"):
            raise ValueError(f"softwave: weights must be 'uniform' or 'distance' (got {self.weights!r})")
        if self.metric == "softdtw" and self.weights == "distance":
            raise ValueError("softwave: weights='distance' needs a metric whose values are distances "
                             "(Soft-DTW values can be negative)")
        if isinstance(self.n_neighbors, bool) or not isinstance(self.n_neighbors, numbers.Integral) \
                or self.n_neighbors < 1:
            raise ValueError(f"softwave: n_neighbors must be an integer >= 1 (got {self.n_neighbors!r})")
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
        if self.metric == "softdtw":
            matrix = _swn.pairwise(X, self._X_fit, gamma=_gamma(self.metric_params), lengths_x=lengths,
                                   lengths_y=self._lengths_fit)
            indices = np.argsort(matrix, axis=1, kind="stable")[:, :k]
            return indices, np.take_along_axis(matrix, indices, axis=1)
        indices, distances = _swn.nearest_neighbours(X, self._X_fit, k, bandwidth=_bandwidth(radius),
                                                     lengths_x=lengths, lengths_y=self._lengths_fit)
        return indices, np.sqrt(np.maximum(distances, 0.0))

    def kneighbors(self, X=None, n_neighbors=None, return_distance=True):
        """The n_neighbors nearest training series of every series of X,
        nearest first: (distances, indices), or indices alone. Without X,
        those of every training series, itself left out (as scikit-learn)."""
        check_is_fitted(self)
        k = self.n_neighbors if n_neighbors is None else n_neighbors
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
            raise ValueError(f"softwave: n_neighbors must be an integer >= 1 (got {k!r})")
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
