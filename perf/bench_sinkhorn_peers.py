#!/usr/bin/env python3
"""Forward Sinkhorn between point clouds: softwave beside FlashSinkhorn and GeomLoss/KeOps.

One process, one CUDA device. For every n = m in --sizes and d in --dims it
draws x, y ~ N(0, 1) (float32, (n, d) and (m, d)) and positive weights
a, b = (U(0,1) + 0.1) / sum (fixed seed, as FlashSinkhorn's own
flash_sinkhorn.bench.bench_forward draws them), and times a fixed number of
log-domain Sinkhorn iterations at a fixed epsilon in each method:

  flash_alternating_tf32 / flash_alternating_fp32
      flash_sinkhorn.SamplesLoss(backend="alternating", use_epsilon_scaling=False,
      eps=eps, n_iters=iterations, debias=False, normalize=False,
      last_extrapolation=False, autotune=True, allow_tf32=True/False): OTT-style
      Gauss-Seidel updates, f from g then g from f (2 passes over n x m an iteration),
      the update order softwave uses.
  flash_symmetric_tf32 / flash_symmetric_fp32
      the same with backend="symmetric": GeomLoss-style averaged (Jacobi) updates,
      one initial step + `iterations` steps, 2 passes each.
  geomloss_keops
      geomloss._legacy.sinkhorn_divergence.sinkhorn_loop with the KeOps online
      soft-min (geomloss._legacy.sinkhorn_samples.softmin_online over lse_genred),
      eps_list = [eps_peer] * iterations, debias=False, last_extrapolation=False:
      the loop SamplesLoss("sinkhorn", p=2, backend="online") runs, minus its
      epsilon-scaling schedule (exactly how bench_forward times GeomLoss).
      One initial step + `iterations` symmetric steps, 2 KeOps reductions each.
  geomloss_keops_eps_scaling (not in the default list)
      the high-level geomloss.SamplesLoss("sinkhorn", p=2, blur=sqrt(eps_peer),
      scaling=--geomloss-scaling, debias=False, backend="online"): GeomLoss's own
      epsilon-scaling schedule, so the iteration count is GeomLoss's choice
      (recorded), not --iterations.
  softwave
      softwave.ot.sinkhorn(x, y, a, b, epsilon=eps, cost="sqeuclidean",
      max_iterations=iterations, tolerance=0.0), see run_softwave(): on CUDA the
      specialised updates (exact FP32 costs for d <= 16, TF32 tensor-core
      products above).
  softwave_portable (not in the default list)
      the same with kernel="portable": the Kokkos kernels every backend runs.

Cost convention. Every row solves the same problem,
    OT_eps = min_P <P, C> + eps KL(P | a x b),  C_ij = |x_i - y_j|^2  (no 1/2),
and every value is reported in that convention:
  * softwave "sqeuclidean" is |x - y|^2.
  * FlashSinkhorn's default half_cost=False is |x - y|^2 (cost_scale 1.0); we pass
    half_cost=False and eps unchanged.
  * GeomLoss's p=2 cost is |x - y|^2 / 2 (KeOps formula "(SqDist(X,Y) / IntCst(2))").
    Scaling the cost by 1/2 and eps by 1/2 gives the same plan, potentials halved:
    OT_{eps/2}(C/2) = OT_eps(C) / 2. So GeomLoss runs at eps_peer = eps / 2 and its
    value is multiplied by 2. (--geomloss-cost full instead uses the formula
    "SqDist(X,Y)" at eps, as bench_forward does; the problems are identical.)

Values: FlashSinkhorn and GeomLoss return the dual value <a, f> + <b, g> at the
last potentials (= OT_eps at convergence); softwave's value is its dual objective.
After a fixed iteration count the methods are not converged to the same point
(alternating vs symmetric updates differ), so values agree only to the residual.

With --backward every call is a training step instead: x requires its
gradient, and each call runs the method and then value.sum().backward()
(softwave: the gradient from the final potentials on its gradient kernels;
FlashSinkhorn: its analytic gradient kernel; GeomLoss is not timed this
way). Each record then carries grad_rel_diff, the relative L2 distance of
its grad_x from softwave's on the same inputs.

Timing: `--warmup` untimed calls (the first compiles KeOps kernels / autotunes
Triton), then `--repeats` calls each bracketed by torch.cuda.synchronize() and
time.perf_counter(); mean and min in ms. Peak memory: torch.cuda.max_memory_allocated
over the timed calls, after reset_peak_memory_stats() (torch's allocator only: KeOps
and Triton outputs are torch tensors, softwave's Kokkos allocations are not counted).
"exp floor" = 2 n m iterations / 4.2e12 s: two exponentials per (i, j) pair per
iteration at an H100's ~4.2e12 exp/s (132 SMs x 16 MUFU.EX2/clk x ~1.98 GHz).

Peers are carried as wheels (no registry on the GPU machine):
    python3 perf/bench_sinkhorn_peers.py --install --out $OUT/peers.json
installs .cache/peers/wheels/* with pip --no-index --no-deps into --target
(default /tmp/peer-site) and puts that folder first on sys.path and PYTHONPATH
(the system site-packages is not touched). KeOps writes its compiled kernels under
KEOPS_CACHE_FOLDER (default here /tmp/keops-cache).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_WHEELS = REPO / ".cache" / "peers" / "wheels"
# The versions the wheels in .cache/peers/wheels carry. pybind11 (pure Python):
# pykeops compiles its binder with `python3 -m pybind11 --includes`.
PEER_PINS = {"flash-sinkhorn": "0.4.1", "geomloss": "0.3.1", "pykeops": "2.3",
             "keopscore": "2.3", "pybind11": "3.1.0"}
PEER_PACKAGES = list(PEER_PINS)
EXP_PER_SECOND = 4.2e12

DEFAULT_METHODS = [
    "flash_alternating_tf32",
    "flash_symmetric_tf32",
    "flash_alternating_fp32",
    "flash_symmetric_fp32",
    "geomloss_keops",
    "softwave",
]
ALL_METHODS = DEFAULT_METHODS + ["softwave_portable", "geomloss_keops_eps_scaling"]


# --------------------------------------------------------------------------
# Arguments, installation, environment (nothing here imports torch)
# --------------------------------------------------------------------------

def int_list(text: str):
    return [int(v) for v in text.replace(" ", "").split(",") if v]


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Time fixed-iteration log-domain Sinkhorn (sq. Euclidean, fixed eps) in "
                    "softwave, FlashSinkhorn and GeomLoss/KeOps on one CUDA device.")
    p.add_argument("--sizes", type=int_list, default=[10000, 50000, 100000],
                   help="comma-separated n (= m) (default 10000,50000,100000)")
    p.add_argument("--dims", type=int_list, default=[3, 64], help="comma-separated d (default 3,64)")
    p.add_argument("--iterations", type=int, default=100, help="Sinkhorn iterations (default 100)")
    p.add_argument("--repeats", type=int, default=5, help="timed calls per row (default 5)")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls per row first (default 2)")
    p.add_argument("--eps", type=float, default=0.1,
                   help="epsilon for the cost |x-y|^2 (default 0.1); GeomLoss gets eps/2 for |x-y|^2/2")
    p.add_argument("--seed", type=int, default=0, help="torch seed for x, y, a, b (default 0)")
    p.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                   help=f"comma-separated, from {','.join(ALL_METHODS)} (default: all but the last)")
    p.add_argument("--out", default=None, help="JSON file for the records (rewritten after every row)")
    p.add_argument("--install", action="store_true",
                   help="pip install the peer wheels (--no-index --no-deps) into --target first")
    p.add_argument("--target", default="/tmp/peer-site",
                   help="install folder for --install; put first on sys.path whenever it exists "
                        "(default /tmp/peer-site)")
    p.add_argument("--wheels", default=str(DEFAULT_WHEELS),
                   help="folder of the peer wheels (default <repo>/.cache/peers/wheels)")
    p.add_argument("--keops-cache", default="/tmp/keops-cache",
                   help="KEOPS_CACHE_FOLDER unless already set (default /tmp/keops-cache)")
    p.add_argument("--softwave-path", action="append", default=[],
                   help="folder to put first on sys.path for `import softwave` (repeatable)")
    p.add_argument("--geomloss-cost", choices=("half", "full"), default="half",
                   help="half: GeomLoss's p=2 formula |x-y|^2/2 at eps/2 (default); "
                        "full: KeOps formula SqDist(X,Y) at eps")
    p.add_argument("--geomloss-scaling", type=float, default=0.5,
                   help="`scaling` of geomloss_keops_eps_scaling (default 0.5, GeomLoss's default)")
    p.add_argument("--exp-rate", type=float, default=EXP_PER_SECOND,
                   help="exponentials per second for the exp floor (default 4.2e12, H100)")
    p.add_argument("--backward", action="store_true",
                   help="time forward + backward w.r.t. x (softwave and FlashSinkhorn methods only)")
    p.add_argument("--dry-run", action="store_true",
                   help="after any install, import each peer, print versions and stop (no GPU needed)")
    args = p.parse_args(argv)
    args.methods = [m for m in args.methods.replace(" ", "").split(",") if m]
    unknown = [m for m in args.methods if m not in ALL_METHODS]
    if unknown:
        p.error(f"unknown method(s) {unknown}; choose from {ALL_METHODS}")
    if args.backward and any(m.startswith("geomloss") for m in args.methods):
        p.error("--backward times softwave and FlashSinkhorn methods only")
    if args.iterations < 1 or args.repeats < 1 or args.warmup < 0:
        p.error("--iterations and --repeats must be >= 1, --warmup >= 0")
    return args


def install_peers(target: str, wheels: str) -> None:
    wheel_dir = Path(wheels)
    if not wheel_dir.is_dir() or not list(wheel_dir.glob("*.whl")):
        raise SystemExit(f"--install: no wheels in {wheel_dir}")
    # --isolated: no pip configuration or PIP_* variables (a configured find-links folder
    # could otherwise offer other versions); --no-index: nothing but the wheels folder.
    cmd = [sys.executable, "-m", "pip", "--isolated", "install", "--no-index", "--no-deps",
           "--no-cache-dir", "--disable-pip-version-check", "--upgrade", "--target", target,
           "--find-links", str(wheel_dir)] + [f"{k}=={v}" for k, v in PEER_PINS.items()]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def prepend_path(folder: str) -> None:
    """First on sys.path, and on PYTHONPATH for child processes (pykeops runs
    `python3 -m pybind11 --includes` in a shell)."""
    folder = str(Path(folder).resolve())
    if folder not in sys.path:
        sys.path.insert(0, folder)
    old = os.environ.get("PYTHONPATH", "")
    if folder not in old.split(os.pathsep):
        os.environ["PYTHONPATH"] = folder + (os.pathsep + old if old else "")


def cuda_home():
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return os.environ[var]
    nvcc = shutil.which("nvcc")
    if nvcc:
        return str(Path(nvcc).resolve().parent.parent)
    for cand in ("/usr/local/cuda", "/opt/cuda"):
        if Path(cand).is_dir():
            return cand
    return None


def prepare_keops_environment(cache: str) -> dict:
    """KeOps reads its settings when keopscore is first imported: the cache
    folder (KEOPS_CACHE_FOLDER, else ~/.cache/keops<version>), cuda.h/nvrtc.h under
    CUDA_PATH/CUDA_HOME/include or /usr/local/cuda/include, and libcuda/libnvrtc
    through ctypes.util.find_library (ldconfig, else `ld` over LD_LIBRARY_PATH).
    It compiles with g++ and needs Python.h for its pybind11 module."""
    os.environ.setdefault("KEOPS_CACHE_FOLDER", cache)
    os.makedirs(os.environ["KEOPS_CACHE_FOLDER"], exist_ok=True)
    home = cuda_home()
    if home:
        os.environ.setdefault("CUDA_HOME", home)
        os.environ.setdefault("CUDA_PATH", home)
        libdirs = [str(Path(home) / sub) for sub in ("lib64", "targets/x86_64-linux/lib")
                   if (Path(home) / sub).is_dir()]
        old = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
        os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(dict.fromkeys(old + libdirs))
    include = Path(sysconfig.get_paths()["include"])
    return {
        "KEOPS_CACHE_FOLDER": os.environ["KEOPS_CACHE_FOLDER"],
        "CUDA_HOME": home,
        "cuda.h": bool(home) and (Path(home) / "include" / "cuda.h").is_file(),
        "nvrtc.h": bool(home) and (Path(home) / "include" / "nvrtc.h").is_file(),
        "g++": shutil.which(os.environ.get("CXX", "g++")),
        "Python.h": (include / "Python.h").is_file(),
    }


def package_versions() -> dict:
    from importlib import metadata
    out = {}
    for name in ["torch", "triton", "numpy"] + PEER_PACKAGES + ["softwave"]:
        try:
            out[name] = metadata.version(name)
        except Exception:
            out[name] = None
    return out


def dry_run(methods) -> int:
    import importlib
    bad = 0
    for mod in ("flash_sinkhorn", "pykeops", "geomloss", "softwave.ot"):
        try:
            m = importlib.import_module(mod)
            print(f"  import {mod}: ok ({getattr(m, '__file__', '?')})")
        except Exception as e:  # noqa: BLE001 - reported, not fatal
            bad += 1
            print(f"  import {mod}: {type(e).__name__}: {e}")
    return bad


# --------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------

def _scalar(v):
    if v is None:
        return None
    if hasattr(v, "detach"):
        v = v.detach().reshape(-1)
        return float(v[0].item()) if v.numel() >= 1 else None
    if isinstance(v, (int, float)):
        return float(v)
    try:
        import numpy as np
        arr = np.asarray(v).reshape(-1)
        return float(arr[0]) if arr.size else None
    except Exception:
        return None


def softwave_value(out, a, b):
    """The OT value out of whatever softwave.ot.sinkhorn returns: a scalar, a
    result object or dict with value/cost, or potentials (f, g) -> <a,f> + <b,g>."""
    names = ("value", "cost", "loss", "ot", "objective")
    for name in names:
        if isinstance(out, dict) and name in out:
            return _scalar(out[name]), f"[{name!r}]"
        if not isinstance(out, dict) and hasattr(out, name):
            return _scalar(getattr(out, name)), f".{name}"
    if hasattr(out, "numel") and out.numel() == 1:
        return _scalar(out), "scalar"
    if isinstance(out, (int, float)):
        return float(out), "scalar"
    if isinstance(out, (tuple, list)) and out:
        first = out[0]
        if hasattr(first, "numel") and first.numel() == 1:
            return _scalar(first), "[0]"
        if len(out) >= 2 and hasattr(first, "reshape") and hasattr(out[1], "reshape"):
            f, g = first.reshape(-1), out[1].reshape(-1)
            if f.numel() == a.numel() and g.numel() == b.numel():
                return float((a * f).sum() + (b * g).sum()), "<a,f>+<b,g>"
    return None, f"unrecognised return type {type(out).__name__}"


# --------------------------------------------------------------------------
# Methods: each builder returns (fn, info); fn() runs one full solve and
# returns the OT value as a tensor/float in the |x-y|^2 convention.
# --------------------------------------------------------------------------

def run_softwave(x, y, a, b, eps, iterations, kernel="automatic"):
    """softwave's online log-domain Sinkhorn on the cost |x - y|^2, exactly
    `iterations` iterations (tolerance 0 never stops early), synchronised.
    kernel "automatic" takes the CUDA-specialised updates where they apply
    (float, d <= 16); "portable" the Kokkos kernels."""
    import torch
    import softwave.ot
    out = softwave.ot.sinkhorn(x, y, a, b, epsilon=eps, cost="sqeuclidean",
                               max_iterations=iterations, tolerance=0.0, kernel=kernel)
    torch.cuda.synchronize()
    return out


def build_softwave(x, y, a, b, eps, iterations, args, kernel="automatic"):
    import softwave.ot  # noqa: F401 - fail here, as an error record, if absent
    state = {}

    def fn():
        out = run_softwave(x, y, a, b, eps, iterations, kernel)
        state["out"] = out
        return out

    def value():
        v, src = softwave_value(state.get("out"), a, b)
        state["source"] = src
        return v

    return fn, {"value_fn": value, "iterations": iterations, "state": state,
                "peak_note": "torch allocator only: Kokkos allocations are not counted"}


def build_flash(x, y, a, b, eps, iterations, args, backend: str, tf32: bool):
    import torch
    from flash_sinkhorn import SamplesLoss
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    # half_cost=False: C = |x - y|^2 (cost_scale 1.0), the same problem as softwave's at eps.
    loss = SamplesLoss(
        "sinkhorn",
        backend=backend,             # "alternating" (Gauss-Seidel) or "symmetric" (GeomLoss-style)
        use_epsilon_scaling=False,   # fixed eps ...
        eps=eps,
        n_iters=iterations,          # ... for exactly n_iters iterations
        debias=False,
        potentials=False,
        normalize=False,             # a, b already sum to 1
        autotune=True,
        last_extrapolation=False,
        allow_tf32=tf32,             # False: strict fp32 dot products, no TF32 rounding of inputs
        half_cost=False,
    )

    def fn():
        return loss(a, x, b, y)

    return fn, {"iterations": iterations}


def _import_keops():
    # geomloss._legacy.sinkhorn_samples swallows a failed pykeops import; import it
    # first so that the real error is recorded.
    import pykeops  # noqa: F401
    from pykeops.torch import generic_logsumexp  # noqa: F401


def build_geomloss_fixed(x, y, a, b, eps, iterations, args):
    import torch  # noqa: F401
    from functools import partial
    _import_keops()
    from geomloss._legacy.sinkhorn_divergence import log_weights, sinkhorn_cost, sinkhorn_loop
    from geomloss._legacy.sinkhorn_samples import cost_formulas, lse_genred, softmin_online

    d = x.shape[1]
    if args.geomloss_cost == "half":
        # GeomLoss's p = 2 cost |x-y|^2 / 2 ("(SqDist(X,Y) / IntCst(2))"): at eps/2 it is the
        # same problem as |x-y|^2 at eps, with potentials and value halved -> value * 2.
        formula, eps_peer, scale = cost_formulas[2], eps / 2.0, 2.0
    else:
        formula, eps_peer, scale = "SqDist(X,Y)", eps, 1.0
    softmin = partial(softmin_online, log_conv=lse_genred(formula, d))
    a_log, b_log = log_weights(a), log_weights(b)
    C_xy, C_yx = (x, y), (y, x)
    eps_list = [eps_peer] * iterations   # fixed eps, exactly `iterations` symmetric steps

    def fn():
        _, _, g_ab, f_ba = sinkhorn_loop(softmin, a_log, b_log, None, None, C_xy, C_yx, eps_list,
                                         None, debias=False, last_extrapolation=False)
        return scale * sinkhorn_cost(eps_peer, None, a, b, None, None, g_ab, f_ba,
                                     batch=False, debias=False, potentials=False)

    return fn, {"iterations": iterations, "note": f"KeOps formula {formula} at eps {eps_peer:g}"}


def build_geomloss_scaling(x, y, a, b, eps, iterations, args):
    _import_keops()
    from geomloss import SamplesLoss
    from geomloss._legacy.sinkhorn_divergence import scaling_parameters

    # |x-y|^2/2 at eps/2 = blur^2  ->  blur = sqrt(eps/2); value * 2 (see build_geomloss_fixed).
    blur = math.sqrt(eps / 2.0)
    loss = SamplesLoss("sinkhorn", p=2, blur=blur, scaling=args.geomloss_scaling,
                       debias=False, backend="online")
    _, _, eps_list, _ = scaling_parameters(x, y, 2, blur, None, None, args.geomloss_scaling)

    def fn():
        return 2.0 * loss(a, x, b, y)

    return fn, {"iterations": len(eps_list),
                "note": f"GeomLoss eps-scaling, blur {blur:.4g}, scaling {args.geomloss_scaling:g}, "
                        f"{len(eps_list)} eps steps + last extrapolation"}


def builder(method):
    if method == "softwave":
        return build_softwave
    if method == "softwave_portable":
        return lambda *a_, **k_: build_softwave(*a_, **k_, kernel="portable")
    if method == "geomloss_keops":
        return build_geomloss_fixed
    if method == "geomloss_keops_eps_scaling":
        return build_geomloss_scaling
    _, backend, precision = method.split("_")
    tf32 = precision == "tf32"
    return lambda *a_, **k_: build_flash(*a_, **k_, backend=backend, tf32=tf32)


def with_backward(fn, x):
    """A training step: the method's call, then the gradient of its value's
    sum w.r.t. x (into x.grad)."""
    def step():
        x.grad = None
        out = fn()
        value = out.value if hasattr(out, "value") else out
        value.sum().backward()
        return out
    return step


# --------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------

def time_calls(fn, warmup: int, repeats: int):
    import torch
    first_ms = None
    for k in range(warmup):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        if k == 0:
            first_ms = (time.perf_counter() - t0) * 1e3
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    times, out = [], None
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return times, out, base, torch.cuda.max_memory_allocated(), first_ms


def make_problem(n, m, d, seed):
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(n, d, device="cuda", dtype=torch.float32, generator=g)
    y = torch.randn(m, d, device="cuda", dtype=torch.float32, generator=g)
    a = torch.rand(n, device="cuda", dtype=torch.float32, generator=g) + 0.1
    b = torch.rand(m, device="cuda", dtype=torch.float32, generator=g) + 0.1
    return x, y, a / a.sum(), b / b.sum()


def run_one(method, x, y, a, b, eps, args, meta):
    import torch
    n, d = x.shape
    m = y.shape[0]
    rec = {"method": method, "n": n, "m": m, "d": d, "iterations": args.iterations, "eps": eps,
           "mean_ms": None, "min_ms": None, "peak_bytes": None, "value": None, "error": None}
    rec.update(meta)
    rec["backward"] = bool(args.backward)
    fn = info = None
    try:
        with torch.set_grad_enabled(args.backward):
            fn, info = builder(method)(x, y, a, b, eps, args.iterations, args)
            if args.backward:
                fn = with_backward(fn, x)
            rec["iterations"] = info.get("iterations", args.iterations)
            times, out, base, peak, first_ms = time_calls(fn, args.warmup, args.repeats)
        rec["mean_ms"] = sum(times) / len(times)
        rec["min_ms"] = min(times)
        rec["times_ms"] = times
        rec["first_call_ms"] = first_ms
        rec["peak_bytes"] = int(peak)
        rec["base_bytes"] = int(base)
        if "value_fn" in info:
            rec["value"] = info["value_fn"]()
            rec["value_source"] = info["state"].get("source")
        else:
            rec["value"] = _scalar(out)
        for key in ("note", "peak_note"):
            if key in info:
                rec[key] = info[key]
    except BaseException as e:  # noqa: BLE001 - a failing peer must not stop the others
        if isinstance(e, KeyboardInterrupt):
            raise
        rec["error"] = f"{type(e).__name__}: {str(e).strip()[:2000]}"
        rec["traceback"] = traceback.format_exc(limit=8)[-4000:]
    finally:
        fn = info = None
        gc.collect()
        try:
            torch.cuda.synchronize()
        except Exception:
            pass
        torch.cuda.empty_cache()
    floor_s = 2.0 * n * m * rec["iterations"] / args.exp_rate
    rec["exp_floor_ms"] = floor_s * 1e3
    if rec["min_ms"]:
        rec["min_over_floor"] = rec["min_ms"] / rec["exp_floor_ms"]
    return rec


def print_row(r, header=False):
    if header:
        print(f"{'method':<28}{'n':>8}{'d':>5}{'iters':>6}{'mean ms':>11}{'min ms':>11}"
              f"{'floor ms':>10}{'x floor':>8}{'peak MiB':>10}  {'value':>14}  error")
    peak = "-" if r["peak_bytes"] is None else f"{r['peak_bytes'] / 2**20:.1f}"
    if r.get("peak_note") and r["peak_bytes"] is not None:
        peak += "*"
    def f(v, fmt):
        width = fmt[:fmt.index(".")] if "." in fmt else fmt.rstrip("g")
        return format("-", f">{width}") if v is None else format(v, fmt)
    err = "" if not r["error"] else r["error"].splitlines()[0][:80]
    if r.get("grad_rel_diff") is not None:
        err = f"grad_x vs softwave {r['grad_rel_diff']:.2e} " + err
    print(f"{r['method']:<28}{r['n']:>8}{r['d']:>5}{r['iterations']:>6}{f(r['mean_ms'], '11.2f')}"
          f"{f(r['min_ms'], '11.2f')}{r['exp_floor_ms']:>10.2f}{f(r.get('min_over_floor'), '8.2f')}"
          f"{peak:>10}  {f(r['value'], '14.7g')}  {err}", flush=True)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.install:
        install_peers(args.target, args.wheels)
    if Path(args.target).is_dir():
        prepend_path(args.target)
    for folder in reversed(args.softwave_path):
        prepend_path(folder)
    keops_env = prepare_keops_environment(args.keops_cache)
    versions = package_versions()
    print("versions:", json.dumps(versions))
    print("keops environment:", json.dumps(keops_env))
    if args.dry_run:
        bad = dry_run(args.methods)
        print(f"dry run: {bad} import(s) failed")
        return 0

    import torch
    if not torch.cuda.is_available():
        print("CUDA is not available: this benchmark needs a GPU", file=sys.stderr)
        return 2
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "flash_sinkhorn": versions.get("flash-sinkhorn"), "geomloss": versions.get("geomloss"),
            "pykeops": versions.get("pykeops")}
    print(f"device: {meta['device']}; eps {args.eps:g} on |x-y|^2; {args.iterations} iterations; "
          f"warmup {args.warmup}, repeats {args.repeats}", flush=True)

    records = []
    header = True
    for n in args.sizes:
        for d in args.dims:
            x, y, a, b = make_problem(n, n, d, args.seed)
            x.requires_grad_(args.backward)
            gradients = {}
            for method in args.methods:
                rec = run_one(method, x, y, a, b, args.eps, args, meta)
                if args.backward and rec["error"] is None:
                    gradients[method] = x.grad.detach().clone()
                    if "softwave" in gradients:
                        ref = gradients["softwave"]
                        rec["grad_rel_diff"] = float((gradients[method] - ref).norm() / ref.norm())
                records.append(rec)
                print_row(rec, header)
                header = False
                if args.out:
                    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                    Path(args.out).write_text(json.dumps(records, indent=1))
            del x, y, a, b
            torch.cuda.empty_cache()
    if any(r.get("peak_note") for r in records):
        print("* torch allocator only (Kokkos allocations not counted)")
    errors = [r for r in records if r["error"]]
    for r in errors:
        print(f"\n{r['method']} n={r['n']} d={r['d']}: {r['error']}\n{r.get('traceback', '')}")
    if args.out:
        print(f"wrote {len(records)} records to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
