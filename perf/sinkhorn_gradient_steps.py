"""A Sinkhorn training step's two parts on the GPU: the solve alone and the
solve with the value's gradient w.r.t. x, through softwave.ot (float32,
epsilon 0.1, a fixed iteration count), at shapes where d is large enough
that the gradient pass, not the solve, can dominate. Prints one line a
shape: the times (CUDA events, median of 3 batches) and the difference,
and the gradient's total magnitude, so that two builds run one after
the other can be compared line by line.

    python3 perf/sinkhorn_gradient_steps.py TAG
"""

import sys
from pathlib import Path

import torch

import softwave.ot as ot

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_small import per_step_ms  # noqa: E402

SHAPES = [(1, 4096, 64, 50), (1, 4096, 32, 50), (1, 4096, 16, 50), (8, 512, 3, 50), (1, 20000, 64, 20)]


def main():
    tag = sys.argv[1] if len(sys.argv) > 1 else "softwave"
    torch.manual_seed(0)
    for b, n, d, iterations in SHAPES:
        x = torch.randn(b, n, d, device="cuda", requires_grad=True)
        y = torch.randn(b, n, d, device="cuda")

        def solve():
            with torch.no_grad():
                ot.sinkhorn(x, y, epsilon=0.1, tolerance=0.0, max_iterations=iterations).value

        def solve_and_gradient():
            x.grad = None
            ot.sinkhorn(x, y, epsilon=0.1, tolerance=0.0, max_iterations=iterations).value.sum().backward()

        alone, both = per_step_ms(solve, batches=3), per_step_ms(solve_and_gradient, batches=3)
        solve_and_gradient()
        print(f"{tag} {b}/{n}/{d}, {iterations}: solve {alone:.3f} ms, solve + gradient {both:.3f} ms, "
              f"gradient {both - alone:.3f} ms, |grad| {float(x.grad.abs().sum()):.6e}", flush=True)


if __name__ == "__main__":
    main()
