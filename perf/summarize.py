#!/usr/bin/env python3
"""Prints a markdown table from a softwave_bench JSON file (Google Benchmark's
--benchmark_out_format=json).

    python3 perf/summarize.py build/openmp/perf-results/softdtw-openmp-<...>.json

One row per benchmark: manual time (ms), Mcells/s, measured peak workspace
and the header's formula (MiB), the matching peer figure and the speedup
(our cells/s over the peer's cells/s; the CPU peer runs one pair per call on
one core in float64, so only the rates compare). With --benchmark_repetitions
the median rows are shown (and the coefficient of variation of the time).
Standard library only.
"""

import json
import sys


def fmt(value, digits=3):
    if value is None:
        return "-"
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 0.01:
        return f"{value:.{digits - 1}f}"
    return f"{value:.2e}"


def sig(value, digits=4):
    return "-" if value is None else f"{value:.{digits}g}"


def short_name(run):
    name = run.get("run_name") or run["name"]
    for suffix in ("/manual_time", "/real_time"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        data = json.load(f)

    context = data.get("context", {})
    runs = data.get("benchmarks", [])
    aggregated = any(r.get("run_type") == "aggregate" for r in runs)
    cv = {}
    if aggregated:
        for r in runs:
            if r.get("run_type") == "aggregate" and r.get("aggregate_name") == "cv":
                cv[short_name(r)] = r.get("real_time")
        runs = [
            r for r in runs
            if r.get("run_type") == "aggregate" and r.get("aggregate_name") == "median"
        ]

    print(
        f"softwave_bench on {context.get('host_name', '?')}, {context.get('date', '?')}: "
        f"{context.get('kokkos_execution_space', '?')}, "
        f"concurrency {context.get('kokkos_concurrency', '?')}, "
        f"grid {context.get('softwave_grid', '?')}, tile {context.get('softwave_tile', '?')}"
        + (", medians of repetitions" if aggregated else "")
    )
    print()
    header = ["benchmark", "ms"]
    if aggregated:
        header.append("cv %")
    header += ["Mcells/s", "peak MiB", "formula MiB", "peak/formula", "peer", "peer ms",
               "peer Mcells/s", "peer peak MiB", "speedup"]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for r in runs:
        name = short_name(r)
        if r.get("error_occurred"):
            cells = [name, "ERROR: " + str(r.get("error_message", ""))]
            cells += [""] * (len(header) - len(cells))
            print("| " + " | ".join(cells) + " |")
            continue
        ms = r.get("ms")
        if ms is None or aggregated:
            # real_time carries the manual time, in the benchmark's time unit.
            scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[r.get("time_unit", "ns")]
            ms = r["real_time"] * scale
        rate = r.get("cells_per_s")
        peer_rate = r.get("peer_cells_per_s")
        label = r.get("label") or ""
        peer = label[len("peer="):] if label.startswith("peer=") else "-"
        if peer != "-" and r.get("peer_B", 1) != 1:
            peer += f" (B={r['peer_B']:.0f})"
        speedup = rate / peer_rate if rate and peer_rate else None
        peak, formula = r.get("peak_workspace_MB"), r.get("formula_MB")
        cells = [name, fmt(ms)]
        if aggregated:
            c = cv.get(name)
            cells.append(fmt(100 * c) if c is not None else "-")
        cells += [
            fmt(rate / 1e6 if rate else None),
            sig(peak),
            sig(formula),
            f"{peak / formula:.3f}" if peak is not None and formula else "-",
            peer,
            fmt(r.get("peer_ms")),
            fmt(peer_rate / 1e6 if peer_rate else None),
            sig(r.get("peer_peak_MB")),
            (fmt(speedup) + "x") if speedup else "-",
        ]
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
