"""PyTorch front end: a drop-in ``SoftDTW`` module and functions with autograd.

Tensors stay where they are (CPU, or CUDA in a CUDA build of softwave) and
are passed to the core without copies; CUDA work is queued on the current
stream of the tensors' device (``torch.cuda.current_stream()``). float32 and
float64 run as given; float16 and bfloat16 are read as they are (no float32
copy is made) and computed with float32 accumulation: values come out in
float32, gradients in the input dtype, rounded once.

When an input requires grad, the forward computes the gradients too, in the
same fused pass (no B×N×M table is ever kept); backward only scales them by
the incoming gradient. Double backward is not supported.

Example::

    import torch
    from softwave.torch import SoftDTW
    x = torch.randn(32, 512, 64, device="cuda", requires_grad=True)
    y = torch.randn(32, 512, 64, device="cuda")
    loss = SoftDTW(gamma=0.1)(x, y).mean()
    loss.backward()
"""

from __future__ import annotations

from typing import Callable, Optional, Union

import torch

from . import _engine
from ._common import Options, options

__all__ = [
    "SoftDTW",
    "soft_dtw",
    "soft_dtw_divergence",
    "soft_dtw_alignment",
    "soft_dtw_cost",
    "pairwise",
    "dtw",
]

_FLOATS = (torch.float32, torch.float64)
_HALVES = (torch.float16, torch.bfloat16)


class _TorchAdapter(_engine.Adapter):
    def empty(self, shape, like, dtype=None):
        return torch.empty(tuple(shape), dtype=like.dtype if dtype is None else dtype, device=like.device)

    def int32(self, values, like):
        lengths = torch.as_tensor(values, device=like.device)
        if lengths.dtype.is_floating_point or lengths.dtype == torch.bool or lengths.is_complex():
            raise TypeError(f"softwave: lengths must be integers (got {lengths.dtype})")
        return lengths.to(torch.int32).contiguous()

    def stream(self, like):
        if like.is_cuda:
            return torch.cuda.current_stream(like.device).cuda_stream
        return 0

    def checks_by_default(self, like):
        # On the GPU a data check waits for the stream, like .item() would:
        # off by default there, as in torch's own operators.
        return not like.is_cuda

    def int32_dtype(self):
        return torch.int32

    def value_dtype(self, like):
        return _value_dtype(like.dtype)


_adapter = _TorchAdapter()


def _compute_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """The float type the core runs in for these inputs."""
    for name, t in zip(("x", "y"), tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"softwave: {name} must be a torch.Tensor (got {type(t).__name__})")
        if not (t.dtype.is_floating_point):
            raise TypeError(f"softwave: {name} must be a floating-point tensor (got {t.dtype})")
    if len(tensors) == 2:
        x, y = tensors
        if x.device != y.device:
            raise ValueError(f"softwave: x is on {x.device} but y is on {y.device}; move them to one device")
        if x.dtype != y.dtype:
            raise TypeError(f"softwave: x is {x.dtype} but y is {y.dtype}; pass one dtype")
    return tensors[0].dtype


def _value_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of values (and of their incoming gradients) for inputs of dtype."""
    return torch.float32 if dtype in _HALVES else dtype


def _prepare(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t.detach().to(dtype).contiguous()


def _check_device(t: torch.Tensor) -> None:
    if t.is_cuda and not _engine._core.has_cuda():
        raise ValueError(
            "softwave: the tensors are on CUDA but this softwave was built for the CPU only "
            "(pip install . with SOFTWAVE_KOKKOS_BACKEND=CUDA for a CUDA build)"
        )


class _SoftDTWFunction(torch.autograd.Function):
    """values = sdtw(x, y) (or the divergence); ∇ computed in the forward."""

    @staticmethod
    def forward(ctx, x, y, lengths_x, lengths_y, opts: Options, divergence: bool):
        dtype = _compute_dtype(x, y)
        _check_device(x)
        want_x, want_y = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        values, gx, gy, _ = _engine.soft_dtw(
            _adapter, _prepare(x, dtype), _prepare(y, dtype), opts, divergence=divergence,
            grad_x=want_x, grad_y=want_y, lengths_x=lengths_x, lengths_y=lengths_y,
        )
        ctx.save_for_backward(gx if want_x else None, gy if want_y else None)
        ctx.input_dtypes = (x.dtype, y.dtype)
        return values

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_values):
        gx, gy = ctx.saved_tensors
        scale = grad_values.reshape(-1, 1, 1)
        grad_x = None if gx is None else (gx * scale.to(gx.dtype)).to(ctx.input_dtypes[0])
        grad_y = None if gy is None else (gy * scale.to(gy.dtype)).to(ctx.input_dtypes[1])
        return grad_x, grad_y, None, None, None, None


class _SoftDTWCostFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, cost, lengths_x, lengths_y, opts: Options):
        dtype = _compute_dtype(cost)
        _check_device(cost)
        values, gc = _engine.soft_dtw_cost(_adapter, _prepare(cost, dtype), opts, grad=ctx.needs_input_grad[0],
                                           lengths_x=lengths_x, lengths_y=lengths_y)
        ctx.save_for_backward(gc)
        ctx.input_dtype = cost.dtype
        return values

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_values):
        (gc,) = ctx.saved_tensors
        if gc is None:
            return None, None, None, None
        return (gc * grad_values.reshape(-1, 1, 1).to(gc.dtype)).to(ctx.input_dtype), None, None, None


def _batched(x: torch.Tensor, y: torch.Tensor):
    x3, single = _engine.as_batch("x", x)
    y3, _ = _engine.as_batch("y", y, x.ndim)
    return x3, y3, single


def _wants_grad(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _series_call(x, y, opts, divergence, lengths_x, lengths_y):
    x3, y3, single = _batched(x, y)
    if _wants_grad(x3, y3):
        values = _SoftDTWFunction.apply(x3, y3, lengths_x, lengths_y, opts, divergence)
    else:  # inference: values only, without autograd's bookkeeping
        dtype = _compute_dtype(x3, y3)
        _check_device(x3)
        values, *_ = _engine.soft_dtw(_adapter, _prepare(x3, dtype), _prepare(y3, dtype), opts,
                                      divergence=divergence, lengths_x=lengths_x, lengths_y=lengths_y)
    return values[0] if single else values


def soft_dtw(x: torch.Tensor, y: torch.Tensor, gamma: float = 1.0, *, bandwidth=None,
             dist: Union[str, Callable] = "sqeuclidean", lengths_x=None, lengths_y=None,
             kernel: str = "automatic", check_inputs: Optional[bool] = None) -> torch.Tensor:
    """Soft-DTW values sdtw_γ(x_b, y_b), differentiable w.r.t. x and y.

    x: (B, N, d), y: (B, M, d) → (B,); (N, d) / (N,) single series → a scalar.
    bandwidth: Sakoe–Chiba half-width (cells); None or 0 means no band.
    dist: 'sqeuclidean', 'l1', 'cosine', or a callable dist(x, y) → (B, N, M)
    cost tensor (autograd then flows through it). lengths_x / lengths_y:
    per-pair lengths (B,) of padded batches. gamma = 0 is hard DTW (its
    gradient follows the optimal path). check_inputs: refuse non-finite
    inputs and out-of-range lengths with a ValueError; None (default) checks
    CPU tensors only, since on CUDA the check waits for the stream (unchecked,
    lengths are clamped into range and a NaN makes its pair's value NaN).
    """
    if callable(dist):
        x3, y3, single = _batched(x, y)
        values = soft_dtw_cost(dist(x3, y3), gamma, bandwidth=bandwidth, lengths_x=lengths_x,
                               lengths_y=lengths_y, kernel=kernel, check_inputs=check_inputs)
        return values[0] if single else values
    return _series_call(x, y, options(gamma, bandwidth, dist, kernel, check_inputs=check_inputs), False,
                        lengths_x, lengths_y)


def soft_dtw_divergence(x: torch.Tensor, y: torch.Tensor, gamma: float = 1.0, *, bandwidth=None,
                        dist: Union[str, Callable] = "sqeuclidean", lengths_x=None, lengths_y=None,
                        kernel: str = "automatic", check_inputs: Optional[bool] = None) -> torch.Tensor:
    """Soft-DTW divergence sdtw(x, y) − ½ sdtw(x, x) − ½ sdtw(y, y): ≥ 0 and
    zero iff x = y (Blondel et al. 2021); N ≠ M is fine."""
    if callable(dist):
        x3, y3, single = _batched(x, y)
        xy = soft_dtw_cost(dist(x3, y3), gamma, bandwidth=bandwidth, lengths_x=lengths_x, lengths_y=lengths_y,
                           kernel=kernel, check_inputs=check_inputs)
        xx = soft_dtw_cost(dist(x3, x3), gamma, bandwidth=bandwidth, lengths_x=lengths_x, lengths_y=lengths_x,
                           kernel=kernel, check_inputs=check_inputs)
        yy = soft_dtw_cost(dist(y3, y3), gamma, bandwidth=bandwidth, lengths_x=lengths_y, lengths_y=lengths_y,
                           kernel=kernel, check_inputs=check_inputs)
        values = xy - 0.5 * (xx + yy)
        return values[0] if single else values
    return _series_call(x, y, options(gamma, bandwidth, dist, kernel, check_inputs=check_inputs), True,
                        lengths_x, lengths_y)


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
    values = _SoftDTWCostFunction.apply(cost.unsqueeze(0) if single else cost, lengths_x, lengths_y, opts)
    return values[0] if single else values


def soft_dtw_alignment(x: torch.Tensor, y: torch.Tensor, gamma: float = 1.0, *, bandwidth=None,
                       dist: str = "sqeuclidean", lengths_x=None, lengths_y=None,
                       kernel: str = "automatic", check_inputs: Optional[bool] = None) -> torch.Tensor:
    """Expected alignment E (B, N, M) (or (N, M) for one pair): entries in
    [0, 1], zero outside each pair's lengths; gamma = 0 gives the optimal
    path's indicator. Not differentiable (returned detached)."""
    opts = options(gamma, bandwidth, dist, kernel, check_inputs=check_inputs)
    dtype = _compute_dtype(x, y)
    _check_device(x)
    x3, y3, single = _batched(x, y)
    _, _, _, e = _engine.soft_dtw(_adapter, _prepare(x3, dtype), _prepare(y3, dtype), opts, alignment=True,
                                  lengths_x=lengths_x, lengths_y=lengths_y)
    return e[0] if single else e


class _PairwiseFunction(torch.autograd.Function):
    """D[i, j] = sdtw(x_i, y_j). The backward pulls Σ G_ij ∇ sdtw(x_i, y_j)
    through the pair kernels in chunks, so memory stays bounded."""

    @staticmethod
    def forward(ctx, x, y, lengths_x, lengths_y, opts: Options, divergence: bool):
        dtype = _compute_dtype(x, y)
        _check_device(x)
        xd, yd = _prepare(x, dtype), _prepare(y, dtype)
        lx = None if lengths_x is None else _adapter.int32(lengths_x, x)
        ly = None if lengths_y is None else _adapter.int32(lengths_y, x)
        matrix = _engine.pairwise(_adapter, xd, yd, opts, divergence=divergence, lengths_x=lx, lengths_y=ly)
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
            ctx.save_for_backward(xd, yd, lx, ly)
        ctx.opts, ctx.divergence, ctx.input_dtypes = opts, divergence, (x.dtype, y.dtype)
        return matrix

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_matrix):
        x, y, lx, ly = ctx.saved_tensors
        b1, b2 = x.shape[0], y.shape[0]
        # Summed over chunks in the value dtype (float32 for 16-bit inputs).
        wide = _value_dtype(x.dtype)
        grad_x = torch.zeros(x.shape, dtype=wide, device=x.device) if ctx.needs_input_grad[0] else None
        grad_y = torch.zeros(y.shape, dtype=wide, device=y.device) if ctx.needs_input_grad[1] else None
        weights = grad_matrix.to(wide).reshape(-1).contiguous()
        # Pairs per chunk: keep the expanded copies of x and y near 256 MiB.
        pair_bytes = 2 * (x[0].numel() + y[0].numel()) * x.element_size()
        chunk = max(1, min(b1 * b2, (256 << 20) // max(1, pair_bytes)))
        for start in range(0, b1 * b2, chunk):
            index = torch.arange(start, min(start + chunk, b1 * b2), device=x.device)
            i, j = index // b2, index % b2
            _, gx, gy, _ = _engine.soft_dtw(
                _adapter, x.index_select(0, i), y.index_select(0, j), ctx.opts, divergence=ctx.divergence,
                grad_x=grad_x is not None, grad_y=grad_y is not None,
                grad_output=weights[start : start + index.numel()].contiguous(),
                lengths_x=None if lx is None else lx.index_select(0, i),
                lengths_y=None if ly is None else ly.index_select(0, j),
            )
            if grad_x is not None:
                grad_x.index_add_(0, i, gx.to(wide))
            if grad_y is not None:
                grad_y.index_add_(0, j, gy.to(wide))
        return (
            None if grad_x is None else grad_x.to(ctx.input_dtypes[0]),
            None if grad_y is None else grad_y.to(ctx.input_dtypes[1]),
            None, None, None, None,
        )


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
    return _PairwiseFunction.apply(x3, y3, lengths_x, lengths_y, opts, divergence)


def dtw(x: torch.Tensor, y: torch.Tensor, *, bandwidth=None, dist: str = "sqeuclidean", lengths_x=None,
        lengths_y=None, return_path: bool = True, check_inputs: Optional[bool] = None):
    """Hard DTW: values ((B,) or a scalar, differentiable along the optimal
    path) and, with return_path, the warping paths: a list of (K_b, 2) int64
    tensors of 0-based (i, j) from (0, 0) to (N_b − 1, M_b − 1) (one tensor for
    a single pair). Ties go diagonal, then up, then left."""
    opts = options(0.0, bandwidth, dist, check_inputs=check_inputs)
    values = _series_call(x, y, opts, False, lengths_x, lengths_y)
    if not return_path:
        return values
    dtype = _compute_dtype(x, y)
    x3, y3, single = _batched(x, y)
    _, path, length = _engine.dtw_path(_adapter, _prepare(x3, dtype), _prepare(y3, dtype), opts,
                                       lengths_x=lengths_x, lengths_y=lengths_y)
    counts = length.tolist()
    paths = [path[b, : counts[b]].long() for b in range(path.shape[0])]
    return (values, paths[0]) if single else (values, paths)


class SoftDTW(torch.nn.Module):
    """Soft-DTW loss between batches of series, a drop-in for the peers'
    modules: ``SoftDTW(gamma=1.0, bandwidth=None, normalize=False,
    dist="sqeuclidean")`` as in sdtw-cuda-torch, and ``SoftDTW(use_cuda,
    gamma, normalize, bandwidth, dist_func)`` as in pytorch-softdtw-cuda.

    forward(x (B, N, d), y (B, M, d)) → (B,) values. normalize=True returns
    the Soft-DTW divergence (works for N ≠ M, unlike the peers).
    use_cuda is accepted for compatibility: the computation runs where the
    tensors are. dist_func(x, y) → (B, N, M) gives a custom cost (autograd
    flows through it). fused is accepted and ignored (softwave never builds
    the B×N×M cost tensor for the built-in costs). check_inputs: as in
    soft_dtw (None: check CPU tensors, not CUDA ones, which would wait for
    the stream on every call).
    """

    def __init__(self, use_cuda: Optional[bool] = None, gamma: float = 1.0, normalize: bool = False,
                 bandwidth=None, dist_func: Optional[Callable] = None, *, dist: str = "sqeuclidean",
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
        self.use_cuda = use_cuda
        self.normalize = bool(normalize)
        self.dist_func = dist_func
        self.fused = fused
        self._options = options(gamma, bandwidth, dist, kernel, check_inputs=check_inputs)
        self.gamma, self.bandwidth, self.dist = self._options.gamma, bandwidth, dist

    def forward(self, x: torch.Tensor, y: torch.Tensor, lengths_x=None, lengths_y=None) -> torch.Tensor:
        for name, t in (("x", x), ("y", y)):
            if not isinstance(t, torch.Tensor) or t.ndim != 3:
                shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"softwave: SoftDTW takes {name} as (B, N, d) (got {shape})")
        if self.dist_func is not None:
            function = soft_dtw_divergence if self.normalize else soft_dtw
            return function(x, y, self.gamma, bandwidth=self.bandwidth, dist=self.dist_func,
                            lengths_x=lengths_x, lengths_y=lengths_y, kernel=self._options.kernel,
                            check_inputs=self._options.check)
        return _series_call(x, y, self._options, self.normalize, lengths_x, lengths_y)

    def extra_repr(self) -> str:
        return f"gamma={self.gamma}, bandwidth={self.bandwidth}, normalize={self.normalize}, dist={self.dist!r}"
