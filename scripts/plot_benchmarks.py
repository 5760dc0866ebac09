#!/usr/bin/python3
# scripts/plot_benchmarks.py: the pictures of docs/benchmarks.md from JSON lines of weft-bench (--json,
# --sweep) and bench/mpi_collectives (--json): both write {"op", "devices", "bytes", "time_us", ...} per point.
#
#   /usr/bin/python3 scripts/plot_benchmarks.py --weft weft.jsonl --mpi mpi.jsonl --membw 45.4 --out-dir docs
#
# Draws two PNGs:
#   benchmarks-size.png     per op, time against one replica's buffer size at --devices (default 8): weft,
#                           Open MPI, and the copy roofline (the bytes the op must read and write at least,
#                           over the host copy bandwidth --membw in GB/s; none for ppermute, which moves none);
#   benchmarks-scaling.png  per op, time against the device count at the sizes of --scaling-sizes.
# Several lines for one point (repeated runs) are reduced to their median. Skipped points are ignored.
# Needs matplotlib (Debian python3-matplotlib); draws with the Agg backend, so no display is needed.
import argparse
import json
import os
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

OPS = ["allreduce", "all_gather", "reduce_scatter", "all_to_all", "ppermute"]


def min_traffic_bytes(op, devices, size):
    """Bytes an in-memory implementation must move at least (read + write), for the roofline. `size` is the
    point's "bytes": one replica's input, except for all_gather, whose benchmarks report the gathered buffer."""
    n = devices
    return {
        "allreduce": (n + 1) * size,        # read every input, write one shared result
        "all_gather": 2 * size,             # read every input (size in all), write the gathered result
        "reduce_scatter": (n + 1) * size,   # read every input, write n results of size / n
        "all_to_all": 2 * n * size,         # read and write every block
    }.get(op)


def load(paths):
    """{(op, devices, bytes): median time_us} from JSON-lines files."""
    points = defaultdict(list)
    for path in paths:
        with open(path) as f:
            for number, line in enumerate(f, 1):
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    p = json.loads(line)
                except json.JSONDecodeError as e:
                    sys.exit(f"plot_benchmarks.py: {path}:{number}: not JSON: {e}")
                if "skipped" in p or "time_us" not in p:
                    continue
                points[(p["op"], int(p["devices"]), int(p["bytes"]))].append(float(p["time_us"]))
    return {k: statistics.median(v) for k, v in points.items()}


def size_label(b):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift}{unit}"
    return str(b)


def plot_sizes(weft, mpi, devices, membw, out):
    ops = [op for op in OPS if any(k[0] == op and k[1] == devices for k in weft)]
    if not ops:
        sys.exit(f"plot_benchmarks.py: no weft points at {devices} devices")
    fig, axes = plt.subplots(1, len(ops), figsize=(4.2 * len(ops), 3.8), squeeze=False)
    for ax, op in zip(axes[0], ops):
        for name, data, style in (("weft", weft, "o-"), ("Open MPI", mpi, "s--")):
            xs = sorted(b for (o, d, b) in data if o == op and d == devices)
            if xs:
                ax.loglog(xs, [data[(op, devices, b)] for b in xs], style, label=name)
        xs = sorted(b for (o, d, b) in weft if o == op and d == devices)
        if membw and min_traffic_bytes(op, devices, 1):
            ax.loglog(xs, [min_traffic_bytes(op, devices, b) / (membw * 1e3) for b in xs], ":", color="gray",
                      label=f"copy roofline ({membw:g} GB/s)")
        ax.set_title(f"{op}, {devices} devices / ranks")
        ax.set_xlabel("bytes gathered" if op == "all_gather" else "bytes per replica")
        ax.set_xticks(xs)
        ax.set_xticklabels([size_label(b) for b in xs], rotation=45)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("time (us, median)")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"plot_benchmarks.py: wrote {out}")


def plot_scaling(weft, mpi, sizes, out):
    ops = [op for op in OPS if any(k[0] == op for k in weft)]
    fig, axes = plt.subplots(1, len(ops), figsize=(4.2 * len(ops), 3.8), squeeze=False)
    def per_replica(op, devices, b):  # all_gather points carry the gathered size
        return b // devices if op == "all_gather" else b

    all_devices = set()
    for ax, op in zip(axes[0], ops):
        for size in sizes:
            for name, data, style in (("weft", weft, "o-"), ("MPI", mpi, "s--")):
                pts = sorted((d, t) for (o, d, b), t in data.items() if o == op and per_replica(o, d, b) == size)
                if len(pts) > 1:
                    ax.loglog([d for d, _ in pts], [t for _, t in pts], style, label=f"{name} {size_label(size)}")
                    all_devices.update(d for d, _ in pts)
        ax.set_title(f"{op} (bytes per replica)")
        ax.set_xlabel("devices / ranks")
        ax.set_xticks(sorted(all_devices))
        ax.set_xticklabels([str(d) for d in sorted(all_devices)])
        ax.minorticks_off()
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    axes[0][0].set_ylabel("time (us, median)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"plot_benchmarks.py: wrote {out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--weft", nargs="+", required=True, help="weft-bench JSON-lines files")
    ap.add_argument("--mpi", nargs="*", default=[], help="mpi_collectives JSON-lines files")
    ap.add_argument("--membw", type=float, default=0, help="host copy bandwidth in GB/s (weft-bench --op membw)")
    ap.add_argument("--devices", type=int, default=8, help="device count of the size plot")
    ap.add_argument("--scaling-sizes", default="4K,1M,64M", help="sizes of the scaling plot")
    ap.add_argument("--out-dir", default=".", help="where the PNGs go")
    args = ap.parse_args()
    weft, mpi = load(args.weft), load(args.mpi)
    units = {"K": 10, "M": 20, "G": 30}
    sizes = [int(s[:-1]) << units[s[-1]] if s[-1] in units else int(s) for s in args.scaling_sizes.split(",")]
    os.makedirs(args.out_dir, exist_ok=True)
    plot_sizes(weft, mpi, args.devices, args.membw, os.path.join(args.out_dir, "benchmarks-size.png"))
    plot_scaling(weft, mpi, sizes, os.path.join(args.out_dir, "benchmarks-scaling.png"))


if __name__ == "__main__":
    main()
