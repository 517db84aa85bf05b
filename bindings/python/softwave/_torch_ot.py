"""softwave.ot's PyTorch side: Sinkhorn solves, their values' and the
divergence's autograd, and the plan queries.

As in softwave.torch (see _torch_ops), with torch >= 2.4 each call into the
core is also registered as an operator (``torch.ops.softwave.sinkhorn``,
``sinkhorn_gradients``, ``sinkhorn_divergence``, ``sinkhorn_query``) with a
fake implementation and, for the solve and the divergence, registered
autograd, so that ``torch.compile`` traces softwave.ot without a graph
break. Eager calls take ``torch.autograd.Function``s (less per-call cost),
which are also the whole path on older torch.

Arrays arrive batched ((B, N, d), (B, N, K), ...) under softwave.ot's
names: x, y, cost (the matrix), u, v, p, q, a, b; settings as
softwave.ot._settings makes them.
"""

from __future__ import annotations

import warnings
from typing import Optional, Tuple

import torch

from . import _core
from ._torch_ops import OPS, _anchors, _first_order, _none, _traced
from .ot import _query_layout, _solve_outputs

ARRAYS = ("x", "y", "cost", "u", "v", "p", "q", "a", "b")
SETTINGS = ("epsilon", "epsilon_relative", "epsilon_scaling", "rho_a", "rho_b", "max_iterations", "tolerance",
            "check_every", "cost", "kernel", "check")
OUTPUTS = ("f", "g", "value", "transport_cost", "marginal_error", "iterations", "converged")


def _stream(like: torch.Tensor) -> int:
    return int(torch.cuda.current_stream(like.device).cuda_stream) if like.is_cuda else 0


def _run(operation: str, arrays: dict, settings: dict, like: torch.Tensor, **extra) -> None:
    """_core.optimal_transport on the current stream of like's device, with
    every tensor detached (the core reads them; autograd is this module's)."""
    plain = {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in arrays.items()}
    _core.optimal_transport(operation, plain, dict(settings, stream=_stream(like), **extra))


def sizes(arrays: dict) -> Tuple[int, int, int]:
    """(B, N, K) of a batched problem."""
    if arrays.get("x") is not None:
        return arrays["x"].shape[0], arrays["x"].shape[1], arrays["y"].shape[1]
    if arrays.get("cost") is not None:
        return tuple(arrays["cost"].shape)
    return arrays["p"].shape[0], arrays["p"].shape[1], arrays["q"].shape[1]


def _first(arrays: dict) -> torch.Tensor:
    return next(v for k, v in arrays.items() if k in ("x", "cost", "p"))


# ---------------------------------------------------------------------------
# The core's calls.


def solve(arrays: dict, settings: dict, f0=None, g0=None) -> dict:
    """The potentials and diagnostics (OUTPUTS) of every problem; f0, g0: a
    warm start (batched), copied."""
    like = _first(arrays)
    out = _outputs(like, arrays)
    warm = f0 is not None
    if warm:
        out["f"], out["g"] = f0.detach().clone(), g0.detach().clone()
    _run("solve", dict(arrays, **out), settings, like, warm_start=warm)
    return out


def _empty_like(like):
    """ot's empty(shape, integer) for tensors like `like`."""
    return lambda shape, integer: like.new_empty(shape, dtype=torch.int32 if integer else like.dtype)


def _outputs(like, arrays) -> dict:
    return _solve_outputs(sizes(arrays), _empty_like(like))


def gradients(arrays: dict, f, g, grad_value, settings: dict, wanted) -> dict:
    """∇ of Σ grad_value · value with respect to the arrays named in wanted
    (batched, as the arrays are)."""
    grads = {k: torch.empty(arrays[k].shape, dtype=f.dtype, device=f.device) for k in wanted}
    if grads:
        _run("gradients", dict(arrays, f=f, g=g, grad_output=grad_value.contiguous(),
                               **{"grad_" + k: v for k, v in grads.items()}), settings, f)
    return grads


def divergence(arrays: dict, settings: dict, wanted):
    """Sinkhorn divergences (B,), whether all three solves converged (B,)
    int32, and ∇ of Σ values with respect to the arrays in wanted."""
    like = arrays["x"]
    B = like.shape[0]
    values, converged = like.new_empty((B,)), like.new_empty((B,), dtype=torch.int32)
    grads = {k: like.new_empty(arrays[k].shape) for k in wanted}
    _run("divergence", dict(arrays, values=values, converged=converged,
                            **{"grad_" + k: v for k, v in grads.items()}), settings, like)
    return values, converged, grads


def query(arrays: dict, f, g, settings: dict, kind: str, z=None, draws: int = 1, seed: int = 0) -> torch.Tensor:
    """One question about the plans of solved problems (ot._query_layout's
    kinds), without forming them unless kind is "plan"."""
    shape, integer, z_name, out_name = _query_layout(kind, sizes(arrays), z, draws)
    out = _empty_like(f)(shape, integer)
    named = {out_name: out} if z_name is None else {z_name: z, out_name: out}
    _run("queries", dict(arrays, f=f, g=g, **named), settings, f, seed=int(seed))
    return out


# ---------------------------------------------------------------------------
# Eager autograd (every torch).


def _reshaped(grads: dict, names, shapes) -> list:
    return [grads[k].reshape(s) if k in grads else None for k, s in zip(names, shapes)]


class _ValueOf(torch.autograd.Function):
    """Values as a function of the caller's tensors (originals, named by
    names), computed already; context holds what backward needs."""

    @staticmethod
    def forward(ctx, context, names, values, *originals):
        ctx.context, ctx.names = context, names
        ctx.shapes = [t.shape for t in originals]
        ctx.anchors = _anchors(ctx.needs_input_grad[3:], *originals)
        return values.clone()

    @staticmethod
    def _returned(ctx, grad, grads: dict):
        return (None, None, None, *_first_order(ctx.anchors, grad, *_reshaped(grads, ctx.names, ctx.shapes)))


class _SinkhornValue(_ValueOf):
    """The OT value: the envelope theorem's gradients, from the solved
    potentials (context: arrays, f, g, settings)."""

    @staticmethod
    def backward(ctx, grad):
        arrays, f, g, settings = ctx.context
        wanted = [k for k, need in zip(ctx.names, ctx.needs_input_grad[3:]) if need]
        with torch.no_grad():
            grads = gradients(arrays, f, g, grad, settings, wanted)
        return _ValueOf._returned(ctx, grad, grads)


class _DivergenceValue(_ValueOf):
    """Divergences: their gradients (context: by array name) were formed with
    the values and are scaled by the incoming gradient per problem."""

    @staticmethod
    def backward(ctx, grad):
        with torch.no_grad():
            scaled = {k: _per_problem(g, grad) for k, g in ctx.context.items()}
        return _ValueOf._returned(ctx, grad, scaled)


def _per_problem(gradient: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    return gradient * grad.reshape((grad.shape[0],) + (1,) * (gradient.dim() - 1))


# ---------------------------------------------------------------------------
# What softwave.ot calls with torch tensors. arrays: batched, not detached
# (under torch.compile the operators' autograd starts from them); originals:
# the caller's tensors by array name (eager autograd starts from those).


def _differentiable(originals: dict) -> list:
    if not torch.is_grad_enabled():
        return []
    return [k for k in ARRAYS if isinstance(originals.get(k), torch.Tensor) and originals[k].requires_grad]


def sinkhorn(arrays: dict, settings: dict, originals: dict, f0=None, g0=None) -> dict:
    """OUTPUTS; value differentiable with respect to the inputs that
    require grad, the others detached."""
    if _traced():
        outputs = torch.ops.softwave.sinkhorn(*(arrays.get(k) for k in ARRAYS), f0, g0,
                                              *(settings[k] for k in SETTINGS))
        out = dict(zip(OUTPUTS, outputs))
        return {k: v if k == "value" else v.detach() for k, v in out.items()}
    out = solve(arrays, settings, f0, g0)
    names = _differentiable(originals)
    if names:
        out["value"] = _SinkhornValue.apply((arrays, out["f"], out["g"], settings), names, out["value"],
                                            *(originals[k] for k in names))
    return out


def sinkhorn_divergence(arrays: dict, settings: dict, originals: dict):
    """(values, converged): values differentiable in the inputs that require grad."""
    names = _differentiable(originals)
    if _traced():
        want = [k in names for k in ("x", "y", "a", "b")]
        values, converged, *_ = torch.ops.softwave.sinkhorn_divergence(
            *(arrays.get(k) for k in ("x", "y", "a", "b")), *(settings[k] for k in SETTINGS), *want)
        return values, converged.detach()
    values, converged, grads = divergence(arrays, settings, names)
    if names:
        values = _DivergenceValue.apply(grads, names, values, *(originals[k] for k in names))
    return values, converged


def plan_query(arrays: dict, f, g, settings: dict, kind: str, z=None, draws: int = 1, seed: int = 0):
    if _traced():
        return torch.ops.softwave.sinkhorn_query(*(None if arrays.get(k) is None else arrays[k].detach()
                                                   for k in ARRAYS), f, g,
                                                 *(settings[k] for k in SETTINGS), kind, z, int(draws), int(seed))
    return query(arrays, f, g, settings, kind, z, draws, seed)


# ---------------------------------------------------------------------------
# The registered operators (torch >= 2.4).


def _named(values) -> dict:
    return {k: v for k, v in zip(ARRAYS, values) if v is not None}


def _settings_of(values) -> dict:
    return dict(zip(SETTINGS, values))


if OPS:
    T = torch.Tensor
    O = Optional[torch.Tensor]

    @torch.library.custom_op("softwave::sinkhorn", mutates_args=())
    def _sinkhorn_op(x: O, y: O, cost_matrix: O, u: O, v: O, p: O, q: O, a: O, b: O, f0: O, g0: O,
                     epsilon: float, epsilon_relative: bool, epsilon_scaling: float, rho_a: float, rho_b: float,
                     max_iterations: int, tolerance: float, check_every: int, cost: str, kernel: str,
                     check: bool) -> Tuple[T, T, T, T, T, T, T]:
        arrays = _named((x, y, cost_matrix, u, v, p, q, a, b))
        settings = _settings_of((epsilon, epsilon_relative, epsilon_scaling, rho_a, rho_b, max_iterations,
                                 tolerance, check_every, cost, kernel, check))
        out = solve(arrays, settings, f0, g0)
        return tuple(out[k] for k in OUTPUTS)

    @_sinkhorn_op.register_fake
    def _(x, y, cost_matrix, u, v, p, q, a, b, f0, g0, *settings):
        arrays = _named((x, y, cost_matrix, u, v, p, q, a, b))
        out = _outputs(_first(arrays), arrays)
        return tuple(out[k] for k in OUTPUTS)

    def _sinkhorn_setup(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:9], output[0], output[1])
        ctx.settings = inputs[11:]

    def _sinkhorn_backward(ctx, grad_f, grad_g, grad_value, *unused):
        *arrays, f, g = ctx.saved_tensors
        want = ctx.needs_input_grad[:9]
        with torch.no_grad():
            grads = torch.ops.softwave.sinkhorn_gradients(*arrays, f, g, grad_value, *ctx.settings, *want)
        return (*(gk if w else None for gk, w in zip(grads, want)), *(None,) * (2 + len(SETTINGS)))

    _sinkhorn_op.register_autograd(_sinkhorn_backward, setup_context=_sinkhorn_setup)

    @torch.library.custom_op("softwave::sinkhorn_gradients", mutates_args=())
    def _sinkhorn_gradients_op(x: O, y: O, cost_matrix: O, u: O, v: O, p: O, q: O, a: O, b: O, f: T, g: T,
                               grad_value: T, epsilon: float, epsilon_relative: bool, epsilon_scaling: float,
                               rho_a: float, rho_b: float, max_iterations: int, tolerance: float, check_every: int,
                               cost: str, kernel: str, check: bool, want_x: bool, want_y: bool, want_cost: bool,
                               want_u: bool, want_v: bool, want_p: bool, want_q: bool, want_a: bool,
                               want_b: bool) -> Tuple[T, T, T, T, T, T, T, T, T]:
        arrays = _named((x, y, cost_matrix, u, v, p, q, a, b))
        settings = _settings_of((epsilon, epsilon_relative, epsilon_scaling, rho_a, rho_b, max_iterations,
                                 tolerance, check_every, cost, kernel, check))
        want = (want_x, want_y, want_cost, want_u, want_v, want_p, want_q, want_a, want_b)
        grads = gradients(arrays, f, g, grad_value, settings, [k for k, w in zip(ARRAYS, want) if w])
        return tuple(grads[k] if k in grads else _none(f) for k in ARRAYS)

    @_sinkhorn_gradients_op.register_fake
    def _(x, y, cost_matrix, u, v, p, q, a, b, f, g, grad_value, *rest):
        want = rest[len(SETTINGS):]
        return tuple(t.new_empty(t.shape) if w and t is not None else _none(f)
                     for t, w in zip((x, y, cost_matrix, u, v, p, q, a, b), want))

    @torch.library.custom_op("softwave::sinkhorn_divergence", mutates_args=())
    def _divergence_op(x: T, y: T, a: O, b: O, epsilon: float, epsilon_relative: bool, epsilon_scaling: float,
                       rho_a: float, rho_b: float, max_iterations: int, tolerance: float, check_every: int,
                       cost: str, kernel: str, check: bool, want_x: bool, want_y: bool, want_a: bool,
                       want_b: bool) -> Tuple[T, T, T, T, T, T]:
        arrays = {k: t for k, t in zip("xyab", (x, y, a, b)) if t is not None}
        settings = _settings_of((epsilon, epsilon_relative, epsilon_scaling, rho_a, rho_b, max_iterations,
                                 tolerance, check_every, cost, kernel, check))
        wanted = [k for k, w in zip("xyab", (want_x, want_y, want_a, want_b)) if w]
        values, converged, grads = divergence(arrays, settings, wanted)
        return (values, converged, *(grads[k] if k in grads else _none(x) for k in "xyab"))

    @_divergence_op.register_fake
    def _(x, y, a, b, *rest):
        want = rest[len(SETTINGS):]
        B = x.shape[0]
        return (x.new_empty((B,)), x.new_empty((B,), dtype=torch.int32),
                *(t.new_empty(t.shape) if w and t is not None else _none(x) for t, w in zip((x, y, a, b), want)))

    def _divergence_setup(ctx, inputs, output):
        ctx.save_for_backward(*output[2:])
        ctx.want = inputs[4 + len(SETTINGS):]
        ctx.anchors = _anchors(ctx.want, *inputs[:4])

    def _divergence_backward(ctx, grad_values, *unused):
        grads = ctx.saved_tensors
        with torch.no_grad():
            scaled = [_per_problem(gk, grad_values) if w else None for gk, w in zip(grads, ctx.want)]
        return (*_first_order(ctx.anchors, grad_values, *scaled), *(None,) * (len(SETTINGS) + 4))

    _divergence_op.register_autograd(_divergence_backward, setup_context=_divergence_setup)

    @torch.library.custom_op("softwave::sinkhorn_query", mutates_args=())
    def _query_op(x: O, y: O, cost_matrix: O, u: O, v: O, p: O, q: O, a: O, b: O, f: T, g: T, epsilon: float,
                  epsilon_relative: bool, epsilon_scaling: float, rho_a: float, rho_b: float, max_iterations: int,
                  tolerance: float, check_every: int, cost: str, kernel: str, check: bool, kind: str, z: O,
                  draws: int, seed: int) -> T:
        settings = _settings_of((epsilon, epsilon_relative, epsilon_scaling, rho_a, rho_b, max_iterations,
                                 tolerance, check_every, cost, kernel, check))
        return query(_named((x, y, cost_matrix, u, v, p, q, a, b)), f, g, settings, kind, z, draws, seed)

    @_query_op.register_fake
    def _(x, y, cost_matrix, u, v, p, q, a, b, f, g, *rest):
        kind, z, draws = rest[len(SETTINGS):len(SETTINGS) + 3]
        shape, integer, _, _ = _query_layout(kind, sizes(_named((x, y, cost_matrix, u, v, p, q, a, b))), z, draws)
        return _empty_like(f)(shape, integer)


class _GwPlan(torch.autograd.Function):
    """Sampled GW's plan (the solve runs in forward), differentiable in
    fused GW's linear cost through the last solve (softwave.ot.sampled_gw's
    differentiable mode): ∂⟨G, T⟩/∂C = w·β·(the last plan's derivative)."""

    @staticmethod
    def forward(ctx, solve, vjp, saved_features, linear, source_features, target_features):
        plan, last_plan, report = solve()
        ctx.vjp = dict(vjp, epsilon=report["final_epsilon"],
                       scale=report["last_plan_weight"] * vjp["fgw_alpha"])
        ctx.save_for_backward(last_plan, *saved_features)
        return plan

    @staticmethod
    def backward(ctx, grad_plan):
        last_plan, source_features, target_features = ctx.saved_tensors
        v = ctx.vjp
        grad_cost = torch.empty_like(last_plan)
        report = _core.sinkhorn_plan_vjp(
            {"plan": last_plan[None],
             "grad_plan": grad_plan.detach().to(last_plan.dtype).contiguous()[None],
             "grad_cost": grad_cost[None]},
            v["epsilon"], v["rho_a"], v["rho_b"], v["mode"], v["iterations"], 1e-6, v["check"],
            _stream(last_plan))
        if not report["converged"]:
            warnings.warn(f"softwave: the plan's adjoint system stopped at a relative residual of "
                          f"{report['residual']:.2g} after {report['iterations']} iterations "
                          f"(the gradient is that accurate)", RuntimeWarning, stacklevel=2)
        grad_cost.mul_(v["scale"])
        grad_linear = grad_source = grad_target = None
        if ctx.needs_input_grad[3]:
            grad_linear = grad_cost
        if ctx.needs_input_grad[4] or ctx.needs_input_grad[5]:
            # C_ik = ‖F_i − G_k‖²: ∂/∂F_i = 2 Σ_k dC_ik (F_i − G_k), and the same
            # for G with the transpose.
            f, g = source_features, target_features
            if ctx.needs_input_grad[4]:
                grad_source = 2 * (grad_cost.sum(1, keepdim=True) * f - grad_cost @ g)
            if ctx.needs_input_grad[5]:
                grad_target = 2 * (grad_cost.sum(0)[:, None] * g - grad_cost.T @ f)
        return None, None, None, grad_linear, grad_source, grad_target


def gw_plan(solve, vjp: dict, linear, source_features, target_features,
            saved_features) -> torch.Tensor:
    """The plan solve() returns (its call to the core), differentiable in the
    linear cost given (C_linear, or the features) where it requires grad;
    saved_features: the features as tensors the core read (or None)."""
    return _GwPlan.apply(solve, vjp, saved_features, linear, source_features,
                         target_features)
