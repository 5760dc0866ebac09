"""weft.checkpoint (jax.checkpoint / jax.remat; issue 23): the backward pass recomputes a checkpointed
function's values from its inputs instead of keeping them from the forward pass. The gradients are the ones
without it (the recomputed values are the forward ones, so bit for bit here, within 1e-12 asserted), the
differentiated program holds the recomputed equations, and its planned peak of live bytes
(Program::peak_live_bytes, the executor's free-after-last-use policy) drops where the regions hold values the
backward rules read.
"""
import functools

import numpy as np
import pytest

import weft
import weft.numpy as jnp
from weft import lax

# 64-bit types on (JAX's jax_enable_x64; conftest.py): float64 results compared with numpy's float64 to a few ulps.
pytestmark = pytest.mark.usefixtures("jax_enable_x64")


@pytest.fixture(scope="module", autouse=True)
def runtime():
    return weft.init(device_count=8)


RNG = np.random.default_rng(2323)
WIDTH, BATCH, LAYERS = 16, 8, 4
PARAMS = [{"w": RNG.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH), "b": 0.1 * RNG.standard_normal(WIDTH)}
          for _ in range(LAYERS)]
X = RNG.standard_normal((BATCH, WIDTH))
Y = np.eye(WIDTH)[RNG.integers(0, WIDTH, BATCH)]


def tanh_layer(p, h):
    return jnp.tanh(h @ p["w"] + p["b"])


def head(h, y):
    # Reductions with axes inside a region: a recomputation that lost an equation's params would change them.
    return -jnp.mean(jnp.sum(y * weft.nn.log_softmax(h, axis=-1), axis=-1))


def mlp_loss(params, x, y, layer=tanh_layer, ckpt=lambda f: f):
    h = x
    for p in params:
        h = ckpt(layer)(p, h)
    return ckpt(head)(h, y)


def max_abs_diff(a, b):
    la, lb = weft.tree_util.tree_leaves(a), weft.tree_util.tree_leaves(b)
    assert len(la) == len(lb)
    return max(float(np.abs(np.asarray(u) - np.asarray(v)).max()) for u, v in zip(la, lb))


def test_outside_differentiation_checkpoint_just_computes_fun():
    f = weft.checkpoint(tanh_layer)
    want = np.tanh(X @ PARAMS[0]["w"] + PARAMS[0]["b"])
    np.testing.assert_allclose(f(PARAMS[0], X), want, rtol=1e-12)  # eager, no trace
    np.testing.assert_allclose(weft.jit(f)(PARAMS[0], X), want, rtol=1e-12)  # traced, not differentiated
    text = str(weft.make_program(f)(PARAMS[0], X))
    assert "tanh[checkpoint=" in text and "matmul[checkpoint=" in text  # the region's equations, marked
    assert weft.remat is weft.checkpoint


@pytest.mark.parametrize("where", ["each layer", "the whole loss", "nested"])
def test_gradients_with_and_without_checkpoint_are_equal(where):
    if where == "each layer":
        loss = functools.partial(mlp_loss, ckpt=weft.checkpoint)
    elif where == "the whole loss":
        loss = weft.checkpoint(mlp_loss)
    else:  # a checkpoint inside another: each is its own region
        loss = weft.checkpoint(functools.partial(mlp_loss, ckpt=weft.checkpoint))
    value, grads = weft.value_and_grad(loss)(PARAMS, X, Y)
    want_value, want = weft.value_and_grad(mlp_loss)(PARAMS, X, Y)
    assert float(np.asarray(want_value)) == pytest.approx(float(np.asarray(value)), abs=1e-12)
    assert max_abs_diff(grads, want) <= 1e-12
    assert max(float(np.abs(np.asarray(g)).max()) for g in weft.tree_util.tree_leaves(want)) > 1e-3  # not all zero


def test_vjp_of_a_checkpointed_function_pulls_back_the_same_cotangent():
    f = lambda p, x: tanh_layer(p, tanh_layer(p, x))
    ct = RNG.standard_normal((BATCH, WIDTH))
    out, pull = weft.vjp(weft.checkpoint(f), PARAMS[0], X)
    want_out, want_pull = weft.vjp(f, PARAMS[0], X)
    assert max_abs_diff(out, want_out) == 0.0  # the forward output is the forward pass's own
    assert max_abs_diff(pull(ct), want_pull(ct)) <= 1e-12


def test_the_differentiated_program_recomputes_each_region():
    def vjp_program(ckpt):
        return weft.make_program(weft.value_and_grad(functools.partial(mlp_loss, ckpt=ckpt)))(PARAMS, X, Y)

    plain, checkpointed = vjp_program(lambda f: f), vjp_program(weft.checkpoint)
    # Each layer's forward equations (matmul, add, tanh) once more, and the head's log_softmax (its rule reads
    # its result); the head's reductions and multiply feed only dead values, removed when built.
    assert plain.count("tanh") == LAYERS and checkpointed.count("tanh") == 2 * LAYERS
    assert checkpointed.count("log_softmax") == plain.count("log_softmax") + 1
    assert len(checkpointed.equations) > len(plain.equations)
    assert "checkpoint=" not in str(checkpointed)  # the VJP's result is a plain program


def test_checkpoint_inside_a_traced_pmap_with_a_pmean():
    xs = RNG.standard_normal((8, BATCH, WIDTH))

    def normalized_layer(p, h):
        # A collective inside the region whose result a backward rule reads (the multiply's): recomputed too,
        # on every replica alike.
        h = tanh_layer(p, h)
        return h * lax.pmean(jnp.mean(h, axis=0), "i")

    def step(ckpt):
        def train_step(params, x, y):
            loss, g = weft.value_and_grad(functools.partial(mlp_loss, layer=normalized_layer, ckpt=ckpt))(params, x, y)
            return lax.pmean(loss, "i"), lax.pmean(g, "i")
        return train_step

    pmapped = lambda ckpt: weft.pmap(step(ckpt), axis_name="i", in_axes=(None, 0, None))
    loss, grads = pmapped(weft.checkpoint)(PARAMS, xs, Y)
    want_loss, want = pmapped(lambda f: f)(PARAMS, xs, Y)
    assert max_abs_diff(loss, want_loss) <= 1e-12
    assert max_abs_diff(grads, want) <= 1e-12
    program = lambda ckpt: weft.make_program(step(ckpt), axis_env=[("i", 8)])(PARAMS, xs[0], Y)
    # The layers' pmeans run again in the backward pass (a recomputed value no rule reads would be dead code).
    assert program(weft.checkpoint).count("pmean") == program(lambda f: f).count("pmean") + LAYERS


def gelu_layer(p, h):
    # GELU's tanh approximation written out (weft.nn.gelu is one fused equation whose rule keeps only its
    # input): the composed form's intermediates are what checkpointing is for.
    z = h @ p["w"] + p["b"]
    return 0.5 * z * (1.0 + jnp.tanh(np.sqrt(2.0 / np.pi) * (z + 0.044715 * z ** 3)))


def squared_error(params, x, y, ckpt):
    h = x
    for p in params:
        h = ckpt(gelu_layer)(p, h)
    return jnp.mean((h - y) ** 2)


def planned_peak(ckpt, width, batch, layers=4):
    rng = np.random.default_rng(0)
    params = [{"w": rng.standard_normal((width, width)), "b": rng.standard_normal(width)} for _ in range(layers)]
    x, y = rng.standard_normal((batch, width)), rng.standard_normal((batch, width))
    return weft.make_program(weft.value_and_grad(functools.partial(squared_error, ckpt=ckpt)))(
        params, x, y)._program.peak_live_bytes


def test_checkpointing_each_layer_of_a_gelu_mlp_cuts_the_planned_peak_of_live_bytes():
    # A property of the plan (liveness over the program's equations), so deterministic. Each GELU layer holds
    # about five activations its backward rules read (the tanh approximation's intermediates); checkpointed,
    # only the layer boundaries stay live between the passes and one layer's intermediates at a time come back.
    # Width 512, batch 512, float64: 52.0 MiB -> 28.0 MiB (0.539).
    ratio = planned_peak(weft.checkpoint, 512, 512) / planned_peak(lambda f: f, 512, 512)
    assert ratio <= 0.6, ratio


def test_a_policy_that_is_not_callable_is_refused():
    # (policies are built: test_checkpoint_policies.py)
    with pytest.raises(TypeError, match="policy must be callable"):
        weft.checkpoint(tanh_layer, policy=object())
