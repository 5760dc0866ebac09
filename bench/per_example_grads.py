"""Per-example gradients of the Fashion-MNIST MLP (issue 46): the gradient of every example's loss with respect
to every parameter, for a batch of 256, three ways:

- `vmap`: weft.jit(weft.vmap(weft.grad(loss), in_axes=(None, 0, 0))), JAX's idiom: one batched program;
- `loop`: 256 calls of weft.jit(weft.grad(loss)), one per example, from Python;
- `by hand`: one jitted program with the per-example gradient formulas written out (the outer products of each
  layer's input and delta, example by example: w's gradient [B, fan_in, fan_out]).

The model is examples/train_fashion_mnist.py's (784-512-512-10, ReLU, softmax cross-entropy, He-initialised
float32 weights); the batch is the first 256 training images when the data set is present, else random
pixels. The three agree (checked before timing). The runs alternate (vmap, loop, by hand, vmap, ...) so that
the machine's drift falls on all three alike; each figure is the median of --reps runs, after one warm-up run
each (the traces).

    cd build && PYTHONPATH=python /usr/bin/python3 ../bench/per_example_grads.py [--reps 7] [--json]
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

import weft
import weft.numpy as jnp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import train_fashion_mnist as mnist  # noqa: E402  (the model and the data reader)

BATCH = 256


def example_loss(params, x, label):
    """One example's cross-entropy: x (784,), label a scalar int32."""
    logits = mnist.forward(params, x)[-1]
    target = weft.nn.one_hot(label, logits.shape[-1], dtype=logits.dtype)
    return -jnp.sum(target * weft.nn.log_softmax(logits, axis=-1))


def by_hand(params, x, labels):
    """The per-example gradients of example_loss for a batch, written out: each layer's delta as the batched
    backward pass computes it, then w's gradient per example as the outer product of the layer's input and
    its delta (a [B, fan_in, fan_out] broadcast product) and b's as the delta itself."""
    z1, h1, z2, h2, logits = mnist.forward(params, x)
    targets = weft.nn.one_hot(labels, logits.shape[-1], dtype=logits.dtype)
    d_logits = jnp.exp(weft.nn.log_softmax(logits, axis=-1)) - targets
    d_z2 = mnist.relu_backward(mnist.matmul_nt(d_logits, params["w3"]), z2)
    d_z1 = mnist.relu_backward(mnist.matmul_nt(d_z2, params["w2"]), z1)

    def outer(a, d):
        return jnp.reshape(a, (a.shape[0], a.shape[1], 1)) * jnp.reshape(d, (d.shape[0], 1, d.shape[1]))

    return {"w1": outer(x, d_z1), "b1": d_z1, "w2": outer(h1, d_z2), "b2": d_z2,
            "w3": outer(h2, d_logits), "b3": d_logits}


def batch(data_dir):
    try:
        images, labels = mnist.load_split(data_dir, "train", BATCH)
        return images, labels, "Fashion-MNIST's first 256 training images"
    except FileNotFoundError:
        rng = np.random.default_rng(0)
        return (rng.random((BATCH, 784), dtype=np.float32), rng.integers(0, 10, BATCH).astype(np.int32),
                "random pixels (no data set found)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--data", default=mnist.DEFAULT_DATA)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    params = mnist.init_parameters(0)
    x, labels, source = batch(args.data)
    grad = weft.jit(weft.grad(example_loss))
    vmapped = weft.jit(weft.vmap(weft.grad(example_loss), in_axes=(None, 0, 0)))
    hand = weft.jit(by_hand)

    def loop():
        per_example = [grad(params, x[i], labels[i]) for i in range(BATCH)]
        return {k: np.stack([g[k] for g in per_example]) for k in params}

    ways = {"vmap": lambda: vmapped(params, x, labels), "loop": loop, "by hand": lambda: hand(params, x, labels)}
    # The warm-up runs (tracing) double as the check that the three agree.
    results = {name: {k: np.asarray(v) for k, v in run().items()} for name, run in ways.items()}
    worst = 0.0
    for k in params:
        scale = max(1e-30, float(np.max(np.abs(results["by hand"][k]))))
        for name in ("vmap", "loop"):
            worst = max(worst, float(np.max(np.abs(results[name][k] - results["by hand"][k]))) / scale)
    if worst > 1e-4:
        raise SystemExit(f"the three ways disagree: max relative difference {worst:.3g}")

    times = {name: [] for name in ways}
    for _ in range(args.reps):
        for name, run in ways.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    if args.json:
        print(json.dumps({"batch": BATCH, "reps": args.reps, "max_rel_diff": worst,
                          **{f"{name.replace(' ', '_')}_ms": round(ms, 3) for name, ms in medians.items()}}))
        return
    print(f"# per-example gradients, MLP 784-512-512-10 float32, batch {BATCH} ({source}); "
          f"median of {args.reps} alternating runs; the three agree to {worst:.1e} relative")
    print(f"{'way':<10} {'ms':>10} {'vs vmap':>9}")
    for name, ms in medians.items():
        print(f"{name:<10} {ms:>10.2f} {ms / medians['vmap']:>8.2f}x")


if __name__ == "__main__":
    main()
