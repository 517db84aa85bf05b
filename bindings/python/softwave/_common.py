"""Argument checks shared by the torch, numpy and jax front ends.

Everything here is about Python-level arguments (scalars, strings, shapes);
array contents, extents and lengths are checked by the C++ core, whose
``softwave::invalid_argument`` arrives as ``ValueError`` with the same text.
Empty inputs are refused here too (check_extents), before the core (or a
JAX callback) is reached, so that every front end words them alike.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Optional

DISTS = ("sqeuclidean", "l1", "cosine")
KERNELS = ("automatic", "portable", "specialised", "pairs")


@dataclass(frozen=True)
class Options:
    """The Soft-DTW settings of one call, checked."""

    gamma: float = 1.0
    dist: str = "sqeuclidean"
    band: int = -1  # < 0: no Sakoe–Chiba band
    kernel: str = "automatic"
    # Data checks (finite inputs, lengths in range); None: the framework's
    # default (see Adapter.checks_by_default).
    check: Optional[bool] = None


def check_gamma(gamma, *, allow_zero: bool = True) -> float:
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real):
        raise TypeError(f"softwave: gamma must be a real number (got {type(gamma).__name__})")
    gamma = float(gamma)
    if not math.isfinite(gamma):
        raise ValueError(f"softwave: gamma must be finite (got {gamma})")
    if gamma < 0 or (gamma == 0 and not allow_zero):
        bound = "> 0 (Soft-DTW) or 0 (hard DTW)" if allow_zero else "> 0"
        raise ValueError(f"softwave: gamma must be {bound} (got {gamma})")
    return gamma


def band_of(bandwidth) -> int:
    """The Sakoe–Chiba half-width w in cells (cells with |i - j| <= w are
    kept; -1: no band) for a bandwidth read as the peers (sdtw-cuda-torch,
    pytorch-softdtw-cuda) read it: the condition |i - j| <= bandwidth, so a
    float keeps floor(bandwidth) (0.5: the diagonal only, 1.7: w = 1), and
    None or exactly 0 means no band."""
    if bandwidth is None:
        return -1
    if isinstance(bandwidth, bool) or not isinstance(bandwidth, numbers.Real):
        raise TypeError(
            f"softwave: bandwidth must be None or a number of cells (got {type(bandwidth).__name__})"
        )
    if not math.isfinite(bandwidth) or bandwidth < 0:
        raise ValueError(f"softwave: bandwidth must be None or >= 0 (got {bandwidth})")
    if bandwidth == 0:
        return -1
    return int(math.floor(bandwidth))


def bandwidth_of(band: int):
    """The inverse of band_of: a bandwidth argument that band_of reads back as
    the half-width `band` (w + 0.5 keeps the cells |i - j| <= w; the integer
    0 would mean no band)."""
    return None if band < 0 else band + 0.5


# The extents of one series (or of a cost tensor's rows and columns): each
# must be at least 1 in a batch that holds any series.
_EMPTY_BECAUSE = {
    "N": "every series needs at least one time step",
    "M": "every series needs at least one time step",
    "L": "the barycenter needs at least one time step",
    "d": "every time step needs at least one value",
}


def check_extents(name: str, shape, labels=("N", "d")) -> None:
    """One rule for empty inputs in every front end: a batch of B = 0 series
    is an empty batch (its results are empty, of the right shape); in a batch
    of B > 0 series, a zero extent (N, M or d) is an error naming it.
    shape: (B, *extents), labels: the names of the extents."""
    if shape[0] == 0:
        return
    for extent, label in zip(shape[1:], labels):
        if extent == 0:
            raise ValueError(f"softwave: {name} is empty ({label} = 0): {_EMPTY_BECAUSE[label]}")


def check_batches(x_shape, y_shape) -> None:
    """x (B, N, d) and y (B, M, d) of one batch of pairs (the core's rule,
    checked here where the core is not reached: empty batches, JAX tracing)."""
    check_extents("x", x_shape, ("N", "d"))
    check_extents("y", y_shape, ("M", "d"))
    if x_shape[0] != y_shape[0]:
        raise ValueError(f"softwave: x and y have different batch sizes (x: {x_shape[0]}, y: {y_shape[0]})")
    if x_shape[0] and x_shape[2] != y_shape[2]:
        raise ValueError(f"softwave: x and y have different feature counts (x: {x_shape[2]}, y: {y_shape[2]})")


# sdtw-cuda-torch's other names of the squared Euclidean cost; it reads
# dist case-insensitively. Accepting both keeps its users' dist strings valid.
_DIST_ALIASES = {"sq_euclidean": "sqeuclidean", "squared_euclidean": "sqeuclidean"}


def dist_of(dist) -> str:
    """The built-in cost named by dist (any case, peer spellings included)."""
    if isinstance(dist, str):
        name = _DIST_ALIASES.get(dist.lower(), dist.lower())
        if name in DISTS:
            return name
    raise ValueError(f"softwave: dist must be one of {', '.join(DISTS)} or a callable (got {dist!r})")


def options(gamma=1.0, bandwidth=None, dist="sqeuclidean", kernel="automatic", *, allow_zero_gamma=True,
            check_inputs=None) -> Options:
    dist = dist_of(dist)
    if kernel not in KERNELS:
        raise ValueError(f"softwave: kernel must be one of {', '.join(KERNELS)} (got {kernel!r})")
    if check_inputs is not None and not isinstance(check_inputs, bool):
        raise TypeError(f"softwave: check_inputs must be None, True or False (got {type(check_inputs).__name__})")
    return Options(check_gamma(gamma, allow_zero=allow_zero_gamma), dist, band_of(bandwidth), kernel, check_inputs)


def batch_shape(name: str, ndim: int) -> str:
    """How an array of `ndim` dimensions is read: (B, N, d) is a batch,
    (N, d) one multivariate series, (N,) one univariate series."""
    if ndim not in (1, 2, 3):
        raise ValueError(
            f"softwave: {name} must be (B, N, d), (N, d) or (N,) (got {ndim} dimensions)"
        )
    return ("series", "pair", "batch")[ndim - 1]


def same_layout(x_ndim: int, y_ndim: int) -> None:
    if x_ndim != y_ndim:
        raise ValueError(
            f"softwave: x and y must both be batches (B, N, d), single series (N, d) "
            f"or univariate series (N,) (got {x_ndim} and {y_ndim} dimensions)"
        )


def check_method(method: str) -> str:
    if method not in ("lbfgs", "adam"):
        raise ValueError(f"softwave: method must be 'lbfgs' or 'adam' (got {method!r})")
    return method


def optional_int(name: str, value, minimum: int) -> Optional[int]:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"softwave: {name} must be an integer (got {type(value).__name__})")
    if value < minimum:
        raise ValueError(f"softwave: {name} must be >= {minimum} (got {value})")
    return int(value)
