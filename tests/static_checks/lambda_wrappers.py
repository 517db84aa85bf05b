#!/usr/bin/env python3
"""Fails when an nvcc extended lambda is compiled into more than one object
of a static library.

nvcc gives each __host__ __device__ lambda a wrapper type whose copy and
call hooks are variables local to the translation unit, set where the
lambda is made; the linker keeps one unit's copy of the code that uses the
wrapper. A lambda in a header that several units instantiate the same way
can then be copied through another unit's hooks, never set: a call through
a null pointer, depending on what the optimiser inlined. Such kernels must
be functors. The wrapper's own symbols name the lambda (its enclosing
function and position), so a wrapper defined in two objects is one.

usage: lambda_wrappers.py NM (ARCHIVE | OBJECT)...
"""
import collections
import re
import subprocess
import sys


def main() -> int:
    nm, files = sys.argv[1], sys.argv[2:]
    if not files:
        print(__doc__)
        return 2
    where = collections.defaultdict(set)
    for path in files:
        listing = subprocess.run([nm, "-A", "--defined-only", path], check=True,
                                 capture_output=True, text=True).stdout
        for line in listing.splitlines():
            # archive:object.o:address kind symbol
            fields = line.rsplit(" ", 2)
            if len(fields) != 3 or "__nv_hdl_wrapper_t" not in fields[2]:
                continue
            # Local symbols (lower-case kinds but u, a unique global) are each
            # object's own: only what the linker merges counts.
            if fields[1].islower() and fields[1] != "u":
                continue
            # "archive:object.o:address" or "object.o:address"
            where[fields[2]].add(fields[0].rsplit(":", 1)[0].split("/")[-1])
    shared = {s: objs for s, objs in where.items() if len(objs) > 1}
    print(f"{len(where)} lambda wrapper symbols, {len(shared)} in more than one object")
    if not shared:
        return 0
    lambdas = collections.defaultdict(set)
    names = subprocess.run(["c++filt"], input="\n".join(shared), capture_output=True,
                           text=True).stdout.splitlines()
    for name, objs in zip(names, shared.values()):
        tag = re.search(r"__nv_dl_tag<[^&]*&(.*?), (\d+)u>", name)
        lambdas[f"lambda {tag.group(2)} of {tag.group(1)}" if tag else name].update(objs)
    for what, objs in sorted(lambdas.items()):
        print(f"{what[:400]}\n    in {', '.join(sorted(objs))}")
    print("these lambdas sit in code several translation units instantiate: make them functors")
    return 1


if __name__ == "__main__":
    sys.exit(main())
