#!/usr/bin/env python3
"""Measures achieved GEMM throughput on this machine's GPU over a grid of M, N, K, in bf16 and
FP8 (E4M3 x E4M3 with per-tensor scales, bf16 out, as TransformerEngine's current-scaling recipe
runs its linear layers), and the cost of FP8's per-tensor cast: the amax reduction and the scaled
cast of a bf16 activation. The grids are written in the kernel-profile layout of docs/compute.md
("gemm: DTYPE: m, n, k, tflops"), so they can be pasted into a profile.

Usage: python3 scripts/measure/gemm_grid.py OUT_DIR [SIZES] [--shapes MxNxK,...]
  SIZES: comma-separated powers of two for M, N and K (default 256,...,16384).
  --shapes: instead of the grid, these shapes in both dtypes (held-out checks of a profile).
Writes OUT_DIR/gemm_grid.csv (kind, m, n, k, dtype, median ms, TFLOP/s or GB/s) and
OUT_DIR/gemm_grid.yaml (the grids). Each figure is, after 30 ms of warm-up runs, the median of three
means of back-to-back runs filling 10 ms each (CUDA events), on random normal operands (a GPU
multiplies zeros faster). Per-run timing of a short kernel right after an idle moment measures the
GPU below its sustained clock: on an H100 it moved figures by 5-17% between two runs.
"""
import csv
import math
import os
import statistics
import sys

import torch


def time_ms(fn, warm_ms=30.0, batch_ms=10.0, batches=3):
    """Milliseconds of one run of fn, as back-to-back runs take it in a training step: runs until
    warm_ms have passed (the GPU's clocks ramp up under load), then the median over `batches` of
    the mean of enough back-to-back runs to fill batch_ms, each batch timed with CUDA events."""
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)

    def timed(reps):
        start.record()
        for _ in range(reps):
            fn()
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop)

    elapsed, reps = 0.0, 1
    while elapsed < warm_ms:
        elapsed += timed(reps)
        reps *= 2
    one = timed(4) / 4
    reps = max(5, math.ceil(batch_ms / max(one, 1e-3)))
    return statistics.median(timed(reps) / reps for _ in range(batches))


def gemm_fn(dtype, a, bt, one):
    """[m, k] x [k, n]: bf16 through matmul; fp8 through cuBLASLt's scaled GEMM, which wants the
    second operand column-major (bt is [n, k] row-major, so bt.t() is [k, n] column-major)."""
    if dtype == "bf16":
        return lambda: torch.matmul(a, bt.t())
    return lambda: torch._scaled_mm(a, bt.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def main(out_dir, sizes, shapes=None):
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(0)
    header = (f"{props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}, "
              f"cuda {torch.version.cuda}, cuBLAS {torch.backends.cuda.preferred_blas_library()}")
    print("# " + header, flush=True)
    os.makedirs(out_dir, exist_ok=True)
    rows = []
    grids = {}
    one = torch.ones((), device=dev, dtype=torch.float32)
    if shapes:
        with open(os.path.join(out_dir, "gemm_shapes.csv"), "w", newline="") as f:
            wr = csv.writer(f)
            wr.writerow(["kind", "m", "n", "k", "dtype", "median_ms", "rate"])
            for m, n, k in shapes:
                for dtype in ("bf16", "fp8"):
                    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
                    bt = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
                    if dtype == "fp8":
                        a, bt = a.to(torch.float8_e4m3fn), bt.to(torch.float8_e4m3fn)
                    ms = time_ms(gemm_fn(dtype, a, bt, one))
                    wr.writerow(["gemm", m, n, k, dtype, f"{ms:.4f}", f"{2 * m * n * k / ms / 1e9:.1f}"])
                    print(f"{m}x{n}x{k} {dtype} {ms:.4f} ms {2 * m * n * k / ms / 1e9:.1f} TFLOP/s", flush=True)
        return
    for dtype in ("bf16", "fp8"):
        grid = {}
        for m in sizes:
            for n in sizes:
                for k in sizes:
                    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
                    bt = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
                    if dtype == "fp8":
                        a = a.to(torch.float8_e4m3fn)
                        bt = bt.to(torch.float8_e4m3fn)
                    ms = time_ms(gemm_fn(dtype, a, bt, one))
                    tflops = 2 * m * n * k / ms / 1e9
                    grid[(m, n, k)] = tflops
                    rows.append(("gemm", m, n, k, dtype, ms, tflops))
                    del a, bt
            print(f"{dtype} m {m}: " + " ".join(f"{grid[(m, n, sizes[-1])]:.0f}" for n in sizes), flush=True)
        grids[dtype] = grid

    # FP8 current scaling: before each GEMM, the amax of the bf16 input (one read) and the scaled
    # cast to E4M3 (one read, one write of a byte per value). Bytes: 2 + 2 + 1 per value.
    for tokens, width in ((8192, 4096), (8192, 8192), (8192, 14336), (16384, 8192), (8192, 28672)):
        x = torch.randn(tokens, width, device=dev, dtype=torch.bfloat16)

        def cast():
            amax = x.abs().amax().float()
            scale = 448.0 / amax
            return (x.float() * scale).to(torch.float8_e4m3fn)

        ms = time_ms(cast)
        nbytes = 5 * tokens * width
        rows.append(("fp8_cast", tokens, width, 0, "bf16", ms, nbytes / ms / 1e6))
        ms_amax = time_ms(lambda: x.abs().amax())
        rows.append(("amax", tokens, width, 0, "bf16", ms_amax, 2 * tokens * width / ms_amax / 1e6))
        del x

    with open(os.path.join(out_dir, "gemm_grid.csv"), "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["kind", "m", "n", "k", "dtype", "median_ms", "rate"])
        for r in rows:
            wr.writerow([r[0], r[1], r[2], r[3], r[4], f"{r[5]:.4f}", f"{r[6]:.1f}"])
    with open(os.path.join(out_dir, "gemm_grid.yaml"), "w") as f:
        f.write(f"# {header}\n# back-to-back runs after a 30 ms warm-up, medians of 3 batches, random normal operands\n")
        f.write("gemm:\n")
        for dtype, grid in grids.items():
            f.write(f"  {dtype}:\n")
            for key in ("m", "n", "k"):
                f.write(f"    {key}: [{', '.join(str(s) for s in sizes)}]\n")
            f.write("    tflops:  # one row per (m, n), its values at each k\n")
            for m in sizes:
                for n in sizes:
                    vals = ", ".join(f"{grid[(m, n, k)]:.1f}" for k in sizes)
                    f.write(f"      - [{vals}]  # m {m}, n {n}\n")
    for r in rows:
        if r[0] != "gemm":
            print(f"{r[0]:9s} {r[1]}x{r[2]} {r[5]:.4f} ms {r[6]:.1f} GB/s", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    held = None
    if "--shapes" in args:
        i = args.index("--shapes")
        held = [tuple(int(x) for x in s.split("x")) for s in args[i + 1].split(",")]
        del args[i:i + 2]
    sz = [int(s) for s in args[1].split(",")] if len(args) > 1 else [256 << i for i in range(7)]
    main(args[0], sz, held)
