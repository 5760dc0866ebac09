#!/usr/bin/python3
"""bench/plot_transformer.py: the pictures of docs/transformer.md, drawn with matplotlib from the JSON lines
bench/compare_transformer.sh writes ($OUT/runs.jsonl: one line per run, each with train.py's or the PyTorch
twin's summary: per-step losses, validation curve, tokens/s).

    bench/plot_transformer.py --curves build/bench/curves/runs.jsonl --out docs/transformer_loss.png
    bench/plot_transformer.py --speed build/bench/every/runs.jsonl --out docs/transformer_speed.png

--curves: training loss (a moving average over --smooth steps, since one batch of 32 sequences is noisy) and
the validation points (train.py / pytorch_transformer.py --eval-every) of each layout, one line per layout.
--speed: each layout's median tokens/s over its runs, as bars, weft and PyTorch told apart by colour.
Nothing here measures; it only draws what the runs recorded.
"""
import argparse
import json
import statistics
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def read_runs(path):
    runs = [json.loads(line) for line in open(path) if line.strip()]
    return [r for r in runs if r.get("rc") == 0 and r.get("result")]


def moving_average(values, width):
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= width:
            total -= values[i - width]
        out.append(total / min(i + 1, width))
    return out


def plot_curves(runs, out, smooth, title):
    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=110)
    seen = set()
    for r in runs:
        layout, res = r["layout"], r["result"]
        if layout in seen:  # the first run of each layout: the curves of repeated runs are the same
            continue
        seen.add(layout)
        losses = res["losses"]
        line, = ax.plot(range(1, len(losses) + 1), moving_average(losses, smooth), lw=1.2,
                        label=f"{layout}: train (mean of {smooth})")
        if res.get("valid_curve"):
            steps, valid = zip(*res["valid_curve"])
            ax.plot(steps, valid, "o--", ms=3, lw=0.8, color=line.get_color(),
                    label=f"{layout}: validation ({valid[-1]:.3f} at {steps[-1]})")
    ax.set_xlabel("step (global batch 32 x 128 characters)")
    ax.set_ylabel("cross-entropy (nats per character)")
    ax.set_title(title)
    ax.set_ylim(top=min(ax.get_ylim()[1], 3.5))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out)


def plot_speed(runs, out, title):
    layouts = []
    for r in runs:
        if r["layout"] not in layouts:
            layouts.append(r["layout"])
    tps = [statistics.median(r["result"]["tokens_per_s"] for r in runs if r["layout"] == name) for name in layouts]
    colours = ["tab:orange" if name.startswith("pt-") else "tab:blue" for name in layouts]
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(layouts) + 1.2), dpi=110)
    ax.barh(range(len(layouts)), [t / 1e3 for t in tps], color=colours)
    ax.set_yticks(range(len(layouts)), layouts, fontsize=8)
    ax.invert_yaxis()
    for i, t in enumerate(tps):
        ax.text(t / 1e3, i, f" {t / 1e3:.1f}k", va="center", fontsize=7)
    ax.set_xlabel("thousand tokens/s (median over runs; blue weft, orange PyTorch 1.13)")
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--curves", metavar="RUNS_JSONL", help="loss curves of long runs")
    what.add_argument("--speed", metavar="RUNS_JSONL", help="tokens/s bars")
    ap.add_argument("--out", required=True, help="the PNG to write")
    ap.add_argument("--smooth", type=int, default=50, help="moving-average width of the training losses")
    ap.add_argument("--title", default="")
    args = ap.parse_args()
    runs = read_runs(args.curves or args.speed)
    if not runs:
        sys.exit(f"plot_transformer.py: no successful runs in {args.curves or args.speed}")
    if args.curves:
        plot_curves(runs, args.out, args.smooth, args.title or "character-level transformer on the KJV Bible")
    else:
        plot_speed(runs, args.out, args.title or "transformer training speed, this machine")
    return 0


if __name__ == "__main__":
    sys.exit(main())
