#!/usr/bin/env python3
"""Writes topologies/tuners/aws-p5.conf: AWS's tuner plugin's all_reduce choices on p5, as rules in
the CSV of NCCL's example tuner plugin (sim/tuner_config.h), one set per node count.

Usage: scripts/aws_p5_tuner.py [OUT]   (default: topologies/tuners/aws-p5.conf)

AWS's NCCL plugin (aws-ofi-nccl) loads its own tuner on p5 instances. For communicators of 8 ranks
a node it picks all_reduce's algorithm and protocol by where the call's (size in bytes, rank count)
falls among polygons; outside them NCCL's cost model chooses. The polygons' vertices below are the
figures of aws-ofi-nccl v1.16.3, src/tuner/nccl_ofi_regions.cpp, region_init_internal_p5_p5e
(branch nRanks == 8 * nNodes), in the order the tuner tries them; the first polygon that holds the
point (inside or on its edge) decides. This script evaluates them at 8 x N ranks for N = 2..128
nodes and writes, per node count, the size ranges where each choice holds (to the byte).
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_SIZE = 100 * 1024**3    # the tuner's TUNER_MAX_SIZE: sizes beyond fall back to NCCL
MAX_RANKS = 1024 * 1024     # its TUNER_MAX_RANKS


def extend(a, b, z):
    """The point of line a-b that reaches z's x or z's y, whichever comes first (the tuner's
    extend_region: how its polygons reach past the measured sizes and rank counts)."""
    if a[0] == b[0]:
        return (a[0], z[1])
    if a[1] == b[1]:
        return (z[0], a[1])
    m = (a[1] - b[1]) / (a[0] - b[0])
    c = b[1] - m * b[0]
    y = m * z[0] + c
    return (z[0], y) if y < z[1] else ((z[1] - c) / m, z[1])


FAR = (MAX_SIZE, MAX_RANKS)
TREE_LL128_END = extend((402653184, 2048), (402653184, 4096), FAR)
NVLS_TREE_END = extend((8053063680, 160), (9663676416, 192), FAR)
RING_SIMPLE_END = extend((8053063680, 160), (9663676416, 192), FAR)
REGIONS = [  # (algorithm, protocol, vertices as (bytes, ranks))
    ("tree", "ll128", [(0, 16), (31457280, 16), (37748736, 32), (117440512, 64), (301989888, 128),
                       (301989888, 256), (335544320, 512), (536870912, 1024), (402653184, 2048),
                       (402653184, 4096), TREE_LL128_END, (0, TREE_LL128_END[1])]),
    ("nvls_tree", "simple", [(31457281, 16), (MAX_SIZE, 16), (31457281, 16)]),
    ("ring", "ll128", [(31457280, 17), (1073741824, 17), (2147483648, 64), (2147483648, 128),
                       (1342177280, 160), (2147483648, 256), (1074790400, 256), (444596224, 160),
                       (301989888, 128), (117440512, 64), (37748736, 32)]),
    ("nvls_tree", "simple", [(2147483648, 128), (6442450944, 128), (8053063680, 160), (9663676416, 192),
                             NVLS_TREE_END, TREE_LL128_END, (402653184, 4096), (402653184, 2048),
                             (536870912, 1024), (335544320, 512), (301989888, 256), (310378496, 160),
                             (444596224, 160), (1074790400, 256), (2684354560, 256), (2147483648, 224),
                             (1342177280, 160)]),
    ("ring", "simple", [(1073741824, 17), (RING_SIMPLE_END[0], 17), RING_SIMPLE_END, (9663676416, 192),
                        (8053063680, 160), (2684354560, 64), (1610612736, 32)]),
]


def on_edge(p, a, b):
    (x, y), (x1, y1), (x2, y2) = p, a, b
    length = ((x2 - x1) ** 2 + (y2 - y1) ** 2) ** 0.5
    if length == 0:
        return (x, y) == (x1, y1)
    if abs((x2 - x1) * (y - y1) - (y2 - y1) * (x - x1)) / length > 1e-9:
        return False
    return min(x1, x2) <= x <= max(x1, x2) and min(y1, y2) <= y <= max(y1, y2)


def holds(p, poly):
    """Inside or on the edge (ray casting)."""
    n = len(poly)
    if any(on_edge(p, poly[i], poly[(i + 1) % n]) for i in range(n)):
        return True
    x, y = p
    inside = False
    for i in range(n):
        (x1, y1), (x2, y2) = poly[i], poly[(i + 1) % n]
        if (y1 > y) != (y2 > y) and x < x1 + (y - y1) * (x2 - x1) / (y2 - y1):
            inside = not inside
    return inside


def choice(size, ranks):
    for algo, proto, poly in REGIONS:
        if holds((size, ranks), poly):
            return (algo, proto)
    return None  # NCCL's cost model


def ranges(ranks):
    """[(first byte, last byte, choice)] over 0..MAX_SIZE, each boundary found to the byte."""
    grid = [0]
    s = 1.0
    while s < MAX_SIZE:
        grid.append(int(s))
        s *= 2 ** (1 / 32)
    grid.append(MAX_SIZE)
    out, start, cur = [], 0, choice(0, ranks)
    for a, b in zip(grid, grid[1:]):
        if choice(b, ranks) == cur:
            continue
        lo, hi = a, b  # choice(lo) == cur != choice(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if choice(mid, ranks) == cur:
                lo = mid
            else:
                hi = mid
        out.append((start, lo, cur))
        start, cur = hi, choice(hi, ranks)
    out.append((start, MAX_SIZE, cur))
    return out


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "topologies", "tuners", "aws-p5.conf")
    lines = [
        "# AWS's tuner plugin on p5 (aws-ofi-nccl v1.16.3, loaded by the plugin itself): its all_reduce",
        "# choices for 8 ranks a node on 2 to 128 nodes, in the CSV of NCCL's example tuner plugin",
        "# (collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks). Written by",
        "# scripts/aws_p5_tuner.py from the vertices of the tuner's p5/p5e regions",
        "# (src/tuner/nccl_ofi_regions.cpp); sizes its regions leave out go to NCCL's cost model, as",
        "# they do with the plugin. all_gather, reduce_scatter and other rank counts: NCCL's model.",
    ]
    for nodes in range(2, 129):
        ranks = 8 * nodes
        for first, last, c in ranges(ranks):
            if c:
                lines.append(f"allreduce,{first},{last},{c[0]},{c[1]},-1,{nodes},{ranks}")
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {out_path}: {len(lines) - 6} rules")


if __name__ == "__main__":
    main()
