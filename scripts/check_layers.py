#!/usr/bin/env python3
"""Checks the architecture that the folders express (DESIGN.md, "Layout").

1. Every quoted #include of a project file points down the layer order
       sim <- runtime/device <- runtime/tensor <- runtime/distributed <- {tp, cp} <- models
           <- testing <- app
   (a folder may include its own files and those of the layers below it, never above or beside).
2. No include cycle between units, a unit being a header with its source files (foo.h, foo.cpp,
   foo.cu): `a.cpp -> b.h -> a.h` is a cycle between the units a and b, though no header
   includes itself.
3. Nothing under runtime/ names the layers built on it (TP, CP, RoPE, AdamW, attention): their
   math and their device kernels live in their own folders.

Prints each violation as `file:line: message` and exits 1 if there is any; 0 and a one-line
summary otherwise. Usage: scripts/check_layers.py [REPO_ROOT]  (default: this script's repo).
"""
import os
import re
import sys

LAYERS = ["sim", "runtime/device", "runtime/tensor", "runtime/distributed", "tp", "cp", "models", "testing", "app"]
# Which layers each may include (itself included). tp and cp sit side by side.
ALLOWED = {
    "sim": {"sim"},
    "runtime/device": {"sim", "runtime/device"},
    "runtime/tensor": {"sim", "runtime/device", "runtime/tensor"},
    "runtime/distributed": {"sim", "runtime/device", "runtime/tensor", "runtime/distributed"},
    "tp": {"sim", "runtime/device", "runtime/tensor", "runtime/distributed", "tp"},
    "cp": {"sim", "runtime/device", "runtime/tensor", "runtime/distributed", "cp"},
    "models": {"sim", "runtime/device", "runtime/tensor", "runtime/distributed", "tp", "cp", "models"},
    # ranksim::testing, the helpers for users' tests (GoogleTest), sits above the layers it tests.
    "testing": {"sim", "runtime/device", "runtime/tensor", "runtime/distributed", "tp", "cp", "models", "testing"},
    "app": set(LAYERS),
}
SOURCE_EXT = (".h", ".cpp", ".cu", ".cuh")
# Cycles between units that are tolerated while a change to break them is under way: none. The
# check fails on any cycle not listed here, and on a listed one that no longer exists, so that the
# list only shrinks. (The structure issue broke the last ones: Tensor's copies and the ops by
# kind in their own units, and the shared types of cp's layout, the schedules and the topology
# spec in their own headers.)
KNOWN_CYCLES = set()

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
# Words that name a layer above the runtime, as code or prose (the safetensors reader's `cp` is a
# code point, and is lower case).
ABOVE_RUNTIME = re.compile(r"\b(TP|CP|RoPE|AdamW|[Aa]ttention)\b|\b(tp|cp|models)/")


def layer_of(path):
    for layer in sorted(LAYERS, key=len, reverse=True):
        if path == layer or path.startswith(layer + "/"):
            return layer
    return None


def unit_of(path):
    return os.path.splitext(path)[0]


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    root = os.path.abspath(root)
    files = []
    for top in ("sim", "runtime", "tp", "cp", "models", "testing", "app"):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for n in names:
                if n.endswith(SOURCE_EXT):
                    files.append(os.path.relpath(os.path.join(dirpath, n), root).replace(os.sep, "/"))
    files.sort()
    known = set(files)
    problems = []
    edges = {}
    for f in files:
        src_layer = layer_of(f)
        with open(os.path.join(root, f), encoding="utf-8") as fh:
            lines = fh.read().split("\n")
        for i, line in enumerate(lines, 1):
            if src_layer.startswith("runtime") and ABOVE_RUNTIME.search(line):
                problems.append(f"{f}:{i}: runtime/ names a layer built on it: {line.strip()}")
            m = INCLUDE.match(line)
            if not m:
                continue
            inc = m.group(1)
            if inc not in known:
                continue  # a system or third-party header, or a test helper
            dst_layer = layer_of(inc)
            if dst_layer not in ALLOWED[src_layer]:
                problems.append(f"{f}:{i}: {src_layer} must not include {inc} ({dst_layer} is not below it)")
            a, b = unit_of(f), unit_of(inc)
            if a != b:
                edges.setdefault(a, {}).setdefault(b, (f, i))
    # Cycles between units: depth-first search, reporting each cycle once by its smallest unit.
    seen_cycles = set()
    state = {}

    def visit(u, stack):
        state[u] = 1
        stack.append(u)
        for v in sorted(edges.get(u, {})):
            if state.get(v) == 1:
                cycle = stack[stack.index(v):]
                key = frozenset(cycle)
                if key not in seen_cycles:
                    seen_cycles.add(key)
                    if key in KNOWN_CYCLES:
                        continue
                    f, i = edges[u][v]
                    problems.append(f"{f}:{i}: include cycle: {' -> '.join(cycle + [v])}")
            elif state.get(v) is None:
                visit(v, stack)
        stack.pop()
        state[u] = 2

    for u in sorted(edges):
        if state.get(u) is None:
            visit(u, [])
    for gone in sorted(KNOWN_CYCLES - seen_cycles, key=sorted):
        problems.append(f"scripts/check_layers.py: the known cycle {sorted(gone)} is gone: remove it from KNOWN_CYCLES")
    for p in problems:
        print(p)
    if problems:
        print(f"check_layers: {len(problems)} problem(s) in {len(files)} files")
        return 1
    tolerated = f" but the {len(KNOWN_CYCLES)} known" if KNOWN_CYCLES else ""
    print(f"check_layers: {len(files)} files, layers {' <- '.join(LAYERS)}: no upward include, "
          f"no cycle{tolerated}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
