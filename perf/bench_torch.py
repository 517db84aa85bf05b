"""PyTorch front end on the GPU: forward + backward through autograd (the way
a training loop calls it) on the peers' grid, next to the peers' figures in
../shared/perf/peers-softdtw-h200.csv, and the Python layer's overhead.

    python3 perf/bench_torch.py --out bench-torch.json [--peers FILE] [--quick]

Timing: CUDA events around each repetition, after 3 warm-ups; the median of
at least 5 repetitions (more while under 1 s). Memory beyond the inputs:
torch's allocator (outputs and gradients) plus the library's stream-ordered
workspace (the CUDA default memory pool's high-water mark).
"""

import argparse
import ctypes
import csv
import json
import statistics
import sys
import time
from pathlib import Path

import torch

import softwave
from softwave import _core
from softwave.torch import SoftDTW

GRID = [(b, n, d) for b in (16, 32) for n in (128, 512, 1024, 2048) for d in (1, 64)]
GRID += [(32, 4096, 64), (8, 8192, 16)]


class MemPool:
    """The CUDA default memory pool's used-memory high-water mark (where
    cudaMallocAsync allocations go), read through the CUDA runtime."""

    USED_MEM_HIGH = 8  # cudaMemPoolAttrUsedMemHigh

    def __init__(self):
        self.runtime = None
        for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
            try:
                self.runtime = ctypes.CDLL(name)
                break
            except OSError:
                continue
        self.pool = ctypes.c_void_p()
        if self.runtime is not None:
            rc = self.runtime.cudaDeviceGetDefaultMemPool(ctypes.byref(self.pool), torch.cuda.current_device())
            if rc != 0:
                self.runtime = None

    def reset(self):
        if self.runtime is not None:
            zero = ctypes.c_uint64(0)
            self.runtime.cudaMemPoolSetAttribute(self.pool, self.USED_MEM_HIGH, ctypes.byref(zero))

    def high(self):
        if self.runtime is None:
            return float("nan")
        value = ctypes.c_uint64(0)
        self.runtime.cudaMemPoolGetAttribute(self.pool, self.USED_MEM_HIGH, ctypes.byref(value))
        return value.value


def median_ms(step, min_reps=5, budget_s=1.0):
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    times, started = [], time.perf_counter()
    while len(times) < min_reps or (time.perf_counter() - started < budget_s and len(times) < 200):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        step()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end))
    return statistics.median(times), len(times)


def best_peers(path):
    best = {}
    if not path or not Path(path).exists():
        return best
    with open(path) as f:
        rows = csv.DictReader(line for line in f if not line.startswith("#"))
        for row in rows:
            if row["fwdbwd_ms"] == "ERR":
                continue
            key = (int(row["B"]), int(row["N"]), int(row["D"]))
            value = (float(row["fwdbwd_ms"]), row["impl"], float(row["peak_mb"]))
            if key not in best or value[0] < best[key][0]:
                best[key] = value
    return best


def autograd_floor_step(x, y, values, gx, gy):
    """torch's own cost for softwave's autograd structure: a step through a
    Function whose forward returns ready values and whose backward scales
    ready gradients, with no softwave call."""

    class Precomputed(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            return values.clone()

        @staticmethod
        def backward(ctx, g):
            scale = g.reshape(-1, 1, 1)
            return gx * scale, gy * scale

    def step():
        x.grad = y.grad = None
        Precomputed.apply(x, y).sum().backward()

    return step


def bench_shape(b, n, d, pool):
    generator = torch.Generator(device="cuda").manual_seed(b * 100003 + n * 31 + d)
    x = torch.randn(b, n, d, device="cuda", generator=generator).requires_grad_()
    y = torch.randn(b, n, d, device="cuda", generator=generator).requires_grad_()
    loss = SoftDTW(gamma=1.0)

    def fwdbwd():
        x.grad = y.grad = None
        loss(x, y).sum().backward()

    def fwd():
        with torch.no_grad():
            loss(x, y)

    fwdbwd()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    pool.reset()
    fwdbwd()
    torch.cuda.synchronize()
    # Gradients of x and y stay allocated after the step: they are outputs.
    torch_peak = torch.cuda.max_memory_allocated() - base + 2 * x.numel() * 4
    pool_peak = pool.high()
    fwdbwd_ms, reps = median_ms(fwdbwd)
    fwd_ms, _ = median_ms(fwd)
    return dict(B=b, N=n, d=d, fwdbwd_ms=fwdbwd_ms, fwd_ms=fwd_ms, reps=reps,
                cells_per_s=b * n * n / (fwdbwd_ms * 1e-3),
                peak_mb=(torch_peak + pool_peak) / 1e6, torch_mb=torch_peak / 1e6, workspace_mb=pool_peak / 1e6)


def python_overhead(b=16, n=128, d=1):
    """Autograd path minus a direct call of the compiled core on
    preallocated outputs (same work: values and both gradients)."""
    x = torch.randn(b, n, d, device="cuda").requires_grad_()
    y = torch.randn(b, n, d, device="cuda").requires_grad_()
    loss = SoftDTW(gamma=1.0)
    values, gx, gy = torch.empty(b, device="cuda"), torch.empty_like(x), torch.empty_like(y)
    stream = torch.cuda.current_stream().cuda_stream
    xd, yd = x.detach(), y.detach()

    def autograd_step():
        x.grad = y.grad = None
        loss(x, y).sum().backward()

    def core_step():
        _core.soft_dtw(xd, yd, values, gx, gy, None, None, None, None, 1.0, "sqeuclidean", -1,
                       "automatic", False, stream)

    def forward_step():
        with torch.no_grad():
            loss(x, y)

    def core_forward_step():
        _core.soft_dtw(xd, yd, values, None, None, None, None, None, None, 1.0, "sqeuclidean", -1,
                       "automatic", False, stream)

    torch_floor_step = autograd_floor_step(x, y, values, gx, gy)

    results = {}
    for name, step in (("autograd_us", autograd_step), ("core_us", core_step), ("forward_us", forward_step),
                       ("core_forward_us", core_forward_step), ("torch_autograd_floor_us", torch_floor_step)):
        ms, _ = median_ms(step, min_reps=200, budget_s=2.0)
        results[name] = ms * 1e3
    results["overhead_us"] = results["autograd_us"] - results["core_us"]
    # What softwave's Python layer adds beyond torch's own autograd cost.
    results["layer_overhead_us"] = results["overhead_us"] - results["torch_autograd_floor_us"]
    results["forward_overhead_us"] = results["forward_us"] - results["core_forward_us"]
    return dict(B=b, N=n, d=d, **results)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    root = Path(__file__).resolve().parents[1]
    candidates = [root.parent / "shared", root / "shared"]
    default_peers = next((c / "perf/peers-softdtw-h200.csv" for c in candidates if c.exists()), None)
    parser.add_argument("--peers", default=default_peers and str(default_peers))
    parser.add_argument("--quick", action="store_true", help="only N <= 512")
    args = parser.parse_args()
    peers = best_peers(args.peers)
    pool = MemPool()
    rows = []
    print(f"softwave {softwave.__version__} on {torch.cuda.get_device_name()} ({softwave.default_space()}), "
          f"torch {torch.__version__}")
    print("| B/N/d | fwd+bwd ms | fwd ms | peak MB (torch + workspace) | best peer ms | × |")
    print("|---|---|---|---|---|---|")
    for b, n, d in GRID:
        if args.quick and n > 512:
            continue
        row = bench_shape(b, n, d, pool)
        peer = peers.get((b, n, d))
        if peer:
            row.update(peer_ms=peer[0], peer=peer[1], peer_mb=peer[2], speedup=peer[0] / row["fwdbwd_ms"])
        rows.append(row)
        peer_text = f"{peer[0]:.2f} ({peer[1]})" if peer else "-"
        speedup_text = f"{row['speedup']:.1f}" if peer else "-"
        print(f"| {b}/{n}/{d} | {row['fwdbwd_ms']:.3f} | {row['fwd_ms']:.3f} | {row['peak_mb']:.1f} "
              f"({row['torch_mb']:.1f} + {row['workspace_mb']:.1f}) | {peer_text} | {speedup_text} |", flush=True)
        save(args.out, rows, None)
    overhead = python_overhead()
    print(f"Python layer at B=16, N=128, d=1: forward+backward {overhead['autograd_us']:.1f} us through autograd, "
          f"{overhead['core_us']:.1f} us calling the core directly (overhead {overhead['overhead_us']:.1f} us); "
          f"forward {overhead['forward_us']:.1f} vs {overhead['core_forward_us']:.1f} us "
          f"(overhead {overhead['forward_overhead_us']:.1f} us); torch's autograd alone "
          f"{overhead['torch_autograd_floor_us']:.1f} us, so softwave's layer adds {overhead['layer_overhead_us']:.1f} us")
    save(args.out, rows, overhead)
    return 0


def save(path, rows, overhead):
    with open(path, "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows,
                       python_overhead=overhead), f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
