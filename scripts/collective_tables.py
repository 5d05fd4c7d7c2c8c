#!/usr/bin/env python3
"""Measured vs predicted for every public nccl-tests table in docs/data/nccl-tests/.

Runs `ranksim calibrate --check` on each table with the shipped topology that models its machine
(and the overrides that describe it: node count, NVLS off, fewer devices or NICs), and writes the
tables and a summary into docs/collective-timing.md below the line '<!-- tables -->', with two
checks of the data and the fits: the spread between tables the model describes identically, and
each joint fit refitted without each of its tables in turn, predicting the table left out.

Usage: scripts/collective_tables.py RANKSIM_BINARY [--check]
  --check: do not write; exit 1 if the page is out of date.
"""
import glob
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = "docs/data/nccl-tests"
PAGE = os.path.join(ROOT, "docs/collective-timing.md")
MARK = "<!-- tables -->"

# Tables the shipped constants were fitted to.
FITTED = {
    "h100sxm_8gpu_all_reduce_k8s_ring.csv",
    "h100sxm_1node8gpu_all_reduce_together_nvls.csv",
    "h100sxm_1node8gpu_all_gather_together_ring.csv",
    "h100sxm_1node8gpu_all_reduce_dgxc.csv",
    "h100sxm_1node8gpu_all_to_all_xxrjun.csv",
    "h100sxm_2node16gpu_ibndr_all_reduce_user2.csv",
    "h100sxm_10node10gpu_all_reduce_xxrjun.csv",
    "h100sxm_10node80gpu_all_gather_xxrjun.csv",
    "h100sxm_10node20gpu_all_to_all_xxrjun.csv",
    "h100sxm_2node2gpu_all_to_all_xxrjun01.csv",
    "h100sxm_2node8gpu_all_reduce_snellius_ring.csv",
    "h100sxm_1node4gpu_all_reduce_snellius.csv",
    "h100sxm_2node16gpu_efa_all_reduce_awsome.csv",
    "h100sxm_16node128gpu_efa_all_gather_crazyguitar.csv",
    "h100sxm_8node64gpu_efa_all_to_all_crazyguitar.csv",
    "h100sxm_16node128gpu_efa_all_reduce_crazyguitar.csv",
    "a100sxm4_2node16gpu_all_reduce_alcf_sophia.csv",
    "a100sxm4_2node16gpu_all_gather_alcf_sophia.csv",
    "a100sxm4_2node16gpu_all_to_all_alcf_sophia.csv",
}


# The joint fits of the shipped constants (the commands in the topology files' headers): what
# they calibrate, the topology they start from and its overrides, the constants fitted and the
# tables. The page checks each by leaving one table out at a time.
JOINT_FITS = [
    ("h100-cluster.yaml", "h100-cluster.yaml", ["nodes=10"],
     "intra_latency,nvls_efficiency,nvls_latency,call_overhead,group_launch,simple_latency,network_efficiency,"
     "inter_latency,net_overhead,channel_network_bandwidth,nvls_tree_efficiency",
     ["h100sxm_8gpu_all_reduce_k8s_ring.csv", "h100sxm_1node8gpu_all_reduce_together_nvls.csv",
      "h100sxm_1node8gpu_all_gather_together_ring.csv", "h100sxm_1node8gpu_all_reduce_dgxc.csv",
      "h100sxm_1node8gpu_all_to_all_xxrjun.csv", "h100sxm_10node10gpu_all_reduce_xxrjun.csv",
      "h100sxm_10node80gpu_all_gather_xxrjun.csv", "h100sxm_2node16gpu_ibndr_all_reduce_user2.csv"]),
    ("dgx-a100.yaml", "dgx-a100.yaml", ["nodes=2"],
     "intra_latency,network_efficiency,inter_latency,net_overhead,call_overhead,alltoall_network_efficiency,"
     "simple_latency",
     ["a100sxm4_2node16gpu_all_reduce_alcf_sophia.csv", "a100sxm4_2node16gpu_all_gather_alcf_sophia.csv",
      "a100sxm4_2node16gpu_all_to_all_alcf_sophia.csv"]),
    # aws-p5.yaml's first step (its header): from h100-cluster.yaml with AWS's buffers.
    ("aws-p5.yaml (step 1)", "h100-cluster.yaml",
     ["nodes=16", "collectives.buffer_size=8MiB", "collectives.nvls_chunk_size=512KiB",
      "collectives.nvls_tree_max_chunk_size=512KiB", "collectives.p2p_chunk_size=512KiB",
      "collectives.network_efficiency=1.0", "collectives.channel_network_bandwidth=1000GB/s"],
     "inter_latency,net_overhead,nvls_tree_efficiency,alltoall_network_efficiency,peer_latency,message_latency",
     ["h100sxm_2node16gpu_efa_all_reduce_awsome.csv", "h100sxm_16node128gpu_efa_all_gather_crazyguitar.csv",
      "h100sxm_8node64gpu_efa_all_to_all_crazyguitar.csv"]),
]


def machine(name, header=""):
    """(topology, overrides, what the overrides say) for a data file and its header lines."""
    m = re.search(r"_(\d+)node(\d+)gpu_", name)
    nodes = int(m.group(1)) if m else 1
    gpus = int(m.group(2)) if m else 8
    if name.startswith("a100"):
        if "polaris" in name:
            return ("dgx-a100.yaml", [f"nodes={nodes}", "node.devices=4",
                                      "node.fabric={type: mesh, bandwidth: 100 GB/s, latency: 700 ns}",
                                      "network.nics_per_node=2"],
                    "Polaris: 4 A100 per node, each pair joined by 4 NVLink 3 links (100 GB/s each way), no "
                    "NVSwitch; 2 NICs per node at 200 Gb/s (Slingshot 11, not InfiniBand)")
        if "_efa_" in name:  # AWS p4d and p4de: 400 Gb/s of EFA a node
            return ("dgx-a100.yaml", [f"nodes={nodes}", "network.nics_per_node=4", "network.nic_bandwidth=100Gb/s"],
                    "AWS p4d and p4de: 4 x 100 Gb/s EFA a node through libfabric, not InfiniBand")
        if "_roce_" in name:
            return ("dgx-a100.yaml", [f"nodes={nodes}", "network.transport=roce"],
                    "OCI BM.GPU4.8: 16 x 100 Gb/s RoCE a node (as 8 x 200 Gb/s), not InfiniBand")
        return ("dgx-a100.yaml", [f"nodes={nodes}"], "")
    if "jupiter" in name:  # its own topology: 4 GH200 a node on an NVLink mesh, NDR200
        return ("jupiter-gh200.yaml", [f"nodes={nodes}"],
                "JUPITER Booster: 4 GH200 a node, NVLink 4 between each pair of GPUs at 150 GB/s each way (no "
                "NVSwitch, no NVLS), 4 x InfiniBand NDR200 a node (JSC's configuration page)")
    if "snellius" in name or "odissei" in name:  # Snellius (ODISSEI ran on it too): its own topology
        return ("snellius-h100.yaml", [f"nodes={nodes}"],
                "Snellius gpu_h100: 4 H100 SXM a node, each pair joined by NVLink without NVSwitch (as an HGX "
                "H100 4-GPU board: 6 links, 150 GB/s each way; no NVLS), 4 x 200 Gb/s InfiniBand a node (NCCL's own "
                "log lists four IB ports, which ibstat shows at Rate 200; rings reach 97 GB/s of bus bandwidth)")
    if name.startswith("h100_") and "a3mega" in name:
        return ("h100-cluster.yaml", [f"nodes={nodes}", "network.nic_bandwidth=200Gb/s", "network.transport=roce"],
                "GCP A3 Mega: 8 x 200 Gb/s GPUDirect-TCPXO NICs per VM, not InfiniBand")
    if nodes == 1 or "8gpu_all_reduce_k8s" in name:
        sets = []
        if "nonvls" in name:
            sets.append("collectives.nvls=false")
        return ("dgx-h100.yaml", sets, "NVLS off" if sets else "")
    # The table's ranks go evenly on its nodes (calibrate places them so): fewer GPUs per node
    # than the node has need no override.
    per_node = gpus // nodes
    note = f"{per_node} of each node's 8 GPUs" if per_node != 8 else ""
    if "_efa_" in name:  # AWS p5 on EFA: its own topology, calibrated to some of these tables
        p5 = "AWS p5: 32 x 100 Gb/s EFA a node (3,200 Gb/s, as 8 x 400 Gb/s) through libfabric, not InfiniBand"
        if "NCCL_TUNER_PLUGIN" in header:  # the run loaded AWS's tuner: its all_reduce choices
            return ("aws-p5.yaml", [f"nodes={nodes}", "collectives.tuner=tuners/aws-p5.conf"],
                    p5 + "; AWS's tuner plugin chose all_reduce's algorithm and protocol (topologies/tuners/aws-p5.conf)")
        return ("aws-p5.yaml", [f"nodes={nodes}"], p5)
    if "_roce_" in name:  # the H100 cluster's constants, on RoCE
        return ("h100-cluster.yaml", [f"nodes={nodes}", "network.transport=roce"],
                "RoCE (8 x 400 Gb/s ConnectX-7 a node), not InfiniBand")
    ctas = re.search(r"NCCL_MIN_CTAS=(\d+)", header)
    if ctas:  # at least that many channels
        return ("h100-cluster.yaml", [f"nodes={nodes}", f"collectives.channels={ctas.group(1)}"],
                f"NCCL_MIN_CTAS={ctas.group(1)}: as many channels")
    return ("h100-cluster.yaml", [f"nodes={nodes}"], note)


# How a table was measured, for the tally: networks other than InfiniBand (which the shipped
# topologies model), one thread driving several GPUs, or one process per GPU as training runs.
OTHER_NETWORK = ("_roce_", "_efa_", "polaris", "a3mega")
MODES = ("one process per GPU (InfiniBand, or the network not stated)", "one thread driving several GPUs (-g)",
         "other networks (RoCE, EFA, Slingshot, TCPXO)")


def mode(name, head):
    if any(k in name for k in OTHER_NETWORK):
        return MODES[2]
    if int(head.get("gpus_per_thread", "1")) > 1:
        return MODES[1]
    return MODES[0]


def summary(tally):
    """Lines counting the tables within the error bounds asked of the model (issue #16)."""
    def count(rows, bound):
        return f"{sum(e <= bound for e in rows)} of {len(rows)}"
    fitted = [big for fit, _, _, big, _ in tally if fit and big is not None]
    held = [(fam, how, big) for fit, fam, how, big, _ in tally if not fit and big is not None]
    small = [s for _, _, _, _, s in tally if s is not None]
    families = sorted({fam for fam, _, _ in held})
    by_family = ", ".join(f"{fam} {count([b for f, _, b in held if f == fam], 10)}" for fam in families)
    by_mode = "; ".join(f"{how}: {count([b for _, h, b in held if h == how], 10)}" for how in MODES
                        if any(h == how for _, h, _ in held))
    return [f"Within the bounds asked, from 1 MiB up: fitted tables within 5%: {count(fitted, 5)}; "
            f"held-out tables within 10%: {count([b for _, _, b in held], 10)} ({by_family}). "
            f"Below 1 MiB, within 25%: {count(small, 25)} tables.",
            "",
            f"Held-out tables within 10% from 1 MiB up, by how they were measured: {by_mode}."]


def rows(path):
    """{size in bytes: time in us} of a data file."""
    out = {}
    with open(path) as f:
        for line in f:
            if line.startswith("#") or line.startswith("size_bytes"):
                continue
            size, time = line.split(",")[:2]
            out[int(size)] = float(time)
    return out


def common_sizes(a, b):
    """(time in a, time in b) at the sizes from 1 MiB up that both tables measured. nccl-tests rounds
    a size down to whole elements per rank, so two runs may list sizes a few bytes apart: sizes
    within 0.1% of each other are the same."""
    pairs = []
    for size, t in sorted(a.items()):
        if size < (1 << 20):
            continue
        near = [s for s in b if abs(s - size) <= size * 1e-3]
        if near:
            pairs.append((t, b[near[0]]))
    return pairs


def same_configuration(configs):
    """Lines of a section comparing tables that the model cannot tell apart: the same topology and
    overrides, operation, ranks, nodes, algorithm setting and GPUs per thread. Their spread bounds
    what any one prediction can reach on them."""
    groups = {}
    for key, name, path, big in configs:
        groups.setdefault(key, []).append((name, path, big))
    out = ["", "## Tables of the same configuration", "",
           "Tables measured on different machines (or days) that the model describes identically: the same "
           "topology and overrides, operation, ranks, nodes, algorithm setting and GPUs per thread. Spread: "
           "the geometric mean over the sizes from 1 MiB up that both measured of |ln(a/b)|, as a percentage "
           "(exp(mean) - 1). One prediction per size cannot be within less than half the spread (in log terms) "
           "of both tables: that floor is the last column.", "",
           "| configuration | table a (model error) | table b (model error) | sizes | spread | floor for the worse |",
           "|---|---|---|---|---|---|"]
    count = 0
    for key, members in sorted(groups.items()):
        for i in range(len(members)):
            for j in range(i + 1, len(members)):
                (na, pa, ea), (nb, pb, eb) = members[i], members[j]
                pairs = common_sizes(rows(pa), rows(pb))
                if not pairs:
                    continue
                mean = sum(abs(math.log(x / y)) for x, y in pairs) / len(pairs)
                topo, sets, op, ranks, nodes, algo, gpt = key
                what = f"{op}, {ranks} x {nodes}, {topo} {' '.join(sets[1:])}".rstrip()
                if algo.lower() != "default":
                    what += f", NCCL_ALGO={algo}"
                if gpt != "1":
                    what += f", -g {gpt}"
                out.append(f"| {what} | {na} ({ea}) | {nb} ({eb}) | {len(pairs)} | "
                           f"{100 * (math.exp(mean) - 1):.1f}% | {100 * (math.exp(mean / 2) - 1):.1f}% |")
                count += 1
    return out if count else []


def leave_one_out(binary):
    """Lines of a section refitting each joint fit without each of its tables in turn and predicting
    the table left out (`ranksim calibrate --leave-one-out`)."""
    out = ["", "## Leave one out", "",
           "Each joint fit of the shipped constants (the commands in the topology files' headers) refitted "
           "without one of its tables, which the refitted constants then predict (`ranksim calibrate "
           "--leave-one-out`): how well the fit predicts a table of its own kind that it did not see. A constant "
           "that only the left-out table informs is held at its shipped value (last column).", "",
           "| fit | table left out | fitted with it (>= 1 MiB) | predicted without it (>= 1 MiB) | held at the shipped value |",
           "|---|---|---|---|---|"]
    work = tempfile.mkdtemp(prefix="ranksim-loo-")
    try:
        for label, topo, sets, fit, tables in JOINT_FITS:
            cmd = [binary, "calibrate", "-t", "topologies/" + topo]
            for s in sets:
                cmd += ["--set", s]
            cmd += ["--fit", fit, "--leave-one-out", "-o", os.path.join(work, "fit.yaml")]
            cmd += [os.path.join(DATA, t) for t in tables]
            r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"{' '.join(cmd)} failed: {r.stderr}")
            loo = r.stdout[r.stdout.index("# leave one out"):]
            for t in tables:
                line = re.search(r"^# " + re.escape(os.path.join(DATA, t)) + r":(.*)$", loo, re.M).group(1)
                big = re.search(r"sizes >= 1 MiB ([\d.]+%) fitted, ([\d.]+%) left out", line)
                held = re.search(r"held at the topology's value: (.*)$", line)
                out.append(f"| {label} | {t} | {big.group(1) if big else '-'} | {big.group(2) if big else '-'} | "
                           f"{held.group(1) if held else '-'} |")
    finally:
        shutil.rmtree(work)
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    check = "--check" in sys.argv[2:]
    for _, _, _, _, tables in JOINT_FITS:
        for t in tables:
            if t not in FITTED:
                sys.exit(f"{t} is in a joint fit but not in FITTED")
    out = [MARK, "", "## Every public table: measured vs predicted",
           "", "Generated by `scripts/collective_tables.py` (`ranksim calibrate --check` on each table). "
           "Error: geometric mean of |predicted/measured - 1| over the sizes, computed as "
           "exp(mean |ln(predicted/measured)|) - 1.", "",
           "| table | op | ranks x nodes | topology (overrides) | fitted to | error >= 1 MiB | error < 1 MiB |",
           "|---|---|---|---|---|---|---|"]
    details = []
    # (fitted, GPU family, how measured, error >= 1 MiB, error < 1 MiB) per table, for the tally.
    tally = []
    # (what the model sees, table, path, its error from 1 MiB up) per table, for the spreads.
    configs = []
    for path in sorted(glob.glob(os.path.join(ROOT, DATA, "*.csv"))):
        name = os.path.basename(path)
        with open(path) as f:
            header_lines = [line for line in f if line.startswith("#")]
        head = {}
        for line in header_lines:
            if line.startswith("# ") and ":" in line:
                k, v = line[2:].split(":", 1)
                head[k.strip()] = v.strip()
        topo, sets, note = machine(name, "".join(header_lines))
        cmd = [binary, "calibrate", "--check", "-t", "topologies/" + topo]
        for s in sets:
            cmd += ["--set", s]
        cmd.append(os.path.join(DATA, name))
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed: {r.stderr}")
        big = re.search(r"sizes >= 1 MiB: ([\d.]+%)", r.stdout)
        small = re.search(r"sizes < 1 MiB: ([\d.]+%)", r.stdout)
        over = " ".join("--set " + s for s in sets)
        out.append(f"| [{name}](data/nccl-tests/{name}) | {head.get('op', '?')} | "
                   f"{head.get('ranks', '?')} x {head.get('nodes', '?')} | {topo} {over} | "
                   f"{'yes' if name in FITTED else 'no'} | {big.group(1) if big else '-'} | "
                   f"{small.group(1) if small else '-'} |")
        tally.append((name in FITTED, name.split("_")[0], mode(name, head),
                      float(big.group(1)[:-1]) if big else None, float(small.group(1)[:-1]) if small else None))
        configs.append(((topo, tuple(sets), head.get("op", "?"), head.get("ranks", "?"), head.get("nodes", "?"),
                         head.get("algo", "default"), head.get("gpus_per_thread", "1")),
                        name, path, big.group(1) if big else "-"))
        body = [l for l in r.stdout.splitlines() if not l.startswith("# ranksim")]
        details += ["", f"### {name}", "", f"Source: {head.get('source', '?')}", ""]
        if note:
            details += [f"Machine as modelled: {note}.", ""]
        details += ["```"] + [l for l in body if l.strip()] + ["```"]
    out += [""] + summary(tally)
    out += same_configuration(configs)
    out += leave_one_out(binary)
    text = "\n".join(out + details) + "\n"
    with open(PAGE) as f:
        page = f.read()
    if MARK not in page:
        sys.exit(f"{PAGE} has no '{MARK}' line")
    new = page[: page.index(MARK)] + text
    if check:
        sys.exit(0 if new == page else f"{PAGE} is out of date: run scripts/collective_tables.py")
    with open(PAGE, "w") as f:
        f.write(new)


if __name__ == "__main__":
    main()
