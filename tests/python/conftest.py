"""Fresh random inputs on every run; the seed is printed with each failure
and SOFTWAVE_TEST_SEED=<seed> replays it (as in the C++ suite)."""

import os
import secrets
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
# JAX on a GPU takes most of its memory at start by default; torch and
# softwave's CUDA tests share the device in this process.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

SEED = int(os.environ.get("SOFTWAVE_TEST_SEED", secrets.randbits(32)))
UCR = Path(__file__).resolve().parents[2] / "data" / "ucr"


def pytest_report_header(config):
    import softwave

    return f"softwave: Kokkos {softwave.default_space()} (host {softwave.host_space()}), seed {SEED}"


@pytest.fixture
def rng(request):
    seed = (SEED + sum(map(ord, request.node.nodeid))) % 2**32
    request.node.user_properties.append(("seed", seed))
    return np.random.default_rng(seed)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.sections.append(("seed", f"SOFTWAVE_TEST_SEED={SEED} replays this run"))


def ucr(name, split="TRAIN"):
    table = np.loadtxt(UCR / name / f"{name}_{split}.tsv")
    return table[:, 0].astype(int), table[:, 1:]
