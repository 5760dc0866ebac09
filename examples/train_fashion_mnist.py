"""train_fashion_mnist.py: the Fashion-MNIST MLP of examples/train_fashion_mnist/ written in Python with
weft.numpy, its whole training step (forward, hand-written backward, gradient reduction, SGD with momentum)
traced once by weft.pmap into a program that every replica runs in C++.

    PYTHONPATH=build/python /usr/bin/python3 examples/train_fashion_mnist.py --epochs 2 --json
    PYTHONPATH=build/python /usr/bin/python3 examples/train_fashion_mnist.py --update sharded --steps 300 --json

The model, data and hyper-parameters are the C++ trainer's (build/bin/train_fashion_mnist, mlp.cc):
784-512-512-10 with ReLU, softmax cross-entropy, He-initialised weights and zero biases, SGD with momentum
0.9 and learning rate 0.1 (velocity = momentum * velocity + grad; param -= lr * velocity), global batch 256
over 8 data-parallel replicas, pixels / 255. Until weft has autodiff (issue 23) the backward pass is written
out as mlp.cc writes it. Two layouts of the update, as the C++ trainer has:

- `--update replicated` (the C++ `--replicated-update`, PyTorch DDP's): every replica computes its rows'
  gradients, `lax.pmean` averages them over the replicas, and every replica updates every parameter.
- `--update sharded` (the C++ default in one process): replica d holds its 1/D of every weight's rows and
  their velocity (mapped arguments); a step `all_gather`s the whole weights, runs the forward and backward
  passes on the replica's rows of the batch, `all_gather`s the deltas and `all_to_all`s the layer inputs
  (replica d receives its columns of every replica's rows), forms the gradient of its weight rows from the
  whole batch and updates them; the loss and bias gradients are summed in one `psum`. The C++ trainer
  gathers the new rows at the end of a step instead and keeps whole weights (it slices its rows as views;
  weft.numpy has no slice at a traced offset, and `take` of the rows copied them: 10 % slower).

The data set is a constant of the traced program (one array every replica reads, as the C++ trainer's
split); each step the host passes each replica the indices of its rows and their labels. The initial
parameters and the data order come from numpy's generator (the C++ trainer uses weft::random), so the
losses follow the C++ run's statistically, not bit for bit. With --json the last line is one JSON object
with the C++ trainer's keys (samples_per_s and step_ms: the median over the steps after the first 5).
"""
import argparse
import functools
import gzip
import json
import os
import statistics
import sys
import time

import numpy as np

import weft
import weft.numpy as jnp
from weft import lax

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
PARAMS = ("w1", "b1", "w2", "b2", "w3", "b3")
LAYERS = (("w1", "b1"), ("w2", "b2"), ("w3", "b3"))


# ---- data (dataset.cc's format: IDX files, .gz or plain) ------------------------------------------------------
def read_idx(path, rank):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08 or data[3] != rank:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes and rank {rank}")
    dims = [int.from_bytes(data[4 + 4 * d:8 + 4 * d], "big") for d in range(rank)]
    body = np.frombuffer(data, np.uint8, offset=4 + 4 * rank)
    if body.size != int(np.prod(dims)):
        raise ValueError(f"{path}: the header promises {int(np.prod(dims))} bytes, the file has {body.size}")
    return body.reshape(dims)


def part_path(directory, stem):
    for name in (stem + ".gz", stem):
        if os.path.exists(os.path.join(directory, name)):
            return os.path.join(directory, name)
    raise FileNotFoundError(f"Fashion-MNIST: neither {stem}.gz nor {stem} in {directory}")


def load_split(directory, prefix, limit=0):
    """(images float32 (n, 784) in [0, 1], labels int32 (n,)), the first `limit` only when limit > 0."""
    images = read_idx(part_path(directory, prefix + "-images-idx3-ubyte"), 3)
    labels = read_idx(part_path(directory, prefix + "-labels-idx1-ubyte"), 1)
    if limit:
        images, labels = images[:limit], labels[:limit]
    return (images.reshape(len(images), -1).astype(np.float32) / np.float32(255.0)), labels.astype(np.int32)


# ---- the model (mlp.cc) --------------------------------------------------------------------------------------
def init_parameters(seed, inputs=784, hidden=512, classes=10):
    """He initialisation: weights ~ N(0, 1) * sqrt(2 / fan_in), biases 0 (float32)."""
    rng = np.random.default_rng(seed)

    def dense(fan_in, fan_out):
        return (rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    return {"w1": dense(inputs, hidden), "b1": np.zeros(hidden, np.float32),
            "w2": dense(hidden, hidden), "b2": np.zeros(hidden, np.float32),
            "w3": dense(hidden, classes), "b3": np.zeros(classes, np.float32)}


def forward(p, x):
    z1 = x @ p["w1"] + p["b1"]
    h1 = weft.nn.relu(z1)
    z2 = h1 @ p["w2"] + p["b2"]
    h2 = weft.nn.relu(z2)
    return z1, h1, z2, h2, h2 @ p["w3"] + p["b3"]


def matmul_nt(a, b):
    """a @ b.T for a delta `a` (batch rows) and a weight `b`: matmul with transpose_b (the C++ trainer's
    matmul(a, b, {.transpose_b = true})), a flag of the equation, so the weight is never copied."""
    return weft.ops.matmul(a, b, transpose_b=True)


def matmul_tn(a, b):
    """a.T @ b (a layer's input and its delta: the weight gradient) with transpose_a, no copy."""
    return weft.ops.matmul(a, b, transpose_a=True)


def relu_backward(g, z):
    """g where z > 0, else 0. The zeros are a constant array of g's shape, not the scalar 0: weft's `where`
    takes its one-pass loop only when all three operands have the result's size (with a scalar it walks
    broadcast indices, 4x slower: 7.8 % of a step's CPU)."""
    return jnp.where(z > 0, g, np.zeros(g.shape, g.dtype))


def forward_deltas(p, x, labels, scale):
    """mlp.cc's forward_deltas: the loss (this replica's cross-entropies times `scale`), the layers' inputs
    and the loss's gradients at the pre-activations (the ReLU's gradient: the delta where z > 0, else 0)."""
    z1, h1, z2, h2, logits = forward(p, x)
    targets = weft.nn.one_hot(labels, logits.shape[-1], dtype=logits.dtype)
    log_probs = weft.nn.log_softmax(logits, axis=-1)
    loss = jnp.sum(targets * log_probs) * -scale
    d_logits = (jnp.exp(log_probs) - targets) * scale
    d_z2 = relu_backward(matmul_nt(d_logits, p["w3"]), z2)
    d_z1 = relu_backward(matmul_nt(d_z2, p["w2"]), z1)
    return loss, (x, h1, h2), (d_z1, d_z2, d_logits)


def gradients(p, x, labels, scale):
    """mlp.cc's forward_backward: the loss and the gradient of every parameter."""
    loss, (x, h1, h2), (d_z1, d_z2, d_logits) = forward_deltas(p, x, labels, scale)
    grads = {"w3": matmul_tn(h2, d_logits), "b3": jnp.sum(d_logits, axis=0),
             "w2": matmul_tn(h1, d_z2), "b2": jnp.sum(d_z2, axis=0),
             "w1": matmul_tn(x, d_z1), "b1": jnp.sum(d_z1, axis=0)}
    return loss, grads


def loss_of(p, x, labels, scale, policy=None):
    """The loss alone (this replica's cross-entropies times `scale`), for weft.value_and_grad. With a
    mixed-precision policy (weft.Policy) the parameters and pixels are cast to its compute dtype at use, the
    passes run in it (bfloat16: oneDNN's bf16 products, float32 accumulation) and the logits come back in its
    output dtype for the softmax and the loss; the casts' transposes return the gradients in float32."""
    if policy is not None:
        p, x = policy.cast_to_compute(p), policy.cast_to_compute(x)
    logits = forward(p, x)[-1]
    if policy is not None:
        logits = policy.cast_to_output(logits)
    targets = weft.nn.one_hot(labels, logits.shape[-1], dtype=logits.dtype)
    return jnp.sum(targets * weft.nn.log_softmax(logits, axis=-1)) * -scale


def autodiff_gradients(p, x, labels, scale, policy=None):
    """gradients() by reverse mode (weft.value_and_grad of the loss): no hand-written backward pass."""
    return weft.value_and_grad(functools.partial(loss_of, policy=policy))(p, x, labels, scale)


def sgd_momentum(param, velocity, grad, lr, momentum):
    """PyTorch's SGD with momentum (mlp.cc's sgd_momentum): (new param, new velocity)."""
    velocity = velocity * momentum + grad
    return param - velocity * lr, velocity


# ---- the traced steps ------------------------------------------------------------------------------------------
def make_train_step(images, global_batch, devices, lr=0.1, momentum=0.9, update="replicated", policy=None):
    """The pmapped training step: step(params, velocities, rows, labels) -> (params, velocities, loss).

    `images` (the whole training split) is captured as a constant of the program; `rows` and `labels`
    (devices, global_batch / devices) are each replica's batch. params and velocities are mapped (devices,
    ...): every replica's copy equal (replicated update) or, for the sharded update, replica d's rows of each
    weight and its velocity, and equal copies of the biases (shapes from velocity_shapes). A policy
    (weft.Policy, mixed precision) needs a differentiated update: the hand-written backward is float32."""
    local_batch = global_batch // devices
    if policy is not None and update not in ("autodiff", "sharded-autodiff"):
        raise ValueError(f"the {update} update's backward pass is written out in float32; a mixed-precision "
                         f"policy ({policy}) needs a differentiated one (update 'autodiff' or 'sharded-autodiff')")

    grads_of = functools.partial(autodiff_gradients, policy=policy) if update == "autodiff" else gradients

    # The parameters and velocities are donated (JAX's donate_argnums): the step writes the new ones into
    # their buffers, as the C++ trainer's update in place, instead of into fresh memory.
    @functools.partial(weft.pmap, axis_name="i", donate_argnums=(0, 1))
    def replicated_step(p, v, rows, labels):
        x = jnp.take(images, rows, axis=0)
        # Each replica's mean over its rows; pmean makes it the global batch's mean (the C++ trainer scales
        # by 1 / global batch and sums: the same numbers up to rounding). One pmean per parameter, as the C++
        # trainer's all_reduce per parameter: lax.pmean of the whole dict would be one collective, but packing
        # the leaves into one buffer and slicing them back out copies every gradient twice (measured: 10-15 %
        # more CPU a step).
        loss, grads = grads_of(p, x, labels, 1.0 / local_batch)
        grads = {k: lax.pmean(g, "i") for k, g in grads.items()}
        loss = lax.pmean(loss, "i")
        new_p, new_v = {}, {}
        for name in PARAMS:
            new_p[name], new_v[name] = sgd_momentum(p[name], v[name], grads[name], lr, momentum)
        return new_p, new_v, loss

    @functools.partial(weft.pmap, axis_name="i", donate_argnums=(0, 1))
    def sharded_step(p, v, rows, labels):
        # p and v hold this replica's rows of each weight (and whole biases): the weights are gathered first.
        full = dict(p)
        for w, _ in LAYERS:
            full[w] = lax.all_gather(p[w], "i", axis=0, tiled=True)
        x = jnp.take(images, rows, axis=0)
        loss, inputs, deltas = forward_deltas(full, x, labels, 1.0 / global_batch)
        # One psum for the loss and the three bias gradients (trainer.cc's train_program_sharded_update).
        sums = lax.psum(jnp.concatenate([jnp.reshape(loss, (1,))] + [jnp.sum(d, axis=0) for d in deltas]), "i")
        new_p, new_v = {}, {}
        at = 1
        for (w, b), inp, delta in zip(LAYERS, inputs, deltas):
            width = p[b].shape[0]
            new_p[b], new_v[b] = sgd_momentum(p[b], v[b], sums[at:at + width], lr, momentum)
            at += width
            # The whole batch's rows of the input columns that multiply this replica's weight rows (its columns
            # of every replica's rows: one all_to_all, no gather and slice) and the whole batch's delta.
            full_in = lax.all_to_all(inp, "i", 1, 0, tiled=True)
            full_delta = lax.all_gather(delta, "i", axis=0, tiled=True)
            new_p[w], new_v[w] = sgd_momentum(p[w], v[w], matmul_tn(full_in, full_delta), lr, momentum)
        return new_p, new_v, sums[0]

    def sharded_loss(p, x, labels, scale):
        """loss_of with this replica's weight rows gathered whole at use (FSDP): differentiated with respect to
        the rows, all_gather's transpose reduce-scatters each weight's gradient to them."""
        full = {k: lax.all_gather(v, "i", axis=0, tiled=True) if k.startswith("w") else v for k, v in p.items()}
        return loss_of(full, x, labels, scale, policy)

    @functools.partial(weft.pmap, axis_name="i", donate_argnums=(0, 1))
    def sharded_autodiff_step(p, v, rows, labels):
        # The sharded update with the gradients by reverse mode. Each weight's gradient arrives reduce-scattered
        # to this replica's rows (the transpose of the gather above); weft's program layer turns those
        # psum_scatters of matmul(x, delta) into an all_to_all of x and an all_gather of delta, the same
        # collectives sharded_step calls by hand.
        x = jnp.take(images, rows, axis=0)
        loss, grads = weft.value_and_grad(sharded_loss)(p, x, labels, 1.0 / global_batch)
        biases = [b for _, b in LAYERS]
        sums = lax.psum(jnp.concatenate([jnp.reshape(loss, (1,))] + [grads[b] for b in biases]), "i")
        new_p, new_v = {}, {}
        at = 1
        for w, b in LAYERS:
            width = p[b].shape[0]
            new_p[b], new_v[b] = sgd_momentum(p[b], v[b], sums[at:at + width], lr, momentum)
            at += width
            new_p[w], new_v[w] = sgd_momentum(p[w], v[w], grads[w], lr, momentum)
        return new_p, new_v, sums[0]

    return {"replicated": replicated_step, "autodiff": replicated_step, "sharded": sharded_step,
            "sharded-autodiff": sharded_autodiff_step}[update]


def velocity_shapes(params, devices, update):
    """Each replica's part of each parameter and its velocity: all of it, or (sharded update) its rows of the
    weights."""
    shapes = {}
    for name, value in params.items():
        shape = value.shape
        if update in ("sharded", "sharded-autodiff") and name.startswith("w"):
            if shape[0] % devices:
                raise ValueError(f"--update sharded: {name}'s {shape[0]} rows do not divide over {devices} replicas")
            shape = (shape[0] // devices,) + shape[1:]
        shapes[name] = shape
    return shapes


def make_eval_step(images):
    @functools.partial(weft.pmap, axis_name="i")
    def correct(p, rows, labels):
        logits = forward(p, jnp.take(images, rows, axis=0))[-1]
        hits = (jnp.argmax(logits, axis=-1) == labels).astype(np.float32)  # labels -1 (padding) never count
        return lax.psum(jnp.sum(hits), "i")

    return correct


def stacked(tree, devices):
    """Each leaf repeated along a new first axis, one copy per replica."""
    return {k: np.ascontiguousarray(np.broadcast_to(v, (devices,) + v.shape)) for k, v in tree.items()}


class Trainer:
    """The state (params, velocities) as pmap results and the traced steps, for `devices` replicas."""

    def __init__(self, train, devices=8, global_batch=256, lr=0.1, momentum=0.9, seed=0, update="replicated",
                 test=None, policy=None):
        if global_batch % devices:
            raise ValueError(f"the global batch {global_batch} must divide over the {devices} replicas")
        self.train, self.test = train, test
        self.devices, self.global_batch, self.seed = devices, global_batch, seed
        self.local_batch = global_batch // devices
        params = init_parameters(seed)
        self.update = update
        shapes = velocity_shapes(params, devices, update)
        self.params = {k: v.reshape((devices,) + shapes[k]) if shapes[k] != v.shape else stacked({k: v}, devices)[k]
                       for k, v in params.items()}
        self.velocities = {k: np.zeros((devices,) + s, np.float32) for k, s in shapes.items()}
        self.step_fn = make_train_step(train[0], global_batch, devices, lr, momentum, update, policy)
        self.eval_fn = make_eval_step(test[0]) if test is not None else None
        self.order_rng = np.random.default_rng([seed, 1])

    def steps_per_epoch(self):
        return len(self.train[1]) // self.global_batch

    def epoch_order(self):
        return self.order_rng.permutation(len(self.train[1])).astype(np.int32)

    def batch(self, rows):
        """(rows, labels) as (devices, local batch): replica d gets rows [d * b, (d + 1) * b)."""
        rows = np.ascontiguousarray(rows, np.int32).reshape(self.devices, self.local_batch)
        return rows, self.train[1][rows]

    def step(self, rows):
        """One training step on the global batch `rows`; the loss (replica 0's, all equal)."""
        r, labels = self.batch(rows)
        self.params, self.velocities, loss = self.step_fn(self.params, self.velocities, r, labels)
        return float(loss.shards[0])

    def parameters(self):
        """The parameters as numpy arrays: replica 0's copies (sharded update: the weights joined from every
        replica's rows)."""
        out = {}
        for k, v in self.params.items():
            shards = [np.asarray(s) for s in v.shards] if hasattr(v, "shards") else list(v)
            sharded = self.update in ("sharded", "sharded-autodiff") and k.startswith("w")
            out[k] = np.concatenate(shards) if sharded else np.array(shards[0])
        return out

    def evaluate(self):
        images, labels = self.test
        n, correct = len(labels), 0.0
        params = stacked(self.parameters(), self.devices)
        for begin in range(0, n, self.global_batch):
            rows = np.zeros(self.global_batch, np.int32)
            lab = np.full(self.global_batch, -1, np.int32)
            take = min(self.global_batch, n - begin)
            rows[:take] = np.arange(begin, begin + take)
            lab[:take] = labels[begin:begin + take]
            shape = (self.devices, self.local_batch)
            correct += float(self.eval_fn(params, rows.reshape(shape), lab.reshape(shape)).shards[0])
        return correct / n


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=DEFAULT_DATA, help="directory of the Fashion-MNIST IDX files (.gz or plain)")
    ap.add_argument("--devices", type=int, default=8, help="replicas (data parallel)")
    ap.add_argument("--update", choices=("replicated", "sharded", "autodiff", "sharded-autodiff"),
                    default="replicated",
                    help="replicated: pmean the gradients, every replica updates everything (the C++ "
                         "--replicated-update); sharded: the C++ default's sharded update; autodiff: the "
                         "replicated update with the gradients from weft.value_and_grad (no hand-written "
                         "backward pass); sharded-autodiff: the sharded update on weft.value_and_grad (the C++ "
                         "default with --backward autodiff)")
    ap.add_argument("--dtype", choices=("f32", "bf16"), default="f32",
                    help="bf16: the mixed-precision policy params=float32,compute=bfloat16,output=float32 (with "
                         "--update autodiff or sharded-autodiff; the optimizer state stays float32)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: the epochs decide)")
    ap.add_argument("--train-limit", type=int, default=0, help="use only the first N training images (0: all)")
    ap.add_argument("--batch", type=int, default=256, help="global batch")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-eval", action="store_true", help="skip the test-set evaluation")
    ap.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    args = ap.parse_args(argv)

    weft.init(device_count=args.devices)
    train = load_split(args.data, "train", args.train_limit)
    test = None if args.no_eval else load_split(args.data, "t10k")
    policy = weft.get_policy("params=float32,compute=bfloat16,output=float32") if args.dtype == "bf16" else None
    if policy is not None and args.update not in ("autodiff", "sharded-autodiff"):
        ap.error(f"--dtype bf16 needs a differentiated update (--update autodiff or sharded-autodiff): the "
                 f"{args.update} update's backward pass is written out in float32")
    trainer = Trainer(train, args.devices, args.batch, args.lr, args.momentum, args.seed, args.update, test, policy)
    per_epoch = trainer.steps_per_epoch()
    total = args.steps if args.steps > 0 else args.epochs * per_epoch
    step_seconds, loss, order = [], float("nan"), None
    start = time.perf_counter()
    for step in range(total):
        k = step % per_epoch
        if k == 0:
            order = trainer.epoch_order()
        t0 = time.perf_counter()
        loss = trainer.step(order[k * args.batch:(k + 1) * args.batch])
        step_seconds.append(time.perf_counter() - t0)
        if (step + 1) % per_epoch == 0 and not args.json:
            print(f"epoch {step // per_epoch}: loss {loss:.4f}, {time.perf_counter() - start:.1f} s", file=sys.stderr)
    warmup = min(5, len(step_seconds) // 2)
    step_s = statistics.median(step_seconds[warmup:])
    accuracy = trainer.evaluate() if test is not None else None
    print(f"trained {total} steps on {args.devices} devices ({args.update} update, traced Python): final loss "
          f"{loss:.4f}, test accuracy {accuracy if accuracy is not None else float('nan'):.4f}, "
          f"{args.batch / step_s:.0f} samples/s, {step_s * 1e3:.2f} ms/step")
    if args.json:
        print(json.dumps({"epochs": args.epochs, "devices": args.devices, "instances": 1,
                          "data_parallel": args.devices, "model_parallel": 1, "zero": False,
                          "update": args.update, "param_dtype": "float32",
                          "compute_dtype": "bfloat16" if policy is not None else "float32", "final_loss": loss, "test_accuracy": accuracy,
                          "samples_per_s": args.batch / step_s, "step_ms": step_s * 1e3,
                          "first_step_ms": step_seconds[0] * 1e3}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
