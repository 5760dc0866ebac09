#!/usr/bin/python3
# bench/pytorch_transformer.py: the PyTorch twin of examples/transformer/ (train.py, model.py): the same
# character-level transformer on the King James Bible, written out layer by layer in PyTorch 1.13, so that
# bench/compare_transformer.sh can put weft's layouts beside PyTorch's and tests/python/test_transformer.py
# can check weft's float64 losses against an independent framework's.
#
#   /usr/bin/python3 bench/pytorch_transformer.py --steps 60 --json                  # one process, all cores
#   /usr/bin/python3 bench/pytorch_transformer.py --dtype bf16 --steps 60 --json     # torch.autocast bf16
#   /usr/bin/python3 bench/pytorch_transformer.py --ddp 8 --steps 60 --json          # DDP, gloo, 8 ranks
#
# The same model, not a look-alike: the weights come from corpus.init_params (same seed, GPT-2 init) in the
# (in, out) layout weft uses, every product is x @ W + b, the tokens enter as one_hot @ embed + pos, the
# blocks are pre-LN with F.layer_norm (eps from corpus.Config), causal multi-head attention with
# corpus.causal_bias's additive -1e9 and scores scaled by the reciprocal of sqrt(head_dim) as model.py
# multiplies, F.gelu(approximate='tanh'), a final LayerNorm, the head and the mean token NLL; the batches come
# from corpus.batches (same seed), the optimizer is torch.optim.AdamW with corpus.AdamW's hyper-parameters
# (train.py's adamw() is that update written out). No nn.TransformerEncoder: its fused paths and its
# (out, in) weights would make it a different computation. In float64 the 20-step losses of the test's small
# configuration agree with weft's to rounding (tests/data/transformer_torch_losses.json, made by
# --dump-losses).
#
# Modes: one process (--dtype f32 | f64 | bf16; bf16 = the forward pass and loss under
# torch.autocast('cpu', dtype=torch.bfloat16) with float32 parameters and optimizer, PyTorch's recommended
# CPU mixed precision and what weft's --dtype bf16 mirrors), or DDP over gloo (--ddp N: N spawned ranks on
# localhost, one thread each unless --threads says otherwise, rank r taking rows [r B/N, (r+1) B/N) of every
# global batch of --batch rows, so the ranks together see the single process's batches). The --json line has
# train.py's keys (framework "pytorch", dp = the ranks, plus ddp, threads, torch and peak_rss_mib_sum).
# tokens/s = batch x context / the median step time after 3 warmup steps; peak RSS is getrusage's ru_maxrss,
# for DDP the largest rank's (peak_rss_mib) and the ranks' sum with the launcher's (peak_rss_mib_sum).
#
# Runs under Debian's /usr/bin/python3 (torch 1.13, numpy). Debian's torch does its float32 matmuls in
# whatever libblas.so.3 the loader finds; bench/compare_transformer.sh chooses the fast one (LD_LIBRARY_PATH,
# OPENBLAS_CORETYPE) as bench/compare_training.sh does, and bench/pytorch_blas_probe.sh measured why.
import argparse
import json
import math
import os
import resource
import socket
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "transformer"))

import corpus  # noqa: E402  (numpy only: the text, the configuration, the weights, the batches)

WARMUP = 3  # steps left out of the median step time, as train.py does


def parse_args(argv):
    p = argparse.ArgumentParser(description="the PyTorch twin of examples/transformer/train.py")
    p.add_argument("--ddp", type=int, default=0, help="DDP over gloo with this many ranks (0: one process)")
    p.add_argument("--threads", type=int, default=0,
                   help="intra-op threads per process (default: every core for one process, 1 per DDP rank)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--batch", type=int, default=32, help="global batch (sequences)")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--dtype", choices=("f32", "f64", "bf16"), default="f32",
                   help="f32 / f64 everywhere, or bf16: torch.autocast bfloat16, parameters and state float32")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--text", help="train on this text file instead of the King James Bible")
    p.add_argument("--eval-every", type=int, default=0, help="validation loss every N steps (0: at the end)")
    p.add_argument("--eval-batches", type=int, default=8)
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    p.add_argument("--dump-losses", metavar="FILE",
                   help="write the per-step losses with the command and torch's version to FILE (JSON)")
    a = p.parse_args(argv)
    ranks = max(a.ddp, 1)
    if a.ddp < 0 or a.batch % ranks:
        p.error(f"--ddp {a.ddp}: the ranks must divide the global batch {a.batch}")
    if a.threads <= 0:
        a.threads = (os.cpu_count() or 1) if a.ddp == 0 else 1
    return a


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def make_model(torch, config, params, dtype):
    """The transformer as an nn.Module (DDP wants one) over corpus.init_params' arrays."""
    nn, F = torch.nn, torch.nn.functional

    def param(a):
        return nn.Parameter(torch.tensor(a, dtype=dtype))

    class Transformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.c = config
            self.embed, self.pos = param(params["embed"]), param(params["pos"])
            self.blocks = nn.ModuleList()
            for b in params["blocks"]:
                block = nn.Module()
                for name in corpus.BLOCK_PARAMS:
                    setattr(block, name, param(b[name]))
                self.blocks.append(block)
            self.lnf_g, self.lnf_b, self.head = param(params["lnf_g"]), param(params["lnf_b"]), param(params["head"])
            # A buffer, not a parameter: the causal mask never trains (and DDP broadcasts buffers once).
            self.register_buffer("bias", torch.tensor(corpus.causal_bias(config.context, float), dtype=dtype))

        def layer_norm(self, x, g, b):
            return F.layer_norm(x, (self.c.d_model,), g, b, self.c.eps)

        def attention(self, h, b):
            B, T, _ = h.shape
            H, dh = self.c.heads, self.c.head_dim

            def split_heads(x):  # (B, T, H dh) -> (B, H, T, dh)
                return x.reshape(B, T, H, dh).transpose(1, 2)

            q = split_heads(h @ b.wq + b.bq)
            k = split_heads(h @ b.wk + b.bk)
            v = split_heads(h @ b.wv + b.bv)
            # model.py multiplies by the reciprocal (it does not divide): the same rounding.
            scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(dh)) + self.bias[:T, :T]
            y = torch.softmax(scores, dim=-1) @ v                   # (B, H, T, dh)
            y = y.transpose(1, 2).reshape(B, T, H * dh)
            return y @ b.wo + b.bo

        def mlp(self, h, b):
            return F.gelu(h @ b.w1 + b.b1, approximate="tanh") @ b.w2 + b.b2

        def forward(self, tokens, targets):
            """The mean over the batch's tokens of -log p(target)."""
            B, T = tokens.shape
            V = self.c.vocab
            # one_hot @ embed as model.py has it (under autocast this product is a bfloat16 one too).
            onehot = F.one_hot(tokens.reshape(B * T), V).to(self.embed.dtype)
            x = (onehot @ self.embed).reshape(B, T, self.c.d_model) + self.pos[:T]
            for b in self.blocks:
                x = x + self.attention(self.layer_norm(x, b.ln1_g, b.ln1_b), b)
                x = x + self.mlp(self.layer_norm(x, b.ln2_g, b.ln2_b), b)
            logits = self.layer_norm(x, self.lnf_g, self.lnf_b) @ self.head
            # The loss in the parameters' dtype (a bfloat16 head product is widened first), as weft's
            # Policy keeps softmax and the loss in float32.
            return F.cross_entropy(logits.reshape(B * T, V).to(self.embed.dtype), targets.reshape(B * T))

    return Transformer()


def train(rank, args, port, queue):
    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    ranks = max(args.ddp, 1)
    dist = None
    if args.ddp:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=ranks)

    data = corpus.Corpus(open(args.text).read() if args.text else None)
    config = corpus.Config(vocab=data.vocab, layers=args.layers, d_model=args.d_model, heads=args.heads,
                           context=args.context)
    dtype = torch.float64 if args.dtype == "f64" else torch.float32
    np_dtype = np.float64 if args.dtype == "f64" else np.float32
    # Drawn in float64 and cast by corpus.init_params, exactly as train.py's Trainer gets them.
    model = make_model(torch, config, corpus.init_params(config, args.seed, np_dtype), dtype)
    if args.ddp:
        # DDP's defaults (25 MiB buckets, all-reduce overlapped with the backward pass, gradients averaged).
        model = torch.nn.parallel.DistributedDataParallel(model)
    hp = corpus.AdamW(lr=args.lr, weight_decay=args.weight_decay)
    opt = torch.optim.AdamW(model.parameters(), lr=hp.lr, betas=(hp.beta1, hp.beta2), eps=hp.eps,
                            weight_decay=hp.weight_decay)
    local = args.batch // ranks
    rows = slice(rank * local, (rank + 1) * local)

    def loss_of(x, y):
        tokens = torch.from_numpy(x[rows].astype(np.int64))
        targets = torch.from_numpy(y[rows].astype(np.int64))
        if args.dtype == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return model(tokens, targets)
        return model(tokens, targets)

    def evaluate():
        """train.py's evaluate: the mean loss over the fixed validation batches (each rank its rows)."""
        with torch.no_grad():
            losses = torch.tensor([float(loss_of(x, y)) for x, y in corpus.validation_batches(
                data.valid, args.batch, config.context, args.eval_batches)], dtype=torch.float64)
        if dist:
            dist.all_reduce(losses)
            losses /= ranks
        return float(losses.mean())

    batches = corpus.batches(data.train, args.batch, config.context, args.seed)
    losses = torch.zeros(args.steps, dtype=torch.float64)
    step_seconds, curve = [], []
    if dist:
        dist.barrier()  # every rank has its text and model: the clocks start together
    for step in range(args.steps):
        x, y = next(batches)
        t0 = time.perf_counter()
        loss = loss_of(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step_seconds.append(time.perf_counter() - t0)
        # Kept per rank and averaged once at the end: a per-step all-reduce for logging would slow the step.
        losses[step] = loss.detach().double()
        if args.eval_every and (step + 1) % args.eval_every == 0:
            curve.append((step + 1, evaluate()))
        if args.log_every and (step + 1) % args.log_every == 0 and not args.json and rank == 0:
            print(f"step {step + 1}: loss {float(losses[step]):.4f} (rank 0's rows)", file=sys.stderr)
    valid = evaluate()
    rss_max = torch.tensor([peak_rss_mib()], dtype=torch.float64)
    rss_sum = rss_max.clone()
    if dist:
        dist.all_reduce(losses)
        losses /= ranks
        dist.all_reduce(rss_max, op=dist.ReduceOp.MAX)
        dist.all_reduce(rss_sum)
    result = None
    if rank == 0:
        result = report(args, ranks, losses, curve, valid, step_seconds, rss_max, rss_sum, torch)
        if queue is not None:
            queue.put(result)
    if dist:
        # Leave without running destructors: torch 1.13's DDP Reducer, collected with the GIL held, destroys
        # ProcessGroupGloo, which joins a gloo worker thread that is itself waiting for the GIL to free a tensor
        # (seen: 2 runs in 3 hung there forever). Everything this rank owes is sent: the collectives above are
        # done and rank 0's result is in the pipe.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return result


def report(args, ranks, losses, curve, valid, step_seconds, rss_max, rss_sum, torch):
    """Rank 0's result: the JSON object compare_transformer.sh reads."""
    warmup = min(WARMUP, len(step_seconds) // 2)
    step_s = statistics.median(step_seconds[warmup:]) if step_seconds else float("nan")
    return {"framework": "pytorch", "dp": ranks, "tp": 1, "pp": 1, "sp": False, "fsdp": False,
            "dtype": args.dtype, "steps": args.steps, "losses": [float(v) for v in losses],
            "valid_curve": curve, "valid_loss": valid, "tokens_per_s": args.batch * args.context / step_s,
            "step_ms": step_s * 1e3, "peak_rss_mib": float(rss_max), "peak_rss_mib_sum": float(rss_sum),
            "ddp": args.ddp, "threads": args.threads, "torch": torch.__version__}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv):
    args = parse_args(argv)
    # Thread counts must be in the environment before torch loads a BLAS (spawned ranks inherit it): the
    # OpenMP and pthread OpenBLAS builds read them once, and 8 ranks each starting one thread per core would
    # fight over the cores.
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    if args.ddp:
        import torch.multiprocessing as mp
        queue = mp.get_context("spawn").SimpleQueue()
        mp.start_processes(train, args=(args, free_port(), queue), nprocs=args.ddp, join=True,
                           start_method="spawn")
        result = queue.get()
        result["peak_rss_mib_sum"] += peak_rss_mib()  # the launcher holds memory too
    else:
        result = train(0, args, 0, None)
    losses = result["losses"]
    print(f"pytorch_transformer: trained {args.steps} steps ({'ddp %d' % args.ddp if args.ddp else 'one process'}"
          f" x {args.threads} thread(s), {args.dtype}): loss {losses[-1] if losses else float('nan'):.4f}, "
          f"validation {result['valid_loss']:.4f}, {result['tokens_per_s']:.0f} tokens/s, "
          f"{result['step_ms']:.1f} ms/step, peak RSS {result['peak_rss_mib']:.0f} MiB", file=sys.stderr)
    if args.dump_losses:
        with open(args.dump_losses, "w") as f:
            json.dump({"made_by": "bench/pytorch_transformer.py --dump-losses: the per-step training losses of "
                                  "the PyTorch twin, read by tests/python/test_transformer.py",
                       "command": "/usr/bin/python3 bench/pytorch_transformer.py " + " ".join(argv),
                       "torch": result["torch"], "dtype": args.dtype, "ddp": args.ddp,
                       "config": {"layers": args.layers, "d_model": args.d_model, "heads": args.heads,
                                  "context": args.context, "batch": args.batch, "seed": args.seed,
                                  "lr": args.lr, "weight_decay": args.weight_decay},
                       "losses": losses}, f, indent=1)
            f.write("\n")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
