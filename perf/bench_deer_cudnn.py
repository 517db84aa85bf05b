"""cuDNN's GRU through torch on the DEER benchmark's task (perf/bench_deer.cpp:
input size = hidden size n, B = 16, inputs N(0, 1), PyTorch's default
initialisation, zero initial state, float32): forward, and forward +
backward of y.sum() (gradients of x and every weight), beside softwave's
BM_DeerGru figures.

    python3 perf/bench_deer_cudnn.py --out cudnn.json [--shapes 1x1000,4x100000]

Where cuDNN refuses a shape, torch's own kernels run it (the row's "cudnn"
is then false).

Timing: CUDA events around repeated calls after warm-up, median of 5; peak
memory from torch.cuda.max_memory_allocated over one call.
"""

import argparse
import json
import statistics

import torch

SHAPES = [(1, 1000), (1, 10000), (1, 100000), (1, 1000000), (4, 1000),
          (4, 100000), (4, 1000000), (16, 1000), (16, 100000), (64, 1000),
          (64, 10000)]
BATCH = 16


def median_ms(call, repeats=5):
    call()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        begin = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        begin.record()
        call()
        end.record()
        torch.cuda.synchronize()
        times.append(begin.elapsed_time(end))
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--shapes", default=None,
                        help="n x T pairs, e.g. 1x1000,16x100000")
    args = parser.parse_args()
    shapes = SHAPES
    if args.shapes:
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    torch.backends.cudnn.enabled = True
    rows = []
    for n, steps in shapes:
        torch.manual_seed(0)
        gru = torch.nn.GRU(n, n, batch_first=True).cuda()
        x = torch.randn(BATCH, steps, n, device="cuda")
        xg = x.clone().requires_grad_(True)

        def forward():
            with torch.no_grad():
                gru(x)

        def forward_backward():
            gru.zero_grad(set_to_none=True)
            xg.grad = None
            y, _ = gru(xg)
            y.sum().backward()

        for name, call in (("forward", forward), ("forward_backward", forward_backward)):
            # cuDNN refuses some shapes (CUDNN_STATUS_NOT_SUPPORTED); torch's
            # own GRU kernels then run them, and the row says so.
            for use_cudnn in (True, False):
                torch.backends.cudnn.enabled = use_cudnn
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                try:
                    ms = median_ms(call, 5 if steps < 1000000 else 2)
                except RuntimeError as error:
                    print(f"GRU n={n} T={steps} {name} cudnn={use_cudnn}: "
                          f"{str(error).splitlines()[0]}", flush=True)
                    continue
                peak = torch.cuda.max_memory_allocated() - base
                rows.append({"n": n, "T": steps, "mode": name, "cudnn": use_cudnn,
                             "ms": ms, "peak_MB": peak / 2**20})
                print(f"GRU n={n} T={steps} {name} cudnn={use_cudnn}: {ms:.3f} ms, "
                      f"peak {peak / 2**20:.1f} MB", flush=True)
                break
    with open(args.out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "cudnn": torch.backends.cudnn.version(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
