"""weft.checkpoint's memory (docs/autodiff.md, "checkpoint"): the differentiated step of a 4-layer MLP,
float64, with and without each layer checkpointed: the plan's peak of live bytes (Program::peak_live_bytes)
and the real peak RSS the step's first run adds (VmHWM after it minus VmRSS before it, the high-water mark reset
through /proc/self/clear_refs; the first, as the block pool keeps freed blocks for reuse). Each configuration runs in a fresh process.

    cd build && PYTHONPATH=python /usr/bin/python3 ../bench/checkpoint_memory.py [--width 512 --batch 256]
"""
import argparse
import functools
import json
import subprocess
import sys


def status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(field)


def measure(layer_name, width, batch, layers, checkpointed):
    import numpy as np
    import weft
    import weft.numpy as jnp

    weft.init(device_count=1)

    def composed_gelu(z):
        return 0.5 * z * (1.0 + jnp.tanh(0.7978845608028654 * (z + 0.044715 * z ** 3)))

    layer = {"tanh": lambda p, h: jnp.tanh(h @ p["w"] + p["b"]),
             # GELU's tanh form written out: weft.nn.gelu is one fused equation now, whose rule keeps its
             # input only (nothing for checkpointing to drop); the composed form is the case it is for.
             "gelu": lambda p, h: composed_gelu(h @ p["w"] + p["b"])}[layer_name]
    wrap = weft.checkpoint if checkpointed else (lambda f: f)

    def loss(params, x, y):
        h = x
        for p in params:
            h = wrap(layer)(p, h)
        return jnp.mean((h - y) ** 2)

    rng = np.random.default_rng(0)
    params = [{"w": rng.standard_normal((width, width)) / np.sqrt(width), "b": 0.1 * rng.standard_normal(width)}
              for _ in range(layers)]
    x, y = rng.standard_normal((batch, width)), rng.standard_normal((batch, width))
    step = weft.value_and_grad(loss)
    planned = weft.make_program(step)(params, x, y)._program.peak_live_bytes
    # The kernels' own set-up (the BLAS's buffers, the pool's first blocks) on a small step of the same
    # shape of program, so that the measured run's growth is its buffers.
    weft.jit(weft.value_and_grad(loss))(params, x[:8], y[:8])
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    before = status_kib("VmRSS")
    # The first run of this shape: weft's block pool keeps freed blocks for the next allocation of their
    # size, so a second run would reuse the first one's pages and add nothing.
    out = weft.jit(step)(params, x, y)
    del out
    return {"planned_bytes": planned, "rss_added_bytes": (status_kib("VmHWM") - before) * 1024}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: "layer,checkpointed" measured in this process
    args = ap.parse_args()
    if args.one:
        layer_name, checkpointed = args.one.split(",")
        print(json.dumps(measure(layer_name, args.width, args.batch, args.layers, checkpointed == "1")))
        return
    mib = 2.0 ** 20
    print(f"{args.layers}-layer MLP, width {args.width}, batch {args.batch}, float64, value_and_grad of a squared error")
    for layer_name in ("tanh", "gelu"):
        res = {}
        for checkpointed in ("0", "1"):
            run = subprocess.run([sys.executable, __file__, "--width", str(args.width), "--batch", str(args.batch),
                                  "--layers", str(args.layers), "--one", f"{layer_name},{checkpointed}"],
                                 check=True, capture_output=True, text=True)
            res[checkpointed] = json.loads(run.stdout.strip().splitlines()[-1])
        p0, p1 = res["0"]["planned_bytes"], res["1"]["planned_bytes"]
        r0, r1 = res["0"]["rss_added_bytes"], res["1"]["rss_added_bytes"]
        print(f"  {layer_name}: planned peak {p0 / mib:.1f} -> {p1 / mib:.1f} MiB ({p1 / p0:.3f}x); "
              f"peak RSS added by a run {r0 / mib:.1f} -> {r1 / mib:.1f} MiB ({r1 / max(r0, 1):.3f}x)")


if __name__ == "__main__":
    main()
