"""PyTorch front end: a drop-in ``SoftDTW`` module and functions with autograd.

Tensors stay where they are (CPU, or CUDA in a CUDA build of softwave) and
are passed to the core without copies; CUDA work is queued on the current
stream of the tensors' device (``torch.cuda.current_stream()``). float32 and
float64 run as given; float16 and bfloat16 are read as they are (no float32
copy is made) and computed with float32 accumulation: values come out in
float32, gradients in the input dtype, rounded once. An empty batch (B = 0)
gives empty results; N = 0 or d = 0 is a ValueError.

When an input requires grad, the forward computes the gradients too, in the
same fused pass (no B×N×M table is ever kept); backward only scales them by
the incoming gradient. Second derivatives are not available: a gradient taken
with ``create_graph=True`` may be used as a value, but differentiating it (a
gradient penalty, a Hessian, double backward) raises a RuntimeError rather
than silently giving zero.

``SoftDTW``, ``softdtw`` and ``softdtw_barycenter`` take sdtw-cuda-torch's
arguments (``SoftDTW`` also pytorch-softdtw-cuda's), so that
``import softwave.torch as softdtw_cuda`` is all a migration needs.

Example::

    import torch
    from softwave.torch import SoftDTW
    x = torch.randn(32, 512, 64, device="cuda", requires_grad=True)
    y = torch.randn(32, 512, 64, device="cuda")
    loss = SoftDTW(gamma=0.1)(x, y).mean()
    loss.backward()
"""

from __future__ import annotations

import sys
from typing import Callable, Optional, Union

import torch

from . import _engine
from . import _torch_ops as ops
from ._barycenter import barycenter
from ._common import Options, check_batches, check_extents, optional_int, options

__all__ = [
    "SoftDTW",
    "softdtw",
    "softdtw_barycenter",
    "softdtw_barycenter_cpu",
    "soft_dtw",
    "soft_dtw_divergence",
    "soft_dtw_alignment",
    "soft_dtw_cost",
    "pairwise",
    "dtw",
    "nearest_neighbours",
]

def _tensor(name: str, t) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"softwave: {name} must be a torch.Tensor (got {type(t).__name__})")
    return t


def _compute_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """The float type the core runs in for these inputs."""
    for name, t in zip(("x", "y"), tensors):
        if not _tensor(name, t).dtype.is_floating_point:
            raise TypeError(f"softwave: {name} must be a floating-point tensor (got {t.dtype})")
    if len(tensors) == 2:
        x, y = tensors
        if x.device != y.device:
            raise ValueError(f"softwave: x is on {x.device} but y is on {y.device}; move them to one device")
        if x.dtype != y.dtype:
            raise TypeError(f"softwave: x is {x.dtype} but y is {y.dtype}; pass one dtype")
    return tensors[0].dtype


def _check_device(t: torch.Tensor) -> None:
    if t.is_cuda and not ops.HAS_CUDA:
        raise ValueError(
            "softwave: the tensors are on CUDA but this softwave was built for the CPU only "
            "(pip install . with SOFTWAVE_KOKKOS_BACKEND=CUDA for a CUDA build)"
        )


def _lengths(x: torch.Tensor, lengths_x, lengths_y):
    return ops.lengths_of(lengths_x, x), ops.lengths_of(lengths_y, x)


def _batched(x: torch.Tensor, y: torch.Tensor):
    """(B, N, d) views of a batch of pairs or of one pair ((N, d) or (N,)
    each), and whether it was one pair."""
    x3, single = _engine.as_batch("x", _tensor("x", x))
    y3, _ = _engine.as_batch("y", _tensor("y", y), x.ndim)
    return x3, y3, single


def _batch_of_pairs(name: str, t) -> torch.Tensor:
    """How SoftDTW and softdtw read an input, as sdtw-cuda-torch does: an
    unbatched series (N, d) or (N,) is a batch of one, so the result stays
    (B,), (1,) for one pair. A view: gradients reach t in its own shape."""
    return _engine.as_batch(name, _tensor(name, t))[0]


def _options(gamma, bandwidth, dist, kernel, check_inputs):
    """The checked options, and the cost function when dist is a callable
    (x, y) → (B, N, M) rather than the name of a built-in cost."""
    if callable(dist):
        return options(gamma, bandwidth, "sqeuclidean", kernel, check_inputs=check_inputs), dist
    return options(gamma, bandwidth, dist, kernel, check_inputs=check_inputs), None


def _check_fused(fused) -> None:
    # sdtw-cuda-torch's choice of whether to build the cost tensor. softwave
    # never builds it for a built-in cost, so there is nothing to choose:
    # the flag is only checked, and fused=True works on the CPU too.
    if fused is not None and not isinstance(fused, bool):
        raise TypeError(f"softwave: fused must be None, True or False (got {type(fused).__name__})")


def _user_cost(dist_func: Callable, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    cost = dist_func(a, b)
    want = (a.shape[0], a.shape[1], b.shape[1])
    if not isinstance(cost, torch.Tensor) or tuple(cost.shape) != want:
        got = tuple(cost.shape) if isinstance(cost, torch.Tensor) else type(cost).__name__
        raise ValueError(f"softwave: dist(x, y) must return a (B, N, M) = {want} tensor (got {got})")
    return cost


def _cost_values(cost, opts: Options, lengths_x, lengths_y) -> torch.Tensor:
    _compute_dtype(cost)
    _check_device(cost)
    return ops.cost_values(cost, opts, *_lengths(cost, lengths_x, lengths_y))


def _series_values(x3, y3, opts: Options, divergence: bool, dist_func: Optional[Callable], lengths_x, lengths_y):
    """(B,) Soft-DTW values (or divergences) of (B, N, d) / (B, M, d) batches,
    differentiable w.r.t. x3 and y3."""
    if dist_func is not None:  # the user's cost tensor: autograd flows through dist_func
        check_batches(x3.shape, y3.shape)  # named as x and y, not as the cost tensor

        def sdtw(a, b, lengths_a, lengths_b):
            return _cost_values(_user_cost(dist_func, a, b), opts, lengths_a, lengths_b)

        values = sdtw(x3, y3, lengths_x, lengths_y)
        if divergence:
            values = values - 0.5 * (sdtw(x3, x3, lengths_x, lengths_x) + sdtw(y3, y3, lengths_y, lengths_y))
        return values
    _compute_dtype(x3, y3)
    _check_device(x3)
    check_batches(x3.shape, y3.shape)
    return ops.soft_dtw_values(x3, y3, opts, divergence, *_lengths(x3, lengths_x, lengths_y))


def _pair_values(x, y, divergence, gamma, bandwidth, dist, lengths_x, lengths_y, kernel, check_inputs):
    """soft_dtw and soft_dtw_divergence: (B,) for batches, a scalar for one pair."""
    opts, dist_func = _options(gamma, bandwidth, dist, kernel, check_inputs)
    x3, y3, single = _batched(x, y)
    values = _series_values(x3, y3, opts, divergence, dist_func, lengths_x, lengths_y)
    return values[0] if single else values


def soft_dtw(x: torch.Tensor, y: torch.Tensor, gamma: float = 1.0, *, bandwidth=None,
             dist: Union[str, Callable] = "sqeuclidean", lengths_x=None, lengths_y=None,
             kernel: str = "automatic", check_inputs: Optional[bool] = None) -> torch.Tensor:
    """Soft-DTW values sdtw_γ(x_b, y_b), differentiable w.r.t. x and y.

    x: (B, N, d), y: (B, M, d) → (B,); one pair of series, (N, d) and (M, d)
    or (N,) and (M,), → a scalar (SoftDTW and softdtw give (1,) instead).
    bandwidth: Sakoe–Chiba band, read as the peers read it: cells with
    |i − j| ≤ bandwidth are kept (a float is floored: 0.5 keeps the diagonal
    only; for N ≠ M the band follows the diagonal of the N×M table); None or
    0 means no band.
    dist: 'sqeuclidean', 'l1', 'cosine', or a callable dist(x, y) → (B, N, M)
    cost tensor (autograd then flows through it). lengths_x / lengths_y:
    per-pair lengths (B,) of padded batches. gamma = 0 is hard DTW (its
    gradient follows the optimal path). check_inputs: refuse non-finite
    inputs and out-of-range lengths with a ValueError; None (default) checks
    CPU tensors only, since on CUDA the check waits for the stream (unchecked,
    lengths are clamped into range and a NaN makes its pair's value NaN).
    """
    return _pair_values(x, y, False, gamma, bandwidth, dist, lengths_x, lengths_y, kernel, check_inputs)


def soft_dtw_divergence(x: torch.Tensor, y: torch.Tensor, gamma: float = 1.0, *, bandwidth=None,
                        dist: Union[str, Callable] = "sqeuclidean", lengths_x=None, lengths_y=None,
                        kernel: str = "automatic", check_inputs: Optional[bool] = None) -> torch.Tensor:
    """Soft-DTW divergence sdtw(x, y) − ½ sdtw(x, x) − ½ sdtw(y, y): ≥ 0 and
    zero iff x = y (Blondel et al. 2021); N ≠ M is fine. Shapes and
    arguments as in soft_dtw."""
    return _pair_values(x, y, True, gamma, bandwidth, dist, lengths_x, lengths_y, kernel, check_inputs)


def soft_dtw_cost(cost: torch.Tensor, gamma: float = 1.0, *, bandwidth=None, lengths_x=None, lengths_y=None,
                  kernel: str = "automatic", check_inputs: Optional[bool] = None) -> torch.Tensor:
    """Soft-DTW on a cost tensor C: (B, N, M) → (B,), or (N, M) → a scalar;
    differentiable w.r.t. C (the gradient is the expected alignment)."""
    opts = options(gamma, bandwidth, "sqeuclidean", kernel, check_inputs=check_inputs)
    if not isinstance(cost, torch.Tensor):
        raise TypeError(f"softwave: cost must be a torch.Tensor (got {type(cost).__name__})")
    if cost.ndim not in (2, 3):
        raise ValueError(f"softwave: cost must be (B, N, M) or (N, M) (got {cost.ndim} dimensions)")
    single = cost.ndim == 2
    values = _cost_values(cost.unsqueeze(0) if single else cost, opts, lengths_x, lengths_y)
    return values[0] if single else values


def soft_dtw_alignment(x: torch.Tensor, y: torch.Tensor, gamma: float = 1.0, *, bandwidth=None,
                       dist: str = "sqeuclidean", lengths_x=None, lengths_y=None,
                       kernel: str = "automatic", check_inputs: Optional[bool] = None) -> torch.Tensor:
    """Expected alignment E (B, N, M) (or (N, M) for one pair): entries in
    [0, 1], zero outside each pair's lengths; gamma = 0 gives the optimal
    path's indicator. Not differentiable (returned detached)."""
    opts = options(gamma, bandwidth, dist, kernel, check_inputs=check_inputs)
    x3, y3, single = _batched(x, y)
    _compute_dtype(x3, y3)
    _check_device(x3)
    check_batches(x3.shape, y3.shape)
    lx, ly = _lengths(x3, lengths_x, lengths_y)
    _, _, _, e = ops.soft_dtw(x3.detach(), y3.detach(), opts, alignment=True, lengths_x=lx, lengths_y=ly)
    return e[0] if single else e


def pairwise(x: torch.Tensor, y: Optional[torch.Tensor] = None, gamma: float = 1.0, *, divergence: bool = False,
             bandwidth=None, dist: str = "sqeuclidean", lengths_x=None, lengths_y=None,
             kernel: str = "automatic", check_inputs: Optional[bool] = None) -> torch.Tensor:
    """All-pairs matrix (B1, B2) of Soft-DTW values (or divergences) between
    x: (B1, N, d) and y: (B2, M, d) (default y = x); (B, N) means univariate
    series. Differentiable; forward memory does not grow with B1·B2·N·M."""
    opts = options(gamma, bandwidth, dist, kernel, check_inputs=check_inputs)
    if y is None:
        y, lengths_y = x, (lengths_x if lengths_y is None else lengths_y)
    for name, t in (("x", x), ("y", y)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"softwave: {name} must be a torch.Tensor (got {type(t).__name__})")
        if t.ndim not in (2, 3):
            raise ValueError(f"softwave: {name} must be (B, N, d) or (B, N) (got {t.ndim} dimensions)")
    x3 = x.unsqueeze(-1) if x.ndim == 2 else x
    y3 = y.unsqueeze(-1) if y.ndim == 2 else y
    _compute_dtype(x3, y3)
    _check_device(x3)
    check_extents("x", x3.shape, ("N", "d"))
    check_extents("y", y3.shape, ("M", "d"))
    return ops.pairwise_matrix(x3, y3, opts, divergence, *_lengths(x3, lengths_x, lengths_y))


def dtw(x: torch.Tensor, y: torch.Tensor, *, bandwidth=None, dist: str = "sqeuclidean", lengths_x=None,
        lengths_y=None, return_path: bool = True, check_inputs: Optional[bool] = None):
    """Hard DTW: values ((B,) or a scalar, differentiable along the optimal
    path) and, with return_path, the warping paths: a list of (K_b, 2) int64
    tensors of 0-based (i, j) from (0, 0) to (N_b − 1, M_b − 1) (one tensor for
    a single pair). Ties go diagonal, then up, then left."""
    opts = options(0.0, bandwidth, dist, check_inputs=check_inputs)
    x3, y3, single = _batched(x, y)
    values = _series_values(x3, y3, opts, False, None, lengths_x, lengths_y)
    if not return_path:
        return values[0] if single else values
    _, path, length = ops.dtw_path(x3.detach(), y3.detach(), opts, *_lengths(x3, lengths_x, lengths_y))
    counts = length.tolist()
    paths = [path[b, : counts[b]].long() for b in range(path.shape[0])]
    return (values[0], paths[0]) if single else (values, paths)


def nearest_neighbours(x: torch.Tensor, y: torch.Tensor, k: int = 1, *, bandwidth=None, dist: str = "sqeuclidean",
                       lengths_x=None, lengths_y=None, check_inputs: Optional[bool] = None,
                       return_counts: bool = False):
    """Exact k-nearest neighbours under hard DTW (softwave.numpy's, on the
    tensors' device): indices (B1, k) int64 and distances (B1, k), nearest
    first, ties to the lower index, for x (B1, N, d) against y (B2, M, d);
    (B, N) means univariate series. Not differentiable (the distances are
    detached); with return_counts also the search's counts (a dict)."""
    opts = options(0.0, bandwidth, dist, check_inputs=check_inputs)
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"softwave: k must be an integer (got {type(k).__name__})")
    for name, t in (("x", x), ("y", y)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"softwave: {name} must be a torch.Tensor (got {type(t).__name__})")
        if t.ndim not in (2, 3):
            raise ValueError(f"softwave: {name} must be (B, N, d) or (B, N) (got {t.ndim} dimensions)")
    x3 = x.detach().unsqueeze(-1) if x.ndim == 2 else x.detach()
    y3 = y.detach().unsqueeze(-1) if y.ndim == 2 else y.detach()
    dtype = _compute_dtype(x3, y3)
    if dtype not in (torch.float32, torch.float64):
        dtype = torch.float32  # the search takes float32 or float64
    _check_device(x3)
    if not 1 <= k <= y3.shape[0]:
        raise ValueError(f"softwave: k must be in [1, {y3.shape[0]}] (the number of series in y; got {k})")
    indices, distances, counts = _engine.nearest_neighbours(
        ops.adapter, x3.to(dtype).contiguous(), y3.to(dtype).contiguous(), k, opts,
        lengths_x=ops.lengths_of(lengths_x, x3), lengths_y=ops.lengths_of(lengths_y, x3))
    return (indices, distances, counts) if return_counts else (indices, distances)


class SoftDTW(torch.nn.Module):
    """Soft-DTW loss between batches of series, a drop-in for the peers'
    modules: ``SoftDTW(gamma=1.0, bandwidth=None, normalize=False,
    dist="sqeuclidean", fused=None)`` as in sdtw-cuda-torch, and
    ``SoftDTW(use_cuda, gamma, normalize, bandwidth, dist_func)`` as in
    pytorch-softdtw-cuda (tslearn's SoftDTWLossPyTorch(gamma, normalize,
    dist_func) too).

    forward(x, y) → (B,) values for x (B, N, d) and y (B, M, d); an
    unbatched series, (N, d) or (N,), is read as a batch of one, as in
    sdtw-cuda-torch, so one pair gives shape (1,). normalize=True returns
    the Soft-DTW divergence (works for N ≠ M, unlike the peers); gamma = 0 is
    hard DTW (the peers refuse it). use_cuda is accepted for compatibility:
    the computation runs where the tensors are. dist: a built-in cost's name
    ('sq_euclidean' and 'squared_euclidean' are read as 'sqeuclidean') or a
    callable; dist_func(x, y) → (B, N, M) gives a custom cost (autograd flows
    through it). fused is accepted and ignored (softwave never builds the
    B×N×M cost tensor for the built-in costs). check_inputs: as in soft_dtw
    (None: check CPU tensors, not CUDA ones, which would wait for the stream
    on every call).
    """

    def __init__(self, use_cuda: Optional[bool] = None, gamma: float = 1.0, normalize: bool = False,
                 bandwidth=None, dist_func: Optional[Callable] = None, *, dist: Union[str, Callable] = "sqeuclidean",
                 fused: Optional[bool] = None, kernel: str = "automatic",
                 check_inputs: Optional[bool] = None):
        super().__init__()
        if use_cuda is not None and not isinstance(use_cuda, bool):
            raise TypeError(
                "softwave: the first positional argument of SoftDTW is use_cuda (a bool), as in "
                f"pytorch-softdtw-cuda (got {type(use_cuda).__name__}); pass gamma=... by keyword"
            )
        if dist_func is not None and not callable(dist_func):
            raise TypeError("softwave: dist_func must be callable (x, y) -> (B, N, M)")
        _check_fused(fused)
        self._options, cost_function = _options(gamma, bandwidth, dist, kernel, check_inputs)
        if cost_function is not None and dist_func is not None:
            raise TypeError("softwave: pass the cost function as dist or as dist_func, not both")
        self.use_cuda = use_cuda
        self.normalize = bool(normalize)
        self.dist_func = dist_func if dist_func is not None else cost_function
        self.fused = fused
        self.gamma, self.bandwidth, self.dist = self._options.gamma, bandwidth, dist

    def forward(self, x: torch.Tensor, y: torch.Tensor, lengths_x=None, lengths_y=None) -> torch.Tensor:
        return _series_values(_batch_of_pairs("x", x), _batch_of_pairs("y", y), self._options, self.normalize,
                              self.dist_func, lengths_x, lengths_y)

    def extra_repr(self) -> str:
        return f"gamma={self.gamma}, bandwidth={self.bandwidth}, normalize={self.normalize}, dist={self.dist!r}"


def softdtw(x: torch.Tensor, y: torch.Tensor, *, gamma: float = 1.0, bandwidth=None, normalize: bool = False,
            dist: Union[str, Callable] = "sqeuclidean", fused: Optional[bool] = None, lengths_x=None,
            lengths_y=None, kernel: str = "automatic", check_inputs: Optional[bool] = None) -> torch.Tensor:
    """sdtw-cuda-torch's functional entry point: ``SoftDTW(gamma=...,
    bandwidth=..., normalize=..., dist=..., fused=...)(x, y)``, with the same
    shapes ((B,), or (1,) for one unbatched pair) and arguments; the rest are
    soft_dtw's."""
    _check_fused(fused)
    opts, dist_func = _options(gamma, bandwidth, dist, kernel, check_inputs)
    return _series_values(_batch_of_pairs("x", x), _batch_of_pairs("y", y), opts, bool(normalize), dist_func,
                          lengths_x, lengths_y)


def softdtw_barycenter(X: torch.Tensor, *, gamma: float = 1.0, weights=None, max_iter: int = 100, lr: float = 0.1,
                       init: Optional[torch.Tensor] = None, device=None, verbose: bool = False,
                       fused: Optional[bool] = None, early_stopping: bool = True, patience: int = 10,
                       tol: float = 1e-5, method: str = "lbfgs", bandwidth=None,
                       dist: str = "sqeuclidean") -> torch.Tensor:
    """sdtw-cuda-torch's barycenter entry point on softwave.barycenter: the
    series z minimising Σ_b w_b sdtw_γ(z, X_b) for X (B, N, d), returned
    detached, (N, d) (or init's length), on X's device (or `device`).

    The optimiser is softwave's L-BFGS unless method='adam', whose step is lr
    (the peer runs Adam with cosine annealing). init: None (the weighted
    mean of X) or an (L, d) tensor. tol: softwave's stopping rule (relative
    decrease of the objective, see softwave.barycenter); early_stopping=False
    runs until max_iter or until the objective stops changing. patience and
    fused are accepted and have nothing to set; verbose prints the
    optimiser's report.
    """
    _tensor("X", X)
    _check_fused(fused)
    optional_int("patience", patience, 1)
    if device is not None:
        X = X.to(device)
    z, report = barycenter(X, gamma, weights, method=method, max_iter=max_iter,
                           tol=tol if early_stopping else sys.float_info.min, init=init,
                           bandwidth=bandwidth, dist=dist, learning_rate=lr, return_report=True)
    if verbose:
        print(f"softwave.torch.softdtw_barycenter: {report}")
    return z


def softdtw_barycenter_cpu(X: torch.Tensor, **kwargs) -> torch.Tensor:
    """sdtw-cuda-torch's softdtw_barycenter_cpu: softdtw_barycenter on the CPU."""
    return softdtw_barycenter(X, device="cpu", **kwargs)
