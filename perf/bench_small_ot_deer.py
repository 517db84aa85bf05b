"""Small Sinkhorn and DEER training steps from PyTorch on the GPU: what a
call costs eager, under torch.compile (fullgraph, through the registered
operators; default mode and mode="reduce-overhead", where inductor replays
CUDA graphs) and replayed from a CUDA graph captured by hand, beside the
same work with the core called directly (preallocated outputs, no autograd)
and, as torch's own floor for a compiled step, ``(x * y).sum().backward()``
compiled with mode="reduce-overhead" on the same tensors.

    python3 perf/bench_small_ot_deer.py --out small-ot-deer.json

Sinkhorn: the OT value and its gradient, ``ot.sinkhorn(x, y, epsilon=0.1,
tolerance=0, max_iterations=I).value.sum().backward()`` (a fixed count, so
nothing waits for the host and the step can be captured), x requiring grad.
DEER: a GRU layer's forward and backward, method "deer": ``deer.GRU`` (full
Jacobians) and ``deer.ParaGRU`` (diagonal hidden weights, exact Newton on
the fused kernel). Eager, the Newton loop reads convergence back after each
iteration; captured in a CUDA graph it issues max_iter iterations without
reading back, max_iter set to the most iterations eager took on the same
data (recorded, with the largest difference between the graph's states and
eager's). Timing as in perf/bench_small.py (CUDA events around batches of
back-to-back steps, median over batches).

JAX, where it runs on the GPU: ``jax.jit(jax.value_and_grad(...))`` of the
same losses through softwave.jax (the core as XLA FFI targets on XLA's
stream): Sinkhorn's summed values w.r.t. x; DEER's mean squared states
w.r.t. the weights, ``deer_gru`` with PyTorch's layouts (for ParaGRU's rows
the GRU with diagonal hidden weights, which is ParaGRU's cell with one
head, its input projection done by the core). Host-timed as in
perf/bench_small.py.
"""

import argparse
import copy
import json
import sys

import torch
from bench_small import jax_ms, jax_on_gpu, per_step_ms

import softwave.deer as deer
import softwave.ot as ot
from softwave import _core

SINKHORN_SHAPES = [(1, 256, 3, 20), (256, 64, 3, 20), (1, 1024, 3, 50), (8, 512, 3, 50), (1, 4096, 64, 50)]  # B, N = K, d, iterations
DEER_SHAPES = [("ParaGRU", 16, 256, 8, 16), ("ParaGRU", 16, 2048, 8, 16), ("ParaGRU", 1, 1024, 64, 64),
               ("ParaGRU", 4, 16384, 4, 8), ("GRU", 16, 256, 8, 16), ("GRU", 4, 16384, 4, 8),
               ("GRU", 16, 2048, 8, 16)]  # layer, B, T, inputs, hidden


def sinkhorn_step(fn, x, y, iterations):
    def step():
        x.grad = None
        fn(x, y, iterations).sum().backward()

    return step


def sinkhorn_value(x, y, iterations):
    return ot.sinkhorn(x, y, epsilon=0.1, tolerance=0.0, max_iterations=iterations).value


def sinkhorn_core(x, y, iterations):
    """The solve and the gradient through _core with preallocated outputs."""
    b, n, k = x.shape[0], x.shape[1], y.shape[1]
    settings = {"epsilon": 0.1, "tolerance": 0.0, "max_iterations": iterations, "check": False,
                "stream": torch.cuda.current_stream().cuda_stream}
    out = {"f": x.new_empty((b, n)), "g": x.new_empty((b, k)), "value": x.new_empty((b,))}
    grad = {"grad_x": torch.empty_like(x), "grad_output": x.new_ones((b,))}

    def step():
        _core.optimal_transport("solve", dict(x=x, y=y, **out), settings)
        _core.optimal_transport("gradients", dict(x=x, y=y, f=out["f"], g=out["g"], **grad), settings)

    return step


def jax_sinkhorn_step(b, n, d, iterations):
    found = jax_on_gpu()
    if found is None:
        return None
    jax, jnp, swj = found
    x = jax.random.normal(jax.random.PRNGKey(0), (b, n, d), jnp.float32)
    y = jax.random.normal(jax.random.PRNGKey(1), (b, n, d), jnp.float32)
    program = jax.jit(jax.value_and_grad(
        lambda a: swj.sinkhorn(a, y, epsilon=0.1, tolerance=0.0, max_iterations=iterations).value.sum()))
    return (lambda: program(x)), jax


def jax_deer_step(layer, b, t, m, hidden):
    found = jax_on_gpu()
    if found is None:
        return None
    jax, jnp, swj = found
    diagonal = layer == "ParaGRU"
    keys = jax.random.split(jax.random.PRNGKey(0), 5)
    bound = hidden ** -0.5
    shapes = ((3 * hidden, m), (3 * hidden, 1 if diagonal else hidden), (3 * hidden,), (3 * hidden,))
    weights = tuple(jax.random.uniform(k, s, jnp.float32, -bound, bound) for k, s in zip(keys[1:], shapes))
    x = jax.random.normal(keys[0], (b, t, m), jnp.float32)
    options = {"method": "deer", "diagonal": diagonal, "jacobian": "diagonal" if diagonal else "full"}

    def loss(w):
        return jnp.mean(jnp.square(swj.deer_gru(x, None, *w, **options).y))

    program = jax.jit(jax.value_and_grad(loss))
    return (lambda: program(weights)), jax


def graph_of(step):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


def states(module, x):
    """The layer's states (B, T, H): deer.GRU returns (output, h_n), ParaGRU the states."""
    out = module(x)
    return out[0] if isinstance(out, tuple) else out


def deer_step(module, x):
    def step():
        module.zero_grad(set_to_none=True)
        states(module, x).square().mean().backward()

    return step


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="bench-small-ot-deer.json")
    parser.add_argument("--only", choices=("sinkhorn", "deer"), help="one family's rows")
    parser.add_argument("--no-compile", action="store_true", help="leave out the torch.compile variants")
    parser.add_argument("--layer", choices=("ParaGRU", "GRU"), help="one DEER layer's rows")
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = []
    for b, n, d, iterations in SINKHORN_SHAPES if args.only != "deer" else []:
        x = torch.randn(b, n, d, device="cuda", requires_grad=True)
        y = torch.randn(b, n, d, device="cuda")
        row = {"family": "sinkhorn", "B": b, "N": n, "d": d, "iterations": iterations}
        row["core_ms"] = per_step_ms(sinkhorn_core(x.detach(), y, iterations))
        row["eager_ms"] = per_step_ms(sinkhorn_step(sinkhorn_value, x, y, iterations))
        row["graph_ms"] = per_step_ms(graph_of(sinkhorn_step(sinkhorn_value, x, y, iterations)))
        found = jax_sinkhorn_step(b, n, d, iterations)
        row["jax_ms"] = jax_ms(*found, per_batch=20) if found else None
        row["compiled_ms"] = row["compiled_graphs_ms"] = row["torch_compiled_floor_ms"] = None
        if not args.no_compile:
            torch._dynamo.reset()
            compiled = torch.compile(sinkhorn_value, fullgraph=True)
            row["compiled_ms"] = per_step_ms(sinkhorn_step(compiled, x, y, iterations))
            torch._dynamo.reset()
            graphed = torch.compile(sinkhorn_value, fullgraph=True, mode="reduce-overhead")
            row["compiled_graphs_ms"] = per_step_ms(sinkhorn_step(graphed, x, y, iterations))
            torch._dynamo.reset()
            trivial = torch.compile(lambda a, c, _: a * c, fullgraph=True, mode="reduce-overhead")
            row["torch_compiled_floor_ms"] = per_step_ms(sinkhorn_step(trivial, x, y, iterations))
        rows.append(row)
        print(json.dumps(row), flush=True)
    for layer, b, t, m, hidden in DEER_SHAPES if args.only != "sinkhorn" else []:
        if args.layer and layer != args.layer:
            continue
        x = torch.randn(b, t, m, device="cuda")
        module = getattr(deer, layer)(m, hidden, method="deer").cuda()
        row = {"family": "deer", "layer": layer, "B": b, "T": t, "inputs": m, "hidden": hidden}
        row["eager_ms"] = per_step_ms(deer_step(module, x), batches=5)
        with torch.no_grad():
            eager_y = states(module, x)
        row["eager_iterations"] = max(module.last_report.iterations)
        found = jax_deer_step(layer, b, t, m, hidden)
        row["jax_ms"] = jax_ms(*found, per_batch=20) if found else None
        # A copy of the layer for the capture: the eager steps made the
        # parameters' gradient accumulators on the default stream, and a
        # capture on the side stream would have to wait on it.
        captured = copy.deepcopy(module)
        captured.options["max_iter"] = row["eager_iterations"]
        replay = graph_of(deer_step(captured, x))
        row["graph_ms"] = per_step_ms(replay, batches=5)
        with torch.no_grad():
            graph_y = torch.empty_like(eager_y)
            replay_of_forward = graph_of(lambda: graph_y.copy_(states(captured, x)))
            replay_of_forward()
            row["graph_max_dy"] = float((graph_y - eager_y).abs().max())
        row["compiled_ms"] = None
        if not args.no_compile:
            torch._dynamo.reset()
            try:
                row["compiled_ms"] = per_step_ms(deer_step(torch.compile(module, fullgraph=True), x), batches=5)
            except Exception as e:  # noqa: BLE001 - reported; the eager figure stands
                row["compile_failed"] = True
                print(f"deer compile failed at {b}/{t}: {type(e).__name__}: {str(e)[:300]}", file=sys.stderr)
        rows.append(row)
        print(json.dumps(row), flush=True)
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}
    with open(args.out, "w") as f:
        json.dump(meta, f, indent=1)

    def ms(value):
        return "–" if value is None else f"{value:.3f}"

    print("| Sinkhorn B/N/d, iterations | core ms | eager ms | compiled ms | compiled, reduce-overhead ms "
          "| CUDA graph ms | JAX jit ms | torch's compiled floor ms |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["family"] == "sinkhorn":
            print(f"| {r['B']}/{r['N']}/{r['d']}, {r['iterations']} | {r['core_ms']:.3f} | {r['eager_ms']:.3f} "
                  f"| {ms(r['compiled_ms'])} | {ms(r['compiled_graphs_ms'])} | {r['graph_ms']:.3f} "
                  f"| {ms(r['jax_ms'])} | {ms(r['torch_compiled_floor_ms'])} |")
    print("| DEER layer B/T/inputs/hidden | eager ms | compiled ms | CUDA graph ms (max_iter) | graph vs eager "
          "| JAX jit ms |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if r["family"] == "deer":
            print(f"| {r['layer']} {r['B']}/{r['T']}/{r['inputs']}/{r['hidden']} | {r['eager_ms']:.3f} "
                  f"| {'failed' if r.get('compile_failed') else ms(r['compiled_ms'])} "
                  f"| {r['graph_ms']:.3f} ({r['eager_iterations']}) "
                  f"| {r['eager_ms'] / r['graph_ms']:.2f}× | {ms(r['jax_ms'])} |")


if __name__ == "__main__":
    main()
