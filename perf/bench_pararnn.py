"""softwave's ParaRNN cells beside ParaRNN's own CUDA kernels, on one GPU in
one process, float32: ParaRNN's GRU and LSTM modules (Danieli et al. 2025;
its repository's ``parallel_reduce_cuda`` extension built in place, modules
in mode "parallel_FUSED": one fused kernel running a fixed number of Newton
iterations, 3 as built) and softwave.deer.ParaGRU / ParaLSTM loaded with the
same state dict (Newton to the float32 defaults, atol 1e-4 / rtol 1e-3).

For each cell and shape (B, T, m = input size, H = hidden size, heads):
  fwd_ms      forward from x under no_grad (both form B x + b with torch's
              batched product first)
  fwdbwd_ms   forward and backward through autograd, every gradient (x and
              the parameters)
  max_dy      the largest |h − h_ref| over the outputs, h_ref the sequential
              evaluation of the same equations in float64 (softwave's
              sequential loop, which the tests check against ParaRNN's
              equations)
  iterations  softwave's Newton iterations (the largest over the batch)
Timing: CUDA events around batches of back-to-back calls, median over
batches (perf/bench_small.py). Memory is not compared: softwave's
workspace is not allocated through torch's allocator.

    PYTHONPATH=<ParaRNN checkout> python3 perf/bench_pararnn.py --out pararnn.json
"""

import argparse
import json
import sys

import torch
from bench_small import per_step_ms

import softwave.deer as deer

# (B, T, m, H, heads): ParaRNN's language-model layer (d_model 2048, 4 heads,
# 2048 tokens, 32 sequences a GPU, from its training configuration), smaller
# layers, and long sequences of few units.
SHAPES = [(32, 2048, 2048, 2048, 4), (16, 2048, 512, 512, 4), (16, 16384, 64, 64, 1), (16, 100_000, 16, 16, 1),
          (16, 1_000_000, 1, 1, 1)]
QUICK = [(16, 2048, 512, 512, 4), (16, 100_000, 16, 16, 1)]


def pararnn_module(cell, m, H, heads):
    # ParaRNN's configuration dataclass defaults a field to another dataclass
    # instance, which Python >= 3.11 refuses unless that class hashes; its
    # modules are used as they are otherwise.
    from pararnn.parallel_reduction import parallel_reduction

    parallel_reduction.NewtonConfig.__hash__ = object.__hash__
    if cell == "gru":
        from pararnn.rnn_cell.gru_diag_mh import GRUDiagMH as Module
        from pararnn.rnn_cell.gru_diag_mh import GRUDiagMHConfig as Config
    else:
        from pararnn.rnn_cell.lstm_cifg_diag_mh import LSTMCIFGDiagMH as Module
        from pararnn.rnn_cell.lstm_cifg_diag_mh import LSTMCIFGDiagMHConfig as Config
    config = Config(state_dim=H, input_dim=m, device=torch.device("cuda"), dtype=torch.float32,
                    mode="parallel_FUSED", num_heads=heads)
    return Module(config)


def case(cell, B, T, m, H, heads):
    torch.manual_seed(0)
    theirs = pararnn_module(cell, m, H, heads)
    Ours = deer.ParaGRU if cell == "gru" else deer.ParaLSTM
    ours = Ours(m, H, heads, method="deer").cuda()
    ours.load_state_dict(theirs.state_dict())
    reference = Ours(m, H, heads, method="sequential", dtype=torch.float64).cuda()
    reference.load_state_dict({k: v.double() for k, v in theirs.state_dict().items()})
    x = torch.randn(B, T, m, device="cuda")
    with torch.no_grad():
        want = reference(x.double())
        row = {"cell": cell, "B": B, "T": T, "m": m, "H": H, "heads": heads}
        for name, model in (("pararnn", theirs), ("softwave", ours)):
            row[name + "_max_dy"] = float((model(x).double() - want).abs().max())
            row[name + "_fwd_ms"] = per_step_ms(lambda: model(x), batches=5)
        row["softwave_iterations"] = max(ours.last_report.iterations)
        row["softwave_path"] = sorted(set(ours.last_report.path))
    del want
    xg = x.clone().requires_grad_()
    weight = torch.randn(B, T, H, device="cuda")
    for name, model in (("pararnn", theirs), ("softwave", ours)):
        def step():
            xg.grad = None
            model.zero_grad(set_to_none=True)
            (model(xg) * weight).sum().backward()

        row[name + "_fwdbwd_ms"] = per_step_ms(step, batches=5)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rows = []
    print(f"{'cell':5} {'B':>3} {'T':>8} {'m':>5} {'H':>5} {'heads':>5} | {'fwd ms P / S':>17} | "
          f"{'fwd+bwd ms P / S':>17} | {'max|dy| P / S':>19} | it")
    for cell in ("gru", "lstm"):
        for shape in QUICK if args.quick else SHAPES:
            try:
                r = case(cell, *shape)
            except Exception as e:  # a shape one side cannot run is reported, not fatal
                print(f"{cell} {shape}: {type(e).__name__}: {e}", file=sys.stderr)
                rows.append({"cell": cell, "shape": shape, "error": f"{type(e).__name__}: {e}"})
                torch.cuda.empty_cache()
                continue
            rows.append(r)
            print(f"{cell:5} {r['B']:>3} {r['T']:>8} {r['m']:>5} {r['H']:>5} {r['heads']:>5} | "
                  f"{r['pararnn_fwd_ms']:7.3f} / {r['softwave_fwd_ms']:7.3f} | "
                  f"{r['pararnn_fwdbwd_ms']:7.3f} / {r['softwave_fwdbwd_ms']:7.3f} | "
                  f"{r['pararnn_max_dy']:8.2e} / {r['softwave_max_dy']:8.2e} | {r['softwave_iterations']}",
                  flush=True)
            torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
