#!/usr/bin/python3
# scripts/plot_training.py: one PNG comparing training runs from their metrics CSVs (the format written by
# examples/train_fashion_mnist and bench/pytorch_mlp.py: kind,epoch,step,elapsed_s,loss,samples_per_s,
# test_accuracy). Left: training loss per step against elapsed time; right: test accuracy per epoch against
# elapsed time; every run on the same axes, so a faster framework shows as a curve shifted left.
#
#   /usr/bin/python3 scripts/plot_training.py --out runs.png weft.csv pytorch=bench/out/pt-1.csv
#   /usr/bin/python3 scripts/plot_training.py --smooth 20 --out runs.png a.csv b.csv
#
# A run is PATH (labelled with the file's stem) or LABEL=PATH. Needs matplotlib (Debian python3-matplotlib);
# draws with the Agg backend, so no display is needed.
import argparse
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

HEADER = ["kind", "epoch", "step", "elapsed_s", "loss", "samples_per_s", "test_accuracy"]


def parse_run(spec):
    """LABEL=PATH or PATH (label: the file stem). A path that exists as written wins over a split at '='."""
    if "=" in spec and not os.path.exists(spec):
        label, path = spec.split("=", 1)
    else:
        label, path = os.path.splitext(os.path.basename(spec))[0], spec
    return label, path


def read_metrics(path):
    """(steps, epochs): lists of (elapsed_s, loss) and (elapsed_s, test_accuracy), in file order."""
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header != HEADER:
            raise ValueError(f"{path}: header {header}, expected {','.join(HEADER)}")
        steps, epochs = [], []
        for lineno, row in enumerate(reader, start=2):
            if not row:
                continue
            if len(row) != len(HEADER):
                raise ValueError(f"{path}:{lineno}: {len(row)} fields, expected {len(HEADER)}")
            rec = dict(zip(HEADER, row))
            if rec["kind"] == "step":
                steps.append((float(rec["elapsed_s"]), float(rec["loss"])))
            elif rec["kind"] == "epoch":
                if rec["test_accuracy"] != "":
                    epochs.append((float(rec["elapsed_s"]), float(rec["test_accuracy"])))
            else:
                raise ValueError(f"{path}:{lineno}: kind {rec['kind']!r}, expected step or epoch")
    return steps, epochs


def smooth(values, window):
    """Trailing moving average over up to `window` points: the curve stays causal and keeps its length."""
    if window <= 1:
        return list(values)
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def main(argv):
    p = argparse.ArgumentParser(description="Plot training loss and test accuracy of several runs.")
    p.add_argument("runs", nargs="+", metavar="[LABEL=]CSV", help="metrics CSV files")
    p.add_argument("--out", required=True, help="PNG file to write")
    p.add_argument("--smooth", type=int, default=1, metavar="N",
                   help="moving average of the per-step loss over N steps (default 1: raw)")
    p.add_argument("--log-loss", action="store_true", help="logarithmic loss axis")
    p.add_argument("--title", default="", help="figure title")
    args = p.parse_args(argv)
    if args.smooth < 1:
        p.error("--smooth must be >= 1")

    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(13, 5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    any_acc = False
    for i, spec in enumerate(args.runs):
        label, path = parse_run(spec)
        try:
            steps, epochs = read_metrics(path)
        except (OSError, ValueError) as e:
            sys.exit(f"plot_training.py: {e}")
        color = colors[i % len(colors)]
        if steps:
            t, loss = zip(*steps)
            ax_loss.plot(t, smooth(list(loss), args.smooth), color=color, linewidth=1.2, label=label)
        if epochs:
            t, acc = zip(*epochs)
            ax_acc.plot(t, acc, color=color, marker="o", label=label)
            any_acc = True

    smoothing = f", moving average over {args.smooth} steps" if args.smooth > 1 else ""
    ax_loss.set_title(f"training loss per step{smoothing}")
    ax_loss.set_xlabel("elapsed time (s)")
    ax_loss.set_ylabel("cross-entropy loss")
    if args.log_loss:
        ax_loss.set_yscale("log")
    ax_acc.set_title("test accuracy per epoch")
    ax_acc.set_xlabel("elapsed time (s)")
    ax_acc.set_ylabel("test accuracy")
    if not any_acc:
        ax_acc.text(0.5, 0.5, "no epoch rows with test accuracy", ha="center", va="center",
                    transform=ax_acc.transAxes)
    for ax in (ax_loss, ax_acc):
        ax.set_xlim(left=0)
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.out, dpi=100)
    print(f"plot_training.py: wrote {args.out} ({len(args.runs)} runs)", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
