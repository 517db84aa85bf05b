"""Calls into the compiled core, written once for every array framework.

A front end hands in a small adapter (how to allocate an output like an
input, how to make int32 lengths, which CUDA stream is current) and arrays
already shaped (B, N, d), C-contiguous and of one float type. Outputs are
allocated by the framework, so they live in its allocator and on its device;
the core writes into them in place, on the framework's current stream.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from . import _core
from ._common import Options, batch_shape, check_batches, check_extents, same_layout


class Adapter:
    """What the engine needs from an array framework."""

    def empty(self, shape: Sequence[int], like: Any, dtype: Any = None) -> Any:  # pragma: no cover
        raise NotImplementedError

    def int32(self, values: Any, like: Any) -> Any:  # pragma: no cover
        raise NotImplementedError

    def stream(self, like: Any) -> int:
        return 0

    def checks_by_default(self, like: Any) -> bool:
        """Whether data checks run when the caller leaves check_inputs None."""
        return True

    def int32_dtype(self) -> Any:  # pragma: no cover
        raise NotImplementedError

    def int64_dtype(self) -> Any:  # pragma: no cover
        raise NotImplementedError

    def value_dtype(self, like: Any) -> Any:
        """The dtype of values and matrices for inputs like `like` (None: its own)."""
        return None


def as_batch(name: str, a: Any, other_ndim: Optional[int] = None):
    """(B, N, d) view of a batch, one multivariate series (N, d) or one
    univariate series (N,); returns the view and whether it was one pair."""
    kind = batch_shape(name, a.ndim)
    if other_ndim is not None:
        same_layout(other_ndim, a.ndim)
    if kind == "series":
        return a.reshape(1, a.shape[0], 1), True
    if kind == "pair":
        return a.reshape(1, a.shape[0], a.shape[1]), True
    return a, False


def lengths_of(adapter: Adapter, lengths: Any, like: Any):
    return None if lengths is None else adapter.int32(lengths, like)


def check_of(adapter: Adapter, opts: Options, like: Any) -> bool:
    return adapter.checks_by_default(like) if opts.check is None else opts.check


def soft_dtw(
    adapter: Adapter,
    x,
    y,
    opts: Options,
    *,
    divergence: bool = False,
    grad_x: bool = False,
    grad_y: bool = False,
    alignment: bool = False,
    grad_output=None,
    lengths_x=None,
    lengths_y=None,
):
    """values (B,) and, as asked, ∇x, ∇y (of Σ grad_output·values) and E."""
    check_batches(x.shape, y.shape)
    batch, n, d = x.shape
    m = y.shape[1]
    values = adapter.empty((batch,), x, adapter.value_dtype(x))
    gx = adapter.empty(x.shape, x) if grad_x else None
    gy = adapter.empty(y.shape, y) if grad_y else None
    e = adapter.empty((batch, n, m), x) if alignment else None
    if batch == 0:  # an empty batch: empty results, nothing to compute
        return values, gx, gy, e
    _core.soft_dtw(
        x, y, values, gx, gy, e, grad_output,
        lengths_of(adapter, lengths_x, x), lengths_of(adapter, lengths_y, x),
        opts.gamma, opts.dist, opts.band, opts.kernel, divergence, adapter.stream(x),
        check_of(adapter, opts, x),
    )
    return values, gx, gy, e


def soft_dtw_cost(adapter: Adapter, cost, opts: Options, *, grad: bool = False, grad_output=None, lengths_x=None, lengths_y=None):
    check_extents("cost", cost.shape, ("N", "M"))
    values = adapter.empty((cost.shape[0],), cost, adapter.value_dtype(cost))
    gc = adapter.empty(cost.shape, cost) if grad else None
    if cost.shape[0] == 0:
        return values, gc
    _core.soft_dtw_cost(
        cost, values, gc, grad_output,
        lengths_of(adapter, lengths_x, cost), lengths_of(adapter, lengths_y, cost),
        opts.gamma, opts.band, opts.kernel, adapter.stream(cost), check_of(adapter, opts, cost),
    )
    return values, gc


def pairwise(adapter: Adapter, x, y, opts: Options, *, divergence: bool = False, lengths_x=None, lengths_y=None):
    check_extents("x", x.shape, ("N", "d"))
    check_extents("y", y.shape, ("M", "d"))
    matrix = adapter.empty((x.shape[0], y.shape[0]), x, adapter.value_dtype(x))
    if x.shape[0] == 0 or y.shape[0] == 0:
        return matrix
    # One set with itself (the same array and lengths) lets the core walk
    # only half the pairs: keep the lengths one object too.
    lx = lengths_of(adapter, lengths_x, x)
    ly = lx if lengths_y is lengths_x else lengths_of(adapter, lengths_y, x)
    _core.pairwise(
        x, y, matrix, lx, ly,
        opts.gamma, opts.dist, opts.band, opts.kernel, divergence, adapter.stream(x),
        check_of(adapter, opts, x),
    )
    return matrix


def nearest_neighbours(adapter: Adapter, x, y, k: int, opts: Options, *, lengths_x=None, lengths_y=None):
    """The k nearest y_c of every x_q under hard DTW: indices (B1, k) int64,
    distances (B1, k), nearest first (ties to the lower index), and the
    search's counts (a dict: pairs, pruned, pruned_reverse, abandoned,
    completed)."""
    check_extents("x", x.shape, ("N", "d"))
    check_extents("y", y.shape, ("M", "d"))
    indices = adapter.empty((x.shape[0], k), x, adapter.int64_dtype())
    distances = adapter.empty((x.shape[0], k), x, adapter.value_dtype(x))
    if x.shape[0] == 0:
        counts = dict.fromkeys(("pairs", "pruned", "pruned_reverse", "abandoned", "completed"), 0)
        return indices, distances, counts
    counts = _core.nearest_neighbours(
        x, y, indices, distances,
        lengths_of(adapter, lengths_x, x), lengths_of(adapter, lengths_y, x),
        opts.dist, opts.band, adapter.stream(x), check_of(adapter, opts, x),
    )
    return indices, distances, dict(counts)


def dtw_path(adapter: Adapter, x, y, opts: Options, *, lengths_x=None, lengths_y=None):
    """Hard DTW values (B,), paths (B, N+M-1, 2) int32 padded with -1, and
    path lengths (B,)."""
    check_batches(x.shape, y.shape)
    batch, n, _ = x.shape
    m = y.shape[1]
    values = adapter.empty((batch,), x, adapter.value_dtype(x))
    path = adapter.empty((batch, max(n + m - 1, 0), 2), x, adapter.int32_dtype())
    length = adapter.empty((batch,), x, adapter.int32_dtype())
    if batch == 0:
        return values, path, length
    _core.dtw_path(
        x, y, values, path, length,
        lengths_of(adapter, lengths_x, x), lengths_of(adapter, lengths_y, x),
        opts.dist, opts.band, adapter.stream(x), check_of(adapter, opts, x),
    )
    return values, path, length


def barycenter(adapter: Adapter, X, z, opts: Options, *, weights=None, lengths=None,
               method="lbfgs", max_iter=100, tol=1e-5, history=10, learning_rate=1e-2):
    """Optimises z (L, d) in place; returns the optimiser's report (dict)."""
    return _core.barycenter(
        X, z, weights, lengths_of(adapter, lengths, X),
        opts.gamma, opts.dist, opts.band, opts.kernel,
        method, max_iter, tol, history, learning_rate, adapter.stream(X),
    )
