"""Where the time of one small call goes, on CUDA: the PyTorch profiler
(CUPTI) records every CUDA runtime call and kernel of the process,
softwave's included. Prints, per scenario, the time a call takes back to
back, the host's time to issue it and its GPU time by events, then the
host-side runtime calls per call (count and µs) and the kernels per call;
writes a Chrome trace of each scenario to $OUT (or the working directory).

    python3 perf/device/profile_step.py                  # Soft-DTW, B=16, N=128, d=1
    python3 perf/device/profile_step.py --family deer    # DEER layers, eager
    python3 perf/device/profile_step.py --family gw      # sampled GW, small tasks
"""
import argparse
import os
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from softwave import _core

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_torch import autograd_floor_step  # noqa: E402

out = os.environ.get("OUT", ".")
STEPS = 50


def softdtw_scenarios():
    from softwave.torch import SoftDTW

    B, N, D = 16, 128, 1
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

    scenarios = [("training_step", training_step), ("training_step_checked", training_step_checked),
                 ("inference", inference), ("core_value_and_grad", core_value_and_grad),
                 ("core_value_and_grad_unchecked", core_value_and_grad_unchecked),
                 ("autograd_floor", autograd_floor), ("core_then_floor", core_then_floor)]
    return scenarios, 1000


def deer_scenarios():
    """DEER's eager layers (method "deer"), each beside the core's own calls
    on the same arrays: ParaRNN's GRU at B/T/inputs/hidden 16/256/8/16 (the
    small-shape table's first DEER row) and one GRU sequence, n = 1,
    T = 1000."""
    import softwave.deer as deer
    from softwave import _torch_deer

    from bench_small_ot_deer import deer_step as layer_step
    from bench_small_ot_deer import states

    def layer_forward(module, x):
        def forward():
            with torch.no_grad():
                states(module, x)

        return forward

    def core_calls(module, x):
        """The core's forward and gradients on the layer's own arrays,
        preallocated (what the layer's Function does, less torch)."""
        with torch.no_grad():
            weight, bias, weight_hh = module._pytorch_gates()
            p = module._projections(x, weight, bias)
        settings = deer._settings("gru", "deer", "diagonal", "automatic", None, None, 100, 0, None, True,
                                  diagonal=True)
        core = deer._core_settings(settings, _torch_deer._stream(x))
        B, T = x.shape[:2]
        y = x.new_empty((B, T, module.hidden_size))
        forward_arrays = {"x": p, "weight_hh": weight_hh, "y": y,
                          "iterations": torch.empty(B, dtype=torch.int32, device=x.device),
                          "path": torch.empty(B, dtype=torch.int32, device=x.device)}
        gradient_arrays = {"x": p, "weight_hh": weight_hh, "y": y, "grad_y": torch.ones_like(y),
                           "grad_x": torch.empty_like(p), "grad_weight_hh": torch.empty_like(weight_hh)}

        def forward():
            _core.deer_rnn("forward", forward_arrays, core)

        def both():
            forward()
            _core.deer_rnn("gradients", gradient_arrays, dict(core, warm_start=False))

        # The same iterations issued without reading convergence back (as in
        # a CUDA-graph capture): the cost of the read-backs is the difference.
        forward()
        fixed = dict(core, max_iterations=int(forward_arrays["iterations"].max()), check_every=0)

        def forward_unchecked():
            _core.deer_rnn("forward", forward_arrays, fixed)

        return forward, both, forward_unchecked

    torch.manual_seed(0)
    x = torch.randn(16, 256, 8, device="cuda")
    para = deer.ParaGRU(8, 16, method="deer").cuda()
    core_forward, core_both, core_forward_unchecked = core_calls(para, x)
    x1 = torch.randn(1, 1000, 1, device="cuda")
    gru = deer.GRU(1, 1, method="deer").cuda()
    scenarios = [("para_gru_step", layer_step(para, x)), ("para_gru_forward", layer_forward(para, x)),
                 ("core_forward", core_forward), ("core_forward_unchecked", core_forward_unchecked),
                 ("core_forward_and_gradients", core_both),
                 ("gru_n1_T1000_forward", layer_forward(gru, x1)),
                 ("gru_n1_T1000_step", layer_step(gru, x1))]
    return scenarios, 100


def gw_scenarios():
    """Sampled GW as perf/bench_gw_torchgw.py calls it (CUDA tensors, no
    plan or objective): TorchGW's distance-mode task in landmark mode
    (spiral 400 -> Swiss roll 500, alpha 0.8, at most 200 iterations, 20
    landmarks; also with 5 Sinkhorn iterations a solve) and its scale task
    at 4000 x 5000, 10000 x 12000 and 40000 x 50000 (alpha 0.9, 50
    landmarks), and its random precomputed task at 2000 x 2500. Profiled
    only (two calls after one untimed): perf/bench_gw_torchgw.py times
    them."""
    import numpy as np
    import softwave.ot as swot

    from bench_gw_torchgw import cloud

    def task(n, k, alpha, max_iter, landmarks, **options):
        x = torch.from_numpy(cloud(np, n, 0, False)).cuda()
        y = torch.from_numpy(cloud(np, k, 1, True)).cuda()
        return solve(x, y, alpha, max_iter, distance_mode="landmark", n_landmarks=landmarks, **options)

    def random_task(n, k):
        x = torch.from_numpy(np.random.default_rng(0).uniform(size=(n, 3)).astype(np.float32)).cuda()
        y = torch.from_numpy(np.random.default_rng(1).uniform(size=(k, 3)).astype(np.float32)).cuda()
        return solve(x, y, 0.9, 300, distance_mode="precomputed")

    def solve(x, y, alpha, max_iter, **options):
        def call():
            swot.sampled_gw(x, y, k=5, alpha=alpha, epsilon=0.005, M=80, max_iter=max_iter,
                            mixed_precision=True, seed=0, plan=False, objective=False, **options)

        return call

    scenarios = [("landmark_400x500", task(400, 500, 0.8, 200, 20)),
                 ("landmark_400x500_5_steps", task(400, 500, 0.8, 200, 20, sinkhorn_iterations=5)),
                 ("scale_4000x5000", task(4000, 5000, 0.9, 300, 50)),
                 ("scale_10000x12000", task(10000, 12000, 0.9, 300, 50)),
                 ("scale_40000x50000", task(40000, 50000, 0.9, 300, 50)),
                 ("random_2000x2500", random_task(2000, 2500))]
    return scenarios, 0


def host_us(f, n):
    """Host time to issue one call (no synchronisation inside the timing,
    so a call that waits for the GPU shows it here)."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        f()
    issued = (time.perf_counter() - start) / n * 1e6
    torch.cuda.synchronize()
    return issued


def device_us(f, n):
    """GPU time of one call, CUDA events around n calls on the current stream."""
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    begin.record()
    for _ in range(n):
        f()
    end.record()
    torch.cuda.synchronize()
    return begin.elapsed_time(end) / n * 1e3


def wall_us(f, n):
    for _ in range(n // 10):
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



def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--family", choices=("softdtw", "deer", "gw"), default="softdtw")
    parser.add_argument("--only", default="", help="comma-separated scenario names (default: all)")
    args = parser.parse_args()
    global STEPS
    if args.family == "gw":
        STEPS = 2  # a call is thousands of kernels
    scenarios, calls = {"softdtw": softdtw_scenarios, "deer": deer_scenarios, "gw": gw_scenarios}[args.family]()
    if args.only:
        scenarios = [(name, f) for name, f in scenarios if name in args.only.split(",")]
    if calls:  # GW's calls are timed by perf/bench_gw_torchgw.py instead
        print(f"µs per call: back to back (median of 5 batches of {calls}), host issue time, events")
    for name, f in scenarios if calls else ():
        print(f"  {name:32s} {wall_us(f, calls):8.1f} {host_us(f, calls):8.1f} {device_us(f, calls // 5):8.1f}",
              flush=True)
    for name, f in scenarios:
        profile_calls(name, f)


def short_name(key):
    """A kernel's name without the launch wrappers Kokkos puts around every
    functor (they hid which kernel a row was), cut to 100 characters."""
    for prefix in ("void ", "Kokkos::Impl::cuda_parallel_launch_constant_memory<",
                   "Kokkos::Impl::cuda_parallel_launch_local_memory<", "Kokkos::Impl::",
                   "softwave::impl::"):
        if key.startswith(prefix):
            key = key[len(prefix):]
    return key[:100]


def profile_calls(name, f):
    """The runtime calls and kernels of STEPS calls, per call."""
    print(f"\n=== {name}")
    for _ in range(20 if STEPS > 2 else 1):
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
    print(f"{'event':100s} {'per call':>8s} {'host us/call':>12s} {'device us/call':>14s}")
    for e in sorted(rows, key=lambda e: -(e.self_cpu_time_total + e.self_device_time_total)):
        print(f"{short_name(e.key):100s} {e.count / STEPS:8.2f} {e.self_cpu_time_total / STEPS:12.1f} "
              f"{e.self_device_time_total / STEPS:14.1f}", flush=True)


if __name__ == "__main__":
    main()
