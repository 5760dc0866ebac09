"""weft.grad, weft.value_and_grad and weft.vjp (issue 23, first step): against central differences of the
same function in numpy (float64), over pytrees, with argnums and has_aux, and inside a traced weft.pmap with
JAX's pmap rules (the gradient of a psum'ed loss with respect to a broadcast parameter is n times the
replica's own, as in JAX's issue 3970; of a pmean'ed loss, the replica's own).
"""
import numpy as np
import pytest

import weft
import weft.numpy as jnp
from weft import lax

from conftest import assert_close, numeric_grad

# 64-bit types on (JAX's jax_enable_x64; conftest.py): float64 parameters against float64 central differences.
pytestmark = pytest.mark.usefixtures("jax_enable_x64")


@pytest.fixture(scope="module", autouse=True)
def runtime():
    return weft.init(device_count=8)


RNG = np.random.default_rng(23)
W1 = RNG.standard_normal((5, 4))
B1 = RNG.standard_normal((4,))
W2 = RNG.standard_normal((4, 3))
X = RNG.standard_normal((6, 5))
Y = np.eye(3)[RNG.integers(0, 3, 6)]


def mlp_loss(params, x, y):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"]
    return -jnp.mean(jnp.sum(y * weft.nn.log_softmax(logits, axis=-1), axis=-1))


def np_mlp_loss(params, x, y):
    h = np.tanh(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"]
    z = logits - logits.max(-1, keepdims=True)
    log_softmax = z - np.log(np.exp(z).sum(-1, keepdims=True))
    return -np.mean(np.sum(y * log_softmax, axis=-1))


def test_grad_of_an_mlp_loss_over_a_dict_matches_central_differences():
    params = {"w1": W1, "b1": B1, "w2": W2}
    grads = weft.grad(mlp_loss)(params, X, Y)
    want = numeric_grad(lambda p: np_mlp_loss(p, X, Y), params)
    assert sorted(grads) == ["b1", "w1", "w2"]
    for name in params:
        assert grads[name].shape == params[name].shape and grads[name].dtype == np.float64
        assert_close(grads[name], want[name])


def test_value_and_grad_argnums_and_has_aux():
    def f(a, b, c):
        return jnp.sum(jnp.exp(a) * b ** 2) + c, {"aux": a * 2}

    a, b = RNG.standard_normal(4), RNG.standard_normal(4)
    (value, aux), (ga, gb) = weft.value_and_grad(f, argnums=(0, 1), has_aux=True)(a, b, 1.5)
    np.testing.assert_allclose(value, np.sum(np.exp(a) * b ** 2) + 1.5, rtol=1e-12)
    np.testing.assert_allclose(aux["aux"], a * 2)
    np.testing.assert_allclose(ga, np.exp(a) * b ** 2, rtol=1e-12)
    np.testing.assert_allclose(gb, 2 * np.exp(a) * b, rtol=1e-12)
    g, aux2 = weft.grad(f, argnums=1, has_aux=True)(a, b, 1.5)
    np.testing.assert_allclose(g, gb, rtol=1e-12)


def test_vjp_pulls_back_a_cotangent():
    a = RNG.standard_normal((3, 4))
    out, pullback = weft.vjp(lambda x: jnp.tanh(x) @ W2[:4, :], a)
    np.testing.assert_allclose(out, np.tanh(a) @ W2[:4, :], rtol=1e-12)
    ct = RNG.standard_normal(out.shape)
    (ga,) = pullback(ct)
    np.testing.assert_allclose(ga, (ct @ W2[:4, :].T) * (1 - np.tanh(a) ** 2), rtol=1e-12)


def test_stop_gradient_blocks_and_integers_get_zeros():
    g = weft.grad(lambda x: jnp.sum(x * lax.stop_gradient(x)))(np.array([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(g, [1.0, 2.0, 3.0])  # only the first factor is differentiated
    with pytest.raises(weft.InvalidArgument, match=r"grad requires a real scalar output, got float64\[3\]"):
        weft.grad(lambda x: x * 2)(np.ones(3))


@pytest.mark.parametrize("reduce,scale", [("psum", 8), ("pmean", 1)])
def test_grad_inside_a_traced_pmap_follows_jaxs_pmap_rules(reduce, scale):
    xs = RNG.standard_normal((8, 6, 5))
    params = {"w1": W1, "b1": B1, "w2": W2}

    def step(p, x):
        return weft.grad(lambda p: getattr(lax, reduce)(mlp_loss(p, x, Y), "i"))(p)

    grads = weft.pmap(step, axis_name="i", in_axes=(None, 0))(params, xs)
    for r in range(8):
        want = numeric_grad(lambda p: np_mlp_loss(p, xs[r], Y), params)
        for name in params:
            assert_close(np.asarray(grads[name])[r], scale * want[name], rtol=1e-6)


def test_a_pmapped_training_step_is_one_program_with_one_reduction_per_dtype():
    params = {"w1": W1.astype(np.float32), "b1": B1.astype(np.float32), "w2": W2.astype(np.float32)}

    def train_step(p, x, y):
        loss, g = weft.value_and_grad(mlp_loss)(p, x, y)
        g = lax.pmean(g, "i")  # the gradients of a dict: one all-reduce
        return lax.pmean(loss, "i"), {k: p[k] - 0.1 * g[k] for k in p}

    xs = RNG.standard_normal((8, 6, 5)).astype(np.float32)
    ys = np.broadcast_to(Y.astype(np.float32), (8, 6, 3)).copy()
    step = weft.pmap(train_step, axis_name="i", in_axes=(None, 0, 0))
    loss0, new = step(params, xs, ys)
    loss1, _ = step({k: np.asarray(v)[0] for k, v in new.items()}, xs, ys)
    assert float(np.asarray(loss1)[0]) < float(np.asarray(loss0)[0])
    program = weft.make_program(lambda p, x, y: train_step(p, x, y), axis_env=[("i", 8)])(
        params, xs[0], ys[0])
    assert program.count("pmean") == 2  # the loss's and the gradients' (packed into one buffer)
