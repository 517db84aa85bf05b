"""softwave.deer's PyTorch side: the recurrence's forward and its gradients
by implicit differentiation, and the (a, b) scan with its gradients, as
``torch.autograd.Function``s for eager calls and, with torch >= 2.4, as
registered operators (``torch.ops.softwave.deer_rnn``,
``deer_rnn_gradients``, ``linear_recurrence`` and
``linear_recurrence_gradients``, with fake implementations and registered
autograd) that ``torch.compile`` traces without a graph break; see
_torch_ops for why eager calls bypass them.
Captured in a CUDA graph (the core sees its stream capturing), a forward
issues all ``max_iter`` Newton iterations without reading their convergence
back (those after a sequence converged skip its work), so nothing waits for
the device; a small ``max_iter`` keeps the graph short.
"""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import torch

from . import _core, deer
from ._torch_ops import OPS, _anchors, _first_order, _none, _traced

# The settings an operator takes, in its argument order (softwave.deer._settings
# makes them; atol and rtol may be None: the dtype's defaults).
SETTINGS = ("cell", "method", "jacobian", "kernel", "atol", "rtol", "max_iterations", "chunk", "start_warm_up",
            "damping", "block_size", "block_layout", "diagonal", "check")


def _stream(like: torch.Tensor) -> int:
    return int(torch.cuda.current_stream(like.device).cuda_stream) if like.is_cuda else 0


def _core_settings(settings: dict, like: torch.Tensor, **extra) -> dict:
    return deer._core_settings(settings, _stream(like), **extra)


def _given(t):
    return None if t is None else t.detach().contiguous()


def forward(settings: dict, lengths, n: int, x, h0, w_ih, w_hh, b_ih, b_hh, peephole):
    """(y (B, T, n), iterations (B,), path (B,)) from the core."""
    B, T = x.shape[0], x.shape[1]
    arrays = {"x": x.detach().contiguous(), "y0": _given(h0), "lengths": lengths,
              **dict(zip(deer.weight_names(settings["cell"]), map(_given, (w_ih, w_hh, b_ih, b_hh, peephole)))),
              "y": x.new_empty((B, T, n)),
              "iterations": torch.empty((B,), dtype=torch.int32, device=x.device),
              "path": torch.empty((B,), dtype=torch.int32, device=x.device)}
    _core.deer_rnn("forward", arrays, _core_settings(settings, x))
    return arrays["y"], arrays["iterations"], arrays["path"]


def gradients(settings: dict, lengths, grad_y, y, x, h0, w_ih, w_hh, b_ih, b_hh, peephole, need) -> tuple:
    """∇ of Σ grad_y · y with respect to (x, h0, w_ih, w_hh, b_ih, b_hh,
    peephole), None where need is False or the input is None."""
    inputs = (x, h0, w_ih, w_hh, b_ih, b_hh, peephole)
    grads = [None] * 7
    for k, (t, want) in enumerate(zip(inputs, need)):
        if want and t is not None:
            # h0's gradient has the state's width, which grad_y has.
            grads[k] = (x.new_empty((x.shape[0], grad_y.shape[2])) if k == 1
                        else torch.empty_like(t, memory_format=torch.contiguous_format))
    names = deer.weight_names(settings["cell"])
    arrays = {"x": _given(x), "y0": _given(h0), "lengths": lengths, "y": _given(y), "grad_y": grad_y.contiguous(),
              **dict(zip(names, map(_given, inputs[2:]))),
              **dict(zip(("grad_x", "grad_y0", *("grad_" + k for k in names)), grads))}
    _core.deer_rnn("gradients", arrays, _core_settings(settings, x, warm_start=False))
    return tuple(grads)


class _Deer(torch.autograd.Function):
    @staticmethod
    def forward(ctx, settings, lengths, n, x, h0, w_ih, w_hh, b_ih, b_hh, peephole):
        y, iterations, path = forward(settings, lengths, n, x, h0, w_ih, w_hh, b_ih, b_hh, peephole)
        ctx.settings, ctx.lengths = settings, lengths
        inputs = (x, h0, w_ih, w_hh, b_ih, b_hh, peephole)
        ctx.inputs = tuple(None if t is None else t.detach() for t in inputs)
        ctx.y = y
        ctx.anchors = _anchors(ctx.needs_input_grad[3:], *inputs)
        ctx.mark_non_differentiable(iterations, path)
        return y, iterations, path

    @staticmethod
    def backward(ctx, grad_y, _iterations, _path):
        with torch.no_grad():
            grads = gradients(ctx.settings, ctx.lengths, grad_y, ctx.y, *ctx.inputs, ctx.needs_input_grad[3:])
        return (None, None, None, *_first_order(ctx.anchors, grad_y, *grads))


def scan_forward(settings: dict, a, b, y0):
    """The recurrence's states, a's shape, from the core."""
    rows, T = deer._recurrence_rows(a, b, y0)
    arrays = {"a": a.detach().contiguous().reshape(rows, T), "b": b.detach().contiguous().reshape(rows, T),
              "y0": None if y0 is None else y0.detach().contiguous().reshape(rows), "y": a.new_empty((rows, T))}
    _core.linear_recurrence("forward", arrays, dict(settings, stream=_stream(a)))
    return arrays["y"].reshape(a.shape)


def scan_gradients(settings: dict, grad_y, a, y0, y, need_a: bool, need_y0: bool):
    """(grad_a, grad_b, grad_y0) of Σ grad_y · y, grad_a and grad_y0 None
    where not needed (or y0 is None)."""
    shape = a.shape
    rows, T = int(np.prod(shape[:-1], dtype=np.int64)), int(shape[-1])
    g = grad_y.detach().contiguous().reshape(rows, T)
    grad_b = torch.empty_like(g)
    grad_a = torch.empty_like(g) if need_a else None
    grad_y0 = g.new_empty((rows,)) if need_y0 and y0 is not None else None
    arrays = {"a": a.detach().contiguous().reshape(rows, T),
              "y0": None if y0 is None else y0.detach().contiguous().reshape(rows),
              "y": y.detach().contiguous().reshape(rows, T), "grad_y": g, "grad_a": grad_a, "grad_b": grad_b,
              "grad_y0": grad_y0}
    _core.linear_recurrence("gradients", arrays, dict(settings, stream=_stream(a)))
    return (None if grad_a is None else grad_a.reshape(shape), grad_b.reshape(shape),
            None if grad_y0 is None else grad_y0.reshape(shape[:-1]))


class _LinearRecurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, settings, a, b, y0):
        y = scan_forward(settings, a, b, y0)
        ctx.settings = settings
        ctx.save_for_backward(a, y0, y)
        ctx.anchors = _anchors(ctx.needs_input_grad[1:], a, b, y0)
        return y

    @staticmethod
    def backward(ctx, grad_y):
        a, y0, y = ctx.saved_tensors
        need_a, need_b, need_y0 = ctx.needs_input_grad[1:]
        with torch.no_grad():
            grad_a, grad_b, grad_y0 = scan_gradients(ctx.settings, grad_y, a, y0, y, need_a, need_y0)
        return (None, *_first_order(ctx.anchors, grad_y, grad_a, grad_b if need_b else None, grad_y0))


def linear_recurrence(a, b, y0, reverse: bool, kernel: str, check: bool):
    """softwave.deer.linear_recurrence for torch tensors, with autograd."""
    if _traced():
        return torch.ops.softwave.linear_recurrence(a, b, y0, reverse, kernel, check)
    return _LinearRecurrence.apply({"reverse": reverse, "kernel": kernel, "check": check}, a, b, y0)


def rnn(settings: dict, lengths, n: int, x, h0, w_ih, w_hh, b_ih, b_hh, peephole=None):
    """(y, iterations, path), y differentiable in every tensor input."""
    if not _traced():
        return _Deer.apply(settings, lengths, n, x, h0, w_ih, w_hh, b_ih, b_hh, peephole)
    return torch.ops.softwave.deer_rnn(x, h0, lengths, w_ih, w_hh, b_ih, b_hh, peephole, n,
                                       *(settings[k] for k in SETTINGS))


if OPS:
    T = torch.Tensor
    O = Optional[torch.Tensor]

    @torch.library.custom_op("softwave::deer_rnn", mutates_args=())
    def _deer_op(x: T, h0: O, lengths: O, weight_ih: T, weight_hh: T, bias_ih: O, bias_hh: O, peephole: O, n: int,
                 cell: str,
                 method: str, jacobian: str, kernel: str, atol: Optional[float], rtol: Optional[float],
                 max_iterations: int, chunk: int, start_warm_up: Optional[int], damping: float, block_size: int,
                 block_layout: str, diagonal: bool, check: bool) -> Tuple[T, T, T]:
        settings = dict(zip(SETTINGS, (cell, method, jacobian, kernel, atol, rtol, max_iterations, chunk,
                                       start_warm_up, damping, block_size, block_layout, diagonal, check)))
        return forward(settings, lengths, n, x, h0, weight_ih, weight_hh, bias_ih, bias_hh, peephole)

    @_deer_op.register_fake
    def _(x, h0, lengths, weight_ih, weight_hh, bias_ih, bias_hh, peephole, n, *settings):
        B = x.shape[0]
        return (x.new_empty((B, x.shape[1], n)), x.new_empty((B,), dtype=torch.int32),
                x.new_empty((B,), dtype=torch.int32))

    def _deer_setup(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:8], output[0])
        ctx.rest = inputs[8:]

    def _deer_backward(ctx, grad_y, *unused):
        x, h0, lengths, *weights, y = ctx.saved_tensors
        need = tuple(ctx.needs_input_grad[k] for k in (0, 1, 3, 4, 5, 6, 7))
        with torch.no_grad():
            grads = torch.ops.softwave.deer_rnn_gradients(grad_y, y, x, h0, lengths, *weights, *ctx.rest, *need)
        gx, gh0, *gweights = (g if w else None for g, w in zip(grads, need))
        return (gx, gh0, None, *gweights, *(None,) * (1 + len(SETTINGS)))

    _deer_op.register_autograd(_deer_backward, setup_context=_deer_setup)

    @torch.library.custom_op("softwave::deer_rnn_gradients", mutates_args=())
    def _deer_gradients_op(grad_y: T, y: T, x: T, h0: O, lengths: O, weight_ih: T, weight_hh: T, bias_ih: O,
                           bias_hh: O, peephole: O, n: int, cell: str, method: str, jacobian: str, kernel: str,
                           atol: Optional[float], rtol: Optional[float], max_iterations: int, chunk: int,
                           start_warm_up: Optional[int], damping: float, block_size: int, block_layout: str,
                           diagonal: bool, check: bool, need_x: bool, need_h0: bool,
                           need_weight_ih: bool, need_weight_hh: bool, need_bias_ih: bool,
                           need_bias_hh: bool, need_peephole: bool) -> Tuple[T, T, T, T, T, T, T]:
        settings = dict(zip(SETTINGS, (cell, method, jacobian, kernel, atol, rtol, max_iterations, chunk,
                                       start_warm_up, damping, block_size, block_layout, diagonal, check)))
        need = (need_x, need_h0, need_weight_ih, need_weight_hh, need_bias_ih, need_bias_hh, need_peephole)
        grads = gradients(settings, lengths, grad_y, y, x, h0, weight_ih, weight_hh, bias_ih, bias_hh, peephole, need)
        return tuple(_none(x) if g is None else g for g in grads)

    @_deer_gradients_op.register_fake
    def _(grad_y, y, x, h0, lengths, weight_ih, weight_hh, bias_ih, bias_hh, peephole, n, *rest):
        need = rest[len(SETTINGS):]
        inputs = (x, h0, weight_ih, weight_hh, bias_ih, bias_hh, peephole)
        shapes = [None if t is None else tuple(t.shape) for t in inputs]
        shapes[1] = (x.shape[0], n)
        return tuple(x.new_empty(s) if w and t is not None else _none(x) for t, s, w in zip(inputs, shapes, need))

    @torch.library.custom_op("softwave::linear_recurrence", mutates_args=())
    def _scan_op(a: T, b: T, y0: O, reverse: bool, kernel: str, check: bool) -> T:
        return scan_forward({"reverse": reverse, "kernel": kernel, "check": check}, a, b, y0)

    @_scan_op.register_fake
    def _(a, b, y0, reverse, kernel, check):
        deer._recurrence_rows(a, b, y0)
        return torch.empty_like(a, memory_format=torch.contiguous_format)

    def _scan_setup(ctx, inputs, output):
        a, b, y0, *settings = inputs
        ctx.save_for_backward(a, y0, output)
        ctx.settings = settings

    def _scan_backward(ctx, grad_y):
        a, y0, y = ctx.saved_tensors
        need_a, need_b, need_y0 = ctx.needs_input_grad[:3]
        with torch.no_grad():
            grad_a, grad_b, grad_y0 = torch.ops.softwave.linear_recurrence_gradients(
                grad_y, a, y0, y, *ctx.settings, need_a, need_y0 and y0 is not None)
        return (grad_a if need_a else None, grad_b if need_b else None,
                grad_y0 if need_y0 and y0 is not None else None, None, None, None)

    _scan_op.register_autograd(_scan_backward, setup_context=_scan_setup)

    @torch.library.custom_op("softwave::linear_recurrence_gradients", mutates_args=())
    def _scan_gradients_op(grad_y: T, a: T, y0: O, y: T, reverse: bool, kernel: str, check: bool, need_a: bool,
                           need_y0: bool) -> Tuple[T, T, T]:
        settings = {"reverse": reverse, "kernel": kernel, "check": check}
        grad_a, grad_b, grad_y0 = scan_gradients(settings, grad_y, a, y0, y, need_a, need_y0)
        return (_none(a) if grad_a is None else grad_a, grad_b, _none(a) if grad_y0 is None else grad_y0)

    @_scan_gradients_op.register_fake
    def _(grad_y, a, y0, y, reverse, kernel, check, need_a, need_y0):
        dense = dict(memory_format=torch.contiguous_format)
        return (torch.empty_like(a, **dense) if need_a else _none(a), torch.empty_like(a, **dense),
                a.new_empty(a.shape[:-1]) if need_y0 and y0 is not None else _none(a))
