"""softwave's PyTorch operators: every call into the core from softwave.torch.

With torch >= 2.4 the core's entry points are registered as operators
(``torch.ops.softwave.*``, through ``torch.library.custom_op``) with fake
implementations, which give their outputs' shapes without running them, and
registered autograd: ``torch.compile`` traces a model that uses softwave
through them, without a graph break. Eager Soft-DTW values go through
the operator registered in C++ (``torch.ops.softwave.soft_dtw_values``,
softwave._torch_native, with its autograd in C++) where the package was
built with one; other eager calls (and every call on older torch, such as
Debian's 1.13, which has no ``custom_op``) go through
``torch.autograd.Function``s. All of them give the same results.
Neither synchronises the host or allocates outside the stream, so a forward
and backward can be captured in a CUDA graph and replayed.

The functions below take tensors already shaped (B, N, d) (or (B, N, M) for
cost tensors) and checked options; softwave.torch does the argument reading.
"""

from __future__ import annotations

import importlib.util
import warnings
from typing import Optional, Tuple

import torch

from . import _core, _engine
from ._common import Options

HAS_CUDA = _core.has_cuda()  # read once: a call into the extension breaks torch.compile's graph
OPS = hasattr(torch.library, "custom_op") and hasattr(torch.library, "register_fake")


def _load_native():
    """softwave._torch_native attached to the core, or None where the package
    was built without torch's headers or against another torch."""
    if importlib.util.find_spec(f"{__package__}._torch_native") is None:
        return None
    try:
        from . import _torch_native
    except ImportError as error:
        warnings.warn(f"softwave: the C++ torch operators did not load ({error}); softwave.torch calls the core "
                      "through torch.autograd.Function instead (reinstall softwave against this torch)")
        return None
    _torch_native.attach(_core.torch_bridge())
    return _torch_native


NATIVE = _load_native()


def _traced() -> bool:
    """Whether torch.compile is tracing this call: it then goes through the
    registered operators. Eager calls take the direct path, since a custom
    operator's Python dispatch costs more than the whole call at small
    shapes (measured on an H100 host: 1.2 ms against 0.34 ms a training step
    at 16/128/1)."""
    return OPS and torch.compiler.is_compiling()

_HALVES = (torch.float16, torch.bfloat16)


def value_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of values (and of their incoming gradients) for inputs of dtype."""
    return torch.float32 if dtype in _HALVES else dtype


class TorchAdapter(_engine.Adapter):
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

    def int64_dtype(self):
        return torch.int64

    def value_dtype(self, like):
        return value_dtype(like.dtype)


adapter = TorchAdapter()


def lengths_of(lengths, like: torch.Tensor) -> Optional[torch.Tensor]:
    """Per-pair lengths as an int32 tensor on like's device (None: full)."""
    return None if lengths is None else adapter.int32(lengths, like)


def resolved(opts: Options, like: torch.Tensor) -> Options:
    """opts with the data check decided (None: the device's default), so
    that an operator's arguments are plain values."""
    if opts.check is not None:
        return opts
    return Options(opts.gamma, opts.dist, opts.band, opts.kernel, _engine.check_of(adapter, opts, like))


# ---------------------------------------------------------------------------
# Second derivatives: refused loudly, never silently zero.

SECOND_ORDER = (
    "softwave: second derivatives (double backward: differentiating a gradient taken with create_graph=True, "
    "as a gradient penalty or a Hessian does) are not supported: softwave's backward returns gradients computed "
    "in the forward, with no graph of their own. Use the gradient as a value (detach it, or create_graph=False), "
    "or compute the term that needs second derivatives with another implementation"
)


class _SecondOrderError(torch.autograd.Function):
    """Passes a first-order gradient through unchanged, with a grad_fn whose
    own backward raises: differentiating the gradient is an error, never a
    silent zero."""

    @staticmethod
    def forward(ctx, grad, *anchors):
        return grad.view_as(grad)

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(SECOND_ORDER)


def _anchors(needs, *inputs) -> tuple:
    """The inputs that need grad, kept (not saved: their values are never
    read, so in-place changes after the forward stay allowed) for
    _first_order. Under torch.compile none are kept: it refuses double
    backward itself."""
    if OPS and torch.compiler.is_compiling():
        return ()
    return tuple(t for t, need in zip(inputs, needs) if need)


def _first_order(anchors, grad_output, *grads):
    """The gradients a backward returns. Under create_graph=True each one is
    tied, through _SecondOrderError, to everything it depends on (the inputs
    that require grad and the incoming gradient), so that any further
    derivative of it raises."""
    if not torch.is_grad_enabled():
        return grads
    tied = [t for t in (*anchors, grad_output) if t.requires_grad]
    if not tied:
        return grads
    return tuple(None if g is None else _SecondOrderError.apply(g, *tied) for g in grads)


def _scaled(gradient: Optional[torch.Tensor], grad_values: torch.Tensor, dtype: torch.dtype):
    """∇ of Σ grad_values · values from the per-pair gradients of the values."""
    if gradient is None:
        return None
    return (gradient * grad_values.reshape(-1, 1, 1).to(gradient.dtype)).to(dtype)


# ---------------------------------------------------------------------------
# The core's calls, unregistered: the operators' bodies, and the whole path
# on torch without custom_op.


def _soft_dtw_core(x, y, grad_output, lengths_x, lengths_y, gamma, dist, band, kernel, check, divergence,
                   grad_x, grad_y, alignment):
    opts = Options(gamma, dist, band, kernel, check)
    return _engine.soft_dtw(adapter, x.contiguous(), y.contiguous(), opts, divergence=divergence, grad_x=grad_x,
                            grad_y=grad_y, alignment=alignment, grad_output=grad_output, lengths_x=lengths_x,
                            lengths_y=lengths_y)


def _cost_core(cost, grad_output, lengths_x, lengths_y, gamma, band, kernel, check, grad):
    opts = Options(gamma, "sqeuclidean", band, kernel, check)
    return _engine.soft_dtw_cost(adapter, cost.contiguous(), opts, grad=grad, grad_output=grad_output,
                                 lengths_x=lengths_x, lengths_y=lengths_y)


def _pairwise_core(x, y, lengths_x, lengths_y, gamma, dist, band, kernel, check, divergence):
    opts = Options(gamma, dist, band, kernel, check)
    return _engine.pairwise(adapter, x.contiguous(), y.contiguous(), opts, divergence=divergence,
                            lengths_x=lengths_x, lengths_y=lengths_y)


def _dtw_path_core(x, y, lengths_x, lengths_y, dist, band, check):
    opts = Options(0.0, dist, band, "automatic", check)
    return _engine.dtw_path(adapter, x.contiguous(), y.contiguous(), opts, lengths_x=lengths_x,
                            lengths_y=lengths_y)


def _none(like: torch.Tensor) -> torch.Tensor:
    """An operator's stand-in for an output that was not asked for
    (operators return tensors, never None)."""
    return like.new_empty((0,))


if OPS:

    @torch.library.custom_op("softwave::soft_dtw", mutates_args=())
    def _soft_dtw_op(x: torch.Tensor, y: torch.Tensor, grad_output: Optional[torch.Tensor],
                     lengths_x: Optional[torch.Tensor], lengths_y: Optional[torch.Tensor], gamma: float, dist: str,
                     band: int, kernel: str, check: bool, divergence: bool, grad_x: bool, grad_y: bool,
                     alignment: bool) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        values, gx, gy, e = _soft_dtw_core(x, y, grad_output, lengths_x, lengths_y, gamma, dist, band, kernel,
                                           check, divergence, grad_x, grad_y, alignment)
        return (values, _none(x) if gx is None else gx, _none(y) if gy is None else gy,
                _none(x) if e is None else e)

    @_soft_dtw_op.register_fake
    def _(x, y, grad_output, lengths_x, lengths_y, gamma, dist, band, kernel, check, divergence, grad_x, grad_y,
          alignment):
        values = x.new_empty((x.shape[0],), dtype=value_dtype(x.dtype))
        return (values, x.new_empty(x.shape) if grad_x else _none(x), y.new_empty(y.shape) if grad_y else _none(y),
                x.new_empty((x.shape[0], x.shape[1], y.shape[1])) if alignment else _none(x))

    def _soft_dtw_setup(ctx, inputs, output):
        x, y = inputs[0], inputs[1]
        ctx.save_for_backward(output[1], output[2])
        ctx.want = (inputs[11], inputs[12])
        ctx.dtypes = (x.dtype, y.dtype)
        ctx.anchors = _anchors(ctx.want, x, y)

    def _soft_dtw_backward(ctx, grad_values, *unused):
        gx, gy = ctx.saved_tensors
        with torch.no_grad():
            grad_x = _scaled(gx, grad_values, ctx.dtypes[0]) if ctx.want[0] else None
            grad_y = _scaled(gy, grad_values, ctx.dtypes[1]) if ctx.want[1] else None
        return (*_first_order(ctx.anchors, grad_values, grad_x, grad_y), *(None,) * 12)

    _soft_dtw_op.register_autograd(_soft_dtw_backward, setup_context=_soft_dtw_setup)

    @torch.library.custom_op("softwave::soft_dtw_cost", mutates_args=())
    def _cost_op(cost: torch.Tensor, grad_output: Optional[torch.Tensor], lengths_x: Optional[torch.Tensor],
                 lengths_y: Optional[torch.Tensor], gamma: float, band: int, kernel: str, check: bool,
                 grad: bool) -> Tuple[torch.Tensor, torch.Tensor]:
        values, gc = _cost_core(cost, grad_output, lengths_x, lengths_y, gamma, band, kernel, check, grad)
        return values, _none(cost) if gc is None else gc

    @_cost_op.register_fake
    def _(cost, grad_output, lengths_x, lengths_y, gamma, band, kernel, check, grad):
        values = cost.new_empty((cost.shape[0],), dtype=value_dtype(cost.dtype))
        return values, cost.new_empty(cost.shape) if grad else _none(cost)

    def _cost_setup(ctx, inputs, output):
        ctx.save_for_backward(output[1])
        ctx.want, ctx.dtype = inputs[8], inputs[0].dtype
        ctx.anchors = _anchors((ctx.want,), inputs[0])

    def _cost_backward(ctx, grad_values, unused):
        (gc,) = ctx.saved_tensors
        with torch.no_grad():
            grad_cost = _scaled(gc, grad_values, ctx.dtype) if ctx.want else None
        return (*_first_order(ctx.anchors, grad_values, grad_cost), *(None,) * 8)

    _cost_op.register_autograd(_cost_backward, setup_context=_cost_setup)

    @torch.library.custom_op("softwave::pairwise", mutates_args=())
    def _pairwise_op(x: torch.Tensor, y: torch.Tensor, lengths_x: Optional[torch.Tensor],
                     lengths_y: Optional[torch.Tensor], gamma: float, dist: str, band: int, kernel: str,
                     check: bool, divergence: bool) -> torch.Tensor:
        return _pairwise_core(x, y, lengths_x, lengths_y, gamma, dist, band, kernel, check, divergence)

    @_pairwise_op.register_fake
    def _(x, y, lengths_x, lengths_y, gamma, dist, band, kernel, check, divergence):
        return x.new_empty((x.shape[0], y.shape[0]), dtype=value_dtype(x.dtype))

    def _pairwise_setup(ctx, inputs, output):
        x, y, lengths_x, lengths_y = inputs[:4]
        ctx.save_for_backward(x, y, lengths_x, lengths_y)
        ctx.opts = Options(*inputs[4:9])
        ctx.divergence = inputs[9]
        ctx.anchors = _anchors(ctx.needs_input_grad[:2], x, y)

    def _pairwise_backward(ctx, grad_matrix):
        x, y, lengths_x, lengths_y = ctx.saved_tensors
        with torch.no_grad():
            grad_x, grad_y = pairwise_gradients(x, y, lengths_x, lengths_y, ctx.opts, ctx.divergence, grad_matrix,
                                                ctx.needs_input_grad[0], ctx.needs_input_grad[1], True)
        return (*_first_order(ctx.anchors, grad_matrix, grad_x, grad_y), *(None,) * 8)

    _pairwise_op.register_autograd(_pairwise_backward, setup_context=_pairwise_setup)

    @torch.library.custom_op("softwave::dtw_path", mutates_args=())
    def _dtw_path_op(x: torch.Tensor, y: torch.Tensor, lengths_x: Optional[torch.Tensor],
                     lengths_y: Optional[torch.Tensor], dist: str, band: int,
                     check: bool) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return _dtw_path_core(x, y, lengths_x, lengths_y, dist, band, check)

    @_dtw_path_op.register_fake
    def _(x, y, lengths_x, lengths_y, dist, band, check):
        batch = x.shape[0]
        return (x.new_empty((batch,), dtype=value_dtype(x.dtype)),
                x.new_empty((batch, x.shape[1] + y.shape[1] - 1, 2), dtype=torch.int32),
                x.new_empty((batch,), dtype=torch.int32))


# ---------------------------------------------------------------------------
# What softwave.torch calls.


def soft_dtw(x, y, opts: Options, *, divergence=False, grad_x=False, grad_y=False, alignment=False,
             grad_output=None, lengths_x=None, lengths_y=None, through_ops=None):
    """The core's soft_dtw on (B, N, d) / (B, M, d) tensors, outside autograd:
    values (B,) and, as asked, ∇x, ∇y (of Σ grad_output·values) and E (None
    where not asked). lengths: int32 tensors or None. through_ops: call the
    registered operator (default: while torch.compile traces)."""
    o = resolved(opts, x)
    args = (x, y, grad_output, lengths_x, lengths_y, o.gamma, o.dist, o.band, o.kernel, o.check, divergence,
            grad_x, grad_y, alignment)
    if not (_traced() if through_ops is None else through_ops):
        return _soft_dtw_core(*args)
    with torch.no_grad():
        values, gx, gy, e = torch.ops.softwave.soft_dtw(*args)
    return values, gx if grad_x else None, gy if grad_y else None, e if alignment else None


class _SoftDTWFunction(torch.autograd.Function):
    """values = sdtw(x, y) (or the divergence); ∇ computed in the forward
    (torch without custom_op)."""

    @staticmethod
    def forward(ctx, x, y, lengths_x, lengths_y, opts: Options, divergence: bool):
        want = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        values, gx, gy, _ = _soft_dtw_core(x, y, None, lengths_x, lengths_y, opts.gamma, opts.dist, opts.band,
                                           opts.kernel, opts.check, divergence, want[0], want[1], False)
        ctx.save_for_backward(gx, gy)
        ctx.dtypes = (x.dtype, y.dtype)
        ctx.anchors = _anchors(want, x, y)
        return values

    @staticmethod
    def backward(ctx, grad_values):
        gx, gy = ctx.saved_tensors
        with torch.no_grad():
            grad_x = _scaled(gx, grad_values, ctx.dtypes[0])
            grad_y = _scaled(gy, grad_values, ctx.dtypes[1])
        return (*_first_order(ctx.anchors, grad_values, grad_x, grad_y), None, None, None, None)


def soft_dtw_values(x, y, opts: Options, divergence: bool, lengths_x, lengths_y) -> torch.Tensor:
    """(B,) values (or divergences), differentiable w.r.t. x and y; the
    gradients are computed in the same pass where an input requires grad."""
    o = resolved(opts, x)
    if NATIVE is not None and not _traced() and (NATIVE.cuda or not x.is_cuda):
        return torch.ops.softwave.soft_dtw_values(x, y, lengths_x, lengths_y, o.gamma, o.dist, o.band, o.kernel,
                                                  o.check, divergence)
    want_x, want_y = (torch.is_grad_enabled() and t.requires_grad for t in (x, y))
    if not (want_x or want_y):
        return soft_dtw(x, y, o, divergence=divergence, lengths_x=lengths_x, lengths_y=lengths_y)[0]
    if not _traced():
        return _SoftDTWFunction.apply(x, y, lengths_x, lengths_y, o, divergence)
    return torch.ops.softwave.soft_dtw(x, y, None, lengths_x, lengths_y, o.gamma, o.dist, o.band, o.kernel, o.check,
                                       divergence, want_x, want_y, False)[0]


class _SoftDTWCostFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, cost, lengths_x, lengths_y, opts: Options):
        want = ctx.needs_input_grad[0]
        values, gc = _cost_core(cost, None, lengths_x, lengths_y, opts.gamma, opts.band, opts.kernel, opts.check,
                                want)
        ctx.save_for_backward(gc)
        ctx.dtype = cost.dtype
        ctx.anchors = _anchors((want,), cost)
        return values

    @staticmethod
    def backward(ctx, grad_values):
        (gc,) = ctx.saved_tensors
        with torch.no_grad():
            grad_cost = _scaled(gc, grad_values, ctx.dtype)
        return (*_first_order(ctx.anchors, grad_values, grad_cost), None, None, None)


def cost_values(cost, opts: Options, lengths_x, lengths_y) -> torch.Tensor:
    """(B,) Soft-DTW values of a (B, N, M) cost tensor, differentiable w.r.t. it."""
    o = resolved(opts, cost)
    want = torch.is_grad_enabled() and cost.requires_grad
    if not _traced():
        return _SoftDTWCostFunction.apply(cost, lengths_x, lengths_y, o)
    return torch.ops.softwave.soft_dtw_cost(cost, None, lengths_x, lengths_y, o.gamma, o.band, o.kernel, o.check,
                                            want)[0]


def pairwise_gradients(x, y, lengths_x, lengths_y, opts: Options, divergence: bool, grad_matrix, want_x: bool,
                       want_y: bool, through_ops: bool):
    """Σ_ij G_ij ∇ sdtw(x_i, y_j), pulled through the pair kernels in chunks
    so that memory stays bounded. through_ops: through the registered
    soft_dtw operator (the pairwise operator's backward, which torch.compile
    and opcheck trace with stand-in tensors) or directly."""
    b1, b2 = x.shape[0], y.shape[0]
    # Summed over chunks in the value dtype (float32 for 16-bit inputs).
    wide = value_dtype(x.dtype)
    grad_x = torch.zeros(x.shape, dtype=wide, device=x.device) if want_x else None
    grad_y = torch.zeros(y.shape, dtype=wide, device=y.device) if want_y else None
    weights = grad_matrix.to(wide).reshape(-1).contiguous()
    # Pairs per chunk: keep the expanded copies of x and y near 256 MiB.
    pair_bytes = 2 * (x.shape[1] * x.shape[2] + y.shape[1] * y.shape[2]) * x.element_size()
    chunk = max(1, min(b1 * b2, (256 << 20) // max(1, pair_bytes)))
    for start in range(0, b1 * b2, chunk):
        index = torch.arange(start, min(start + chunk, b1 * b2), device=x.device)
        i, j = index // b2, index % b2
        _, gx, gy, _ = soft_dtw(
            x.index_select(0, i), y.index_select(0, j), opts, divergence=divergence, grad_x=want_x, grad_y=want_y,
            grad_output=weights[start : start + index.numel()].contiguous(),
            lengths_x=None if lengths_x is None else lengths_x.index_select(0, i),
            lengths_y=None if lengths_y is None else lengths_y.index_select(0, j), through_ops=through_ops,
        )
        if grad_x is not None:
            grad_x.index_add_(0, i, gx.to(wide))
        if grad_y is not None:
            grad_y.index_add_(0, j, gy.to(wide))
    return (None if grad_x is None else grad_x.to(x.dtype), None if grad_y is None else grad_y.to(y.dtype))


class _PairwiseFunction(torch.autograd.Function):
    """D[i, j] = sdtw(x_i, y_j) (torch without custom_op)."""

    @staticmethod
    def forward(ctx, x, y, lengths_x, lengths_y, opts: Options, divergence: bool):
        matrix = _pairwise_core(x, y, lengths_x, lengths_y, opts.gamma, opts.dist, opts.band, opts.kernel,
                                opts.check, divergence)
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
            ctx.save_for_backward(x.detach(), y.detach(), lengths_x, lengths_y)
        ctx.opts, ctx.divergence = opts, divergence
        ctx.anchors = _anchors(ctx.needs_input_grad[:2], x, y)
        return matrix

    @staticmethod
    def backward(ctx, grad_matrix):
        x, y, lengths_x, lengths_y = ctx.saved_tensors
        with torch.no_grad():
            grad_x, grad_y = pairwise_gradients(x, y, lengths_x, lengths_y, ctx.opts, ctx.divergence, grad_matrix,
                                                ctx.needs_input_grad[0], ctx.needs_input_grad[1], False)
        return (*_first_order(ctx.anchors, grad_matrix, grad_x, grad_y), None, None, None, None)


def pairwise_matrix(x, y, opts: Options, divergence: bool, lengths_x, lengths_y) -> torch.Tensor:
    """(B1, B2) matrix of values or divergences, differentiable w.r.t. x and y."""
    o = resolved(opts, x)
    if not _traced():
        return _PairwiseFunction.apply(x, y, lengths_x, lengths_y, o, divergence)
    return torch.ops.softwave.pairwise(x, y, lengths_x, lengths_y, o.gamma, o.dist, o.band, o.kernel, o.check,
                                       divergence)


def dtw_path(x, y, opts: Options, lengths_x, lengths_y):
    """Hard DTW values, paths (B, N+M-1, 2) int32 padded with -1 and path
    lengths (B,); not differentiable."""
    o = resolved(opts, x)
    args = (x, y, lengths_x, lengths_y, o.dist, o.band, o.check)
    if not _traced():
        return _dtw_path_core(*args)
    with torch.no_grad():
        return torch.ops.softwave.dtw_path(*args)
