"""softwave.numpy against the float64 reference: values, gradients (finite
differences), alignments, divergences, all-pairs, hard DTW, lengths, bands,
costs."""

import numpy as np
import pytest
import reference as ref

import softwave.numpy as swn

SHAPES = [(1, 1, 1, 1), (3, 7, 5, 2), (2, 12, 12, 3), (2, 5, 17, 1), (1, 33, 31, 4)]


@pytest.mark.parametrize("B,N,M,d", SHAPES)
@pytest.mark.parametrize("gamma", [1.0, 0.1, 0.0])
@pytest.mark.parametrize("dist", ["sqeuclidean", "l1", "cosine"])
def test_values_match_reference(rng, B, N, M, d, gamma, dist):
    x, y = rng.standard_normal((B, N, d)), rng.standard_normal((B, M, d))
    values = swn.soft_dtw(x, y, gamma, dist=dist)
    expected = [ref.sdtw(x[b], y[b], gamma, dist) for b in range(B)]
    np.testing.assert_allclose(values, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("gamma", [1.0, 0.0])
@pytest.mark.parametrize("band", [0, 2])
def test_pair_kernel_matches_reference(rng, gamma, band):
    """kernel="pairs" (each thread owns whole pairs): values only."""
    x, y = rng.standard_normal((40, 13, 2)), rng.standard_normal((40, 17, 2))
    values = swn.soft_dtw(x, y, gamma, bandwidth=band, kernel="pairs")
    expected = [ref.sdtw(x[b], y[b], gamma, band=band if band else None) for b in range(40)]
    np.testing.assert_allclose(values, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("B,N,M,d", SHAPES[1:4])
@pytest.mark.parametrize("band", [0, 1, 3])
def test_band_matches_reference(rng, B, N, M, d, band):
    x, y = rng.standard_normal((B, N, d)), rng.standard_normal((B, M, d))
    values = swn.soft_dtw(x, y, 0.5, bandwidth=band)
    # bandwidth 0 means "no band", as in the peers.
    expected = [ref.sdtw(x[b], y[b], 0.5, band=band if band else None) for b in range(B)]
    np.testing.assert_allclose(values, expected, rtol=1e-10)


@pytest.mark.parametrize("gamma", [1.0, 0.1])
@pytest.mark.parametrize("divergence", [False, True])
def test_gradients_match_finite_differences(rng, gamma, divergence):
    x, y = rng.standard_normal((2, 6, 2)), rng.standard_normal((2, 8, 2))
    g = rng.uniform(0.5, 2.0, 2)
    function = swn.soft_dtw_divergence_value_and_grad if divergence else swn.soft_dtw_value_and_grad
    value = ref.divergence if divergence else ref.sdtw
    _, gx, gy = function(x, y, gamma, grad_output=g)
    for b in range(2):
        np.testing.assert_allclose(gx[b], g[b] * ref.numerical_grad(lambda a: value(a, y[b], gamma), x[b]),
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(gy[b], g[b] * ref.numerical_grad(lambda a: value(x[b], a, gamma), y[b]),
                                   rtol=1e-5, atol=1e-6)


def test_alignment_is_the_cost_gradient(rng):
    x, y = rng.standard_normal((9, 3)), rng.standard_normal((7, 3))
    E = swn.soft_dtw_alignment(x, y, 0.3)
    C = ref.cost_matrix(x, y)
    np.testing.assert_allclose(E, ref.numerical_grad(lambda c: ref.sdtw_cost(c, 0.3), C), atol=1e-6)
    assert E.shape == (9, 7) and E.min() >= 0 and E.max() <= 1 + 1e-12


def test_cost_tensor_entry_point(rng):
    C = rng.uniform(0, 2, (3, 6, 9))
    values, grad = swn.soft_dtw_cost_value_and_grad(C, 0.2, grad_output=[1.0, 2.0, 0.5])
    np.testing.assert_allclose(values, [ref.sdtw_cost(c, 0.2) for c in C], rtol=1e-10)
    np.testing.assert_allclose(grad[1], 2.0 * ref.numerical_grad(lambda c: ref.sdtw_cost(c, 0.2), C[1]), atol=1e-6)
    assert swn.soft_dtw_cost(C[0], 0.2) == pytest.approx(ref.sdtw_cost(C[0], 0.2))


def test_lengths_ignore_the_padding(rng):
    x, y = rng.standard_normal((3, 10, 2)), rng.standard_normal((3, 12, 2))
    nx, ny = [10, 4, 7], [12, 9, 1]
    values, gx, gy = swn.soft_dtw_value_and_grad(x, y, 0.5, lengths_x=nx, lengths_y=ny)
    for b in range(3):
        assert values[b] == pytest.approx(ref.sdtw(x[b, : nx[b]], y[b, : ny[b]], 0.5), rel=1e-10)
        assert not gx[b, nx[b]:].any() and not gy[b, ny[b]:].any()
    x2 = x.copy()
    x2[1, 4:] = np.nan  # padding is never read
    np.testing.assert_allclose(swn.soft_dtw(x2, y, 0.5, lengths_x=nx, lengths_y=ny), values)


def test_single_series_layouts(rng):
    x, y = rng.standard_normal(11), rng.standard_normal(13)
    assert swn.soft_dtw(x, y) == pytest.approx(ref.sdtw(x, y))
    value, gx, gy = swn.soft_dtw_value_and_grad(x, y)
    assert np.ndim(value) == 0 and gx.shape == x.shape and gy.shape == y.shape
    assert swn.soft_dtw(x[:, None], y[:, None]) == pytest.approx(ref.sdtw(x, y))


def test_float32_keeps_accuracy(rng):
    x, y = rng.standard_normal((4, 64, 3)), rng.standard_normal((4, 50, 3))
    v32 = swn.soft_dtw(x.astype(np.float32), y.astype(np.float32), 0.01)
    assert v32.dtype == np.float32
    expected = swn.soft_dtw(x.astype(np.float32).astype(np.float64), y.astype(np.float32).astype(np.float64), 0.01)
    np.testing.assert_allclose(v32, expected, rtol=1e-6)


def test_divergence_is_zero_on_the_diagonal_and_handles_n_ne_m(rng):
    x, y = rng.standard_normal((2, 9, 2)), rng.standard_normal((2, 14, 2))
    np.testing.assert_allclose(swn.soft_dtw_divergence(x, x, 0.7), 0.0, atol=1e-10)
    np.testing.assert_allclose(swn.soft_dtw_divergence(x, y, 0.7), [ref.divergence(x[b], y[b], 0.7) for b in range(2)],
                               rtol=1e-10)


@pytest.mark.parametrize("divergence", [False, True])
def test_pairwise_matches_pairs(rng, divergence):
    x, y = rng.standard_normal((5, 8, 2)), rng.standard_normal((3, 6, 2))
    D = swn.pairwise(x, y, 0.4, divergence=divergence)
    value = ref.divergence if divergence else ref.sdtw
    np.testing.assert_allclose(D, [[value(a, b, 0.4) for b in y] for a in x], rtol=1e-10)
    univariate = swn.pairwise(x[..., 0], None, 0.4)
    np.testing.assert_allclose(univariate, [[ref.sdtw(a, b, 0.4) for b in x[..., 0]] for a in x[..., 0]], rtol=1e-10)


@pytest.mark.parametrize("gamma", [0.0, 0.3])
@pytest.mark.parametrize("divergence", [False, True])
def test_pairwise_of_one_set_with_itself(rng, gamma, divergence):
    """pairwise(x) walks only half the pairs (the same array and lengths on
    both sides): the whole matrix, symmetric bit for bit, equal to the one
    against a copy (which walks every pair)."""
    x = rng.standard_normal((19, 13, 2))[:, ::-1]  # not contiguous
    lengths = rng.integers(1, 14, 19).astype(np.int32)
    half = swn.pairwise(x, None, gamma, divergence=divergence, bandwidth=3, lengths_x=lengths)
    whole = swn.pairwise(x, x.copy(), gamma, divergence=divergence, bandwidth=3, lengths_x=lengths,
                         lengths_y=lengths.copy())
    np.testing.assert_array_equal(half, half.T)
    np.testing.assert_allclose(half, whole, rtol=1e-12, atol=1e-12)


def test_hard_dtw_path_is_optimal(rng):
    x, y = rng.standard_normal((2, 9, 2)), rng.standard_normal((2, 6, 2))
    values, paths = swn.dtw(x, y)
    for b in range(2):
        C = ref.cost_matrix(x[b], y[b])
        p = paths[b]
        assert tuple(p[0]) == (0, 0) and tuple(p[-1]) == (8, 5)
        steps = np.diff(p, axis=0)
        assert set(map(tuple, steps)) <= {(1, 1), (1, 0), (0, 1)}
        assert C[p[:, 0], p[:, 1]].sum() == pytest.approx(values[b])
        assert values[b] == pytest.approx(ref.sdtw(x[b], y[b], 0.0))


def _walks(rng, shape):
    """Random walks: series with shape, as the pruned search meets them."""
    return np.cumsum(rng.uniform(-1, 1, shape), axis=1)


@pytest.mark.parametrize("B1,B2,N,M,d", [(1, 1, 1, 1, 1), (5, 30, 20, 20, 1), (4, 25, 12, 17, 2), (3, 40, 33, 9, 3)])
@pytest.mark.parametrize("dist", ["sqeuclidean", "l1"])
@pytest.mark.parametrize("band", [None, 2])
def test_nearest_neighbours_match_sorted_pairwise(rng, B1, B2, N, M, d, dist, band):
    x, y = _walks(rng, (B1, N, d)), _walks(rng, (B2, M, d))
    k = min(B2, 4)
    indices, distances, counts = swn.nearest_neighbours(x, y, k, bandwidth=band, dist=dist, return_counts=True)
    matrix = swn.pairwise(x, y, 0.0, bandwidth=band, dist=dist)
    order = np.argsort(matrix, axis=1, kind="stable")[:, :k]
    assert indices.dtype == np.int64 and indices.shape == (B1, k)
    np.testing.assert_array_equal(indices, order)
    np.testing.assert_array_equal(distances, np.take_along_axis(matrix, order, axis=1))
    assert counts["pairs"] == B1 * B2
    assert counts["pruned"] + counts["pruned_reverse"] + counts["abandoned"] + counts["completed"] == B1 * B2


def test_nearest_neighbours_lengths_float32_and_ties(rng):
    x = _walks(rng, (6, 15, 1)).astype(np.float32)
    base = _walks(rng, (3, 18, 1)).astype(np.float32)
    y = np.concatenate([base, base, base])  # every distance three times
    lx, ly = rng.integers(1, 16, 6), np.tile(rng.integers(1, 19, 3), 3)
    indices, distances = swn.nearest_neighbours(x, y, 5, lengths_x=lx, lengths_y=ly)
    matrix = swn.pairwise(x, y, 0.0, lengths_x=lx, lengths_y=ly)
    order = np.argsort(matrix, axis=1, kind="stable")[:, :5]
    assert distances.dtype == np.float32
    np.testing.assert_array_equal(indices, order)
    np.testing.assert_array_equal(distances, np.take_along_axis(matrix, order, axis=1))


def test_nearest_neighbours_errors(rng):
    x, y = rng.standard_normal((2, 5, 1)), rng.standard_normal((3, 5, 1))
    with pytest.raises(ValueError, match="k must be in"):
        swn.nearest_neighbours(x, y, 4)
    with pytest.raises(ValueError, match="k must be in"):
        swn.nearest_neighbours(x, y, 0)
    with pytest.raises(TypeError, match="k must be an integer"):
        swn.nearest_neighbours(x, y, 1.5)
    with pytest.raises(ValueError, match="cost"):
        swn.nearest_neighbours(x, y, 1, dist="cosine")
