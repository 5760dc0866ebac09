"""Shared runs from Python (WEFT_SHARED_RUNS; weft.init(shared_runs=...)): a shard_map'ed data-parallel step
(the gradient's psum from shard_map's transpose, then an AdamW update of P() parameters) has the local
replicas split the update's fused runs: the runtime's counter says one segment a step, and the results have
the bytes of the unshared run and numpy's values (float64); with the setting off, or the parameters sharded
(FSDP), nothing is shared. (tests/inproc/shared_runs_test.cc checks that the replicas then hold one buffer.)
"""
import numpy as np
import pytest

import weft
import weft.numpy as jnp
from weft import P

from conftest import assert_close

# 64-bit types on (JAX's jax_enable_x64; conftest.py): float64 updates compared with numpy's float64 to 1e-9.
pytestmark = pytest.mark.usefixtures("jax_enable_x64")

RNG = np.random.default_rng(77)
# float64, so that numpy's update is a sharp reference (Adam's m / sqrt(v) amplifies float32 rounding).
W0 = RNG.standard_normal((256, 384))
X = RNG.standard_normal((8 * 4, 256))


def train(mode, param_spec=P(), steps=2):
    """(the parameter after `steps` AdamW steps, its moment, shared segments counted) on a fresh runtime."""
    runtime = weft.init(device_count=8, shared_runs=mode)
    mesh = weft.Mesh(np.array(weft.devices()), ("data",))

    def step(w, m, v, x):
        g = weft.grad(lambda w: jnp.sum(jnp.tanh(x @ w) ** 2))(w)  # psum'd: the transpose of the P() input
        m = m * 0.9 + g * 0.1
        v = v * 0.999 + g * g * 0.001
        return w - 0.01 * m / (jnp.sqrt(v) + 1e-8), m, v

    if param_spec == P():
        f = weft.shard_map(step, mesh, in_specs=(P(), P(), P(), P("data")), out_specs=(P(), P(), P()))
    else:
        def fsdp(w, m, v, x):
            whole = weft.lax.all_gather(w, "data", axis=0, tiled=True)
            g = weft.grad(lambda w: jnp.sum(jnp.tanh(x @ w) ** 2))(whole)
            g = weft.lax.psum_scatter(g, "data", scatter_dimension=0, tiled=True)
            m = m * 0.9 + g * 0.1
            v = v * 0.999 + g * g * 0.001
            return w - 0.01 * m / (jnp.sqrt(v) + 1e-8), m, v
        f = weft.shard_map(fsdp, mesh, in_specs=(param_spec,) * 3 + (P("data"),), out_specs=(param_spec,) * 3)
    w, m, v = W0, np.zeros_like(W0), np.zeros_like(W0)
    for _ in range(steps):
        w, m, v = f(w, m, v, X)
    return w, m, np.asarray(w), np.asarray(m), runtime.stats()["shared_runs"]


def numpy_train(steps=2):
    w, m, v = W0.astype(np.float64), np.zeros(W0.shape), np.zeros(W0.shape)
    x = X.astype(np.float64)
    for _ in range(steps):
        t = np.tanh(x @ w)
        g = x.T @ (2 * t * (1 - t * t))
        m = m * 0.9 + g * 0.1
        v = v * 0.999 + g * g * 0.001
        w = w - 0.01 * m / (np.sqrt(v) + 1e-8)
    return w, m


@pytest.mark.parametrize("mode", [1, 2])
def test_a_replicated_update_is_split_with_the_unshared_bytes(mode):
    _, _, w, m, shared = train(mode)
    _, _, w_off, m_off, off = train(0)
    assert shared == 2 and off == 0  # one segment a step, for all 8 replicas
    assert np.array_equal(w.view(np.uint64), w_off.view(np.uint64))
    assert np.array_equal(m.view(np.uint64), m_off.view(np.uint64))
    want_w, want_m = numpy_train()
    assert_close(m, want_m, rtol=1e-9)
    assert_close(w, want_w, rtol=1e-9)


def test_sharded_parameters_share_nothing():
    *_, w, m, shared = train(1, P("data"))
    want_w, _ = numpy_train()
    assert_close(w, want_w, rtol=1e-9)
    assert shared == 0
