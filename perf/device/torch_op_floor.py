"""The floor of a Soft-DTW-shaped training step from PyTorch, with no Soft-DTW
in it: what torch itself costs a step for an operator whose forward returns
values (B,) and keeps ∇x, ∇y, and whose backward scales them by the incoming
gradient, as softwave.torch's does. Each variant allocates what softwave
allocates and launches nothing else, so the difference between them is the
cost of the way the operator is called:

- python_function: a torch.autograd.Function (softwave.torch's eager path);
- cpp_op: an operator registered in C++ (TORCH_LIBRARY) with its autograd
  in C++ (torch::autograd::Function), called as torch.ops.<ns>.<op>;
- cpp_binding: the same C++ autograd function called through its pybind11
  binding, without the torch.ops dispatch from Python.

    python3 perf/device/torch_op_floor.py --out floor.json

Timing as perf/bench_small.py (its per_step_ms): CUDA events around batches
of back-to-back steps, the median per-step time of 7 batches.
"""

import argparse
import json
import sys
from pathlib import Path

import torch
from torch.utils.cpp_extension import load_inline

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_small import per_step_ms  # noqa: E402

CPP = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

namespace {
std::tuple<at::Tensor, at::Tensor, at::Tensor> forward_outputs(const at::Tensor& x, const at::Tensor& y) {
  // What softwave's forward would queue its kernels on.
  volatile auto stream = c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
  (void)stream;
  return {at::empty({x.size(0)}, x.options()), at::empty_like(x), at::empty_like(y)};
}

struct FloorFunction : public torch::autograd::Function<FloorFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& y,
                            double gamma) {
    at::AutoDispatchBelowADInplaceOrView below;
    auto [values, gx, gy] = forward_outputs(x, y);
    ctx->save_for_backward({gx, gy});
    return values;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto scale = grads[0].view({-1, 1, 1});
    return {saved[0] * scale, saved[1] * scale, at::Tensor()};
  }
};

at::Tensor floor_op(const at::Tensor& x, const at::Tensor& y, double gamma) {
  return FloorFunction::apply(x, y, gamma);
}
}  // namespace

TORCH_LIBRARY(softwave_floor, m) { m.def("sdtw(Tensor x, Tensor y, float gamma) -> Tensor"); }
TORCH_LIBRARY_IMPL(softwave_floor, Autograd, m) { m.impl("sdtw", floor_op); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("sdtw", &floor_op); }
"""


class PythonFloor(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y, gamma):
        torch.cuda.current_stream(x.device).cuda_stream
        values = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
        gx, gy = torch.empty_like(x), torch.empty_like(y)
        ctx.save_for_backward(gx, gy)
        return values

    @staticmethod
    def backward(ctx, grad):
        gx, gy = ctx.saved_tensors
        scale = grad.view(-1, 1, 1)
        return gx * scale, gy * scale, None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    module = load_inline("softwave_floor", cpp_sources=[CPP], with_cuda=True, extra_cflags=["-O2"], verbose=False)
    ops = {
        "python_function": lambda x, y: PythonFloor.apply(x, y, 1.0),
        "cpp_op": lambda x, y: torch.ops.softwave_floor.sdtw(x, y, 1.0),
        "cpp_binding": lambda x, y: module.sdtw(x, y, 1.0),
    }
    rows = []
    for batch, n, d in [(16, 64, 1), (16, 128, 1), (64, 128, 8), (32, 256, 16), (32, 512, 64)]:
        x = torch.randn(batch, n, d, device="cuda", requires_grad=True)
        y = torch.randn(batch, n, d, device="cuda", requires_grad=True)
        row = {"shape": f"{batch}/{n}/{d}"}
        for name, op in ops.items():

            def step(op=op):
                x.grad = y.grad = None
                op(x, y).sum().backward()

            row[name + "_ms"] = per_step_ms(step)
        rows.append(row)
        print(row, flush=True)
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
