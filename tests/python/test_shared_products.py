"""Shared products from Python (WEFT_SHARED_PRODUCTS; weft.init(shared_products=...)): a shard_map'ed layer
whose weight is P() runs its forward product and its backward product by the weight's transpose once for all
8 replicas (the runtime's counter says so), and gives numpy's values; with the setting off nothing is shared.
"""
import numpy as np
import pytest

import weft
import weft.numpy as jnp
from weft import P

from conftest import assert_close

RNG = np.random.default_rng(2424)


def layer_and_grad(mode):
    """(outputs, gradient of sum(tanh(x @ w)) with respect to x, shared products counted) on a fresh runtime."""
    runtime = weft.init(device_count=8, shared_products=mode)
    mesh = weft.Mesh(np.array(weft.devices()), ("data",))
    x = RNG.standard_normal((8 * 16, 24)).astype(np.float32)
    w = RNG.standard_normal((24, 40)).astype(np.float32)

    def block(x, w):
        y = jnp.tanh(x @ w)
        dx = weft.grad(lambda x: jnp.sum(jnp.tanh(x @ w)))(x)
        return y, dx

    f = weft.shard_map(block, mesh, in_specs=(P("data"), P()), out_specs=(P("data"), P("data")))
    y, dx = f(x, w)
    return x, w, np.asarray(y), np.asarray(dx), runtime.stats()["shared_products"]


@pytest.mark.parametrize("mode", [1, 2])
def test_a_replicated_weight_is_shared_and_numpy_agrees(mode):
    x, w, y, dx, shared = layer_and_grad(mode)
    want = np.tanh(x.astype(np.float64) @ w.astype(np.float64))
    assert_close(y, want, rtol=1e-5)
    assert_close(dx, ((1 - want ** 2) @ w.T.astype(np.float64)), rtol=1e-4)
    # The forward x @ w (traced twice: once for y, once inside grad) and the backward g @ w.T: one product each
    # for all 8 replicas.
    assert shared == 3


def test_off_shares_nothing():
    x, w, y, dx, shared = layer_and_grad(0)
    assert_close(y, np.tanh(x.astype(np.float64) @ w.astype(np.float64)), rtol=1e-5)
    assert shared == 0
