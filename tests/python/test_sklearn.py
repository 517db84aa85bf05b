"""softwave.sklearn: the scikit-learn estimator contract, tslearn's results
on the shipped UCR sets, and the tslearn-style functions against the
float64 reference."""

import numpy as np
import pytest
import reference as ref
from conftest import ucr

sklearn = pytest.importorskip("sklearn", reason="scikit-learn is not installed")

from sklearn.metrics import adjusted_rand_score  # noqa: E402
from sklearn.model_selection import GridSearchCV  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import FunctionTransformer  # noqa: E402
from sklearn.utils.estimator_checks import check_estimator  # noqa: E402

from softwave.sklearn import (  # noqa: E402
    KNeighborsTimeSeriesClassifier,
    TimeSeriesKMeans,
    cdist_dtw,
    cdist_soft_dtw,
    dtw_barycenter_averaging,
    lb_keogh,
)


def test_passes_scikit_learns_estimator_checks():
    check_estimator(KNeighborsTimeSeriesClassifier())
    check_estimator(KNeighborsTimeSeriesClassifier(n_neighbors=3, weights="distance",
                                                   metric_params={"sakoe_chiba_radius": 1}))
    check_estimator(TimeSeriesKMeans(random_state=0))
    check_estimator(TimeSeriesKMeans(metric="dtw", max_iter=5, random_state=0))


# tslearn 0.10.0's KNeighborsTimeSeriesClassifier (scikit-learn 1.9.1) on the
# same splits, computed for this test: its error count and Σ_i label_i · i
# over its test predictions. Hard DTW must agree exactly.
TSLEARN = [
    ("GunPoint", 1, None, "dtw", 14, 17040),
    ("GunPoint", 1, 15, "dtw", 9, 17068),
    ("ECG200", 3, None, "dtw", 20, 2066),
    ("ECG200", 5, 10, "dtw", 18, 1934),
    ("ItalyPowerDemand", 3, 3, "dtw", 58, 785925),
    ("Beef", 1, None, "euclidean", 10, 1411),
    ("Coffee", 1, None, "softdtw", 0, 273),
]


@pytest.mark.parametrize("name,k,radius,metric,errors,weighted", TSLEARN)
def test_predictions_match_tslearn(name, k, radius, metric, errors, weighted):
    y_train, X_train = ucr(name, "TRAIN")
    y_test, X_test = ucr(name, "TEST")
    params = {"gamma": 1.0} if metric == "softdtw" else (None if radius is None else {"sakoe_chiba_radius": radius})
    model = KNeighborsTimeSeriesClassifier(n_neighbors=k, metric=metric, metric_params=params)
    predicted = model.fit(X_train[:, :, None], y_train).predict(X_test[:, :, None])
    assert int((predicted != y_test).sum()) == errors
    assert int(np.sum(predicted * np.arange(len(predicted)))) == weighted


def test_kneighbors_distances_are_dtw_roots(rng):
    X = np.cumsum(rng.uniform(-1, 1, (12, 20, 2)), axis=1)
    y = rng.integers(0, 3, 12)
    model = KNeighborsTimeSeriesClassifier(n_neighbors=3).fit(X, y)
    distances, indices = model.kneighbors(X[:4])
    for q in range(4):
        expected = sorted((ref.sdtw(X[q], X[c], 0.0), c) for c in range(12))[:3]
        np.testing.assert_array_equal(indices[q], [c for _, c in expected])
        np.testing.assert_allclose(distances[q], [np.sqrt(v) for v, _ in expected], rtol=1e-12)
    # Without X: each series' neighbours among the others.
    own = model.kneighbors(return_distance=False)
    assert own.shape == (12, 3)
    assert not (own == np.arange(12)[:, None]).any()


def test_variable_lengths_padded_with_nan(rng):
    X = np.cumsum(rng.uniform(-1, 1, (8, 16, 1)), axis=1)
    lengths = rng.integers(5, 17, 8)
    padded = X.copy()
    for s, n in enumerate(lengths):
        padded[s, n:] = np.nan
    matrix = cdist_dtw(padded)
    for a in range(8):
        for b in range(8):
            expected = np.sqrt(ref.sdtw(X[a, : lengths[a]], X[b, : lengths[b]], 0.0))
            assert matrix[a, b] == pytest.approx(expected, rel=1e-12, abs=1e-12)
    model = KNeighborsTimeSeriesClassifier(n_neighbors=2).fit(padded, np.arange(8) % 2)
    distances, indices = model.kneighbors(padded)
    np.testing.assert_array_equal(indices, np.argsort(matrix, axis=1, kind="stable")[:, :2])
    bad = padded.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        cdist_dtw(bad)


def test_functions_match_reference(rng):
    A = np.cumsum(rng.uniform(-1, 1, (4, 11, 1)), axis=1)
    B = np.cumsum(rng.uniform(-1, 1, (3, 11, 1)), axis=1)
    for radius in (None, 2):
        got = cdist_dtw(A, B, sakoe_chiba_radius=radius, global_constraint=None if radius is None else "sakoe_chiba")
        expected = [[np.sqrt(ref.sdtw(a, b, 0.0, band=radius)) for b in B] for a in A]
        np.testing.assert_allclose(got, expected, rtol=1e-12)
    soft = cdist_soft_dtw(A, B, gamma=0.5)
    np.testing.assert_allclose(soft, [[ref.sdtw(a, b, 0.5) for b in B] for a in A], rtol=1e-10)
    for radius in (0, 1, 3):
        bound = lb_keogh(A[0], B[1], radius=radius)
        lower = [min(B[1, max(0, i - radius): i + radius + 1, 0]) for i in range(11)]
        upper = [max(B[1, max(0, i - radius): i + radius + 1, 0]) for i in range(11)]
        gap = [max(a - u, l - a, 0.0) for a, l, u in zip(A[0, :, 0], lower, upper)]
        assert bound == pytest.approx(np.sqrt(np.sum(np.square(gap))), rel=1e-12)
        assert bound <= cdist_dtw(A[:1], B[1:2], sakoe_chiba_radius=radius)[0, 0] + 1e-12
    with pytest.raises(ValueError, match="itakura"):
        cdist_dtw(A, itakura_max_slope=2.0)


def test_in_a_pipeline_and_a_grid_search():
    y_train, X_train = ucr("Coffee", "TRAIN")
    y_test, X_test = ucr("Coffee", "TEST")
    pipeline = make_pipeline(FunctionTransformer(lambda X: (X - X.mean(1, keepdims=True)) / X.std(1, keepdims=True)),
                             KNeighborsTimeSeriesClassifier(n_neighbors=1))
    grid = GridSearchCV(pipeline, {"kneighborstimeseriesclassifier__metric_params":
                                   [{"sakoe_chiba_radius": r} for r in (0, 5, 30)]}, cv=3)
    grid.fit(X_train, y_train)
    assert grid.best_params_["kneighborstimeseriesclassifier__metric_params"]["sakoe_chiba_radius"] in (0, 5, 30)
    assert grid.score(X_test, y_test) >= 0.9


def test_bad_parameters_name_themselves():
    X, y = np.zeros((4, 6)), np.array([0, 1, 0, 1])
    for params, word in [({"metric": "cosine"}, "metric"), ({"weights": "max"}, "weights"),
                         ({"n_neighbors": 0}, "n_neighbors"),
                         ({"metric_params": {"sakoe_chiba_radius": -1}}, "sakoe_chiba_radius"),
                         ({"metric_params": {"window": 3}}, "window"),
                         ({"metric": "softdtw", "metric_params": {"gamma": 0}}, "gamma")]:
        with pytest.raises(ValueError, match=word):
            KNeighborsTimeSeriesClassifier(**params).fit(X, y)
    model = KNeighborsTimeSeriesClassifier(n_neighbors=5).fit(X, y)
    with pytest.raises(ValueError, match="n_neighbors"):
        model.predict(X)


# tslearn 0.10.0's TimeSeriesKMeans on the same data with the same initial
# centres (every step-th training series; the centres are the series at
# linspace(0, n - 1, k)), computed for this test: its labels and inertia.
# There the algorithms coincide (means; DBA with 30 iterations), so the
# labels must be equal and the inertia equal to rounding.
TSLEARN_KMEANS = [
    ("SyntheticControl", 6, 5, "euclidean", None, 10,
     "000010150011100010002222222222333333535344244424225535355355", 27.39541677214136),
    ("SyntheticControl", 6, 5, "dtw", {"sakoe_chiba_radius": 3}, 4,
     "000000000011100011102222222222333333333344224424425335355355", 10.998590372079653),
    ("GunPoint", 2, 1, "dtw", {"sakoe_chiba_radius": 5}, 3,
     "00000011110111010011011101111101100010110111100001", 9.75430321254363),
]


@pytest.mark.parametrize("name,k,step,metric,params,max_iter,labels,inertia", TSLEARN_KMEANS)
def test_kmeans_matches_tslearn_from_the_same_centres(name, k, step, metric, params, max_iter, labels, inertia):
    _, X = ucr(name, "TRAIN")
    X = X[::step, :, None]
    init = X[np.linspace(0, len(X) - 1, k).astype(int)]
    model = TimeSeriesKMeans(n_clusters=k, metric=metric, metric_params=params, init=init, max_iter=max_iter).fit(X)
    assert "".join(map(str, model.labels_)) == labels
    assert model.inertia_ == pytest.approx(inertia, rel=1e-12)
    np.testing.assert_array_equal(model.predict(X), model.labels_)
    assert model.cluster_centers_.shape == (k, X.shape[1], 1)


# tslearn 0.10.0's TimeSeriesKMeans with its k-means++ from a fixed seed
# (max_iter 5), computed for this test: softwave draws the same centres from
# the same seed, so the clusters are the same.
TSLEARN_KMEANS_PLUS_PLUS = [
    ("SyntheticControl", 6, 5, {"sakoe_chiba_radius": 3}, 0,
     "333333333322255525554444444444111111111100400040041111111111", 10.053601981855717),
    ("GunPoint", 2, 1, {"sakoe_chiba_radius": 5}, 3,
     "11111100000000101100100010000000011101001000011110", 9.628700608468012),
    ("Trace", 4, 2, None, 7, "20232000303020120122030330101133310110202233103012", 0.49210551160717086),
]


@pytest.mark.parametrize("name,k,step,params,seed,labels,inertia", TSLEARN_KMEANS_PLUS_PLUS)
def test_kmeans_plus_plus_draws_tslearns_centres(name, k, step, params, seed, labels, inertia):
    _, X = ucr(name, "TRAIN")
    X = X[::step, :, None]
    model = TimeSeriesKMeans(n_clusters=k, metric="dtw", metric_params=params, random_state=seed, max_iter=5).fit(X)
    assert "".join(map(str, model.labels_)) == labels
    assert model.inertia_ == pytest.approx(inertia, rel=1e-12)


def test_euclidean_kmeans_plus_plus_is_scikit_learns():
    from sklearn.cluster import kmeans_plusplus
    _, X = ucr("SyntheticControl", "TRAIN")
    X = X[::5, :, None]
    _, expected = kmeans_plusplus(X.reshape(len(X), -1), 6, random_state=4)
    model = TimeSeriesKMeans(n_clusters=6, random_state=4, max_iter=1).fit(X)
    start = TimeSeriesKMeans(n_clusters=6, init=X[expected], max_iter=1).fit(X)
    np.testing.assert_array_equal(model.labels_, start.labels_)
    np.testing.assert_allclose(model.cluster_centers_, start.cluster_centers_)


def test_kmeans_plus_plus_and_softdtw_find_the_classes():
    classes, X = ucr("SyntheticControl", "TRAIN")
    X, classes = X[::5], classes[::5]
    dtw = TimeSeriesKMeans(n_clusters=6, metric="dtw", metric_params={"sakoe_chiba_radius": 3}, n_init=2,
                           max_iter=6, random_state=1).fit(X)
    assert adjusted_rand_score(classes, dtw.labels_) > 0.5
    soft = TimeSeriesKMeans(n_clusters=6, metric="softdtw", metric_params={"gamma": 0.5}, init=dtw.cluster_centers_,
                            max_iter=2, max_iter_barycenter=10).fit(X)
    assert adjusted_rand_score(classes, soft.labels_) > 0.5
    assert soft.transform(X).shape == (len(X), 6)
    again = TimeSeriesKMeans(n_clusters=6, metric="dtw", metric_params={"sakoe_chiba_radius": 3}, n_init=2,
                             max_iter=6, random_state=1).fit(X)
    np.testing.assert_array_equal(again.labels_, dtw.labels_)  # a fixed seed, the same clusters


def test_dba_matches_tslearns_examples():
    """tslearn's documented results of dtw_barycenter_averaging_petitjean."""
    nan = np.nan
    np.testing.assert_allclose(dtw_barycenter_averaging([[1, 2, 3, 4], [1, 2, 4, 5]], max_iter=5).ravel(),
                               [1, 2, 3.5, 4.5])
    ragged = [[1, 2, 3, 4, nan], [1, 2, 3, 4, 5]]
    np.testing.assert_allclose(dtw_barycenter_averaging(ragged, max_iter=5).ravel(), [1, 2, 3, 4, 4.5])
    np.testing.assert_allclose(dtw_barycenter_averaging(ragged, max_iter=5, barycenter_size=3).ravel(),
                               [1.5, 3, 13 / 3])
    np.testing.assert_allclose(dtw_barycenter_averaging([[0, 0, 0], [10, 10, 10]],
                                                        weights=np.array([0.75, 0.25])).ravel(), [2.5] * 3)


def test_kmeans_variable_lengths_and_errors(rng):
    X = np.cumsum(rng.uniform(-1, 1, (12, 20, 1)), axis=1)
    for s in range(0, 12, 3):
        X[s, 15:] = np.nan
    model = TimeSeriesKMeans(n_clusters=2, metric="dtw", random_state=0, max_iter=3).fit(X)
    assert model.labels_.shape == (12,) and np.isfinite(model.cluster_centers_).all()
    with pytest.raises(ValueError, match="euclidean"):
        TimeSeriesKMeans(n_clusters=2).fit(X)
    for params, word in [({"metric": "cosine"}, "metric"), ({"n_clusters": 20}, "n_clusters"),
                         ({"init": "first"}, "init"), ({"init": np.zeros((3, 20, 1))}, "init"),
                         ({"metric": "dtw", "metric_params": {"itakura_max_slope": 2.0}}, "itakura")]:
        with pytest.raises(ValueError, match=word):
            TimeSeriesKMeans(**{"n_clusters": 2, **params}).fit(np.nan_to_num(X))


def _cuda_available():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def test_a_device_that_is_not_there_is_named():
    _, X = ucr("GunPoint", "TRAIN")
    with pytest.raises(ValueError, match="device"):
        cdist_dtw(X[:3], device="nonsense")
    if not _cuda_available():
        model = KNeighborsTimeSeriesClassifier(n_neighbors=1, device="cuda")
        with pytest.raises(ValueError, match="no CUDA device"):
            model.fit(X[:4, :, None], np.arange(4)).predict(X[:2, :, None])


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not _cuda_available(), reason="no CUDA device"))])
def test_estimators_and_functions_on_a_device_give_the_cpu_answers(device):
    """The same kernels on the device: hard DTW bit for bit, Soft-DTW to
    rounding, hence the same predictions and clusters."""
    classes, X = ucr("GunPoint", "TRAIN")
    _, T = ucr("GunPoint", "TEST")
    X, T = X[:, :, None], T[:40, :, None]
    np.testing.assert_array_equal(cdist_dtw(T, X, sakoe_chiba_radius=5, device=device),
                                  cdist_dtw(T, X, sakoe_chiba_radius=5))
    np.testing.assert_allclose(cdist_soft_dtw(T, X, gamma=0.5, device=device),
                               cdist_soft_dtw(T, X, gamma=0.5), rtol=1e-10)
    for metric in ("dtw", "softdtw"):
        here = KNeighborsTimeSeriesClassifier(n_neighbors=3, metric=metric).fit(X, classes)
        there = KNeighborsTimeSeriesClassifier(n_neighbors=3, metric=metric, device=device).fit(X, classes)
        np.testing.assert_array_equal(there.kneighbors(T, return_distance=False),
                                      here.kneighbors(T, return_distance=False))
    params = {"sakoe_chiba_radius": 5}
    here = TimeSeriesKMeans(n_clusters=2, metric="dtw", metric_params=params, random_state=3, max_iter=3).fit(X)
    there = TimeSeriesKMeans(n_clusters=2, metric="dtw", metric_params=params, random_state=3, max_iter=3,
                             device=device).fit(X)
    np.testing.assert_array_equal(there.labels_, here.labels_)
    assert there.inertia_ == here.inertia_
