#!/usr/bin/env python3
"""Measures what PyTorch's own kernels reach on this machine's GPU, as a reference for ranksim's
compute model (issue: compute kernel efficiency profiles): bf16 GEMMs over the shapes of GPT and
Llama layers, fused (flash) attention forward and backward, and memory-bound ops.

Usage: python3 scripts/measure/torch_kernels.py OUT.csv
Each row: kind, shape, dtype, median milliseconds over 20 timed runs after 5 warm-ups (CUDA
events), and the rate (TFLOP/s for GEMMs and attention, GB/s for memory-bound ops, counting the
bytes each must read and write at least).
"""
import csv
import statistics
import sys

import torch
import torch.nn.functional as F


def time_ms(fn, warm=5, runs=20):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main(path):
    dev = torch.device("cuda")
    rows = []
    props = torch.cuda.get_device_properties(0)
    print(f"# {props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}, "
          f"cuda {torch.version.cuda}", flush=True)

    # GEMMs: [m, k] x [k, n], bf16 in, bf16 out, f32 accumulation (torch's default).
    shapes = []
    for m in (512, 1024, 2048, 4096, 8192, 16384):
        for n, k in ((4096, 4096), (12288, 4096), (11008, 4096), (4096, 11008), (12288, 12288),
                     (49152, 12288), (12288, 49152), (1024, 1024), (2048, 2048)):
            shapes.append((m, n, k))
    for m, n, k in shapes:
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        ms = time_ms(lambda: a @ b)
        rows.append(("gemm", f"{m}x{n}x{k}", "bf16", ms, 2 * m * n * k / ms / 1e9))
        del a, b
    for m, n, k in ((8192, 8192, 8192), (4096, 4096, 4096)):
        a = torch.randn(m, k, device=dev)
        b = torch.randn(k, n, device=dev)
        torch.backends.cuda.matmul.allow_tf32 = False
        ms = time_ms(lambda: a @ b)
        rows.append(("gemm", f"{m}x{n}x{k}", "f32", ms, 2 * m * n * k / ms / 1e9))
        torch.backends.cuda.matmul.allow_tf32 = True
        ms = time_ms(lambda: a @ b)
        rows.append(("gemm", f"{m}x{n}x{k}", "tf32", ms, 2 * m * n * k / ms / 1e9))
        torch.backends.cuda.matmul.allow_tf32 = False
        del a, b

    # Attention (scaled_dot_product_attention picks flash attention for bf16): batch 1, 32 heads
    # of 128. Causal forward does half the work: 2 * 2 * s^2 * h * d / 2.
    for s in (1024, 2048, 4096, 8192, 16384, 32768):
        for causal in (False, True):
            q = torch.randn(1, 32, s, 128, device=dev, dtype=torch.bfloat16, requires_grad=True)
            k = torch.randn_like(q, requires_grad=True)
            v = torch.randn_like(q, requires_grad=True)
            flops = 4 * s * s * 32 * 128 * (0.5 if causal else 1.0)
            ms = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
            rows.append(("attention_fwd", f"1x32x{s}x128" + ("/causal" if causal else ""), "bf16", ms,
                         flops / ms / 1e9))
            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            g = torch.randn_like(o)
            ms = time_ms(lambda: torch.autograd.grad(o, (q, k, v), g, retain_graph=True))
            rows.append(("attention_bwd", f"1x32x{s}x128" + ("/causal" if causal else ""), "bf16", ms,
                         2.5 * flops / ms / 1e9))
            del q, k, v, o, g

    # Memory-bound ops at a Llama-7B layer's size (8192 tokens, h 4096, ffn 11008, vocab 32000).
    t, h, ffn, vocab = 8192, 4096, 11008, 32000
    x = torch.randn(t, h, device=dev, dtype=torch.bfloat16)
    a = torch.randn(t, ffn, device=dev, dtype=torch.bfloat16)
    logits = torch.randn(t, vocab, device=dev, dtype=torch.bfloat16)
    w = torch.ones(h, device=dev, dtype=torch.bfloat16)
    bias = torch.zeros(h, device=dev, dtype=torch.bfloat16)
    tgt = torch.randint(0, vocab, (t,), device=dev)
    mem = [
        ("gelu", f"{t}x{ffn}", lambda: F.gelu(a, approximate="tanh"), 2 * 2 * t * ffn),
        ("layer_norm", f"{t}x{h}", lambda: F.layer_norm(x, (h,), w, bias), 2 * 2 * t * h),
        ("softmax", f"{t}x{vocab}", lambda: torch.softmax(logits, dim=-1), 2 * 2 * t * vocab),
        ("cross_entropy", f"{t}x{vocab}", lambda: F.cross_entropy(logits, tgt), 2 * t * vocab),
        ("bias_grad", f"{t}x{ffn}", lambda: a.sum(dim=0), 2 * t * ffn),
        ("add", f"{t}x{ffn}", lambda: a + a, 3 * 2 * t * ffn),
        ("copy", f"{t}x{ffn}", lambda: a.clone(), 2 * 2 * t * ffn),
    ]
    for name, shape, fn, nbytes in mem:
        ms = time_ms(fn)
        rows.append((name, shape, "bf16", ms, nbytes / ms / 1e6))

    with open(path, "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["kind", "shape", "dtype", "median_ms", "rate"])
        for r in rows:
            wr.writerow([r[0], r[1], r[2], f"{r[3]:.4f}", f"{r[4]:.1f}"])
            print(f"{r[0]:14s} {r[1]:22s} {r[2]:5s} {r[3]:9.4f} ms {r[4]:9.1f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
