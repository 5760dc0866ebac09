#!/usr/bin/python3
# bench/pytorch_mlp.py: the PyTorch yardstick for examples/train_fashion_mnist. The same MLP (784-512-512-10,
# ReLU, softmax cross-entropy, SGD momentum 0.9, lr 0.1, global batch 256), the same data files, the same batch
# rule and init distribution, the same metrics CSV and final JSON line, so bench/compare_training.sh and
# scripts/plot_training.py can put weft and PyTorch side by side. Two modes:
#
#   /usr/bin/python3 bench/pytorch_mlp.py --epochs 2 --metrics pt.csv --json           # one process, all cores
#   /usr/bin/python3 bench/pytorch_mlp.py --ranks 8 --steps 300 --json                  # DDP, gloo, 8 ranks
#
# Metrics rows: kind=step per step (loss averaged over the ranks), kind=epoch per epoch (mean loss, samples/s
# over the epoch's training time, test accuracy); with --steps the interrupted last epoch still gets its epoch
# row. The JSON's samples_per_s and step_ms leave out the first --warmup steps; step_cpu_ms is rank 0's CPU
# time per step, which still measures the kernels when other work shares the machine (one thread).
#
# Runs under Debian's /usr/bin/python3 (torch 1.13, numpy). Debian's torch does its float32 matmuls in
# whatever libblas.so.3 the loader finds; bench/compare_training.sh chooses the fast one (LD_LIBRARY_PATH,
# OPENBLAS_CORETYPE) and bench/pytorch_blas_probe.sh measured why.
import argparse
import gzip
import json
import os
import socket
import sys
import time

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
GLOBAL_BATCH = 256
CSV_HEADER = "kind,epoch,step,elapsed_s,loss,samples_per_s,test_accuracy"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--epochs", type=int, default=1, help="epochs to train (default 1)")
    p.add_argument("--steps", type=int, default=0, help="stop after this many steps in all (0 = no limit)")
    p.add_argument("--ranks", type=int, default=None,
                   help="processes; 1 = one process without DDP (default), >1 = DDP over gloo")
    p.add_argument("--ddp", action="store_true", help="DDP even with --ranks 1; without --ranks means 8 ranks")
    p.add_argument("--threads", type=int, default=0,
                   help="intra-op threads per process (default: all cores for one process, "
                        "cores/ranks (at least 1) for DDP)")
    p.add_argument("--metrics", default="", help="write the metrics CSV here")
    p.add_argument("--json", action="store_true", help="end stdout with one JSON object of results")
    p.add_argument("--data", default=DEFAULT_DATA, help="directory of the Fashion-MNIST IDX .gz files")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--warmup", type=int, default=10,
                   help="steps left out of the steady-state samples/s and step_ms (default 10)")
    p.add_argument("--no-eval", action="store_true", help="skip the per-epoch test accuracy")
    p.add_argument("--autocast", choices=["none", "bf16"], default="none",
                   help="bf16: the forward pass and loss under torch.autocast('cpu', dtype=torch.bfloat16), "
                        "PyTorch's recommended mixed precision on CPUs (float32 parameters and optimizer)")
    a = p.parse_args(argv)
    if a.ranks is None:
        a.ranks = 8 if a.ddp else 1
    a.ddp = a.ddp or a.ranks > 1
    if a.ranks < 1 or GLOBAL_BATCH % a.ranks:
        p.error(f"--ranks must divide the global batch {GLOBAL_BATCH}, got {a.ranks}")
    if a.epochs < 1 or a.steps < 0 or a.warmup < 0:
        p.error("--epochs must be >= 1, --steps and --warmup >= 0")
    cores = os.cpu_count() or 1
    if a.threads <= 0:
        a.threads = cores if a.ranks == 1 else max(1, cores // a.ranks)
    return a


def read_idx(path, magic):
    """An IDX file (big-endian header: magic, dims) as a numpy array; gzip if the name says so."""
    import numpy as np
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    found = int.from_bytes(raw[0:4], "big")
    if found != magic:
        raise ValueError(f"{path}: IDX magic {found}, expected {magic}")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path}: {data.size} values for dims {dims}")
    return data.reshape(dims)


def load_split(data_dir, split):
    images = read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz"), 2051)
    labels = read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz"), 2049)
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"{split}: {images.shape[0]} images but {labels.shape[0]} labels")
    # Pixels scaled to [0, 1] float32 and nothing else, as the weft example does.
    import numpy as np
    x = images.reshape(images.shape[0], -1).astype(np.float32) / np.float32(255.0)
    return x, labels.astype(np.int64)


def peak_rss_kib():
    """This process's peak resident set (VmHWM), KiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def make_model(torch):
    nn = torch.nn
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    # He init as the weft example documents it: W ~ N(0, 1) * sqrt(2 / fan_in), b = 0. Same distribution,
    # not the same numbers (weft's RNG is threefry).
    with torch.no_grad():
        for m in model:
            if isinstance(m, nn.Linear):
                m.weight.normal_(0.0, (2.0 / m.in_features) ** 0.5)
                m.bias.zero_()
    return model


def train(rank, args, port, result_queue):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    world = args.ranks
    dist = None
    if args.ddp:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)

    x_train, y_train = load_split(args.data, "train")
    x_test, y_test = load_split(args.data, "t10k")
    x_train, y_train = torch.from_numpy(x_train), torch.from_numpy(y_train)
    x_test, y_test = torch.from_numpy(x_test), torch.from_numpy(y_test)

    torch.manual_seed(args.seed)
    model = make_model(torch)
    if args.ddp:
        # DDP's defaults (25 MiB buckets, overlap of allreduce with backward); the constructor broadcasts
        # rank 0's parameters, so every rank starts equal whatever its RNG did.
        model = torch.nn.parallel.DistributedDataParallel(model)
    net = model.module if args.ddp else model  # for evaluation, without DDP's hooks
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)

    local_batch = GLOBAL_BATCH // world
    steps_per_epoch = x_train.shape[0] // GLOBAL_BATCH  # the last partial batch is dropped
    # The batch order is one permutation per epoch from a seeded generator that every rank shares; rank r
    # takes slice r of each global batch, so DDP sees exactly the single-process batches.
    order_gen = torch.Generator().manual_seed(args.seed + 1)

    def test_accuracy():
        # Each rank scores its share of the test set; the counts are summed.
        net.eval()
        n = x_test.shape[0]
        lo, hi = rank * n // world, (rank + 1) * n // world
        correct = torch.zeros(1, dtype=torch.float64)
        with torch.no_grad():
            for i in range(lo, hi, 1000):
                j = min(i + 1000, hi)
                correct += (net(x_test[i:j]).argmax(1) == y_test[i:j]).sum().double()
        if dist:
            dist.all_reduce(correct)
        net.train()
        return float(correct.item()) / n

    step_rows, epoch_rows = [], []
    step_times = []  # seconds per step, all steps in order
    step_cpu = []  # this process's CPU seconds (all its threads) at the end of each step
    total_steps = 0
    last_loss = float("nan")
    last_accuracy = None
    epochs_run = 0
    if dist:
        dist.barrier()  # every rank has its data and model: the clock starts together
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        perm = torch.randperm(x_train.shape[0], generator=order_gen)
        losses = torch.zeros(steps_per_epoch, dtype=torch.float64)
        ends = []
        epoch_start = time.perf_counter()
        steps_done = 0
        for s in range(steps_per_epoch):
            if args.steps and total_steps >= args.steps:
                break
            t_step = time.perf_counter()
            idx = perm[s * GLOBAL_BATCH + rank * local_batch:s * GLOBAL_BATCH + (rank + 1) * local_batch]
            xb, yb = x_train[idx], y_train[idx]
            if args.autocast == "bf16":
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = F.cross_entropy(model(xb), yb)
            else:
                loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            # Local losses are averaged across ranks once per epoch, not per step: a per-step allreduce
            # for logging would slow the very thing being measured.
            losses[s] = loss.detach()
            now = time.perf_counter()
            step_times.append(now - t_step)
            step_cpu.append(time.process_time())
            ends.append(now)
            steps_done += 1
            total_steps += 1
        if steps_done == 0:
            break
        epoch_train_s = time.perf_counter() - epoch_start
        losses = losses[:steps_done]
        if dist:
            dist.all_reduce(losses)
            losses /= world
        accuracy = None if args.no_eval else test_accuracy()
        epoch_end = time.perf_counter()
        epochs_run += 1
        if rank == 0:
            prev = epoch_start
            for s in range(steps_done):
                dt = ends[s] - prev
                prev = ends[s]
                step_rows.append(("step", epoch + 1, total_steps - steps_done + s + 1, ends[s] - t0,
                                  float(losses[s]), GLOBAL_BATCH / dt if dt > 0 else 0.0, None))
            epoch_rows.append(("epoch", epoch + 1, total_steps, epoch_end - t0, float(losses.mean()),
                               steps_done * GLOBAL_BATCH / epoch_train_s, accuracy))
        last_loss = float(losses[-1])
        last_accuracy = accuracy
        if args.steps and total_steps >= args.steps:
            break

    if last_accuracy is None and not args.no_eval:
        last_accuracy = test_accuracy()
    rss = torch.tensor([float(peak_rss_kib())], dtype=torch.float64)
    if dist:
        dist.all_reduce(rss)
        dist.destroy_process_group()
    if rank != 0:
        return
    steady = step_times[args.warmup:] if len(step_times) > args.warmup else step_times
    step_s = sum(steady) / len(steady) if steady else float("nan")
    # CPU seconds per steady step: on a machine shared with other work, wall time measures the neighbours
    # too, while a one-thread process's CPU time still measures the kernels.
    first = min(args.warmup, len(step_cpu) - 1)
    step_cpu_s = (step_cpu[-1] - step_cpu[first]) / (len(step_cpu) - 1 - first) if len(step_cpu) > 1 else float("nan")
    result = {
        "framework": "pytorch",
        "epochs": epochs_run,
        "steps": total_steps,
        "devices": world,
        "instances": world,
        "data_parallel": world,
        "model_parallel": 1,
        "zero": False,
        "threads_per_instance": args.threads,
        "final_loss": last_loss,
        "test_accuracy": last_accuracy,
        "samples_per_s": GLOBAL_BATCH / step_s,
        "step_ms": step_s * 1e3,
        "step_cpu_ms": step_cpu_s * 1e3,
        "warmup_steps": len(step_times) - len(steady),
        "rss_peak_kib_sum": int(rss.item()),
        "torch": torch.__version__,
    }
    if args.metrics:
        with open(args.metrics, "w") as f:
            f.write(CSV_HEADER + "\n")
            for kind, ep, st, el, lo, sps, acc in sorted(step_rows + epoch_rows, key=lambda r: (r[3], r[0] == "epoch")):
                f.write(f"{kind},{ep},{st},{el:.6f},{lo:.6f},{sps:.3f},{'' if acc is None else f'{acc:.6f}'}\n")
    if result_queue is not None:
        result_queue.put(result)
    else:
        return result


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv):
    args = parse_args(argv)
    # Thread counts must be in the environment before numpy or torch loads a BLAS (spawned ranks inherit it):
    # OpenBLAS's pthread build reads OPENBLAS_NUM_THREADS once, and 8 ranks each starting one thread per
    # core would fight over the cores.
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    for split in ("train", "t10k"):
        for kind in ("images-idx3", "labels-idx1"):
            path = os.path.join(args.data, f"{split}-{kind}-ubyte.gz")
            if not os.path.exists(path):
                sys.exit(f"pytorch_mlp.py: missing {path} (Debian package dataset-fashion-mnist)")
    if not args.ddp:
        result = train(0, args, 0, None)
    else:
        import torch.multiprocessing as mp
        ctx = mp.get_context("spawn")
        queue = ctx.SimpleQueue()
        mp.start_processes(train, args=(args, free_port(), queue), nprocs=args.ranks, join=True,
                           start_method="spawn")
        result = queue.get()
    # Rank 0 sums VmHWM over the ranks; the launcher is one more process holding memory.
    result["rss_peak_kib_sum"] += peak_rss_kib() if args.ddp else 0
    print(f"pytorch_mlp: {result['instances']} process(es) x {result['threads_per_instance']} thread(s), "
          f"{result['steps']} steps, {result['samples_per_s']:.0f} samples/s, {result['step_ms']:.2f} ms/step, "
          f"final loss {result['final_loss']:.4f}, test accuracy {result['test_accuracy']}", file=sys.stderr)
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
