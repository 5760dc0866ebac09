#!/usr/bin/python3
"""Python on weft against Python on Open MPI (mpi4py): what a Python user pays per SPMD step and per
all-reduce (issue 10, item 5; the numbers are in docs/benchmarks.md, "Python: weft against mpi4py").

    PYTHONPATH=build/python /usr/bin/python3 bench/python_vs_mpi4py.py [--runs 3] [--budget 0.3] [--json]

Measured, 8 replicas each, float32 sums:
  call       weft: one call of a pmapped Python function whose body is one lax.psum of a float32 scalar per
             replica, timed from the caller (arguments placed, replicas run, results back as a
             ShardedArray): traced (weft.pmap's default: the program runs in C++ on every replica) and eager
             (eager=True: the Python function runs on every replica's thread). mpi4py: one SPMD step of the
             same program, i.e. comm.Allreduce of one float32 on each of 8 ranks.
  psum 4K    weft traced: a pmapped function of LOOP chained lax.psum calls of 4 KiB per replica (a Python
  psum 1M    loop, unrolled by the trace into LOOP equations), the call's time / LOOP; eager: lax.psum called
             from Python inside one eager pmap, back to back, timed by each replica.
             mpi4py: comm.Allreduce of numpy buffers (the buffer interface, no pickling) on 8 ranks.
Scheme (both sides alike): a warm-up, then iterations sized to a time budget (--budget seconds, from a short
calibration agreed by every replica / rank), timed per replica or rank; a repetition's time is the slowest
replica's or rank's per-iteration time (max over ranks); the result is the median of the repetitions.
Runs alternate weft and mpi4py (--runs each). mpi4py runs as `mpirun -np 8 --oversubscribe --bind-to none
--mca mpi_yield_when_idle 1` (as bench/compare.sh runs the C baseline: 8 ranks on few cores must yield), with
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 when run as root. Before each run the script waits
(at most IDLE_WAIT seconds, default 60) for the CPUs to be at most 10 % busy.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

REPLICAS = 8
SIZES = {"psum 4K": 4 << 10, "psum 1M": 1 << 20}
LOOP = 100  # chained psums per traced call


def calibrated(per_iteration, budget, low=5, high=20000):
    return int(min(high, max(low, budget / max(per_iteration, 1e-9))))


# ---- weft --------------------------------------------------------------------------------------------------

def weft_measure(budget, reps):
    import weft
    from weft import lax

    weft.init(device_count=REPLICAS)
    results = {}

    def caller_timed(call, per_call=1):
        for _ in range(20):
            call()
        start = time.perf_counter()
        for _ in range(20):
            call()
        iters = calibrated((time.perf_counter() - start) / 20, budget)
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            for _ in range(iters):
                call()
            times.append((time.perf_counter() - start) / iters / per_call)
        return statistics.median(times), iters

    # One pmap call with one psum, timed by the caller; traced (the default) and eager.
    x = np.ones((REPLICAS,), np.float32)
    traced = weft.pmap(lambda v: lax.psum(v, "i"), axis_name="i")
    eager = weft.pmap(lambda v: lax.psum(v, "i"), axis_name="i", eager=True)
    results["call"] = caller_timed(lambda: traced(x))
    results["call eager"] = caller_timed(lambda: eager(x))

    def chain(v):
        for _ in range(LOOP):
            v = lax.psum(v, "i")
        return v
    chained = weft.pmap(chain, axis_name="i")
    for label, size in SIZES.items():
        data = np.ones((REPLICAS, size // 4), np.float32)
        results[label] = caller_timed(lambda: chained(data), LOOP)

    # psum from Python inside one pmap: each replica times its own loop.
    def loop(iters, warmup):
        def body(v):
            for _ in range(warmup):
                lax.psum(v, "i")
            lax.psum(v[:1], "i")  # start together
            start = time.perf_counter()
            for _ in range(iters):
                lax.psum(v, "i")
            return np.float64((time.perf_counter() - start) / iters)
        return weft.pmap(body, axis_name="i", eager=True)

    for label, size in SIZES.items():
        data = np.ones((REPLICAS, size // 4), np.float32)
        probe = float(np.max(np.asarray(loop(10, 3)(data))))
        iters = calibrated(probe, budget)
        timed = loop(iters, max(3, iters // 10))
        times = [float(np.max(np.asarray(timed(data)))) for _ in range(reps)]
        results[label + " eager"] = (statistics.median(times), iters)
    return results


# ---- mpi4py (one rank of mpirun -np 8) ----------------------------------------------------------------------

def mpi4py_rank(budget, reps):
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    results = {}
    for label, size in [("call", 4)] + list(SIZES.items()):
        send = np.ones(size // 4, np.float32)
        recv = np.empty_like(send)

        def timed(iters):
            comm.Barrier()
            start = time.perf_counter()
            for _ in range(iters):
                comm.Allreduce(send, recv, op=MPI.SUM)
            mine = (time.perf_counter() - start) / iters
            return comm.allreduce(mine, op=MPI.MAX)  # the slowest rank's time

        for _ in range(20):
            comm.Allreduce(send, recv, op=MPI.SUM)
        assert recv[0] == comm.Get_size(), f"wrong sum {recv[0]}"
        iters = calibrated(timed(10), budget)
        times = [timed(iters) for _ in range(reps)]
        results[label] = (statistics.median(times), iters)
    if comm.Get_rank() == 0:
        print(json.dumps({"mpi4py": results}), flush=True)


# ---- driver -------------------------------------------------------------------------------------------------

def cpu_busy_percent():
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        return sum(v), v[3] + v[4]
    t0, i0 = sample()
    time.sleep(1)
    t1, i1 = sample()
    return 100 * ((t1 - t0) - (i1 - i0)) / max(1, t1 - t0)


def wait_for_idle(limit):
    waited = 0
    while waited < limit:
        if cpu_busy_percent() <= 10:
            return True
        waited += 1
    return False


def run_child(args, env):
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
    if done.returncode != 0:
        sys.exit(f"python_vs_mpi4py: {' '.join(args)} exited with {done.returncode}:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each side, alternating")
    parser.add_argument("--reps", type=int, default=5, help="timed repetitions per run (median)")
    parser.add_argument("--budget", type=float, default=0.3, help="seconds per repetition")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--side", choices=["weft", "mpi4py"], help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.side == "weft":
        print(json.dumps({"weft": weft_measure(args.budget, args.reps)}), flush=True)
        return
    if args.side == "mpi4py":
        mpi4py_rank(args.budget, args.reps)
        return

    me = os.path.abspath(__file__)
    common = ["--reps", str(args.reps), "--budget", str(args.budget)]
    env = dict(os.environ)
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    mpirun = ["mpirun", "-np", str(REPLICAS), "--oversubscribe", "--bind-to", "none", "--mca",
              "mpi_yield_when_idle", "1", sys.executable, me, "--side", "mpi4py", *common]
    idle_limit = int(os.environ.get("IDLE_WAIT", "60"))
    runs = {"weft": [], "mpi4py": []}
    busy_starts = 0
    for _ in range(args.runs):
        for side, command in (("weft", [sys.executable, me, "--side", "weft", *common]), ("mpi4py", mpirun)):
            busy_starts += not wait_for_idle(idle_limit)
            runs[side].append(run_child(command, env)[side])
    if args.json:
        print(json.dumps({"runs": runs, "busy_starts": busy_starts}))
        return
    with open("/proc/cpuinfo") as f:
        model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "?")
    print(f"machine: {os.cpu_count()} CPUs, {model}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"runs: {args.runs} alternating, {args.reps} repetitions each, {REPLICAS} replicas / ranks, "
          f"{args.budget} s per repetition; runs started on a busy machine: {busy_starts}")
    print()
    print("| what (8 replicas) | weft (us) | mpi4py (us) | mpi4py/weft |")
    print("| --- | ---: | ---: | ---: |")
    for label in ["call"] + list(SIZES):
        m = statistics.median(r[label][0] for r in runs["mpi4py"]) * 1e6
        for mode, key in (("traced", label), ("eager", label + " eager")):
            w = statistics.median(r[key][0] for r in runs["weft"]) * 1e6
            print(f"| {label}, {mode} | {w:.1f} | {m:.1f} | {m / w:.2f}x |")


if __name__ == "__main__":
    main()
