"""The Fashion-MNIST training step written in Python with weft.numpy (examples/train_fashion_mnist.py), traced
by weft.pmap into one program per step (issue 22, item 6).

Checked against an independent computation: numpy in float64 gives the first step's loss and gradients of
the same MLP on the same global batch (its own forward and backward, itself checked against central finite
differences), and the traced step must agree within float32 tolerance, in both layouts of the update (the
velocities after one step from zero are the gradients). Also: a few steps on a slice of the real data lower
the loss, both layouts follow each other, and the step is traced once. The same first-step check holds for
the gradients from weft.value_and_grad (update="autodiff").
"""
import pathlib
import sys

import numpy as np
import pytest

import weft

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
import train_fashion_mnist as tfm  # noqa: E402

DATA = pathlib.Path(tfm.DEFAULT_DATA)
pytestmark = pytest.mark.skipif(not (DATA / "train-labels-idx1-ubyte.gz").exists() and
                                not (DATA / "train-labels-idx1-ubyte").exists(),
                                reason=f"Fashion-MNIST not installed at {DATA} (Debian's dataset-fashion-mnist)")
LIMIT = 2048  # training images used: 8 global batches


@pytest.fixture(scope="module", autouse=True)
def runtime():
    return weft.init(device_count=8)


@pytest.fixture(scope="module")
def train():
    return tfm.load_split(str(DATA), "train", LIMIT)


def numpy_loss_and_grads(p, x, labels):
    """The mean softmax cross-entropy of the MLP 784-512-512-10 and its gradients, in float64 numpy."""
    p = {k: v.astype(np.float64) for k, v in p.items()}
    x = x.astype(np.float64)
    z1 = x @ p["w1"] + p["b1"]
    h1 = np.maximum(z1, 0)
    z2 = h1 @ p["w2"] + p["b2"]
    h2 = np.maximum(z2, 0)
    logits = h2 @ p["w3"] + p["b3"]
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    n = len(labels)
    loss = -log_probs[np.arange(n), labels].mean()
    d_logits = np.exp(log_probs)
    d_logits[np.arange(n), labels] -= 1
    d_logits /= n
    d_z2 = (d_logits @ p["w3"].T) * (z2 > 0)
    d_z1 = (d_z2 @ p["w2"].T) * (z1 > 0)
    grads = {"w3": h2.T @ d_logits, "b3": d_logits.sum(0), "w2": h1.T @ d_z2, "b2": d_z2.sum(0),
             "w1": x.T @ d_z1, "b1": d_z1.sum(0)}
    return loss, grads


def test_the_numpy_reference_matches_finite_differences(train):
    images, labels = train
    rng = np.random.default_rng(5)
    p = tfm.init_parameters(0)
    x, y = images[:64], labels[:64]
    _, grads = numpy_loss_and_grads(p, x, y)
    eps = 1e-6  # small enough that no ReLU of the batch changes side
    for name in tfm.PARAMS:
        for _ in range(3):
            index = tuple(int(rng.integers(0, s)) for s in p[name].shape)
            if name == "w1":  # a pixel that is nonzero somewhere in the batch, so the entry matters
                index = (int(np.argmax(x.sum(0))), index[1])
            hi = {k: v.astype(np.float64) for k, v in p.items()}
            lo = {k: v.astype(np.float64) for k, v in p.items()}
            hi[name][index] += eps
            lo[name][index] -= eps
            numeric = (numpy_loss_and_grads(hi, x, y)[0] - numpy_loss_and_grads(lo, x, y)[0]) / (2 * eps)
            assert abs(numeric - grads[name][index]) <= 1e-8 + 1e-4 * abs(numeric), (name, index)


@pytest.mark.parametrize("update", ["replicated", "sharded", "autodiff", "sharded-autodiff"])
def test_first_step_loss_and_gradients_equal_numpy(train, update):
    # autodiff: the replicated update with its gradients from weft.value_and_grad (issue 23's reverse mode),
    # held to the same numpy reference as the hand-written backward; sharded-autodiff: the sharded update on
    # value_and_grad (its reduce-scatters rewritten into gathers by the program layer).
    images, labels = train
    trainer = tfm.Trainer(train, devices=8, global_batch=256, update=update)
    p0 = tfm.init_parameters(0)
    rows = np.random.default_rng(1).permutation(LIMIT)[:256]
    loss = trainer.step(rows)
    want_loss, want = numpy_loss_and_grads(p0, images[rows], labels[rows])
    assert loss == pytest.approx(want_loss, rel=1e-5)
    # Velocity after one step from zero: 0.9 * 0 + grad, the gradient itself (on every replica; the sharded
    # update holds each replica's rows of the weights).
    for name in tfm.PARAMS:
        shards = [np.asarray(s) for s in trainer.velocities[name].shards]
        if update in ("sharded", "sharded-autodiff") and name.startswith("w"):
            got = np.concatenate(shards)
        else:
            got = shards[0]
            for other in shards[1:]:
                np.testing.assert_array_equal(other, got, err_msg=f"{name}: replicas disagree")
        assert got.dtype == np.float32 and got.shape == p0[name].shape
        scale = np.abs(want[name]).max()
        np.testing.assert_allclose(got, want[name], rtol=1e-4, atol=1e-5 * scale, err_msg=name)
    # The parameters: p - lr * grad (replicated ones the same on every replica; the sharded update holds each
    # replica's rows of the weights).
    new = trainer.parameters()
    for name in tfm.PARAMS:
        np.testing.assert_allclose(new[name], p0[name] - 0.1 * want[name], rtol=1e-5, atol=1e-6, err_msg=name)
        shards = [np.asarray(s) for s in trainer.params[name].shards]
        if update in ("sharded", "sharded-autodiff") and name.startswith("w"):
            np.testing.assert_array_equal(np.concatenate(shards), new[name])
        else:
            for shard in shards[1:]:
                np.testing.assert_array_equal(shard, new[name])


def test_a_few_steps_lower_the_loss_in_both_layouts_alike_and_trace_once(train):
    losses = {}
    for update in ("replicated", "sharded"):
        trainer = tfm.Trainer(train, devices=8, global_batch=256, update=update)
        order = trainer.epoch_order()
        losses[update] = [trainer.step(order[k * 256:(k + 1) * 256]) for k in range(trainer.steps_per_epoch())]
        order = trainer.epoch_order()
        losses[update] += [trainer.step(order[k * 256:(k + 1) * 256]) for k in range(trainer.steps_per_epoch())]
        assert len(trainer.step_fn._traced) == 1, "the step is traced once for its signature"
    first, last = losses["replicated"][0], losses["replicated"][-1]
    assert first > 2.0 and last < 0.75 * first, losses["replicated"]
    # Only the order of additions differs (pmean of per-replica means, against the whole batch's sums).
    np.testing.assert_allclose(losses["sharded"][:8], losses["replicated"][:8], rtol=1e-4)


def test_the_sharded_autodiff_step_has_no_reduce_scatter_left(train):
    """All three weight gradients come from gathers of the layer inputs and deltas, as the hand-written
    sharded step calls them: the program layer rewrote the all_gather transposes' psum_scatters."""
    trainer = tfm.Trainer(train, devices=8, global_batch=256, update="sharded-autodiff")
    rows, labels = trainer.batch(np.arange(256))
    program = weft.make_program(lambda p, v, r, l: trainer.step_fn._fun(p, v, r, l), axis_env=[("i", 8)])(
        {k: np.asarray(x)[0] for k, x in trainer.params.items()},
        {k: np.asarray(x)[0] for k, x in trainer.velocities.items()}, rows[0], labels[0])
    # w1's and w2's gradients: an all_to_all of the input and an all_gather of the delta each; w3's (512 x 10)
    # is cheaper reduce-scattered and stays one psum_scatter; the forward gathers the three weights.
    assert program.count("psum_scatter") == 1, program
    assert program.count("all_to_all") == 2
    assert program.count("all_gather") == 3 + 2
    assert program.count("psum") == 1


@pytest.mark.parametrize("update", ["autodiff", "sharded-autodiff"])
def test_bfloat16_policy_first_step_follows_numpy_within_bfloat16_rounding(train, update):
    """weft.Policy(params float32, compute bfloat16, output float32): the first step's loss and gradients
    against numpy's float64 ones, within what bfloat16's 8-bit significand leaves (each gradient's relative
    error in norm), the gradients and velocities back in float32, and the products bfloat16 in the program."""
    images, labels = train
    policy = weft.get_policy("params=float32,compute=bfloat16,output=float32")
    trainer = tfm.Trainer(train, devices=8, global_batch=256, update=update, policy=policy)
    p0 = tfm.init_parameters(0)
    rows = np.random.default_rng(1).permutation(LIMIT)[:256]
    loss = trainer.step(rows)
    want_loss, want = numpy_loss_and_grads(p0, images[rows], labels[rows])
    assert loss == pytest.approx(want_loss, rel=2e-2) and loss != pytest.approx(want_loss, rel=1e-6)
    for name in tfm.PARAMS:
        shards = [np.asarray(s) for s in trainer.velocities[name].shards]
        got = np.concatenate(shards) if update == "sharded-autodiff" and name.startswith("w") else shards[0]
        assert got.dtype == np.float32 and got.shape == p0[name].shape
        error = np.linalg.norm(got - want[name]) / np.linalg.norm(want[name])
        assert error < 3e-2, (name, error)
    r, lab = trainer.batch(rows)
    program = weft.make_program(lambda p, v, r, l: trainer.step_fn._fun(p, v, r, l), axis_env=[("i", 8)])(
        {k: np.asarray(x)[0] for k, x in trainer.params.items()},
        {k: np.asarray(x)[0] for k, x in trainer.velocities.items()}, r[0], lab[0])
    products = [line for line in str(program).splitlines() if "= matmul" in line]
    assert len(products) >= 3 * 3 - 1 and all("bf16[" in line.split("=")[0] for line in products), products


def test_a_policy_needs_a_differentiated_update(train):
    with pytest.raises(ValueError, match="the replicated update's backward pass is written out in float32; a "
                                         "mixed-precision policy .* needs a differentiated one"):
        tfm.Trainer(train, devices=8, update="replicated", policy=weft.get_policy("p=f32,c=bf16,o=f32"))
