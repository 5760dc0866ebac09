"""A loop inside one program against a loop of program calls from Python (issue 47's floor: a fori_loop of
10 000 iterations of a 4 KiB axpy in one jit, at most 2 us an iteration; a Python loop of jitted calls ~20 us).

- `fori_loop`: weft.jit(lambda y, x: lax.fori_loop(0, STEPS, lambda i, y: a * x + y, y)): one program whose
  scan equation the executor runs STEPS times in C++ (src/program/ops/control.cc);
- `python`: STEPS calls of weft.jit(lambda y, x: a * x + y) from Python.

Both compute the same numbers (checked before timing). The runs alternate so that the machine's drift falls on
both alike; each figure is the median (and minimum) of --reps runs, per iteration, after a warm-up call each.

    cd build && PYTHONPATH=python /usr/bin/python3 ../bench/fori_loop.py [--reps 7] [--steps 10000] [--json]
"""
import argparse
import json
import statistics
import time

import numpy as np

import weft
from weft import lax


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--steps", type=int, default=10000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    n, steps, a = 1024, args.steps, np.float32(0.5)  # 1024 float32: 4 KiB
    x, y0 = np.ones(n, np.float32), np.zeros(n, np.float32)
    looped = weft.jit(lambda y, x: lax.fori_loop(0, steps, lambda i, y: a * x + y, y))
    step = weft.jit(lambda y, x: a * x + y)
    y = y0
    for _ in range(steps):
        y = step(y, x)
    np.testing.assert_array_equal(np.asarray(looped(y0, x)), np.asarray(y))
    times = {"fori_loop": [], "python": []}
    for _ in range(args.reps):
        t = time.perf_counter()
        looped(y0, x)
        times["fori_loop"].append((time.perf_counter() - t) / steps * 1e6)
        t = time.perf_counter()
        y = y0
        for _ in range(steps):
            y = step(y, x)
        times["python"].append((time.perf_counter() - t) / steps * 1e6)
    summary = {k: {"median_us": statistics.median(v), "min_us": min(v)} for k, v in times.items()}
    if args.json:
        print(json.dumps(summary))
        return
    for k, v in summary.items():
        print(f"{k:10s} {v['median_us']:8.2f} us an iteration (min {v['min_us']:.2f})")


if __name__ == "__main__":
    main()
