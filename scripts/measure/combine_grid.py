#!/usr/bin/env python3
"""Combines repeated GEMM measurements of scripts/measure/gemm_grid.py into one figure per shape.

Usage: python3 scripts/measure/combine_grid.py OUT.csv [--yaml OUT.yaml] [--perrun PERRUN.csv]
                                               [--floor PROFILE.yaml] RUN.csv...

Per shape and dtype: the median of the RUN files' rates (back-to-back timing, each a separate
run of the script), or the PERRUN file's rate where that is higher. Both timings can only
understate a kernel: back-to-back runs of a kernel shorter than the host's launch cost (about
15 us for torch._scaled_mm) time the host, and a kernel timed alone after an idle moment runs
below the GPU's sustained clock. The higher of the two is the kernel's speed in each regime.
Where both are host-bound (the smallest shapes), --floor raises an fp8 rate to the bf16 rate that
PROFILE.yaml gives at that grid point: an FP8 GEMM is never slower than the bf16 one of its shape
(half the bytes, twice the tensor-core rate).
Writes OUT.csv in gemm_grid.py's layout (the combined rate, its time) and, with --yaml, the grids
in the kernel-profile layout (docs/compute.md) for shapes that form full M x N x K grids.
"""
import argparse
import csv
import statistics


def read(path):
    rows = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            if r["kind"] == "gemm":
                rows[(r["dtype"], int(r["m"]), int(r["n"]), int(r["k"]))] = float(r["rate"])
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--perrun")
    ap.add_argument("--yaml")
    ap.add_argument("--floor")
    a = ap.parse_args()
    floor = {}
    if a.floor:
        import yaml  # only for --floor

        g = yaml.safe_load(open(a.floor))["gemm"]["bf16"]
        i = 0
        for m in g["m"]:
            for n in g["n"]:
                for k, v in zip(g["k"], g["tflops"][i]):
                    floor[("fp8", m, n, k)] = v
                i += 1
    runs = [read(p) for p in a.runs]
    perrun = read(a.perrun) if a.perrun else {}
    keys = sorted(set().union(*[set(r) for r in runs]))
    combined = {}
    for key in keys:
        vals = [r[key] for r in runs if key in r]
        rate = statistics.median(vals)
        if key in perrun:
            rate = max(rate, perrun[key])
        if key in floor:
            rate = max(rate, floor[key])
        combined[key] = rate
    with open(a.out, "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["kind", "m", "n", "k", "dtype", "median_ms", "rate"])
        for (dtype, m, n, k), rate in combined.items():
            wr.writerow(["gemm", m, n, k, dtype, f"{2 * m * n * k / rate / 1e9:.4f}", f"{rate:.1f}"])
    if a.yaml:
        with open(a.yaml, "w") as f:
            f.write("gemm:\n")
            for dtype in sorted({k[0] for k in combined}):
                ms = sorted({k[1] for k in combined if k[0] == dtype})
                ns = sorted({k[2] for k in combined if k[0] == dtype})
                ks = sorted({k[3] for k in combined if k[0] == dtype})
                f.write(f"  {dtype}:\n")
                for name, axis in (("m", ms), ("n", ns), ("k", ks)):
                    f.write(f"    {name}: [{', '.join(str(v) for v in axis)}]\n")
                f.write(f"    tflops:  # one row per (m, n), its values at k = {ks[0]} .. {ks[-1]}\n")
                for m in ms:
                    for n in ns:
                        vals = ", ".join(f"{combined[(dtype, m, n, k)]:.1f}" for k in ks)
                        f.write(f"      - [{vals}]  # m {m}, n {n}\n")


if __name__ == "__main__":
    main()
