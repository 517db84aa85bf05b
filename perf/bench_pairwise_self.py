#!/usr/bin/env python3
"""All pairs of one set with itself on a GPU: softwave.torch.pairwise(x, x)
(the same tensor on both sides, so only the pairs a <= b are walked and
mirrored) against pairwise(x, x.clone()) (every pair walked), best of 3
after a warm-up, the largest difference and whether the matrix is symmetric.

    python3 perf/bench_pairwise_self.py    # after building softwave with CUDA
"""

import time

import softwave.torch as swt
import torch


def best_of(call, repeats=3):
    call()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def main():
    torch.manual_seed(0)
    for B, N, d in [(2000, 128, 1), (4000, 128, 1), (2000, 128, 16)]:
        x = torch.randn(B, N, d, device="cuda")
        y = x.clone()
        itself = best_of(lambda: swt.pairwise(x, x, 1.0))
        copy = best_of(lambda: swt.pairwise(x, y, 1.0))
        half, whole = swt.pairwise(x, x, 1.0), swt.pairwise(x, y, 1.0)
        difference = ((half - whole).abs().max() / whole.abs().max()).item()
        print(f"B={B} N={N} d={d}: itself {itself * 1e3:.1f} ms, copy {copy * 1e3:.1f} ms, "
              f"{copy / itself:.2f}x, difference {difference:.1e}, symmetric {bool((half == half.T).all())}",
              flush=True)


if __name__ == "__main__":
    main()
