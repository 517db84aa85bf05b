"""NumPy front end: plain functions returning values and gradients.

Series are (B, N, d) batches, (N, d) single series or (N,) univariate
series; x and y share one layout (a batch of pairs, or one pair whose results
are scalars and arrays shaped like the inputs). An empty batch (B = 0)
gives empty results; N = 0 or d = 0 is a ValueError. float32 and float64 run
as given; other dtypes (integers, float16) are computed in float64. Results
are NumPy arrays (float64 scalars for a single pair's value).

Example::

    import numpy as np, softwave.numpy as swn
    x, y = np.random.randn(8, 100, 3), np.random.randn(8, 120, 3)
    values = swn.soft_dtw(x, y, gamma=0.1)                # (8,)
    values, gx, gy = swn.soft_dtw_value_and_grad(x, y)   # gradients of Σ values
"""

from __future__ import annotations

import numpy as np

from . import _engine
from ._common import options

__all__ = [
    "soft_dtw",
    "soft_dtw_value_and_grad",
    "soft_dtw_divergence",
    "soft_dtw_divergence_value_and_grad",
    "soft_dtw_alignment",
    "soft_dtw_cost",
    "soft_dtw_cost_value_and_grad",
    "pairwise",
    "dtw",
    "nearest_neighbours",
]


class _NumpyAdapter(_engine.Adapter):
    def empty(self, shape, like, dtype=None):
        return np.empty(tuple(shape), dtype=like.dtype if dtype is None else dtype)

    def int32(self, values, like):
        lengths = np.asarray(values)
        if lengths.dtype.kind not in "iu":
            raise TypeError(f"softwave: lengths must be integers (got {lengths.dtype})")
        return np.ascontiguousarray(lengths, dtype=np.int32)

    def int32_dtype(self):
        return np.int32

    def int64_dtype(self):
        return np.int64


_adapter = _NumpyAdapter()


def _float_array(name, a, dtype=None):
    a = np.asarray(a)
    if a.dtype.kind not in "fiub":
        raise TypeError(f"softwave: {name} must be a real array (got dtype {a.dtype})")
    if dtype is None:
        dtype = a.dtype if a.dtype in (np.float32, np.float64) else np.float64
    return np.ascontiguousarray(a, dtype=dtype)


def _pair(x, y):
    """Both inputs as contiguous (B, N, d) arrays of one float type."""
    x = _float_array("x", x)
    y = _float_array("y", y, x.dtype if np.asarray(y).dtype != x.dtype else None)
    if y.dtype != x.dtype:  # y float64, x float32: compute in float64
        x = x.astype(y.dtype)
    x3, single = _engine.as_batch("x", x)
    y3, _ = _engine.as_batch("y", y, x.ndim)
    return x, y, x3, y3, single


def _grad_output(grad_output, batch, dtype):
    if grad_output is None:
        return None
    g = np.ascontiguousarray(np.broadcast_to(np.asarray(grad_output, dtype=dtype), (batch,)))
    return g


def _finish(single, x, y, values, gx=None, gy=None):
    if single:
        values = values[0].astype(np.float64) if values.dtype == np.float32 else values[0]
        gx = None if gx is None else gx.reshape(x.shape)
        gy = None if gy is None else gy.reshape(y.shape)
    return values, gx, gy


def soft_dtw(x, y, gamma: float = 1.0, *, bandwidth=None, dist: str = "sqeuclidean",
             lengths_x=None, lengths_y=None, kernel: str = "automatic"):
    """Soft-DTW values sdtw_γ(x_b, y_b): (B,) for batches, a scalar for one pair.

    bandwidth: Sakoe–Chiba band, read as the peers read it: cells with
    |i − j| ≤ bandwidth are kept (a float is floored: 0.5 keeps the diagonal
    only; for N ≠ M the band follows the diagonal of the N×M table); None or
    0 means no band.
    dist: 'sqeuclidean', 'l1' or 'cosine'. lengths_x / lengths_y: per-pair
    lengths of padded batches (B,). gamma = 0 is hard DTW.
    """
    opts = options(gamma, bandwidth, dist, kernel)
    x, y, x3, y3, single = _pair(x, y)
    values, *_ = _engine.soft_dtw(_adapter, x3, y3, opts, lengths_x=lengths_x, lengths_y=lengths_y)
    return _finish(single, x, y, values)[0]


def soft_dtw_value_and_grad(x, y, gamma: float = 1.0, *, bandwidth=None, dist: str = "sqeuclidean",
                            lengths_x=None, lengths_y=None, grad_output=None, kernel: str = "automatic"):
    """(values, ∇x, ∇y) of Σ_b grad_output[b] · sdtw_γ(x_b, y_b) (grad_output
    defaults to ones). Gradients are zero in the padding past each length."""
    opts = options(gamma, bandwidth, dist, kernel)
    x, y, x3, y3, single = _pair(x, y)
    g = _grad_output(grad_output, x3.shape[0], x3.dtype)
    values, gx, gy, _ = _engine.soft_dtw(_adapter, x3, y3, opts, grad_x=True, grad_y=True,
                                         grad_output=g, lengths_x=lengths_x, lengths_y=lengths_y)
    return _finish(single, x, y, values, gx, gy)


def soft_dtw_divergence(x, y, gamma: float = 1.0, *, bandwidth=None, dist: str = "sqeuclidean",
                        lengths_x=None, lengths_y=None, kernel: str = "automatic"):
    """Soft-DTW divergence sdtw(x, y) − ½ sdtw(x, x) − ½ sdtw(y, y) (≥ 0,
    zero iff x = y); N ≠ M is fine."""
    opts = options(gamma, bandwidth, dist, kernel)
    x, y, x3, y3, single = _pair(x, y)
    values, *_ = _engine.soft_dtw(_adapter, x3, y3, opts, divergence=True,
                                  lengths_x=lengths_x, lengths_y=lengths_y)
    return _finish(single, x, y, values)[0]


def soft_dtw_divergence_value_and_grad(x, y, gamma: float = 1.0, *, bandwidth=None, dist: str = "sqeuclidean",
                                       lengths_x=None, lengths_y=None, grad_output=None,
                                       kernel: str = "automatic"):
    """(values, ∇x, ∇y) of the Soft-DTW divergence."""
    opts = options(gamma, bandwidth, dist, kernel)
    x, y, x3, y3, single = _pair(x, y)
    g = _grad_output(grad_output, x3.shape[0], x3.dtype)
    values, gx, gy, _ = _engine.soft_dtw(_adapter, x3, y3, opts, divergence=True, grad_x=True, grad_y=True,
                                         grad_output=g, lengths_x=lengths_x, lengths_y=lengths_y)
    return _finish(single, x, y, values, gx, gy)


def soft_dtw_alignment(x, y, gamma: float = 1.0, *, bandwidth=None, dist: str = "sqeuclidean",
                       lengths_x=None, lengths_y=None, kernel: str = "automatic"):
    """Expected alignment E = ∂ sdtw / ∂ C: (B, N, M) (or (N, M) for one pair),
    entries in [0, 1], zero outside each pair's lengths; for gamma = 0 the
    indicator of the optimal warping path."""
    opts = options(gamma, bandwidth, dist, kernel)
    x, y, x3, y3, single = _pair(x, y)
    _, _, _, e = _engine.soft_dtw(_adapter, x3, y3, opts, alignment=True,
                                  lengths_x=lengths_x, lengths_y=lengths_y)
    return e[0] if single else e


def _cost_array(cost):
    cost = _float_array("cost", cost)
    if cost.ndim == 2:
        return cost, cost.reshape(1, *cost.shape), True
    if cost.ndim != 3:
        raise ValueError(f"softwave: cost must be (B, N, M) or (N, M) (got {cost.ndim} dimensions)")
    return cost, cost, False


def soft_dtw_cost(cost, gamma: float = 1.0, *, bandwidth=None, lengths_x=None, lengths_y=None,
                  kernel: str = "automatic"):
    """Soft-DTW on a user cost tensor C (B, N, M) or (N, M)."""
    opts = options(gamma, bandwidth, "sqeuclidean", kernel)
    cost, c3, single = _cost_array(cost)
    values, _ = _engine.soft_dtw_cost(_adapter, c3, opts, lengths_x=lengths_x, lengths_y=lengths_y)
    return values[0].astype(np.float64) if single else values


def soft_dtw_cost_value_and_grad(cost, gamma: float = 1.0, *, bandwidth=None, lengths_x=None,
                                 lengths_y=None, grad_output=None, kernel: str = "automatic"):
    """(values, ∂/∂C) on a cost tensor; ∂/∂C = grad_output[b] · E_b."""
    opts = options(gamma, bandwidth, "sqeuclidean", kernel)
    cost, c3, single = _cost_array(cost)
    g = _grad_output(grad_output, c3.shape[0], c3.dtype)
    values, gc = _engine.soft_dtw_cost(_adapter, c3, opts, grad=True, grad_output=g,
                                       lengths_x=lengths_x, lengths_y=lengths_y)
    if single:
        return values[0].astype(np.float64), gc[0]
    return values, gc


def pairwise(x, y=None, gamma: float = 1.0, *, divergence: bool = False, bandwidth=None,
             dist: str = "sqeuclidean", lengths_x=None, lengths_y=None, kernel: str = "automatic"):
    """All-pairs matrix D[i, j] = sdtw_γ(x_i, y_j) (or the divergence) for
    x: (B1, N, d), y: (B2, M, d) (y defaults to x); (B, N) means univariate
    series here. Memory does not grow with B1·B2·N·M."""
    opts = options(gamma, bandwidth, dist, kernel)
    if y is None:
        y, lengths_y = x, lengths_x if lengths_y is None else lengths_y
    same = y is x  # one set with itself: the core walks half the pairs
    x = _float_array("x", x)
    y = x if same else _float_array("y", y, x.dtype)
    for name, a in (("x", x), ("y", y)):
        if a.ndim not in (2, 3):
            raise ValueError(f"softwave: {name} must be (B, N, d) or (B, N) (got {a.ndim} dimensions)")
    x3 = np.ascontiguousarray(x[..., None] if x.ndim == 2 else x)
    y3 = x3 if same else np.ascontiguousarray(y[..., None] if y.ndim == 2 else y)
    return _engine.pairwise(_adapter, x3, y3, opts,
                            divergence=divergence, lengths_x=lengths_x, lengths_y=lengths_y)


def dtw(x, y, *, bandwidth=None, dist: str = "sqeuclidean", lengths_x=None, lengths_y=None,
        return_path: bool = True):
    """Hard DTW. Returns values ((B,) or a scalar) and, with return_path, the
    optimal warping paths: a list of (K_b, 2) int arrays of 0-based (i, j)
    from (0, 0) to (N_b − 1, M_b − 1) (one array for a single pair). Ties
    go diagonal, then up, then left."""
    opts = options(0.0, bandwidth, dist)
    x, y, x3, y3, single = _pair(x, y)
    values, path, length = _engine.dtw_path(_adapter, x3, y3, opts, lengths_x=lengths_x, lengths_y=lengths_y)
    paths = [path[b, : length[b]].astype(np.int64) for b in range(path.shape[0])]
    values = _finish(single, x, y, values)[0]
    if not return_path:
        return values
    return (values, paths[0]) if single else (values, paths)



def _series_set(name, a, dtype=None):
    """A set of series as a contiguous (B, N, d) array; (B, N) is univariate."""
    a = _float_array(name, a, dtype)
    if a.ndim not in (2, 3):
        raise ValueError(f"softwave: {name} must be (B, N, d) or (B, N) (got {a.ndim} dimensions)")
    return np.ascontiguousarray(a[..., None] if a.ndim == 2 else a)


def nearest_neighbours(x, y, k: int = 1, *, bandwidth=None, dist: str = "sqeuclidean", lengths_x=None,
                       lengths_y=None, return_counts: bool = False):
    """Exact k-nearest neighbours under hard DTW: for every series x_q of
    x (B1, N, d) the k series of y (B2, M, d) with the least DTW distances
    (sqeuclidean or l1 cost; (B, N) means univariate series). Returns
    indices (B1, k) int64 and distances (B1, k), nearest first, ties to the
    lower index: exactly what sorting each row of pairwise(x, y, gamma=0)
    gives, found with the UCR Suite's lower bounds and pruned, early
    abandoned walks, so most pairs are never computed in full. With
    return_counts, also a dict of what the search did with the B1·B2 pairs
    (pruned, pruned_reverse, abandoned, completed)."""
    opts = options(0.0, bandwidth, dist)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"softwave: k must be an integer (got {type(k).__name__})")
    x3 = _series_set("x", x)
    y3 = _series_set("y", y, x3.dtype)
    if not 1 <= k <= y3.shape[0]:
        raise ValueError(f"softwave: k must be in [1, {y3.shape[0]}] (the number of series in y; got {k})")
    indices, distances, counts = _engine.nearest_neighbours(
        _adapter, x3, y3, int(k), opts, lengths_x=lengths_x, lengths_y=lengths_y)
    return (indices, distances, counts) if return_counts else (indices, distances)
