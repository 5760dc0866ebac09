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


# Grouped collectives (issue 45, item 1): a traced pmap's psum / pmax / pmin / pmean / all_gather in axis index
# groups, then elementwise work over 70 000 elements. The result of a grouped collective is equal within its
# group only: before the fix its type said invariant, the local replicas shared the run after it across the
# groups, and replicas 4-7 got group 0's values (mode 2: a MismatchError). Now each group shares its own.
# Every replica against numpy in float64, both modes.
GROUPS = {"halves": [[0, 1, 2, 3], [4, 5, 6, 7]], "interleaved": [[0, 2, 4, 6], [1, 3, 5, 7]]}
GROUPED = {
    "psum": (lambda x, g: weft.lax.psum(x, "i", axis_index_groups=g), lambda xs: xs.sum(0)),
    "pmean": (lambda x, g: weft.lax.pmean(x, "i", axis_index_groups=g), lambda xs: xs.mean(0)),
    "pmax": (lambda x, g: weft.lax.pmax(x, "i", axis_index_groups=g), lambda xs: xs.max(0)),
    "pmin": (lambda x, g: weft.lax.pmin(x, "i", axis_index_groups=g), lambda xs: xs.min(0)),
    "all_gather": (lambda x, g: weft.lax.all_gather(x, "i", axis_index_groups=g, tiled=True),
                   lambda xs: xs.reshape(-1)),
}


@pytest.mark.parametrize("mode", [1, 2])
@pytest.mark.parametrize("groups", sorted(GROUPS))
@pytest.mark.parametrize("op", sorted(GROUPED))
def test_grouped_collectives_then_elementwise_work_keep_each_groups_values(op, groups, mode):
    runtime = weft.init(device_count=8, shared_runs=mode)
    collective, reference = GROUPED[op]
    n = 70000 // 4 if op == "all_gather" else 70000
    x = np.random.default_rng(5).standard_normal((8, n)).astype(np.float32)
    f = weft.pmap(lambda x: collective(x, GROUPS[groups]) * 0.5 + 1.0, axis_name="i")
    got = np.asarray(f(x))
    for members in GROUPS[groups]:
        want = reference(x[members].astype(np.float64)) * 0.5 + 1.0
        for r in members:
            error = np.abs(got[r] - want).max()
            assert error <= 1e-5, f"{op} {groups} mode {mode}: replica {r} is {error} from its group's value"
    # The work after it is still shared, within each group (mode 2 compared the members' inputs): a segment each.
    assert runtime.stats()["shared_runs"] == len(GROUPS[groups])
