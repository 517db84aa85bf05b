"""Where the time of one small call goes (B=16, N=128, d=1, CUDA): the
PyTorch profiler (CUPTI) records every CUDA runtime call and kernel of the
process, softwave's included. Prints, per scenario, the host-side runtime
calls per step (count and µs) and the kernels per step; writes a Chrome
trace of each scenario to $OUT (or the working directory).

    python3 perf/device/profile_step.py
"""
import os
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from softwave import _core
from softwave.torch import SoftDTW

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_torch import autograd_floor_step  # noqa: E402

out = os.environ.get("OUT", ".")
B, N, D, STEPS = 16, 128, 1, 50
x = torch.randn(B, N, D, device="cuda")
y = torch.randn(B, N, D, device="cuda")
xg, yg = x.clone().requires_grad_(), y.clone().requires_grad_()
v = torch.empty(B, device="cuda")
gx, gy = torch.empty_like(x), torch.empty_like(y)
loss = SoftDTW(gamma=1.0)


checked = SoftDTW(gamma=1.0, check_inputs=True)


def training_step():
    xg.grad = yg.grad = None
    loss(xg, yg).sum().backward()


def inference():
    with torch.no_grad():
        loss(x, y)


def training_step_checked():
    xg.grad = yg.grad = None
    checked(xg, yg).sum().backward()


autograd_floor = autograd_floor_step(xg, yg, v, gx, gy)


def core_value_and_grad():
    _core.soft_dtw(x, y, v, gx, gy, None, None, None, None, 1.0, "sqeuclidean", -1, "automatic", False, 0, True)


def core_value_and_grad_unchecked():
    _core.soft_dtw(x, y, v, gx, gy, None, None, None, None, 1.0, "sqeuclidean", -1, "automatic", False, 0, False)


def core_then_floor():
    core_value_and_grad_unchecked()
    autograd_floor()


def host_us(f, n=1000):
    """Host time to issue one call (no synchronisation inside the timing,
    so a call that waits for the GPU shows it here)."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        f()
    issued = (time.perf_counter() - start) / n * 1e6
    torch.cuda.synchronize()
    return issued


def device_us(f, n=200):
    """GPU time of one call, CUDA events around n calls on the current stream."""
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    begin.record()
    for _ in range(n):
        f()
    end.record()
    torch.cuda.synchronize()
    return begin.elapsed_time(end) / n * 1e3


def wall_us(f, n=1000):
    for _ in range(100):
        f()
    best = []
    for _ in range(5):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(n):
            f()
        torch.cuda.synchronize()
        best.append((time.perf_counter() - start) / n * 1e6)
    return sorted(best)[2]


scenarios = [("training_step", training_step), ("training_step_checked", training_step_checked),
             ("inference", inference), ("core_value_and_grad", core_value_and_grad),
             ("core_value_and_grad_unchecked", core_value_and_grad_unchecked),
             ("autograd_floor", autograd_floor), ("core_then_floor", core_then_floor)]
print("µs per call: back to back (median of 5 batches of 1000), host issue time, events")
for name, f in scenarios:
    print(f"  {name:32s} {wall_us(f):8.1f} {host_us(f):8.1f} {device_us(f):8.1f}")
for name, f in scenarios[:5]:
    print(f"\n=== {name}")
    for _ in range(20):
        f()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(STEPS):
            f()
        torch.cuda.synchronize()
    prof.export_chrome_trace(os.path.join(out, f"trace-{name}.json"))
    rows = []
    for e in prof.key_averages():
        if e.key.startswith("cuda") or e.key.startswith("cu") or e.device_type.name == "CUDA":
            rows.append(e)
    print(f"{'event':60s} {'per step':>8s} {'host us/step':>12s} {'device us/step':>14s}")
    for e in sorted(rows, key=lambda e: -(e.self_cpu_time_total + e.self_device_time_total)):
        print(f"{e.key[:60]:60s} {e.count / STEPS:8.2f} {e.self_cpu_time_total / STEPS:12.1f} "
              f"{e.self_device_time_total / STEPS:14.1f}")
