"""Small shapes from PyTorch on the GPU: a training step's forward + backward
(``loss(x, y).sum().backward()``, x and y requiring grad, float32, gamma = 1,
M = N) for softwave eager (through the operator registered in C++, and
through the torch.autograd.Function it replaces), under torch.compile (default mode, and mode="reduce-overhead",
which replays CUDA graphs), replayed from a CUDA graph captured by hand,
and the core called directly with preallocated outputs (the C++ entry point
with no autograd around it), beside the peers run in the same process:
sdtw-cuda-torch (``softdtw_cuda``, unfused and fused) and
pytorch-softdtw-cuda (``soft_dtw_cuda``), when importable.

    PYTHONPATH=<peer sources> python3 perf/bench_small.py --out small.json [--no-compile]

Timing: CUDA events around batches of back-to-back steps after warm-up; the
median over batches of the time per step, so host-bound steps show as the
host's time. JAX: ``jax.jit(jax.value_and_grad(...))`` of the summed values
through softwave.jax (XLA FFI), when JAX sees a GPU.
"""

import argparse
import json
import statistics
import sys
import time

import torch

from softwave import _core, _torch_ops
from softwave.torch import SoftDTW

SHAPES = [(16, 64, 1), (16, 128, 1), (64, 128, 8), (32, 256, 16), (32, 512, 64)]
DEVICE = "cuda"


def per_step_ms(step, batches=7, per_batch=None):
    """Median over batches of the per-step time (CUDA events; on the CPU, the
    wall clock)."""
    if DEVICE == "cpu":
        return wall_ms(step, batches, per_batch)
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    if per_batch is None:  # about 20 ms a batch
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(5):
            step()
        end.record()
        torch.cuda.synchronize()
        per_batch = max(5, min(2000, int(20.0 / max(begin.elapsed_time(end) / 5, 1e-3))))
    times = []
    for _ in range(batches):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(per_batch):
            step()
        end.record()
        torch.cuda.synchronize()
        times.append(begin.elapsed_time(end) / per_batch)
    return statistics.median(times)


def wall_ms(step, batches, per_batch):
    for _ in range(5):
        step()
    if per_batch is None:  # about 20 ms a batch
        start = time.perf_counter()
        for _ in range(5):
            step()
        per_batch = max(5, min(2000, int(0.02 / max((time.perf_counter() - start) / 5, 1e-6))))
    times = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(per_batch):
            step()
        times.append((time.perf_counter() - start) / per_batch * 1e3)
    return statistics.median(times)


def training_step(loss, x, y):
    def step():
        x.grad = y.grad = None
        loss(x, y).sum().backward()

    return step


def graph_step(loss, x, y):
    """The training step captured once in a CUDA graph; the step replays it."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            training_step(loss, x, y)()
    torch.cuda.current_stream().wait_stream(side)
    x.grad = y.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        loss(x, y).sum().backward()
    return graph.replay


def core_step(x, y):
    values = torch.empty(x.shape[0], device=x.device)
    gx, gy = torch.empty_like(x), torch.empty_like(y)
    stream = torch.cuda.current_stream().cuda_stream if x.is_cuda else 0

    def step():
        _core.soft_dtw(x, y, values, gx, gy, None, None, None, None, 1.0, "sqeuclidean", -1, "automatic", False,
                       stream, False)

    return step


def compiled_variants(row, loss, x, y):
    """torch.compile's default mode, and mode="reduce-overhead", in which
    inductor replays the step's graphs as CUDA graphs."""
    torch._dynamo.reset()
    compiled = torch.compile(lambda a, c: loss(a, c), fullgraph=True)
    row["compiled_ms"] = per_step_ms(training_step(compiled, x, y))
    torch._dynamo.reset()
    graphed = torch.compile(lambda a, c: loss(a, c), fullgraph=True, mode="reduce-overhead")
    try:
        row["compiled_graphs_ms"] = per_step_ms(training_step(graphed, x, y))
    except Exception as e:  # noqa: BLE001 - reported, and the other variants still run
        shape = "/".join(map(str, x.shape))
        print(f"reduce-overhead failed at {shape}: {type(e).__name__}: {str(e)[:300]}", file=sys.stderr)


def function_path_ms(loss, x, y):
    """The eager step with the C++ operator set aside: softwave.torch then
    calls the core through its torch.autograd.Function."""
    native, _torch_ops.NATIVE = _torch_ops.NATIVE, None
    try:
        return per_step_ms(training_step(loss, x, y))
    finally:
        _torch_ops.NATIVE = native


def cpu_peers():
    """tslearn's PyTorch Soft-DTW loss (CPU), when importable."""
    try:
        from tslearn.metrics import SoftDTWLossPyTorch

        return {"tslearn": SoftDTWLossPyTorch(gamma=1.0)}
    except Exception as e:  # noqa: BLE001 - a peer that does not import is reported, not fatal
        print(f"tslearn not measured: {e}", file=sys.stderr)
        return {}


def peers():
    import numpy

    # numba's CUDA target (which both peers use) still calls numpy.row_stack,
    # an alias of vstack that NumPy 2.4 removed.
    if not hasattr(numpy, "row_stack"):
        numpy.row_stack = numpy.vstack
    found = {}
    try:
        import softdtw_cuda

        found["sdtw-cuda-torch unfused"] = softdtw_cuda.SoftDTW(gamma=1.0, fused=False)
        found["sdtw-cuda-torch fused"] = softdtw_cuda.SoftDTW(gamma=1.0, fused=True)
    except Exception as e:  # noqa: BLE001 - a peer that does not import is reported, not fatal
        print(f"sdtw-cuda-torch not measured: {e}", file=sys.stderr)
    try:
        import soft_dtw_cuda

        found["pytorch-softdtw-cuda"] = soft_dtw_cuda.SoftDTW(use_cuda=True, gamma=1.0)
    except Exception as e:  # noqa: BLE001
        print(f"pytorch-softdtw-cuda not measured: {e}", file=sys.stderr)
    return found


def jax_on_gpu():
    """(jax, jax.numpy, softwave.jax) where JAX runs on a GPU and softwave
    calls the core there as XLA FFI targets; else None."""
    try:
        import jax
        import jax.numpy as jnp

        import softwave.jax as swj
    except Exception:  # noqa: BLE001
        return None
    if jax.default_backend() != "gpu" or not swj.uses_ffi():
        return None
    return jax, jnp, swj


def jax_step(b, n, d):
    found = jax_on_gpu()
    if found is None:
        return None
    jax, jnp, swj = found
    key = jax.random.PRNGKey(0)
    x = jax.random.normal(key, (b, n, d), jnp.float32)
    y = jax.random.normal(jax.random.PRNGKey(1), (b, n, d), jnp.float32)
    program = jax.jit(jax.value_and_grad(lambda a, c: swj.soft_dtw(a, c, 1.0).sum(), argnums=(0, 1)))

    def step():
        return program(x, y)

    return step, jax


def jax_ms(step, jax, batches=7, per_batch=200):
    import time

    for _ in range(10):
        jax.block_until_ready(step())
    times = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(per_batch):
            out = step()
        jax.block_until_ready(out)
        times.append((time.perf_counter() - start) / per_batch * 1e3)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="bench-small.json")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile variants")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                        help="cpu: the core, eager (both paths) and tslearn, by the wall clock")
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    torch.manual_seed(0)
    peer_losses = peers() if DEVICE == "cuda" else cpu_peers()
    rows = []
    for b, n, d in SHAPES:
        x = torch.randn(b, n, d, device=DEVICE, requires_grad=True)
        y = torch.randn(b, n, d, device=DEVICE, requires_grad=True)
        loss = SoftDTW(gamma=1.0)
        row = {"B": b, "N": n, "d": d}
        row["core_ms"] = per_step_ms(core_step(x.detach(), y.detach()))
        row["eager_ms"] = per_step_ms(training_step(loss, x, y))
        row["native_operator"] = _torch_ops.NATIVE is not None
        if row["native_operator"]:
            row["eager_function_ms"] = function_path_ms(loss, x, y)
        row["graph_ms"] = row["compiled_ms"] = row["compiled_graphs_ms"] = None
        if DEVICE == "cuda":
            row["graph_ms"] = per_step_ms(graph_step(loss, x, y))
            if not args.no_compile:
                compiled_variants(row, loss, x, y)
            found = jax_step(b, n, d)
            if found is not None:
                row["jax_ms"] = jax_ms(*found)
        for name, peer in peer_losses.items():
            try:
                row[name] = per_step_ms(training_step(peer, x, y), batches=5)
            except Exception as e:  # noqa: BLE001 - e.g. a peer's launch limit
                row[name] = None
                print(f"{name} failed at {b}/{n}/{d}: {type(e).__name__}: {str(e)[:120]}", file=sys.stderr)
        peer_times = {k: v for k, v in row.items() if k in peer_losses and v is not None}
        if peer_times:
            best = min(peer_times, key=peer_times.get)
            row["best_peer"], row["best_peer_ms"] = best, peer_times[best]
        rows.append(row)
        print(json.dumps(row), flush=True)
    name = torch.cuda.get_device_name() if DEVICE == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    meta = {"device": name, "torch": torch.__version__, "rows": rows}
    with open(args.out, "w") as f:
        json.dump(meta, f, indent=1)
    head = ("| B/N/d | core ms | eager ms | eager, autograd.Function ms | compiled ms | compiled, reduce-overhead ms "
            "| CUDA graph ms | JAX jit ms | best peer ms | graph vs peer | eager vs peer |")
    print(head)
    print("|" + "---|" * 11)

    def ms(value):
        return "–" if value is None else f"{value:.3f}"

    for r in rows:
        peer = r.get("best_peer_ms")
        peer_text = f"{peer:.3f} ({r['best_peer']})" if peer else "–"
        ratio = f"{peer / r['graph_ms']:.1f}×" if peer and r["graph_ms"] else "–"
        eager_ratio = f"{peer / r['eager_ms']:.1f}×" if peer else "–"
        print(f"| {r['B']}/{r['N']}/{r['d']} | {ms(r['core_ms'])} | {ms(r['eager_ms'])} | "
              f"{ms(r.get('eager_function_ms'))} | {ms(r['compiled_ms'])} | {ms(r['compiled_graphs_ms'])} | "
              f"{ms(r['graph_ms'])} | {ms(r.get('jax_ms'))} | {peer_text} | {ratio} | {eager_ratio} |")


if __name__ == "__main__":
    main()
