"""Python misuse (issue 21, items 3, 4, 12 and 14): what weft.pmap, the conversions and Session do with
input JAX would refuse or read differently. Replicas that disagree about their result's pytree are refused
naming both; negative in_axes / out_axes count from the end, as in JAX (`ndim + axis`), and out-of-range
ones are refused naming the argument; a conversion that fails raises the user's own exception (numpy's,
or the one their `__array__` raised), or an InvalidArgument naming the value; Session's replication_factor
is a number of replicas. Expected values come from numpy and from JAX's documented rules.
"""
import re

import numpy as np
import pytest

import weft
from weft import lax


@pytest.fixture(scope="module", autouse=True)
def runtime():
    return weft.init(device_count=8)


# ---- item 3: every replica returns the same pytree -----------------------------------------------------------

def _odd_replica_returns(odd, other):
    """A function whose replica 3 returns odd(v) and every other replica other(v)."""
    return lambda v: odd(v) if lax.axis_index("i") == 3 else other(v)


@pytest.mark.parametrize("odd,other,odd_text,other_text", [
    # the same number of leaves: before, replica 3's data landed under replica 0's keys
    (lambda v: {"b": v, "c": v}, lambda v: {"a": v, "b": v}, "{'b': *, 'c': *}", "{'a': *, 'b': *}"),
    (lambda v: [v, v], lambda v: (v, v), "[*, *]", "(*, *)"),
    (lambda v: (v, (v, v)), lambda v: ((v, v), v), "(*, (*, *))", "((*, *), *)"),
    (lambda v: (v,), lambda v: v, "(*,)", "*"),
    # a different number of leaves: before, only the counts were named
    (lambda v: {"a": v}, lambda v: {"a": v, "b": v}, "{'a': *}", "{'a': *, 'b': *}"),
])
def test_replicas_must_return_the_same_structure(odd, other, odd_text, other_text):
    # Eager: the replicas' Python decides what each returns (a traced pmap has one structure by construction).
    f = weft.pmap(_odd_replica_returns(odd, other), axis_name="i", eager=True)
    with pytest.raises(weft.InvalidArgument) as error:
        f(np.arange(8, dtype=np.float32))
    message = str(error.value)
    assert "replica 3" in message and "replica 0" in message, message
    assert f"PyTreeDef({odd_text})" in message and f"PyTreeDef({other_text})" in message, message
    # Every call fails the same way (the structure does not depend on which replica finished last).
    for _ in range(5):
        with pytest.raises(weft.InvalidArgument, match="replica 3"):
            f(np.arange(8, dtype=np.float32))


def test_replicas_agreeing_on_the_structure_still_map():
    out = weft.pmap(lambda v: {"b": (v, v * 2), "a": [v + 1]}, axis_name="i")(np.arange(8, dtype=np.float32))
    assert sorted(out) == ["a", "b"] and isinstance(out["b"], tuple) and isinstance(out["a"], list)
    np.testing.assert_array_equal(np.asarray(out["b"][1]), np.arange(8) * 2)
    np.testing.assert_array_equal(np.asarray(out["a"][0]), np.arange(8) + 1)


# ---- item 4: negative axes count from the end (JAX: ndim + axis) ---------------------------------------------

def test_negative_in_axes_count_from_the_end():
    x = np.arange(24, dtype=np.float32).reshape(3, 8)
    # -1 of a rank-2 argument is its axis 1: column i goes to replica i.
    np.testing.assert_array_equal(np.asarray(weft.pmap(lambda c: c * 2, in_axes=-1)(x)), (x * 2).T)
    y = np.arange(8, dtype=np.float32)
    out = weft.pmap(lambda c, v: c + v, in_axes=(-1, -1))(x, y)
    np.testing.assert_array_equal(np.asarray(out), x.T + y[:, None])
    # -2 of a rank-2 argument is axis 0.
    np.testing.assert_array_equal(np.asarray(weft.pmap(lambda r: r + 1, in_axes=-2)(x.T)), x.T + 1)


def test_out_of_range_in_axes_name_the_argument():
    x = np.zeros((3, 8), np.float32)
    with pytest.raises(weft.InvalidArgument, match=r"argument 0 along axis -3.*rank should be at least 3, but is only 2"):
        weft.pmap(lambda c: c, in_axes=-3)(x)
    with pytest.raises(weft.InvalidArgument, match=r"argument 1 along axis 2.*at least 3, but is only 2"):
        weft.pmap(lambda a, b: a, in_axes=(0, 2))(x.T, x)


def test_negative_out_axes_count_from_the_end():
    x = np.arange(24, dtype=np.float32).reshape(8, 3)
    # The result of a rank-1 output has rank 2: out_axes -1 puts the mapped axis last, -2 first.
    np.testing.assert_array_equal(np.asarray(weft.pmap(lambda v: v * 2, out_axes=-1)(x)), (x * 2).T)
    np.testing.assert_array_equal(np.asarray(weft.pmap(lambda v: v * 2, out_axes=-2)(x)), x * 2)


@pytest.mark.parametrize("axis", [2, -3, 5])
def test_out_of_range_out_axes_name_the_output(axis):
    with pytest.raises(weft.InvalidArgument,
                       match=rf"out_axes {axis} is out of range for output 0 .*rank 1.*\[-2, 1\]"):
        weft.pmap(lambda v: v, out_axes=axis)(np.zeros((8, 3), np.float32))


# ---- item 12: a failed conversion raises the user's own error ------------------------------------------------

def test_a_ragged_list_raises_numpys_error():
    # (A list passed to pmap or device_put_replicated is a pytree, as in JAX; Session.variable converts it.)
    ragged = [[1.0, 2.0], [3.0]]
    with pytest.raises(ValueError, match="inhomogeneous") as error:
        weft.Session(replication_factor=2).variable(ragged)
    assert "pybind11" not in str(error.value)
    # device_put_replicated of the same list: one ShardedArray per leaf, as jax.device_put_replicated.
    put = weft.device_put_replicated(ragged, weft.devices()[:2])
    assert [[np.asarray(leaf).tolist() for leaf in row] for row in put] == [[[1.0, 1.0], [2.0, 2.0]], [[3.0, 3.0]]]


def test_an_array_method_that_raises_raises_its_own_exception():
    class NoArray:
        def __array__(self, dtype=None, copy=None):
            raise KeyError("this object has no array")

    with pytest.raises(KeyError, match="this object has no array"):
        weft.pmap(lambda v: v)(NoArray())
    with pytest.raises(KeyError, match="this object has no array"):
        weft.device_put(NoArray(), weft.devices()[0])
    # From a replica's output too: the caller gets the replica's own exception.
    with pytest.raises(KeyError, match="this object has no array"):
        weft.pmap(lambda v: NoArray())(np.zeros(8, np.float32))


def test_a_huge_broadcast_view_raises_numpys_memory_error():
    huge = np.broadcast_to(np.float64(0), (1 << 24, 1 << 24))  # 2 PiB if made contiguous
    with pytest.raises(MemoryError, match="Unable to allocate") as error:
        weft.pmap(lambda v: v)(huge)
    assert "pybind11" not in str(error.value)


@pytest.mark.parametrize("value", [2**31, -2**31 - 1, 2**70])
def test_a_python_int_outside_int32_is_refused_naming_it(value):
    x = np.zeros(8, np.int32)
    with pytest.raises(weft.InvalidArgument, match=rf"a pmap argument: the Python int {value} is outside int32"):
        weft.pmap(lambda v, s: v + s, in_axes=(0, None))(x, value)
    with pytest.raises(weft.InvalidArgument, match=rf"device_put: the Python int {value} is outside int32"):
        weft.device_put(value, weft.devices()[0])


def test_python_ints_at_int32s_bounds_are_int32():
    for value in (2**31 - 1, -2**31):
        got = np.asarray(weft.pmap(lambda v, s: s, in_axes=(0, None))(np.zeros(8, np.int32), value))
        assert got.dtype == np.int32 and (got == value).all()


# ---- item 14: Session's replication_factor -------------------------------------------------------------------

@pytest.mark.parametrize("factor", [-1, -8])
def test_session_refuses_a_negative_replication_factor(factor):
    with pytest.raises(weft.InvalidArgument, match=rf"replication_factor = {factor} is not a number of replicas"):
        weft.Session(replication_factor=factor)


@pytest.mark.parametrize("axis", [1.5, "a", 2**40])
def test_in_axes_that_are_not_axes_are_refused_naming_them(axis):
    # Before: pybind11's "incompatible constructor arguments" or "'float' object is not iterable".
    with pytest.raises(weft.InvalidArgument, match=rf"in_axes {axis!r} of argument 0 is not an axis"):
        weft.pmap(lambda v: v, in_axes=axis)(np.zeros(8, np.float32))
    with pytest.raises(weft.InvalidArgument, match=rf"in_axes {axis!r} of argument 1 is not an axis"):
        weft.pmap(lambda a, b: a, in_axes=(0, axis))(np.zeros(8, np.float32), np.zeros(8, np.float32))


@pytest.mark.parametrize("axis", [1.5, "a"])
def test_out_axes_that_are_not_axes_are_refused_naming_them(axis):
    with pytest.raises(weft.InvalidArgument, match=rf"out_axes {axis!r} of output 0 is not an axis"):
        weft.pmap(lambda v: v, out_axes=axis)(np.zeros((8, 2), np.float32))


@pytest.mark.parametrize("call,text", [
    (lambda: weft.ops.sum(np.ones(3, np.float32), axis=2**40), "sum: axis 1099511627776 is not an axis"),
    (lambda: weft.ops.mean(np.ones(3, np.float32), axis=(0, "a")), "mean: axis 'a' is not an axis"),
    (lambda: weft.ops.argmax(np.ones(3, np.float32), axis=1.5), "argmax: axis 1.5 is not an axis"),
    (lambda: weft.ops.take(np.ones(3, np.float32), np.zeros(1, np.int32), axis=-2**40),
     "take: axis -1099511627776 is not an axis"),
    # Before: pybind11's "incompatible function arguments".
    (lambda: weft.nn.softmax(np.ones(3, np.float32), axis=2**40), "softmax: axis 1099511627776 is not an axis"),
    (lambda: weft.nn.log_softmax(np.ones(3, np.float32), axis="a"), "log_softmax: axis 'a' is not an axis"),
    (lambda: weft.nn.logsumexp(np.ones(3, np.float32), axis=1.5), "logsumexp: axis 1.5 is not an axis"),
    (lambda: weft.nn.one_hot(np.zeros(2, np.int32), 2**40),
     r"one_hot: num_classes = 1099511627776 is not a count \(an int from 0 to 2147483647\)"),
])
def test_array_ops_name_an_axis_that_is_not_one(call, text):
    # Before: pybind11's "Unable to cast Python instance to C++ type".
    with pytest.raises(weft.InvalidArgument, match=text):
        call()


def test_array_ops_take_numpy_integer_axes():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(weft.nn.softmax(x, axis=np.int64(0)).sum(0), np.ones(3), rtol=1e-6)
    np.testing.assert_array_equal(weft.nn.one_hot(np.array([1], np.int32), np.int64(3)), [[0, 1, 0]])
    np.testing.assert_array_equal(weft.ops.sum(x, axis=np.int64(1)), x.sum(1))
    np.testing.assert_array_equal(weft.ops.sum(x, axis=(np.int32(0), -1)), x.sum((0, 1)))
    np.testing.assert_array_equal(weft.ops.argmax(x, axis=np.int64(-1)), x.argmax(-1))


# ---- issue 45, item 12 --------------------------------------------------------------------------------------
# A float index on a tracer: before, int(0.7) read x[0]. JAX refuses any indexer that is not an integer or a
# boolean with this TypeError (jnp.zeros(2)[0.] in JAX's own tests); numpy refuses with an IndexError.
@pytest.mark.parametrize("index, text", [
    (0.7, r"Indexer must have integer or boolean type, got indexer with type float32 at position 0, "
          r"indexer value 0.7"),
    ((0, 1.5), r"got indexer with type float32 at position 1, indexer value 1.5"),
    (np.float64(1.0), r"got indexer with type float64 at position 0"),
    (np.array([0.0, 1.0]), r"got indexer with type float64 at position 0"),
    ([0.5], r"got indexer with type float64 at position 0"),
])
def test_a_float_index_on_a_tracer_is_refused_as_jax_does(index, text):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with pytest.raises(TypeError, match=text):
        weft.jit(lambda v: v[index])(x)


def test_a_non_number_index_on_a_tracer_is_numpys_index_error():
    x = np.arange(3, dtype=np.float32)
    with pytest.raises(IndexError) as numpys:
        x["a"]
    with pytest.raises(IndexError, match=r"only integers, slices .* are valid indices, got 'a' at position 0"):
        weft.jit(lambda v: v["a"])(x)
    assert "only integers, slices" in str(numpys.value)


@pytest.mark.parametrize("index", [1, -1, np.int64(2), (slice(None), 1), np.array([2, 0]), [1, 1]])
def test_integer_indexes_on_a_tracer_still_read_numpys_elements(index):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(np.asarray(weft.jit(lambda v: v[index])(x)), x[index])


def test_grad_passes_keyword_arguments_through_undifferentiated():
    # JAX: keyword arguments go to the function as they are; argnums counts positional arguments only.
    def f(x, b=1.0, *, scale):
        return weft.numpy.sum(x * x * b) * scale

    x = np.array([1.0, 2.0], np.float32)
    np.testing.assert_allclose(np.asarray(weft.grad(f)(x, b=2.0, scale=3.0)), 2 * x * 2.0 * 3.0)
    value, g = weft.value_and_grad(f)(x, scale=0.5)
    np.testing.assert_allclose(float(value), float((x.astype(np.float64) ** 2).sum() * 0.5), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(g), 2 * x * 0.5)
    # An array keyword argument is a constant of the trace (no gradient, its value used).
    g = weft.grad(lambda x, w: weft.numpy.sum(x * w))(x, w=np.array([5.0, 7.0], np.float32))
    np.testing.assert_allclose(np.asarray(g), [5.0, 7.0])


@pytest.mark.parametrize("entries", [
    np.arange(8),                                   # device ids, as an integer array
    np.arange(8).reshape(2, 4),
    list(range(8)),
])
def test_mesh_takes_device_ids(entries):
    devices = weft.devices()
    mesh = weft.Mesh(entries, ("i",) if np.ndim(entries) == 1 else ("a", "b"))
    assert [d.id for d in mesh.devices.flat] == [devices[i].id for i in np.ravel(entries)]
    assert all(d is devices[i] or d == devices[i] for d, i in zip(mesh.devices.flat, np.ravel(entries)))


def test_mesh_of_a_numpy_array_of_devices_and_make_mesh():
    # What JAX users write: Mesh(np.array(jax.devices()).reshape(...), names), and jax.make_mesh.
    mesh = weft.Mesh(np.array(weft.devices()).reshape(2, 4), ("data", "model"))
    assert mesh.shape == {"data": 2, "model": 4}
    made = weft.make_mesh((4, 2), ("data", "model"))
    assert made.shape == {"data": 4, "model": 2}
    assert [d.id for d in made.devices.flat] == [d.id for d in weft.devices()]
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    y = weft.shard_map(lambda b: b * 2.0, made, in_specs=weft.P("data", "model"), out_specs=weft.P("data", "model"))(x)
    np.testing.assert_array_equal(np.asarray(y), x * 2)


@pytest.mark.parametrize("call, text", [
    (lambda: weft.Mesh(np.arange(9), ("i",)), r"weft.Mesh: device id 8 is not a device of the runtime \(ids 0..7\)"),
    (lambda: weft.Mesh(np.array([0.5, 1.0]), ("i",)), r"weft.Mesh: each entry of devices is a weft.Device or a "
                                                       r"device id \(an int\), got 0.5"),
    (lambda: weft.Mesh(np.array([0, 0]), ("i",)), r"weft.Mesh: a device appears twice"),
    (lambda: weft.make_mesh((3, 2), ("a", "b")), r"weft.make_mesh: a mesh of shape \(3, 2\) needs 6 devices, got 8"),
])
def test_mesh_refuses_what_is_not_a_device(call, text):
    with pytest.raises(weft.InvalidArgument, match=text):
        call()


def test_a_pmap_called_in_a_replica_still_says_to_nest():
    inner = weft.pmap(lambda v: v, axis_name="j")
    with pytest.raises(weft.InvalidArgument, match=r"called inside a replica; nest pmap\(pmap\(f\)\)"):
        weft.pmap(lambda v: inner(v), axis_name="i")(np.ones((8, 1), np.float32))
