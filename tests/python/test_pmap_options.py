"""jax.pmap's keyword arguments on weft.pmap (issue 47, part 1): static_broadcasted_argnums, keyword arguments
to the pmapped function (mapped along axis 0 whatever in_axes says, never donated), axis_size, backend,
devices, and donate_argnums counted with the static arguments, as JAX's pmap documents them.

Expected values are numpy's on the same inputs (each replica's row computed on its own, collectives summed in
float64); messages are checked by their text.
"""
import numpy as np
import pytest

import weft
from weft import lax

N = 8


@pytest.fixture(scope="module", autouse=True)
def runtime():
    return weft.init(device_count=N)


RNG = np.random.default_rng(470)
X = RNG.standard_normal((N, 3)).astype(np.float32)
Y = RNG.standard_normal((N, 3)).astype(np.float32)


@pytest.mark.parametrize("eager", [False, True])
def test_static_broadcasted_argument_is_a_python_value_per_trace(eager):
    traces = []

    def f(x, n, y):
        traces.append(n)
        out = x
        for _ in range(n):  # Python control flow on the static value
            out = out * y
        return out

    g = weft.pmap(f, static_broadcasted_argnums=1, eager=eager)
    x, y = X.astype(np.float64), Y.astype(np.float64)
    np.testing.assert_allclose(np.asarray(g(X, 2, Y)), x * y * y, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(g(Y, 2, X)), y * x * x, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(g(X, 1, Y)), x * y, rtol=1e-5)
    if not eager:
        assert traces == [2, 1]  # one trace per static value


def test_in_axes_count_the_static_arguments():
    # in_axes has an entry per positional argument, the static one's included (JAX drops it).
    g = weft.pmap(lambda x, scale, w: x * scale + w, in_axes=(0, None, None), static_broadcasted_argnums=1)
    w = Y[0]
    np.testing.assert_allclose(np.asarray(g(X, 3.0, w)), X.astype(np.float64) * 3 + w, rtol=1e-6)


def test_static_arguments_compare_by_type_and_value():
    traces = []
    g = weft.pmap(lambda x, s: traces.append(type(s)) or x * s, static_broadcasted_argnums=(1,))
    g(X, 2)
    g(X, 2.0)
    g(X, 2)
    assert traces == [int, float]


@pytest.mark.parametrize("call, error, message", [
    (lambda g: g(X), ValueError, r"pmapped function has static_broadcasted_argnums=\(1,\) but was called with only 1 "
                                 r"positional argument\. All static broadcasted arguments must be passed positionally"),
    (lambda g: g(X, n=2), ValueError, r"static_broadcasted_argnums=\(1,\) but was called with only 1 positional"),
    (lambda g: g(X, [2]), ValueError, r"Non-hashable static arguments are not supported\. An error occurred while "
                                      r"trying to hash an object of type <class 'list'>"),
])
def test_static_argument_misuse(call, error, message):
    g = weft.pmap(lambda x, n: x * n, static_broadcasted_argnums=1)
    with pytest.raises(error, match=message):
        call(g)


def test_static_and_donated_positions_cannot_intersect():
    with pytest.raises(ValueError, match=r"`static_argnums` \[1\] and `donate_argnums` \[1\] cannot intersect"):
        weft.pmap(lambda a, b: a, static_broadcasted_argnums=1, donate_argnums=1)
    with pytest.raises(ValueError, match=r"static_broadcasted_argnums \(-1,\) has a negative position"):
        weft.pmap(lambda a, b: a, static_broadcasted_argnums=-1)


def test_donated_position_counts_the_static_arguments():
    # donate_argnums=2 is the third positional argument, after the static one: its buffers go to the call.
    y = weft.device_put_sharded(list(Y), weft.devices())
    keep = weft.device_put_sharded(list(X), weft.devices())
    out = weft.pmap(lambda x, n, y: x * n + y, static_broadcasted_argnums=1, donate_argnums=2)(keep, 2, y)
    np.testing.assert_allclose(np.asarray(out), X.astype(np.float64) * 2 + Y, rtol=1e-6)
    assert y.is_deleted() and not keep.is_deleted()


def test_keyword_arguments_are_mapped_along_axis_0():
    # JAX: "Arguments passed as keywords are always mapped over their leading axis", whatever in_axes says.
    g = weft.pmap(lambda w, *, x, tree: lax.psum(x * w + tree["b"], "i"), axis_name="i", in_axes=None)
    w = Y[0]
    b = np.arange(N, dtype=np.float32)[:, None] * np.ones((N, 3), np.float32)
    got = np.asarray(g(w, x=X, tree={"b": b}))
    want = (X.astype(np.float64) * w + b).sum(0)
    np.testing.assert_allclose(got, np.broadcast_to(want, (N, 3)), rtol=1e-5)


@pytest.mark.parametrize("eager", [False, True])
def test_keyword_and_positional_arguments_mix(eager):
    g = weft.pmap(lambda x, y=None: x - y, eager=eager)
    want = X.astype(np.float64) - Y
    np.testing.assert_allclose(np.asarray(g(X, y=Y)), want, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(g(x=X, y=Y)), want, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(g(X, Y)), want, rtol=1e-6)


def test_keyword_arguments_are_not_donated():
    # JAX: "donate_argnums only work for positional arguments, and keyword arguments will not be donated".
    g = weft.pmap(lambda p, g: p - g, donate_argnums=(0,))
    p = weft.device_put_sharded(list(X), weft.devices())
    out = g(p=p, g=Y)
    np.testing.assert_allclose(np.asarray(out), X.astype(np.float64) - Y, rtol=1e-6)
    assert not p.is_deleted()
    q = weft.device_put_sharded(list(X), weft.devices())
    g(q, Y)
    assert q.is_deleted()


def test_axis_size():
    np.testing.assert_array_equal(np.asarray(weft.pmap(lambda x: x + 1, axis_size=N)(X)), X + 1)
    with pytest.raises(ValueError, match=rf"Specified axis_size 4 doesn't match received axis_size {N}\."):
        weft.pmap(lambda x: x, axis_size=4)(X)
    with pytest.raises(ValueError, match=r"axis_size must be a positive int"):
        weft.pmap(lambda x: x, axis_size=0)


def test_backend_and_devices():
    np.testing.assert_array_equal(np.asarray(weft.pmap(lambda x: x * 2, backend="cpu")(X)), X * 2)
    with pytest.raises(ValueError, match=r"unknown backend 'tpu'; weft has one platform, 'cpu'"):
        weft.pmap(lambda x: x, backend="tpu")
    with pytest.raises(ValueError, match=r"'devices' argument to pmap must be non-empty, or None\."):
        weft.pmap(lambda x: x, devices=[])
    two = weft.devices()[-2:]
    np.testing.assert_array_equal(np.asarray(weft.pmap(lambda x: lax.psum(x, "i"), "i", devices=two)(X[:2])),
                                  np.broadcast_to(X[:2].astype(np.float64).sum(0), (2, 3)).astype(np.float32))


def test_nested_pmaps_refuse_keyword_and_static_arguments_by_name():
    inner = weft.pmap(lambda x: x, axis_name="j")
    with pytest.raises(ValueError, match="static_broadcasted_argnums and keyword arguments are not supported for "
                                         "nested pmaps"):
        weft.pmap(inner, axis_name="i")(x=X.reshape(2, 4, 3))
    inner_static = weft.pmap(lambda x, n: x * n, axis_name="j", static_broadcasted_argnums=1)
    with pytest.raises(ValueError, match="static_broadcasted_argnums is not supported on an inner pmap of a nest"):
        weft.pmap(inner_static, axis_name="i")(X.reshape(2, 4, 3), 2)
