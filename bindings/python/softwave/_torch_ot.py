"""softwave.ot's PyTorch side: Sinkhorn solves, their values' and the
divergence's autograd, the plan queries, and sampled GW's differentiable
plan.

As in softwave.torch (see _torch_ops), with torch >= 2.4 each call into the
core is also registered as an operator (``torch.ops.softwave.sinkhorn``,
``sinkhorn_gradients``, ``sinkhorn_divergence``, ``sinkhorn_query``,
``sampled_gw``, ``gw_plan_vjp``) with a fake implementation and, for the
solves and the divergence, registered autograd, so that ``torch.compile``
traces softwave.ot without a graph break. Eager calls take ``torch.autograd.Function``s (less per-call cost),
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


def gw_cost_gradient(grad_plan: torch.Tensor, last_plan: torch.Tensor, epsilon: float, scale: float,
                     vjp: dict) -> torch.Tensor:
    """dL/dC of fused GW's linear cost from dL/dT: scale times the last
    Sinkhorn plan's derivative at its ε (softwave::sinkhorn_plan_vjp)."""
    grad_cost = torch.empty_like(last_plan)
    report = _core.sinkhorn_plan_vjp(
        {"plan": last_plan[None],
         "grad_plan": grad_plan.detach().to(last_plan.dtype).contiguous()[None],
         "grad_cost": grad_cost[None]},
        epsilon, vjp["rho_a"], vjp["rho_b"], vjp["mode"], vjp["iterations"], 1e-6, vjp["check"],
        _stream(last_plan))
    if not report["converged"]:
        warnings.warn(f"softwave: the plan's adjoint system stopped at a relative residual of "
                      f"{report['residual']:.2g} after {report['iterations']} iterations "
                      f"(the gradient is that accurate)", RuntimeWarning, stacklevel=3)
    return grad_cost.mul_(scale)


def gw_feature_gradients(grad_cost, source_features, target_features, wanted) -> tuple:
    """(dL/dC_linear, dL/dF, dL/dG), None where not wanted: C_ik =
    ‖F_i − G_k‖², so ∂/∂F_i = 2 Σ_k dC_ik (F_i − G_k), and the same for G
    with the transpose."""
    grad_linear = grad_cost if wanted[0] else None
    f, g = source_features, target_features
    grad_source = 2 * (grad_cost.sum(1, keepdim=True) * f - grad_cost @ g) if wanted[1] else None
    grad_target = 2 * (grad_cost.sum(0)[:, None] * g - grad_cost.T @ f) if wanted[2] else None
    return grad_linear, grad_source, grad_target


class _GwPlan(torch.autograd.Function):
    """Sampled GW's plan (the solve runs in forward), differentiable in
    fused GW's linear cost through the last solve (softwave.ot.sampled_gw's
    differentiable mode): ∂⟨G, T⟩/∂C = w·β·(the last plan's derivative)."""

    @staticmethod
    def forward(ctx, solve, vjp, saved_features, linear, source_features, target_features):
        plan, last_plan, report = solve()
        ctx.vjp = vjp
        ctx.epsilon = report["final_epsilon"]
        ctx.scale = report["last_plan_weight"] * vjp["fgw_alpha"]
        ctx.save_for_backward(last_plan, *saved_features)
        return plan

    @staticmethod
    def backward(ctx, grad_plan):
        last_plan, source_features, target_features = ctx.saved_tensors
        grad_cost = gw_cost_gradient(grad_plan, last_plan, ctx.epsilon, ctx.scale, ctx.vjp)
        return (None, None, None,
                *gw_feature_gradients(grad_cost, source_features, target_features, ctx.needs_input_grad[3:6]))


def gw_plan(solve, vjp: dict, linear, source_features, target_features,
            saved_features) -> torch.Tensor:
    """The plan solve() returns (its call to the core), differentiable in the
    linear cost given (C_linear, or the features) where it requires grad;
    saved_features: the features as tensors the core read (or None)."""
    return _GwPlan.apply(solve, vjp, saved_features, linear, source_features,
                         target_features)


# ---------------------------------------------------------------------------
# Sampled GW under torch.compile: one operator for the whole solve (its
# arrays by the core's names, its settings as JSON without the stream, which
# the operator takes at run time), returning the plan, the matching, the
# last Sinkhorn plan (for the gradient), the report's numbers (GW_NUMBERS,
# float64 on the host) and its four lists (host tensors whose lengths the
# solve decides).

GW_ARRAYS = ("source", "target", "a", "b", "linear", "source_features", "target_features", "plan",
             "source_points", "target_points")
GW_NUMBERS = ("iterations", "converged", "seed", "objective", "objective_error", "linear_objective",
              "linear_objective_error", "last_change", "source_scale", "target_scale", "final_epsilon",
              "last_plan_weight", "joined_components", "polish_anchors", "dense_solves")
GW_LISTS = (("changes", torch.float64), ("restart_objectives", torch.float64), ("source_anchors", torch.int64),
            ("target_anchors", torch.int64))


def encode_settings(settings: dict) -> str:
    """Settings (str, int, float, bool or None values) as an operator's str
    argument: a line "name=repr(value)" each (torch.compile traces this;
    json it does not)."""
    return "\n".join(f"{k}={v!r}" for k, v in settings.items())


def decode_settings(text: str) -> dict:
    import ast

    def value(v):
        return float(v) if v in ("inf", "-inf", "nan") else ast.literal_eval(v)

    return {k: value(v) for k, v in (line.split("=", 1) for line in text.split("\n") if line)}


def _gw_solve(inputs, settings: str, want_plan: bool, want_matching: bool, want_last_plan: bool) -> tuple:
    arrays = dict(zip(GW_ARRAYS, (None if t is None else t.detach().contiguous() for t in inputs)))
    source, target = arrays["source"], arrays["target"]
    n, m = source.shape[0], target.shape[0]
    core_settings = {k: v for k, v in decode_settings(settings).items() if not k.startswith("_vjp_")}
    core_settings["stream"] = _stream(source)
    # The core writes the plan over T_init: the operator's inputs stay as
    # they were.
    if arrays["plan"] is not None:
        arrays["plan"] = arrays["plan"].clone()
    elif want_plan:
        arrays["plan"] = source.new_empty((n, m))
    arrays["matching"] = source.new_empty((n,), dtype=torch.int32) if want_matching else None
    arrays["last_plan"] = source.new_empty((n, m)) if want_last_plan else None
    report = _core.gromov_wasserstein(arrays, core_settings)
    numbers = torch.tensor([float(report[k]) for k in GW_NUMBERS], dtype=torch.float64)
    lists = [torch.tensor(report[k], dtype=dtype) for k, dtype in GW_LISTS]
    return (arrays["plan"] if want_plan else _none(source),
            arrays["matching"] if want_matching else _none(source).int(),
            arrays["last_plan"] if want_last_plan else _none(source), numbers, *lists)


if OPS:
    @torch.library.custom_op("softwave::sampled_gw", mutates_args=())
    def _sampled_gw_op(source: T, target: T, a: O, b: O, linear: O, source_features: O, target_features: O,
                       plan_init: O, source_points: O, target_points: O, settings: str, want_plan: bool,
                       want_matching: bool, want_last_plan: bool) -> Tuple[T, T, T, T, T, T, T, T]:
        inputs = (source, target, a, b, linear, source_features, target_features, plan_init, source_points,
                  target_points)
        return _gw_solve(inputs, settings, want_plan, want_matching, want_last_plan)

    @_sampled_gw_op.register_fake
    def _(source, target, a, b, linear, source_features, target_features, plan_init, source_points,
          target_points, settings, want_plan, want_matching, want_last_plan):
        n, m = source.shape[0], target.shape[0]
        ctx = torch.library.get_ctx()
        lists = [torch.empty((ctx.new_dynamic_size(),), dtype=dtype) for _, dtype in GW_LISTS]
        return (source.new_empty((n, m) if want_plan else (0,)),
                source.new_empty((n,) if want_matching else (0,), dtype=torch.int32),
                source.new_empty((n, m) if want_last_plan else (0,)),
                torch.empty((len(GW_NUMBERS),), dtype=torch.float64), *lists)

    def _sampled_gw_setup(ctx, inputs, output):
        ctx.save_for_backward(output[2], output[3], inputs[5], inputs[6])
        given = decode_settings(inputs[10])
        ctx.vjp = {k[5:]: v for k, v in given.items() if k.startswith("_vjp_")} or None

    def _sampled_gw_backward(ctx, grad_plan, *unused):
        last_plan, numbers, source_features, target_features = ctx.saved_tensors
        grads = [None] * 14
        wanted = tuple(ctx.needs_input_grad[k] for k in (4, 5, 6))
        if ctx.vjp is not None and any(wanted):
            grad_cost = torch.ops.softwave.gw_plan_vjp(grad_plan, last_plan, numbers, ctx.vjp["rho_a"],
                                                      ctx.vjp["rho_b"], ctx.vjp["fgw_alpha"], ctx.vjp["mode"],
                                                      ctx.vjp["iterations"], ctx.vjp["check"])
            grads[4:7] = gw_feature_gradients(grad_cost, source_features, target_features, wanted)
        return tuple(grads)

    _sampled_gw_op.register_autograd(_sampled_gw_backward, setup_context=_sampled_gw_setup)

    @torch.library.custom_op("softwave::gw_plan_vjp", mutates_args=())
    def _gw_plan_vjp_op(grad_plan: T, last_plan: T, numbers: T, rho_a: float, rho_b: float, fgw_alpha: float,
                        mode: str, iterations: int, check: bool) -> T:
        at = {k: float(v) for k, v in zip(GW_NUMBERS, numbers.tolist())}
        vjp = dict(rho_a=rho_a, rho_b=rho_b, mode=mode, iterations=iterations, check=check)
        return gw_cost_gradient(grad_plan, last_plan, at["final_epsilon"], at["last_plan_weight"] * fgw_alpha, vjp)

    @_gw_plan_vjp_op.register_fake
    def _(grad_plan, last_plan, *rest):
        return torch.empty_like(last_plan)


def traced_sampled_gw(inputs: dict, settings: dict, want_plan: bool, want_matching: bool, vjp: Optional[dict]):
    """sampled_gw through the operator: (plan, matching, report) with the
    report's numbers as 0-d tensors and its lists as 1-d ones. inputs by
    GW_ARRAYS' names (the linear cost and features as given, so that the
    operator's autograd reaches them); vjp: the differentiable mode's
    settings, or None."""
    # The core's settings, then those of the operator's autograd (_vjp_*).
    core = {k: v for k, v in settings.items() if k != "stream"}
    text = encode_settings(dict(core, **{"_vjp_" + k: v for k, v in (vjp or {}).items()}))
    outputs = torch.ops.softwave.sampled_gw(*(inputs.get(k) for k in GW_ARRAYS), text, want_plan, want_matching,
                                            vjp is not None)
    plan, matching, _, numbers, *lists = outputs
    report = {k: numbers[i] for i, k in enumerate(GW_NUMBERS)}
    report.update({k: t for (k, _), t in zip(GW_LISTS, lists)})
    return plan if want_plan else None, matching if want_matching else None, report
