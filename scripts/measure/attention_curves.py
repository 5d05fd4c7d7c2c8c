#!/usr/bin/env python3
"""Measures fused attention on this machine's GPU as the kernel profile's attention curves hold it
(docs/compute.md): bf16, 16k tokens in 2048 / head_dim heads (batch = 16384 / seq), forward and
backward, causal and not, head dims 64 and 128, 512..16384 keys; through PyTorch's
scaled_dot_product_attention with one backend at a time (cuDNN's fused attention, which
TransformerEngine also uses on Hopper, and flash attention).

Usage: python3 scripts/measure/attention_curves.py OUT_DIR
Writes OUT_DIR/attention_curves.csv (backend, pass, causal, head_dim, seq, ms, TFLOP/s) and
OUT_DIR/attention_curves.yaml (the curves in the profile's layout, one block per backend).
FLOPs: 4 * seq^2 * heads * head_dim * batch forward (half with a causal mask), 2.5 times that
backward. Timing as scripts/measure/gemm_grid.py: back-to-back runs after a warm-up.
"""
import csv
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemm_grid import time_ms  # noqa: E402


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    dev = torch.device("cuda")
    seqs = [512, 1024, 2048, 4096, 8192, 16384]
    rows = []
    backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
    for name, backend in backends.items():
        for d in (64, 128):
            for causal in (False, True):
                for s in seqs:
                    b, h = 16384 // s, 2048 // d
                    q = torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
                    k = torch.randn_like(q, requires_grad=True)
                    v = torch.randn_like(q, requires_grad=True)
                    flops = 4.0 * s * s * h * d * b * (0.5 if causal else 1.0)
                    try:
                        with sdpa_kernel(backend):
                            ms = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
                            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                            g = torch.randn_like(o)
                            ms_b = time_ms(lambda: torch.autograd.grad(o, (q, k, v), g, retain_graph=True))
                    except RuntimeError as e:  # a backend that does not take this shape
                        print(f"{name} d {d} causal {causal} seq {s}: {str(e).splitlines()[0]}", flush=True)
                        continue
                    rows.append((name, "forward", causal, d, s, ms, flops / ms / 1e9))
                    rows.append((name, "backward", causal, d, s, ms_b, 2.5 * flops / ms_b / 1e9))
                    print(f"{name} d {d} causal {causal} seq {s}: fwd {flops / ms / 1e9:.0f} "
                          f"bwd {2.5 * flops / ms_b / 1e9:.0f} TFLOP/s", flush=True)
                    del q, k, v, o, g
    with open(os.path.join(out_dir, "attention_curves.csv"), "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["backend", "pass", "causal", "head_dim", "seq", "ms", "tflops"])
        for r in rows:
            wr.writerow([r[0], r[1], str(r[2]).lower(), r[3], r[4], f"{r[5]:.4f}", f"{r[6]:.1f}"])
    with open(os.path.join(out_dir, "attention_curves.yaml"), "w") as f:
        for name in backends:
            f.write(f"# {name}\nattention:\n  bf16:\n")
            for p in ("forward", "backward"):
                for causal in (False, True):
                    for d in (64, 128):
                        pts = [r for r in rows if r[0] == name and r[1] == p and r[2] == causal and r[3] == d]
                        if not pts:
                            continue
                        f.write(f"    - {{pass: {p}, causal: {str(causal).lower()}, head_dim: {d}, "
                                f"seq: [{', '.join(str(r[4]) for r in pts)}], "
                                f"tflops: [{', '.join(f'{r[6]:.0f}' for r in pts)}]}}\n")


if __name__ == "__main__":
    main(sys.argv[1])
