"""The character-level transformer of examples/transformer/ in every parallel layout (issue 24, item 2).

Against independent expectations: the first loss against a numpy float64 forward pass written out here; the
1-device run's 20 float64 losses against the PyTorch twin's (bench/pytorch_transformer.py, its losses in
tests/data/transformer_torch_losses.json) within 1e-9 relative; every layout against the 1-device run within
1e-10 relative for 20 float64 steps; and the differentiated programs' collective counts
against what each layout promises (tensor parallel: 2 all-reduces per block forward and 2 backward; sequence
parallel: all_gather / psum_scatter pairs instead; FSDP: one all_gather forward and one psum_scatter backward
per sharded parameter; GPipe and 1F1B: one ppermute per tick boundary each way). Small configurations: the whole
file takes seconds.
"""
import collections
import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import weft
from conftest import PYTHON, build_dir, python_env

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "transformer"))
import corpus  # noqa: E402
from layout import Layout  # noqa: E402
import train  # noqa: E402

# 64-bit types on (JAX's jax_enable_x64; conftest.py): the float64 trainer against numpy's float64 loss.
pytestmark = pytest.mark.usefixtures("jax_enable_x64")

STEPS = 20
SMALL = dict(layers=4, d_model=32, heads=4, context=16)
BATCH = 8


@pytest.fixture(scope="module", autouse=True)
def runtime():
    return weft.init(device_count=8)


@pytest.fixture(scope="module")
def data():
    return corpus.Corpus()


def config(data, **over):
    return corpus.Config(vocab=data.vocab, **{**SMALL, **over})


def trainer(data, layout, dtype="f64", **over):
    return train.Trainer(config(data, **over), layout, corpus.AdamW(), BATCH, seed=0, dtype=dtype, data=data)


def losses(data, layout, steps=STEPS, **over):
    t = trainer(data, layout, **over)
    return np.array([t.step() for _ in range(steps)])


@pytest.fixture(scope="module")
def one_device(data):
    return losses(data, Layout())


# ---- an independent forward pass ------------------------------------------------------------------------
def numpy_loss(p, tokens, targets, c):
    def ln(x, g, b):
        mu = x.mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + c.eps) * g + b

    B, T = tokens.shape
    H, dh = c.heads, c.head_dim
    x = p["embed"][tokens] + p["pos"][:T]                        # (B, T, D)
    mask = np.tril(np.ones((T, T), bool))
    for b in p["blocks"]:
        h = ln(x, b["ln1_g"], b["ln1_b"])
        q, k, v = ((h @ b["w" + n] + b["b" + n]).reshape(B, T, H, dh).transpose(0, 2, 1, 3) for n in "qkv")
        s = np.where(mask, q @ k.transpose(0, 1, 3, 2) / np.sqrt(dh), -np.inf)
        a = np.exp(s - s.max(-1, keepdims=True))
        y = ((a / a.sum(-1, keepdims=True)) @ v).transpose(0, 2, 1, 3).reshape(B, T, H * dh)
        x = x + y @ b["wo"] + b["bo"]
        u = ln(x, b["ln2_g"], b["ln2_b"]) @ b["w1"] + b["b1"]
        u = 0.5 * u * (1 + np.tanh(np.sqrt(2 / np.pi) * (u + 0.044715 * u ** 3)))
        x = x + u @ b["w2"] + b["b2"]
    logits = ln(x, p["lnf_g"], p["lnf_b"]) @ p["head"]
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    return -np.take_along_axis(logp, targets[..., None], -1).mean()


def test_first_loss_is_numpys(data):
    t = trainer(data, Layout())
    tokens, targets = next(corpus.batches(data.train, BATCH, SMALL["context"], 0))
    want = numpy_loss(corpus.init_params(t.c, 0, np.float64), tokens, targets, t.c)
    assert abs(t.step() - want) <= 1e-12 * abs(want)


def test_training_lowers_the_loss(one_device):
    assert one_device[-1] < one_device[0] - 0.5, one_device


def test_one_device_follows_pytorch(one_device):
    """The same weights, batches and AdamW in PyTorch (bench/pytorch_transformer.py --dump-losses on this
    configuration; the file records the command): 20 float64 steps agree to rounding, so a drift in
    LayerNorm, GELU, the attention's scale and mask, the loss or the optimizer shows here."""
    with open(ROOT / "tests" / "data" / "transformer_torch_losses.json") as f:
        ref = json.load(f)
    assert ref["config"] == {**SMALL, "batch": BATCH, "seed": 0, "lr": corpus.AdamW.lr,
                             "weight_decay": corpus.AdamW.weight_decay}, ref["config"]
    assert ref["dtype"] == "f64" and len(ref["losses"]) == STEPS
    np.testing.assert_allclose(one_device, ref["losses"], rtol=1e-9, atol=0)


LAYOUTS = {
    "data2": Layout(dp=2),
    "data8": Layout(dp=8),
    "tensor2": Layout(tp=2),
    "tensor4": Layout(tp=4),
    "sequence2": Layout(tp=2, sp=True),
    "fsdp4": Layout(dp=4, fsdp=True),
    "data2_tensor2_fsdp": Layout(dp=2, tp=2, fsdp=True),
    "data2_sequence2": Layout(dp=2, tp=2, sp=True),
    "pipe2_gpipe4": Layout(pp=2, microbatches=4),
    "pipe4_gpipe2": Layout(pp=4, microbatches=2),
    "data2_tensor2_pipe2": Layout(dp=2, tp=2, pp=2, microbatches=2),
    "everything": Layout(dp=2, tp=2, sp=True, fsdp=True, pp=2, microbatches=2),
    "pipe2_1f1b4": Layout(pp=2, microbatches=4, schedule="1f1b"),
    "pipe4_1f1b2": Layout(pp=4, microbatches=2, schedule="1f1b"),
    "pipe2_1f1b8": Layout(pp=2, microbatches=8, schedule="1f1b"),
    "data2_tensor2_pipe2_1f1b": Layout(dp=2, tp=2, pp=2, microbatches=2, schedule="1f1b"),
    "everything_1f1b": Layout(dp=2, tp=2, sp=True, fsdp=True, pp=2, microbatches=2, schedule="1f1b"),
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_layout_follows_one_device(data, one_device, name):
    got = losses(data, LAYOUTS[name])
    np.testing.assert_allclose(got, one_device, rtol=1e-10, atol=0, err_msg=name)


SHARED = ["data8", "tensor2", "data2_tensor2_fsdp", "data2_sequence2", "pipe2_1f1b4", "everything", "everything_1f1b"]


@pytest.mark.parametrize("name", SHARED)
def test_layout_with_shared_products_follows_one_device(data, one_device, name):
    """WEFT_SHARED_PRODUCTS=2: the products by a weight the local replicas share run as one, after a bitwise
    check that their weights are equal (so every product the program's types call shared, in each layout,
    truly is); the losses stay the 1-device ones."""
    runtime = weft.init(device_count=8, shared_products=2)
    try:
        got = losses(data, LAYOUTS[name])
        shared = runtime.stats()["shared_products"]
    finally:
        weft.init(device_count=8)
    np.testing.assert_allclose(got, one_device, rtol=1e-10, atol=0, err_msg=name)
    # Every layout but pure tensor parallelism holds some weight replicated over the replicas that multiply
    # different rows by it (data ranks; pipeline stages for the embedding and head); tensor parallel ranks
    # multiply the same rows by their own columns: nothing to share.
    assert (shared > 0) == (name != "tensor2"), (name, shared)


@pytest.mark.parametrize("name", ["data8", "data2_tensor2_pipe2"])
def test_shared_runs_split_the_update_with_the_unshared_losses(data, name):
    """WEFT_SHARED_RUNS=2 at d_model 128, where the update's runs are large enough to share: the local replicas
    that hold a parameter alike (all 8 in data8; the 2 data ranks of each tensor x pipe coordinate in the
    other) split its AdamW update after a bitwise check that their inputs are equal (so every run the types
    call shared, in each layout, truly is); the losses are the unshared run's, bit for bit."""
    got, shared = {}, {}
    try:
        for mode in (0, 2):
            runtime = weft.init(device_count=8, shared_runs=mode)
            got[mode] = losses(data, LAYOUTS[name], steps=3, d_model=128)
            shared[mode] = runtime.stats()["shared_runs"]
    finally:
        weft.init(device_count=8)
    assert np.array_equal(got[2], got[0]), (name, got)
    assert shared[0] == 0 and shared[2] > 0, (name, shared)


# ---- under the launcher: 2 instances x 4 devices -----------------------------------------------------------
def train_under_weftrun(flags, timeout=240):
    if "WEFT_BUILD_DIR" not in os.environ:
        pytest.skip("run by ctest (python_transformer): needs the build's weftrun")
    c = SMALL
    args = [str(build_dir() / "bin" / "weftrun"), "--num-instances", "2", "--num-replicas", "8", PYTHON,
            str(ROOT / "examples" / "transformer" / "train.py"), *flags, "--dtype", "f64",
            "--layers", str(c["layers"]), "--d-model", str(c["d_model"]), "--heads", str(c["heads"]),
            "--context", str(c["context"]), "--batch", str(BATCH), "--steps", str(STEPS), "--eval-batches", "1",
            "--log-every", "0", "--json"]
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=python_env())


@pytest.mark.parametrize("flags", [
    ["--dp", "8"],
    ["--dp", "2", "--tp", "4"],
    ["--dp", "2", "--tp", "2", "--pp", "2", "--microbatches", "2", "--schedule", "1f1b"],
    ["--dp", "8", "--fsdp"],
    ["--dp", "4", "--tp", "2", "--fsdp"],
], ids=["data8", "data2_tensor4", "data2_tensor2_pipe2_1f1b", "fsdp8", "fsdp4_tensor2"])
def test_two_instances_of_four_devices_follow_one_device(one_device, flags):
    """train.py under weftrun: each instance feeds its 4 devices' blocks and reads back the results; the
    mesh's 'data' axis crosses the instances. The losses are the in-process 1-device run's."""
    done = train_under_weftrun(flags)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    line = next(ln for ln in done.stdout.splitlines() if '{"framework"' in ln)
    summary = json.loads(line[line.index("{"):])
    assert summary["instances"] == 2
    np.testing.assert_allclose(summary["losses"], one_device, rtol=1e-10, atol=0)


def test_fsdp_across_instances_samples_the_one_device_text(one_device):
    """FSDP over a 'data' axis that crosses the instances: the parameters stay blocks on both instances
    (weft.BlockedArray, never assembled) from step to step; sampling gathers them by a shard_map in every
    instance, and the text is the 1-device model's, character for character."""
    flags = ["--sample", "40", "--seed", "0"]
    done = train_under_weftrun(["--dp", "8", "--fsdp", *flags])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    c = SMALL
    alone = subprocess.run([PYTHON, str(ROOT / "examples" / "transformer" / "train.py"), "--dtype", "f64",
                            "--layers", str(c["layers"]), "--d-model", str(c["d_model"]), "--heads", str(c["heads"]),
                            "--context", str(c["context"]), "--batch", str(BATCH), "--steps", str(STEPS),
                            "--eval-batches", "1", "--log-every", "0", *flags],
                           capture_output=True, text=True, timeout=240, env=python_env())
    assert alone.returncode == 0, alone.stderr[-3000:]
    text = alone.stdout.split("\n", 1)[1]  # after the summary line: the sample
    assert len(text.strip()) > 0
    assert text.strip() in done.stdout.replace("[instance 0] ", ""), (text, done.stdout[-3000:])


# ---- the collectives each layout promises ------------------------------------------------------------------
COLLECTIVE = re.compile(r"= (psum|pmean|all_gather|psum_scatter|ppermute|all_to_all)\[axes=\(([^)]*)\)")


def collectives(data, layout, **over):
    """{(op, axes): count} in the differentiated step's program."""
    t = trainer(data, layout, **over)
    tokens, targets = next(t.batches)
    one = np.float64(1.0)
    text = str(t.step_fn.lower(t.params, t.m, t.v, one, one, tokens, targets))
    return collections.Counter((op, axes.replace("'", "").rstrip(",")) for op, axes in COLLECTIVE.findall(text))


def test_tensor_parallel_has_two_all_reduces_per_block_each_way(data):
    got = collectives(data, Layout(tp=2))
    assert got == {("psum", "model"): 4 * SMALL["layers"]}, got   # 2 forward + 2 backward per block


def test_sequence_parallel_pairs_gather_and_scatter(data):
    got = collectives(data, Layout(tp=2, sp=True))
    L = SMALL["layers"]
    assert got[("all_gather", "model")] == 4 * L       # 2 forward, 2 backward (psum_scatter's transposes)
    assert got[("psum_scatter", "model")] == 4 * L
    # No activation all-reduce: the psums left are the gradients of the parameters that meet
    # position-split activations (LayerNorms, the row-parallel biases, the final LayerNorm, head, embed).
    assert got[("psum", "model")] == 6 * L + 4
    assert got[("pmean", "model")] == 1                # the loss over the positions


def test_fsdp_gathers_forward_and_scatters_backward_once_per_parameter(data):
    t = trainer(data, Layout(dp=4, fsdp=True))
    sharded = sum(1 for leaf, spec in zip(weft.tree_util.tree_leaves(t.params), weft.tree_util.tree_leaves(
        t.specs, is_leaf=lambda s: isinstance(s, weft.P))) if "data" in spec.axes())
    got = collectives(data, Layout(dp=4, fsdp=True))
    assert sharded == 16 * SMALL["layers"] + 5 - 1     # all but the 73-row embedding
    assert got[("all_gather", "data")] == sharded
    assert got[("psum_scatter", "data")] == sharded
    assert got[("psum", "data")] == 1                  # the embedding's gradient
    assert got[("pmean", "data")] == 1


def test_gpipe_passes_activations_by_ppermute(data):
    pp, micro = 2, 4
    got = collectives(data, Layout(pp=pp, microbatches=micro))
    boundaries = micro + pp - 2                        # ticks - 1
    assert got[("ppermute", "pipe")] == 2 * boundaries  # forward and its transpose
    assert got[("psum", "pipe")] == 1 + 5              # the loss; embed, pos, lnf_g, lnf_b, head gradients


def test_1f1b_passes_activations_forward_and_cotangents_backward(data):
    """1F1B: a forward ppermute at every tick but the last forward one (M + S - 2), a backward one at every
    backward tick but the last (M + S - 2 too); the shared parameters' gradients one psum over 'pipe' each,
    and with data parallelism every parameter's gradient one psum over 'data' (not one per tick)."""
    pp, micro = 2, 4
    got = collectives(data, Layout(dp=2, pp=pp, microbatches=micro, schedule="1f1b"))
    assert got == {("ppermute", "pipe"): 2 * (micro + pp - 2),
                   ("psum", "pipe"): 1,                          # the loss
                   ("psum", "pipe, data"): 5,                    # embed, pos, lnf_g, lnf_b, head
                   ("psum", "data"): 16 * SMALL["layers"] // pp,  # this stage's blocks
                   ("pmean", "data"): micro}, got                # each microbatch's loss


# ---- bfloat16 ------------------------------------------------------------------------------------------------
def test_bfloat16_products_follow_float32(data):
    """--dtype bf16: the products in bfloat16 (float32 parameters): the losses within bfloat16's rounding of
    the float32 run's, and the program's matmuls are bfloat16 ones."""
    f32 = trainer(data, Layout(dp=2), dtype="f32")
    bf16 = trainer(data, Layout(dp=2), dtype="bf16")
    a = np.array([f32.step() for _ in range(5)])
    b = np.array([bf16.step() for _ in range(5)])
    np.testing.assert_allclose(b, a, rtol=2e-2)
    assert not np.array_equal(a, b)                    # the products did round to bfloat16
    tokens, targets = next(bf16.batches)
    one = np.float32(1.0)
    text = str(bf16.step_fn.lower(bf16.params, bf16.m, bf16.v, one, one, tokens, targets))
    products = [line for line in text.splitlines() if "= matmul" in line]
    assert products and all("bf16[" in line.split("=")[0] for line in products)


def test_bfloat16_cast_rounds_to_nearest_even():
    x = np.array([1.0, 1.00390625, 1.01171875, 3.0e38, -2.5e-3, 65504.0, 1 + 2 ** -8 + 2 ** -20], np.float32)
    got = np.asarray(weft.jit(lambda v: v.astype(weft.bfloat16).astype(np.float32))(x))
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16).astype(np.uint32).view(np.float32)
    np.testing.assert_array_equal(got, rounded)


# ---- the layout's rules -----------------------------------------------------------------------------------
@pytest.mark.parametrize("layout, message", [
    (Layout(tp=3), "--tp 3 must divide the 4 heads"),
    (Layout(pp=3), "--pp 3 must divide the 4 layers"),
    (Layout(sp=True), "sequence parallelism splits positions over the tensor-parallel ranks"),
    (Layout(dp=3), "the batch 8 must divide over 3 data-parallel ranks"),
    (Layout(pp=2, schedule="zero-bubble"), "pipeline schedule 'zero-bubble': the trainer has 'gpipe' and '1f1b'"),
])
def test_layout_errors(data, layout, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        trainer(data, layout)


def test_sampling_gives_text_of_the_vocabulary(data):
    t = trainer(data, Layout(), dtype="f32")
    for _ in range(3):
        t.step()
    text = train.sample(t.parameters(), t.c, data, 40, seed=1)
    assert len(text) == 40 and set(text) <= set(data.chars)


# ---- the command line's rules (issue 45, item 14) -----------------------------------------------------------
# Each bad command line ends with argparse's one-line error and exit status 2, no traceback. Before, --dp 0,
# --heads 0, --batch 0, --microbatches 0, --context 0 and --steps 0 ended in tracebacks (ZeroDivisionError,
# statistics.StatisticsError, numpy's errors...), a short or empty text too, and --d-model 0 "trained".
def bad_text(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# 220 characters; a plain text's last tenth (22 characters) is its validation part (corpus.py).
SHORT_TEXT = "In the beginning God created the heaven and the earth. " * 4


@pytest.mark.parametrize("args, message", [
    (["--dp", "0"], "--dp must be at least 1, got 0"),
    (["--tp", "-2"], "--tp must be at least 1, got -2"),
    (["--pp", "0"], "--pp must be at least 1, got 0"),
    (["--heads", "0"], "--heads must be at least 1, got 0"),
    (["--batch", "0"], "--batch must be at least 1, got 0"),
    (["--microbatches", "0"], "--microbatches must be at least 1, got 0"),
    (["--context", "0"], "--context must be at least 1, got 0"),
    (["--steps", "0"], "--steps must be at least 1, got 0"),
    (["--d-model", "0"], "--d-model must be at least 1, got 0"),
    (["--layers", "0"], "--layers must be at least 1, got 0"),
    (["--eval-batches", "0"], "--eval-batches must be at least 1, got 0"),
    (["--seed", "-1"], "--seed must be at least 0, got -1"),
    (["--log-every", "-5"], "--log-every must be at least 0, got -5"),
    (["--weight-decay", "nan"], "--weight-decay must be at least 0.0, got nan"),
    (["--lr", "0"], "--lr must be a positive number, got 0.0"),
    (["--lr", "inf"], "--lr must be a positive number, got inf"),
    (["--d-model", "30", "--heads", "4"], "--d-model 30 must be a multiple of --heads 4"),
    (["--batch", "6", "--dp", "4"], "the batch 6 must divide over 4 data-parallel ranks x 1 microbatches"),
    (["--pp", "2", "--microbatches", "3", "--batch", "8"], "the batch 8 must divide over 1 data-parallel ranks x 3 "
                                                           "microbatches"),
    (["--tp", "3", "--heads", "4"], "--tp 3 must divide the 4 heads"),
    (["--pp", "3", "--layers", "4"], "--pp 3 must divide the 4 layers"),
    (["--sp"], "sequence parallelism splits positions over the tensor-parallel ranks: it needs --tp > 1"),
    (["--sp", "--tp", "2", "--context", "15"], "--sp: the context 15 must divide over --tp 2"),
    (["--text", "/nonexistent/bible.txt"], "--text /nonexistent/bible.txt: [Errno 2] No such file or directory"),
    (["--text", "{empty}"], "--text {empty} is empty"),
    (["--text", "{short}", "--context", "32"], "--text {short} is too short for --context 32: its training part "
                                               "has 198 characters and its validation part 22, each needs at "
                                               "least 34"),
    (["--text", "{short}", "--context", "8", "--dp", "5000", "--batch", "5000"],
     "--dp 5000 x --tp 1 x --pp 1 = 5000 devices: "),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_bad_command_lines_end_in_one_line_errors(tmp_path, args, message):
    files = {"{empty}": bad_text(tmp_path, "empty.txt", ""), "{short}": bad_text(tmp_path, "short.txt", SHORT_TEXT)}
    args = [files.get(a, a) for a in args]
    for name, path in files.items():
        message = message.replace(name, path)
    done = subprocess.run([PYTHON, str(ROOT / "examples" / "transformer" / "train.py"), *args],
                          capture_output=True, text=True, timeout=60, env=python_env())
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("train.py: error: " + message), last


def test_a_layout_that_is_not_the_weftrun_jobs_ends_in_a_one_line_error():
    # Each instance refuses with argparse's status 2, which weftrun passes on.
    done = train_under_weftrun(["--dp", "4"], timeout=120)
    assert done.returncode == 2, (done.stdout + done.stderr)[-3000:]
    assert "Traceback" not in done.stderr + done.stdout, (done.stdout + done.stderr)[-3000:]
    assert ("train.py: error: --dp 4 x --tp 1 x --pp 1 = 4 devices, the weftrun job has 8 (--num-replicas)"
            in done.stderr + done.stdout), (done.stdout + done.stderr)[-3000:]
