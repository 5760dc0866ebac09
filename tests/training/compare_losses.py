#!/usr/bin/python3
"""Compares the per-step losses of two train_fashion_mnist metrics CSVs (issue 7: every layout follows the
1-device run within a relative tolerance at every step). Exit status 0 when they agree, 1 otherwise.

    compare_losses.py REFERENCE.csv OTHER.csv [--rtol 1e-3] [--steps 100] [--exact]
"""
import argparse
import csv
import sys


def step_losses(path):
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["kind"] == "step"]
    return {int(r["step"]): float(r["loss"]) for r in rows}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("reference")
    parser.add_argument("other")
    parser.add_argument("--rtol", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=100, help="how many steps both files must hold")
    parser.add_argument("--exact", action="store_true", help="bitwise equal losses (same layout twice)")
    args = parser.parse_args()
    reference, other = step_losses(args.reference), step_losses(args.other)
    failures = []
    for step in range(args.steps):
        if step not in reference or step not in other:
            failures.append(f"step {step}: missing in {'reference' if step not in reference else 'other'}")
            continue
        a, b = reference[step], other[step]
        if (a != b) if args.exact else (abs(a - b) > args.rtol * abs(a)):
            failures.append(f"step {step}: reference loss {a!r}, other {b!r} (relative difference {abs(a - b) / abs(a):.3g})")
    if len(reference) < 2 or not reference[max(reference)] < 0.75 * reference[0]:
        failures.append("the reference loss did not fall by a quarter: the model did not learn")
    for line in failures[:20]:
        print(line)
    print(f"{args.steps - len(failures)} of {args.steps} steps agree" + ("" if not failures else f"; {len(failures)} differ"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
