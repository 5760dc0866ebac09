"""train.py: train the character-level transformer (model.py) on the King James Bible in any parallel layout:
one weft.shard_map'ed step (forward, weft.value_and_grad's backward, AdamW) over a (data, model, pipe) mesh.

    PYTHONPATH=build/python /usr/bin/python3 examples/transformer/train.py --dp 8 --steps 2000
    ... --tp 2 --dp 4            Megatron tensor parallelism over 'model'
    ... --tp 2 --sp --dp 4       and sequence parallelism between its halves
    ... --fsdp --dp 8            parameters sharded over 'data', gathered at use
    ... --pp 2 --microbatches 4  a GPipe pipeline over 'pipe'
    ... --schedule 1f1b          the same pipeline in the 1F1B order (pipeline.py)
    ... --dp 2 --tp 2 --pp 2     all three on 8 devices
    ... --dtype bf16             products in bfloat16 (parameters and optimizer state float32)
    ... --sample 200             then print 200 characters sampled from the trained model

The step is traced once; every device runs it in C++. The initial weights and the batches come from
corpus.py (numpy's generator), which the PyTorch twin (bench/pytorch_transformer.py) reads too. With --json
the last line is one JSON object (losses, tokens/s, peak RSS).
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import weft  # noqa: E402
import weft.numpy as jnp  # noqa: E402
from weft import P  # noqa: E402

import corpus  # noqa: E402
from layout import Layout  # noqa: E402
from model import Model  # noqa: E402
from pipeline import one_f_one_b  # noqa: E402

DTYPES = {"f32": np.float32, "f64": np.float64, "bf16": np.float32}


# ---- parameters as the mesh holds them ------------------------------------------------------------------------
def to_mesh_params(params, layout):
    """The parameter tree the step takes (pipeline: the blocks regrouped as `layers per stage` dicts whose
    arrays are stacked over the stages) and its PartitionSpecs."""
    c_layers = len(params["blocks"])
    tree = {k: v for k, v in params.items() if k != "blocks"}
    specs = {k: layout.spec(k, v.shape) for k, v in tree.items()}
    if layout.pp == 1:
        tree["blocks"] = params["blocks"]
        specs["blocks"] = [{k: layout.spec(k, v.shape) for k, v in b.items()} for b in params["blocks"]]
    else:
        per = c_layers // layout.pp
        tree["blocks"] = [{k: np.stack([params["blocks"][s * per + j][k] for s in range(layout.pp)])
                           for k in params["blocks"][0]} for j in range(per)]
        specs["blocks"] = [{k: layout.spec(k, v.shape, stage_axis=True) for k, v in b.items()}
                           for b in tree["blocks"]]
    return tree, specs


def from_mesh_params(tree, layout):
    """The inverse of to_mesh_params: the plain parameter dict (blocks one per layer)."""
    out = {k: v for k, v in tree.items() if k != "blocks"}
    if layout.pp == 1:
        out["blocks"] = tree["blocks"]
    else:
        per = len(tree["blocks"])
        out["blocks"] = [{k: tree["blocks"][j][k][s] for k in tree["blocks"][j]}
                         for s in range(layout.pp) for j in range(per)]
    return out


def tree_map(f, *trees):
    if isinstance(trees[0], dict):
        return {k: tree_map(f, *[t[k] for t in trees]) for k in trees[0]}
    if isinstance(trees[0], (list, tuple)):
        return type(trees[0])(tree_map(f, *xs) for xs in zip(*trees))
    return f(*trees)


# ---- the step ------------------------------------------------------------------------------------------------
def adamw(p, g, m, v, opt, c1, c2):
    """torch.optim.AdamW (decoupled decay): c1 = 1 / (1 - beta1^t), c2 = 1 / (1 - beta2^t)."""
    p = p * (1.0 - opt.lr * opt.weight_decay)
    m = m * opt.beta1 + g * (1.0 - opt.beta1)
    v = v * opt.beta2 + g * g * (1.0 - opt.beta2)
    return p - (m * c1) * opt.lr / (jnp.sqrt(v * c2) + opt.eps), m, v


class Trainer:
    def __init__(self, config, layout, opt, batch, seed=0, dtype="f32", text=None, data=None):
        layout.check(config, batch)
        self.c, self.lay, self.opt, self.batch = config, layout, opt, batch
        self.data = data if data is not None else corpus.Corpus(text)
        if self.data.vocab != config.vocab:
            raise ValueError(f"the text has {self.data.vocab} characters, the config says vocab {config.vocab}")
        self.dtype = DTYPES[dtype]
        if self.dtype == np.float64:
            # float64 needs 64-bit types on, as in JAX (jax.config.update("jax_enable_x64", True)): with them
            # off, weft computes float64 parameters in float32 (docs/python.md, "dtypes and x64").
            weft.config.update("jax_enable_x64", True)
        self.policy = weft.Policy(self.dtype, weft.bfloat16 if dtype == "bf16" else self.dtype, self.dtype)
        self.model = Model(config, layout, self.policy)
        params = corpus.init_params(config, seed, self.dtype)
        self.params, self.specs = to_mesh_params(params, layout)
        self.m = tree_map(np.zeros_like, self.params)
        self.v = tree_map(np.zeros_like, self.params)
        self.t = 0
        self.batches = corpus.batches(self.data.train, batch, config.context, seed)
        mesh = layout.mesh()
        tok = layout.token_spec()
        self.step_fn = weft.shard_map(self._step, mesh,
                                      in_specs=(self.specs, self.specs, self.specs, P(), P(), tok, tok),
                                      out_specs=(self.specs, self.specs, self.specs, P()))
        self.loss_fn = weft.shard_map(self._loss, mesh, in_specs=(self.specs, tok, tok), out_specs=P())

    def _loss(self, p, tokens, targets):
        return self.model.loss(p, tokens, targets)

    def _step(self, p, m, v, c1, c2, tokens, targets):
        if self.lay.pp > 1 and self.lay.schedule == "1f1b":
            loss, g = one_f_one_b(self.model, p, tokens, targets)   # its backward interleaved by hand
        else:
            loss, g = weft.value_and_grad(self.model.loss)(p, tokens, targets)
        flat_p, flat_g, flat_m, flat_v = (weft.tree_util.tree_leaves(t) for t in (p, g, m, v))
        outs = [adamw(a, b, mm, vv, self.opt, c1, c2) for a, b, mm, vv in zip(flat_p, flat_g, flat_m, flat_v)]
        treedef = weft.tree_util.tree_structure(p)
        unflat = lambda k: weft.tree_util.tree_unflatten(treedef, [o[k] for o in outs])  # noqa: E731
        return unflat(0), unflat(1), unflat(2), loss

    def step(self, tokens=None, targets=None):
        """One AdamW step on the next batch (or the given one); the loss before the step."""
        if tokens is None:
            tokens, targets = next(self.batches)
        self.t += 1
        c1 = np.asarray(1.0 / (1.0 - self.opt.beta1 ** self.t), self.dtype)
        c2 = np.asarray(1.0 / (1.0 - self.opt.beta2 ** self.t), self.dtype)
        self.params, self.m, self.v, loss = self.step_fn(self.params, self.m, self.v, c1, c2, tokens, targets)
        return float(loss)

    def evaluate(self, count=8):
        losses = [float(self.loss_fn(self.params, x, y))
                  for x, y in corpus.validation_batches(self.data.valid, self.batch, self.c.context, count)]
        return float(np.mean(losses))

    def parameters(self):
        params = self.params
        if any(isinstance(a, weft.BlockedArray) for a in weft.tree_util.tree_leaves(params)):
            params = self._gathered(params)
        return from_mesh_params(params, self.lay)

    def _gathered(self, params):
        """The parameters whole in every process: under weftrun an FSDP trainer's are BlockedArrays (their
        'data' blocks on both instances), so each leaf is all-gathered over the axes its spec names, and any
        device's copy is the whole. check_vma is off: under shard_map's rules all_gather's result stays typed
        as varying, and out_specs P() would be refused."""
        def gather(p):
            def one(x, spec):
                for d in range(len(spec)):
                    if spec[d]:
                        x = weft.lax.all_gather(x, tuple(spec[d]), axis=d, tiled=True)
                return x
            return weft.tree_util.tree_map(one, p, self.specs)
        mesh = self.lay.mesh()
        return weft.shard_map(gather, mesh, in_specs=(self.specs,), out_specs=P(), check_vma=False)(params)


def sample(params, config, data, length, seed=0, prompt="\n"):
    """`length` characters drawn from the trained model (temperature 1), one at a time, in numpy: the
    forward pass written out again in float64 (model.py's is for the mesh)."""
    rng = np.random.default_rng(seed)
    tokens = list(data.encode(prompt))
    p = tree_map(lambda a: np.asarray(a, np.float64), params)

    def ln(x, g, b):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + config.eps) * g + b

    def gelu(x):
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))

    for _ in range(length):
        ctx = np.array(tokens[-config.context:])
        t, H, dh = len(ctx), config.heads, config.head_dim
        x = p["embed"][ctx] + p["pos"][:t]
        for b in p["blocks"]:
            h = ln(x, b["ln1_g"], b["ln1_b"])
            q, k, v = ((h @ b[w] + b[bb]).reshape(t, H, dh).transpose(1, 0, 2)
                       for w, bb in (("wq", "bq"), ("wk", "bk"), ("wv", "bv")))
            s = q @ k.transpose(0, 2, 1) / np.sqrt(dh) + corpus.causal_bias(t, np.float64)
            s = np.exp(s - s.max(-1, keepdims=True))
            y = ((s / s.sum(-1, keepdims=True)) @ v).transpose(1, 0, 2).reshape(t, H * dh)
            x = x + y @ b["wo"] + b["bo"]
            x = x + gelu(ln(x, b["ln2_g"], b["ln2_b"]) @ b["w1"] + b["b1"]) @ b["w2"] + b["b2"]
        logits = ln(x[-1], p["lnf_g"], p["lnf_b"]) @ p["head"]
        prob = np.exp(logits - logits.max())
        tokens.append(int(rng.choice(len(prob), p=prob / prob.sum())))
    return data.decode(tokens[len(data.encode(prompt)):])


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# ---- the command line's rules ----------------------------------------------------------------------------------
# The least value of each numeric argument (a count of ranks, layers, steps ... is at least 1; a period or a
# count of samples may be 0, which turns it off).
AT_LEAST = {"dp": 1, "tp": 1, "pp": 1, "microbatches": 1, "layers": 1, "d_model": 1, "heads": 1, "context": 1,
            "batch": 1, "steps": 1, "seed": 0, "eval_every": 0, "eval_batches": 1, "sample": 0, "log_every": 0,
            "weight_decay": 0.0}


def check_arguments(ap, args, layout):
    """Every argument, and every combination the model and the layout need, checked before anything runs:
    a bad one ends the program with argparse's one-line error (exit status 2), not a traceback later."""
    for name, least in AT_LEAST.items():
        value = getattr(args, name)
        if not value >= least:  # (also refuses a NaN weight decay)
            ap.error(f"--{name.replace('_', '-')} must be at least {least}, got {value}")
    if not 0.0 < args.lr < float("inf"):
        ap.error(f"--lr must be a positive number, got {args.lr}")
    if args.weight_decay == float("inf"):
        ap.error("--weight-decay must be finite")
    if args.d_model % args.heads:
        ap.error(f"--d-model {args.d_model} must be a multiple of --heads {args.heads} (each head gets "
                 "d_model / heads dimensions)")
    config = corpus.Config(layers=args.layers, d_model=args.d_model, heads=args.heads, context=args.context)
    try:
        layout.check(config, args.batch)  # the layout's own rules (layout.py)
    except ValueError as error:
        ap.error(str(error))


def read_corpus(ap, args):
    """The corpus of --text (or the Bible), refused with a one-line error when it cannot be read or is too
    short for a window of --context + 1 tokens in both its training and its validation part."""
    try:
        text = open(args.text).read() if args.text else None
        data = corpus.Corpus(text)
    except (OSError, UnicodeDecodeError) as error:
        ap.error(f"--text {args.text}: {error}" if args.text else f"the default text: {error}")
    what = f"--text {args.text}" if args.text else "the text"
    if data.vocab == 0:
        ap.error(f"{what} is empty")
    need = args.context + 2  # a window of context + 1 tokens at a start drawn below len - context - 1
    shortest = min(len(data.train), len(data.valid))
    if shortest < need:
        ap.error(f"{what} is too short for --context {args.context}: its training part has {len(data.train)} "
                 f"characters and its validation part {len(data.valid)}, each needs at least {need}")
    return data


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dp", type=int, default=1, help="data-parallel ranks ('data')")
    ap.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks ('model', Megatron)")
    ap.add_argument("--pp", type=int, default=1, help="pipeline stages ('pipe')")
    ap.add_argument("--sp", action="store_true", help="sequence parallelism between the tensor-parallel halves")
    ap.add_argument("--fsdp", action="store_true", help="parameters sharded over 'data', gathered at use")
    ap.add_argument("--microbatches", type=int, default=1, help="pipeline microbatches")
    ap.add_argument("--schedule", choices=("gpipe", "1f1b"), default="gpipe",
                    help="pipeline schedule: gpipe (every forward, then every backward) or 1f1b")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32, help="global batch (sequences)")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--dtype", choices=tuple(DTYPES), default="f32",
                    help="f32 / f64 everywhere, or bf16: products in bfloat16, parameters and state float32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--text", help="train on this text file instead of the King James Bible")
    ap.add_argument("--eval-every", type=int, default=0, help="validation loss every N steps (0: at the end)")
    ap.add_argument("--eval-batches", type=int, default=8)
    ap.add_argument("--sample", type=int, default=0, help="print this many sampled characters at the end")
    ap.add_argument("--log-every", type=int, default=100)
    ap.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    args = ap.parse_args(argv)

    layout = Layout(dp=args.dp, tp=args.tp, pp=args.pp, sp=args.sp, fsdp=args.fsdp,
                    microbatches=args.microbatches, schedule=args.schedule)
    check_arguments(ap, args, layout)
    data = read_corpus(ap, args)
    config = corpus.Config(vocab=data.vocab, layers=args.layers, d_model=args.d_model, heads=args.heads,
                           context=args.context)
    if os.environ.get("WEFT_NUM_INSTANCES"):
        # Under weftrun the job has the devices (its instances hold them together); every instance runs this
        # same script on the same batches, feeds its own devices' blocks and gets back the results.
        if weft.device_count() != layout.devices:
            ap.error(f"--dp {args.dp} x --tp {args.tp} x --pp {args.pp} = {layout.devices} devices, the weftrun job "
                     f"has {weft.device_count()} (--num-replicas)")
    else:
        try:
            weft.init(device_count=layout.devices)
        except weft.InvalidArgument as error:
            ap.error(f"--dp {args.dp} x --tp {args.tp} x --pp {args.pp} = {layout.devices} devices: {error}")
    quiet = weft.process_index() != 0   # one instance reports
    opt = corpus.AdamW(lr=args.lr, weight_decay=args.weight_decay)
    trainer = Trainer(config, layout, opt, args.batch, args.seed, args.dtype, data=data)
    losses, curve, step_seconds = [], [], []
    for step in range(args.steps):
        t0 = time.perf_counter()
        losses.append(trainer.step())
        step_seconds.append(time.perf_counter() - t0)
        if args.eval_every and (step + 1) % args.eval_every == 0:
            curve.append((step + 1, trainer.evaluate(args.eval_batches)))
        if args.log_every and (step + 1) % args.log_every == 0 and not args.json and not quiet:
            recent_ms = statistics.median(step_seconds[-args.log_every:]) * 1e3
            print(f"step {step + 1}: loss {losses[-1]:.4f}, {recent_ms:.1f} ms/step (median of the last "
                  f"{args.log_every})", file=sys.stderr)
    valid = trainer.evaluate(args.eval_batches)
    warmup = min(3, len(step_seconds) // 2)
    step_s = statistics.median(step_seconds[warmup:])
    tokens_per_s = args.batch * args.context / step_s
    # (Every instance takes part: under weftrun an FSDP trainer's parameters are gathered by a shard_map.)
    params = trainer.parameters() if args.sample else None
    if quiet:
        return 0
    print(f"trained {args.steps} steps (dp {args.dp} tp {args.tp}{' sp' if args.sp else ''} pp {args.pp}"
          f"{' fsdp' if args.fsdp else ''}, {args.dtype}): loss {losses[-1]:.4f}, validation {valid:.4f}, "
          f"{tokens_per_s:.0f} tokens/s, {step_s * 1e3:.1f} ms/step, peak RSS {peak_rss_mib():.0f} MiB")
    if args.sample:
        print(sample(params, config, data, args.sample, args.seed))
    if args.json:
        print(json.dumps({"framework": "weft", "instances": weft.process_count(), "dp": args.dp, "tp": args.tp, "pp": args.pp, "sp": args.sp,
                          "fsdp": args.fsdp, "microbatches": args.microbatches, "schedule": args.schedule, "dtype": args.dtype, "steps": args.steps, "losses": losses,
                          "valid_curve": curve, "valid_loss": valid, "tokens_per_s": tokens_per_s,
                          "step_ms": step_s * 1e3, "peak_rss_mib": peak_rss_mib()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
