#!/usr/bin/python3
# bench/pytorch_after_weft.py: does weft change its host process? (issue 45, item 15). One process times a
# one-thread PyTorch training step (the MLP 784-512-512-10 of bench/pytorch_mlp.py, batch BATCH=64, SGD momentum)
# before weft is imported, then imports weft, runs one pmap, and times the same step again. A library must
# leave the step's time as it found it; when weft tuned glibc's malloc for the whole process by itself (a
# fixed 128 KiB mmap threshold), every tensor of 128 KiB or more was mmap'ed and faulted in afresh each step.
# WEFT_MALLOC_TUNING=1 asks weft for that tuning (docs/settings.md, "The process's malloc"), to show its cost.
#
#   /usr/bin/python3 bench/pytorch_after_weft.py                        # PYTHONPATH=build/python
#   WEFT_MALLOC_TUNING=1 /usr/bin/python3 bench/pytorch_after_weft.py   # the tuning weft used to make itself
#
# Prints one JSON line: the median step time (ms) of each phase, their ratio, and the minor page faults a step
# (which a shared machine's load does not change). Debian's python3-torch
# (a benchmark's dependency only: apt-get install python3-torch).
import json
import os
import resource
import statistics
import time

import numpy as np
import torch

STEPS, WARMUP = int(os.environ.get("STEPS", 60)), 10


def make_step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    batch = int(os.environ.get("BATCH", 64))
    x, y = torch.randn(batch, 784), torch.randint(0, 10, (batch,))

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return step


def measure(step):
    """(median ms a step, minor page faults a step): the faults do not depend on a shared machine's load."""
    for _ in range(WARMUP):
        step()
    times = []
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(STEPS):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    return statistics.median(times), faults / STEPS


def main():
    torch.set_num_threads(1)
    step = make_step()
    before, faults_before = measure(step)
    import weft
    n = weft.device_count()
    weft.pmap(lambda v: v * 2)(np.ones((n, 64 * 1024), np.float32))   # one pmap of 256 KiB rows
    after, faults_after = measure(step)
    print(json.dumps({"torch_threads": torch.get_num_threads(), "steps": STEPS,
                      "WEFT_MALLOC_TUNING": os.environ.get("WEFT_MALLOC_TUNING", ""),
                      "before_weft_ms": round(before, 3), "after_weft_ms": round(after, 3),
                      "after_over_before": round(after / before, 3),
                      "faults_per_step_before": round(faults_before, 1), "faults_per_step_after": round(faults_after, 1)}))


if __name__ == "__main__":
    main()
