"""The Jacobian of a 100 -> 100 tanh MLP in float64 (issue 46): weft.jacfwd (the JVP batched over the input's
standard basis, one jitted program) against PyTorch 1.13's torch.autograd.functional.jacobian with
vectorize=True (reverse mode batched by vmap over the output basis, its default strategy, and
strategy="forward-mode"). f(x) = tanh(W2 tanh(W1 x + b1) + b2), W 100x100, the same weights for all.

The Jacobians agree (checked before timing). The runs alternate between the ways and each figure is the
median of --reps runs of --calls calls each, after a warm-up (weft's trace; PyTorch's first vmap).

    cd build && PYTHONPATH=python /usr/bin/python3 ../bench/jacfwd_vs_pytorch.py [--reps 7 --calls 50] [--json]

PyTorch runs with --torch-threads intra-op threads (default: every CPU; Debian's build otherwise starts with
one here).
"""
import argparse
import json
import os
import statistics
import time

import numpy as np

import weft
import weft.numpy as jnp

WIDTH = 100


def parameters(seed=0):
    rng = np.random.default_rng(seed)
    return {"w1": rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH), "b1": 0.1 * rng.standard_normal(WIDTH),
            "w2": rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH), "b2": 0.1 * rng.standard_normal(WIDTH)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--calls", type=int, default=50, help="calls per timed run")
    parser.add_argument("--torch-threads", type=int, default=os.cpu_count(),
                        help="PyTorch's intra-op threads (default: every CPU, as weft's kernels may use)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.torch_threads)

    weft.config.update("jax_enable_x64", True)
    p = parameters()
    x = np.random.default_rng(1).standard_normal(WIDTH)

    def f(x):
        return jnp.tanh(p["w2"] @ jnp.tanh(p["w1"] @ x + p["b1"]) + p["b2"])

    tp = {k: torch.from_numpy(v) for k, v in p.items()}

    def f_torch(x):
        return torch.tanh(tp["w2"] @ torch.tanh(tp["w1"] @ x + tp["b1"]) + tp["b2"])

    jac = weft.jit(weft.jacfwd(f))
    xt = torch.from_numpy(x)
    ways = {
        "weft.jacfwd": lambda: jac(x),
        "torch reverse": lambda: torch.autograd.functional.jacobian(f_torch, xt, vectorize=True),
        "torch forward": lambda: torch.autograd.functional.jacobian(f_torch, xt, vectorize=True,
                                                                    strategy="forward-mode"),
    }
    # Warm-up, and the check: d tanh(u) = (1 - tanh(u)^2) du, by hand in numpy.
    h = np.tanh(p["w1"] @ x + p["b1"])
    y = np.tanh(p["w2"] @ h + p["b2"])
    want = (1 - y ** 2)[:, None] * (p["w2"] @ ((1 - h ** 2)[:, None] * p["w1"]))
    worst = 0.0
    for name in list(ways):
        try:
            got = np.asarray(ways[name]())
        except Exception as e:  # torch's forward-mode vmap may be missing in a build
            print(f"# {name}: unavailable ({type(e).__name__}: {e})")
            del ways[name]
            continue
        worst = max(worst, float(np.max(np.abs(got - want))))
    if worst > 1e-12:
        raise SystemExit(f"the Jacobians disagree with the hand-written one: max difference {worst:.3g}")

    times = {name: [] for name in ways}
    for _ in range(args.reps):
        for name, run in ways.items():
            start = time.perf_counter()
            for _ in range(args.calls):
                run()
            times[name].append((time.perf_counter() - start) / args.calls)
    medians = {name: statistics.median(t) * 1e6 for name, t in times.items()}
    if args.json:
        print(json.dumps({"width": WIDTH, "reps": args.reps, "calls": args.calls, "torch": torch.__version__,
                          "torch_threads": torch.get_num_threads(), "max_abs_diff": worst,
                          **{f"{name.replace(' ', '_').replace('.', '_')}_us": round(us, 2)
                             for name, us in medians.items()}}))
        return
    print(f"# Jacobian of a {WIDTH}->{WIDTH} tanh MLP, float64; torch {torch.__version__} "
          f"({torch.get_num_threads()} threads); median of {args.reps} runs of {args.calls} calls; "
          f"all within {worst:.1e} of the hand-written Jacobian")
    print(f"{'way':<15} {'us/call':>10} {'vs weft':>8}")
    for name, us in medians.items():
        print(f"{name:<15} {us:>10.1f} {us / medians['weft.jacfwd']:>7.2f}x")


if __name__ == "__main__":
    main()
