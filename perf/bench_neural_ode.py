"""softwave.deer.neural_ode against torchdiffeq and a plain torch RK4 loop
on one GPU, in one process: an autonomous neural ODE
dy/dt = W_out tanh(W_hidden y + b_hidden) + b_out (torch.nn.Linear's
initialisation), B = 16 sequences from y0 ~ N(0, 1), a uniform grid of T
steps of 0.05, float32; forward, and forward + backward of y.square().mean()
(gradients of y0 and every weight).

    python3 perf/bench_neural_ode.py --out ode.json [--shapes 8x32x1000,...] [--device cpu]

Variants: softwave DEER with full and with diagonal Jacobians, softwave's
sequential integrator (one thread per sequence, the whole loop in one
kernel), torchdiffeq's odeint with method="rk4" on the same grid (its rk4
is the 3/8 rule: fourth order with four field evaluations, as the classical
scheme softwave runs; gradients by backpropagation through the steps), and
the classical RK4 written as a torch loop (softwave's scheme exactly).
torchdiffeq and the loop launch a few kernels per stage: they run only
where T <= --loop-steps (default 10,000).

Timing: CUDA events (on the CPU the host's clock) around repeated calls
after a warm-up, median of 5
(2 at T >= 100k); max_dy: the largest |y − y_loop64| against the classical
RK4 loop in float64 (where it runs); peak_MB: torch's peak allocation over
one call above what was allocated before it (GPU only).
"""

import argparse
import json
import statistics
import time

import torch

import softwave.deer as deer

SHAPES = [(2, 16, 1000), (2, 16, 10000), (2, 16, 100000), (8, 32, 1000), (8, 32, 10000),
          (8, 32, 100000), (16, 64, 1000), (16, 64, 10000)]
BATCH, STEP = 16, 0.05


def median_ms(call, repeats, device):
    """The median time of call() after a warm-up: CUDA events on a GPU, the
    host's clock on the CPU."""
    call()
    times = []
    if device == "cpu":
        for _ in range(repeats):
            begin = time.perf_counter()
            call()
            times.append(1e3 * (time.perf_counter() - begin))
        return statistics.median(times)
    torch.cuda.synchronize()
    for _ in range(repeats):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        call()
        end.record()
        torch.cuda.synchronize()
        times.append(begin.elapsed_time(end))
    return statistics.median(times)


def rk4_loop(f, y0, steps):
    y, out = y0, []
    for _ in range(steps):
        k1 = f(y)
        k2 = f(y + 0.5 * STEP * k1)
        k3 = f(y + 0.5 * STEP * k2)
        k4 = f(y + STEP * k3)
        y = y + STEP / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        out.append(y)
    return torch.stack(out, 1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--shapes", default=None, help="n x h x T triples, e.g. 8x32x1000")
    parser.add_argument("--loop-steps", type=int, default=10000)
    parser.add_argument("--device", default="cuda", help="cuda, or cpu (softwave's OpenMP build)")
    args = parser.parse_args()
    shapes = SHAPES
    if args.shapes:
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    try:
        import torchdiffeq
    except ImportError:
        torchdiffeq = None
        print("torchdiffeq is not installed: its rows are left out")
    dev = args.device
    rows = []
    for n, h, steps in shapes:
        torch.manual_seed(0)
        hidden, out = torch.nn.Linear(n, h).to(dev), torch.nn.Linear(h, n).to(dev)
        field = torch.nn.Sequential(hidden, torch.nn.Tanh(), out)
        y0 = torch.randn(BATCH, n, device=dev, requires_grad=True)
        grid = torch.full((steps,), STEP, device=dev)
        times = torch.arange(steps + 1, device=dev, dtype=torch.float32) * STEP
        reference = None
        if steps <= args.loop_steps:
            with torch.no_grad():
                f64 = torch.nn.Sequential(torch.nn.Linear(n, h), torch.nn.Tanh(), torch.nn.Linear(h, n)).to(dev)
                f64.load_state_dict(field.state_dict())
                reference = rk4_loop(f64.double(), y0.detach().double(), steps)
        params = list(field.parameters())

        def run_softwave(method, jacobian):
            def call(y0_):
                y, _ = deer.neural_ode(grid, y0_, hidden.weight, out.weight, hidden.bias, out.bias,
                                       method=method, jacobian=jacobian)
                return y
            return call

        variants = [("softwave_deer_full", run_softwave("deer", "full")),
                    ("softwave_deer_diagonal", run_softwave("deer", "diagonal")),
                    ("softwave_sequential", run_softwave("sequential", "full"))]
        if steps <= args.loop_steps:
            variants.append(("torch_rk4_loop", lambda y0_: rk4_loop(field, y0_, steps)))
            if torchdiffeq is not None:
                variants.append(("torchdiffeq_rk4", lambda y0_: torchdiffeq.odeint(
                    lambda t, y: field(y), y0_, times, method="rk4").transpose(0, 1)[:, 1:]))
        for name, run in variants:
            repeats = 5 if steps < 100000 else 2
            row = {"variant": name, "n": n, "h": h, "T": steps, "B": BATCH}
            with torch.no_grad():
                y = run(y0.detach())
            if reference is not None:
                row["max_dy"] = float((y.double() - reference).abs().max())

            def forward():
                with torch.no_grad():
                    run(y0.detach())

            def forward_backward():
                for p in params:
                    p.grad = None
                y0.grad = None
                run(y0).square().mean().backward()

            for mode, call in (("forward", forward), ("forward_backward", forward_backward)):
                if dev == "cpu":
                    row[mode + "_ms"] = median_ms(call, repeats, dev)
                    continue
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                row[mode + "_ms"] = median_ms(call, repeats, dev)
                row[mode + "_peak_MB"] = (torch.cuda.max_memory_allocated() - base) / 1e6
            rows.append(row)
            print(f"n={n} h={h} T={steps} {name}: forward {row['forward_ms']:.3f} ms, forward+backward "
                  f"{row['forward_backward_ms']:.3f} ms, max_dy {row.get('max_dy', float('nan')):.2e}",
                  flush=True)
    meta = {"device": torch.cuda.get_device_name() if dev == "cuda" else f"cpu, {torch.get_num_threads()} threads",
            "torch": torch.__version__,
            "torchdiffeq": getattr(torchdiffeq, "__version__", None)}
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
