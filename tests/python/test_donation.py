"""jax.pmap's donate_argnums on weft's traced pmap: a donated argument's buffers go to the call, which may
write its results into them (an optimizer's update in place, as the C++ trainer does); the array is then
deleted, and using it is JAX's RuntimeError. Results are those of the same call without donation; what is
not donated (numpy arguments, an array passed twice, eager pmaps) is never touched."""
import numpy as np
import pytest

import weft

N = 8


@pytest.fixture(scope="module", autouse=True)
def runtime():
    return weft.init(device_count=N)


def update(p, v, g):
    v = v * 0.9 + g
    return p - v * 0.1, v


def on_devices(x):
    return weft.pmap(lambda a: a * 1.0)(x)  # a ShardedArray (a pmap result) holding x


def pointers(a):
    return [s.__array_interface__["data"][0] for s in a.shards]


def test_donated_arguments_take_the_results_and_are_deleted():
    rng = np.random.default_rng(0)
    p0, v0, g = (rng.standard_normal((N, 5000)).astype(np.float32) for _ in range(3))
    want_p, want_v = weft.pmap(update)(p0, v0, g)
    p, v = on_devices(p0), on_devices(v0)
    before = set(pointers(p) + pointers(v))
    new_p, new_v = weft.pmap(update, donate_argnums=(0, 1))(p, v, g)
    np.testing.assert_array_equal(np.asarray(new_p), np.asarray(want_p))
    np.testing.assert_array_equal(np.asarray(new_v), np.asarray(want_v))
    assert p.is_deleted() and v.is_deleted() and not new_p.is_deleted()
    reused = sum(ptr in before for ptr in pointers(new_p) + pointers(new_v))
    assert reused >= N, f"only {reused} of the {2 * N} results were written into donated buffers"
    with pytest.raises(RuntimeError, match=r"Array has been deleted with shape=float32\[8,5000\].*donate_argnums"):
        np.asarray(p)
    with pytest.raises(RuntimeError, match="Array has been deleted"):
        weft.pmap(update)(p, v, g)


def test_a_training_loop_keeps_donating_its_state():
    step = weft.pmap(update, donate_argnums=(0, 1))
    plain = weft.pmap(update)
    p = on_devices(np.zeros((N, 300), np.float32))
    v = on_devices(np.zeros((N, 300), np.float32))
    want_p, want_v = np.zeros((N, 300), np.float32), np.zeros((N, 300), np.float32)
    for k in range(5):  # from the second call on, the steady-state path (the last call's signature)
        g = np.full((N, 300), k + 1, np.float32)
        old_p = p
        p, v = step(p, v, g)
        want_p, want_v = (np.asarray(r) for r in plain(want_p, want_v, g))
    np.testing.assert_array_equal(np.asarray(p), want_p)
    np.testing.assert_array_equal(np.asarray(v), want_v)
    with pytest.raises(RuntimeError, match="Array has been deleted"):  # the steady state checks it too
        step(old_p, v, g)
    # Another signature after the steady state: traced anew, right.
    p2, _ = step(on_devices(np.ones((N, 7), np.float32)), on_devices(np.zeros((N, 7), np.float32)), np.ones((N, 7), np.float32))
    np.testing.assert_allclose(np.asarray(p2), np.full((N, 7), 0.9, np.float32), rtol=1e-6)


def test_what_is_not_donated_is_never_written():
    g = np.ones((N, 100), np.float32)
    p_host = np.full((N, 100), 3.0, np.float32)
    # A numpy argument (copied onto the devices anyway) is left as it was.
    out, _ = weft.pmap(update, donate_argnums=(0,))(p_host, np.zeros((N, 100), np.float32), g)
    np.testing.assert_array_equal(p_host, np.full((N, 100), 3.0, np.float32))
    # One array passed twice is not donated (its buffer is read twice): it stays alive and unchanged.
    p = on_devices(p_host)
    out2, _ = weft.pmap(update, donate_argnums=(0,))(p, p, g)
    assert not p.is_deleted()
    np.testing.assert_array_equal(np.asarray(p), p_host)
    np.testing.assert_array_equal(np.asarray(out2), np.asarray(weft.pmap(update)(p_host, p_host, g)[0]))
    # Eager pmaps take the hint and ignore it, as JAX's backends without donation.
    q = on_devices(p_host)
    weft.pmap(update, donate_argnums=(0,), eager=True)(q, np.zeros((N, 100), np.float32), g)
    assert not q.is_deleted()
    np.testing.assert_array_equal(np.asarray(q), p_host)
