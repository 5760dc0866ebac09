"""weft.vmap (issue 46): JAX's vmap as one batched program. vmap(f)(xs) must equal f run on each example and
stacked, bit for bit (np.array_equal, dtypes equal), over a table of functions (elementwise, matmul,
reductions, softmax, indexing, reshapes, ...) with in_axes and out_axes variants; with axis_name, the
collectives over it must give what the same function gives under weft.pmap with that axis name, bit for bit;
per-example gradients vmap(grad(loss)) what a loop of grad calls gives. Also JAX's errors and their texts,
and composition with jit, grad, pmap, shard_map and nested vmaps.
"""
import functools

import numpy as np
import pytest

import weft
import weft.numpy as jnp
from weft import lax


@pytest.fixture(scope="module", autouse=True)
def runtime():
    return weft.init(device_count=8)


RNG = np.random.default_rng(4646)


def _r(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def _take(arg, axis, i):
    """Example i of an argument mapped along `axis` (an int, None, or a dict / tuple of them)."""
    if axis is None:
        return arg
    if isinstance(axis, dict):
        return {k: _take(arg[k], axis[k], i) for k in arg}
    if isinstance(axis, tuple):
        return tuple(_take(a, ax, i) for a, ax in zip(arg, axis))
    return np.take(arg, i, axis=axis)


def _stack(outs, out_axes):
    """The per-example outputs stacked as vmap's out_axes says (an int, or a tuple for a tuple output)."""
    if isinstance(outs[0], (tuple, list)):
        axes = out_axes if isinstance(out_axes, tuple) else (out_axes,) * len(outs[0])
        return tuple(_stack([o[k] for o in outs], axes[k]) for k in range(len(outs[0])))
    if isinstance(outs[0], dict):
        return {k: _stack([o[k] for o in outs], out_axes) for k in outs[0]}
    return np.stack([np.asarray(o) for o in outs], axis=out_axes)


def _per_example(f, args, in_axes, out_axes, size):
    axes = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
    jitted = weft.jit(f)
    return _stack([jitted(*[_take(a, ax, i) for a, ax in zip(args, axes)]) for i in range(size)], out_axes)


def _assert_same(got, want):
    if isinstance(want, (tuple, list)):
        assert isinstance(got, type(want)) and len(got) == len(want)
        for g, w in zip(got, want):
            _assert_same(g, w)
        return
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want)
        for k in want:
            _assert_same(got[k], want[k])
        return
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    assert np.array_equal(got, want, equal_nan=True), (got, want)


W = _r(5, 3)
# name, f, arguments (the batch axis where in_axes says: size 4), in_axes, out_axes
CASES = [
    ("elementwise", lambda x: jnp.tanh(x) * 2.0 + x, (_r(4, 5),), 0, 0),
    ("unbatched_operand", lambda x, y: x * y + 1.0, (_r(4, 5), _r(5)), (0, None), 0),
    ("matmul_batched_lhs", lambda x, w: x @ w, (_r(4, 2, 5), W), (0, None), 0),
    ("matmul_batched_rhs", lambda x, w: x @ w, (_r(2, 5), _r(4, 5, 3)), (None, 0), 0),
    ("matmul_both", lambda x, w: x @ w, (_r(4, 2, 5), _r(4, 5, 3)), 0, 0),
    ("matvec_axis1", lambda x, w: w.T @ x, (_r(5, 4), W), (1, None), 0),
    ("sum_axis0", lambda x: jnp.sum(x, axis=0), (_r(4, 3, 5),), 0, 0),
    ("max_last", lambda x: jnp.max(x, axis=-1), (_r(4, 3, 5),), 0, 0),
    ("mean_all", lambda x: jnp.mean(x), (_r(4, 3, 5),), 0, 0),
    ("argmax", lambda x: jnp.argmax(x, axis=-1), (_r(4, 3, 5),), 0, 0),
    ("softmax", lambda x: weft.nn.softmax(x, axis=-1), (_r(4, 3, 5),), 0, 0),
    ("log_softmax_axis0", lambda x: weft.nn.log_softmax(x, axis=0), (_r(3, 4, 5),), 1, 0),
    ("slice", lambda x: x[1:3], (_r(4, 5, 2),), 0, 0),
    ("index_last", lambda x: x[..., 0] * x[0], (_r(4, 3, 3),), 0, 0),
    ("strided", lambda x: x[::2], (_r(4, 6),), 0, 0),
    ("reshape", lambda x: x.reshape(-1) * 3.0, (_r(4, 2, 3),), 0, 0),
    ("transpose", lambda x: x.T + 1.0, (_r(4, 2, 3),), 0, 0),
    ("transpose_3d", lambda x: jnp.transpose(x, (2, 0, 1)), (_r(2, 3, 4, 5),), 2, 0),
    ("where", lambda x: jnp.where(x > 0, x, 0.5 * x), (_r(4, 5),), 0, 0),
    ("concatenate", lambda x, y: jnp.concatenate([x, y], axis=0), (_r(4, 2), _r(3)), (0, None), 0),
    ("negative_in_axis", lambda x, y: x - y, (_r(3, 4), _r(4, 3)), (-1, 0), 0),
    ("out_axes_1", lambda x: x * x, (_r(4, 3, 5),), 0, 1),
    ("out_axes_minus1", lambda x, w: x @ w, (_r(4, 2, 5), W), (0, None), -1),
    ("tuple_out_axes", lambda x: (x + 1.0, jnp.sum(x, axis=0)), (_r(4, 3, 2),), 0, (1, 0)),
    ("dict_in_axes", lambda p, x: jnp.tanh(x @ p["w"] + p["b"]),
     ({"w": W, "b": _r(4, 3)}, _r(4, 5)), ({"w": None, "b": 0}, 0), 0),
    ("unbatched_output_broadcast", lambda x, y: (x * 2.0, y + 1.0), (_r(4, 3), _r(3)), (0, None), (0, 1)),
    ("integer_ops", lambda n: n * 3 + jnp.sum(n), (RNG.integers(-5, 5, (4, 6)).astype(np.int32),), 0, 0),
]


@pytest.mark.parametrize("name,f,args,in_axes,out_axes", CASES, ids=[c[0] for c in CASES])
def test_vmap_equals_per_example_runs(name, f, args, in_axes, out_axes):
    got = weft.vmap(f, in_axes=in_axes, out_axes=out_axes)(*args)
    _assert_same(got, _per_example(f, args, in_axes, out_axes, 4))


def test_one_program_not_a_loop():
    # The batched program has the per-example program's equations, whatever the batch size.
    f = lambda x, y: jnp.tanh(x) * y + 1.0
    one = len(weft.make_program(f)(_r(3), _r(3)).equations)
    for size in (2, 50):
        assert len(weft.make_program(weft.vmap(f, in_axes=(0, None)))(_r(size, 3), _r(3)).equations) == one


def test_in_axes_list_and_kwargs():
    # A list in_axes is read as a tuple (JAX); keyword arguments are mapped along axis 0.
    x, y, z = _r(4, 3), _r(3), _r(4, 3)
    f = lambda x, y, z=None: x * y - z
    got = weft.vmap(f, in_axes=[0, None])(x, y, z=z)
    want = np.stack([weft.jit(lambda a, b, c: f(a, b, c))(x[i], y, z[i]) for i in range(4)])
    _assert_same(got, want)


def test_out_axes_none_and_axis_size():
    # out_axes=None: an output that does not depend on the examples, as it is; axis_size with nothing mapped.
    y = _r(3)
    got = weft.vmap(lambda x, y: (x + y, y * 2.0), in_axes=(0, None), out_axes=(0, None))(_r(4, 3), y)
    _assert_same(got[1], np.asarray(weft.jit(lambda y: y * 2.0)(y)))
    got = weft.vmap(lambda y: y + 1.0, in_axes=None, axis_size=5)(y)
    _assert_same(got, np.stack([np.asarray(weft.jit(lambda y: y + 1.0)(y))] * 5))


def test_unmapped_non_array_arguments_pass_through():
    # JAX's issue 183: an unmapped function argument reaches f as it is.
    got = weft.vmap(lambda g, x: g(x), in_axes=(None, 0))(lambda v: v * 2.0 + 1.0, np.arange(3, dtype=np.float32))
    _assert_same(got, np.arange(3, dtype=np.float32) * 2.0 + 1.0)
    # ... and so does an unmapped Python flag, usable in an `if` (it is no tracer)
    f = lambda x, double: x * 2.0 if double else x
    _assert_same(weft.vmap(f, in_axes=(0, None))(np.arange(3, dtype=np.float32), True),
                 np.arange(3, dtype=np.float32) * 2.0)


# JAX's errors (jax._src.api.vmap and batching.matchaxis), their types and texts.
ERRORS = [
    ("inconsistent_sizes", lambda: weft.vmap(lambda a, b: a + b, in_axes=(0, 1))(_r(10, 4), _r(10, 2)), ValueError,
     "vmap got inconsistent sizes for array axes to be mapped:\n"
     "  * one axis had size 10: axis 0 of argument a of type float32[10,4];\n"
     "  * one axis had size 2: axis 1 of argument b of type float32[10,2]"),
    ("inconsistent_kwargs", lambda: weft.vmap(lambda x1, x2, a3: x1 + x2 + a3)(_r(2), a3=_r(1), x2=_r(2)), ValueError,
     "vmap got inconsistent sizes for array axes to be mapped:\n"
     "  * most axes (2 of them) had size 2, e.g. axis 0 of argument x1 of type float32[2];\n"
     "  * one axis had size 1: axis 0 of kwargs['a3'] of type float32[1]"),
    ("mapped_output_out_axes_none", lambda: weft.vmap(lambda x: x, out_axes=None)(_r(2)), ValueError,
     "vmap has mapped output but out_axes is None"),
    ("named_mapped_output_out_axes_none", lambda: weft.vmap(lambda x: x, out_axes=None, axis_name="foo")(_r(2)),
     ValueError, "vmap has mapped output (axis_name=foo) but out_axes is None"),
    ("nothing_mapped", lambda: weft.vmap(lambda x: x, in_axes=None)(_r(2)), ValueError,
     "vmap must have at least one non-None value in in_axes"),
    ("no_arguments", lambda: weft.vmap(lambda: 1.0)(), ValueError,
     "vmap wrapped function must be passed at least one argument containing an array"),
    ("rank", lambda: weft.vmap(lambda x: x, in_axes=1)(_r(3)), ValueError,
     "vmap was requested to map its argument along axis 1, which implies that its rank should be at least 2, "
     "but is only 1 (its shape is (3,))"),
    ("in_axes_leaf_type", lambda: weft.vmap(lambda x: x, in_axes=(1.5,)), TypeError,
     "vmap in_axes must be an int, None, or (nested) container with those types as leaves, but got (1.5,)."),
    ("in_axes_top_type", lambda: weft.vmap(lambda x: x, in_axes={"a": 0}), TypeError,
     "vmap in_axes must be an int, None, or a tuple of entries corresponding to the positional arguments"),
    ("out_axes_leaf_type", lambda: weft.vmap(lambda x: x, out_axes=("a",)), TypeError,
     "vmap out_axes must be an int, None, or (nested) container with those types as leaves, but got ('a',)."),
    ("in_axes_length", lambda: weft.vmap(lambda x, y: x, in_axes=(0,))(_r(2), _r(2)), ValueError,
     "vmap in_axes must be an int, None, or a tuple of entries corresponding to the positional arguments passed "
     "to the function, but got len(in_axes)=1, len(args)=2"),
    ("out_axes_prefix", lambda: weft.vmap(lambda x: x, out_axes=(2, 3))(_r(2)), ValueError,
     "vmap out_axes specification must be a tree prefix of the corresponding value"),
    ("spmd_axis_name", lambda: weft.vmap(lambda x: x, spmd_axis_name="d"), weft.InvalidArgument,
     "vmap: spmd_axis_name='d' is not supported"),
    ("axis_name_taken", lambda: weft.pmap(weft.vmap(lambda x: x, axis_name="i"), axis_name="i")(_r(2, 3)),
     weft.InvalidArgument, "vmap(<lambda>): axis_name 'i' is already an axis of the enclosing mesh"),
    # (vmap of a function that calls a pmap inside works since issue 47: test_pmap_composition.py)
    ("vmap_of_eager_pmap", lambda: weft.vmap(weft.pmap(lambda x: x * 2.0, eager=True))(_r(2, 2, 3)),
     weft.InvalidArgument, "vmap(<lambda>): vmap of an eager pmap (pmap(<lambda>), eager=True) is not supported"),
]


@pytest.mark.parametrize("name,call,error,text", ERRORS, ids=[e[0] for e in ERRORS])
def test_vmap_errors(name, call, error, text):
    with pytest.raises(error) as info:
        call()
    assert str(info.value).startswith(text), str(info.value)


# ---- axis_name: the collectives over vmap's axis are pmap's over that name ----------------------------
COLLECTIVES = [
    ("psum", lambda x: lax.psum(x, "b")),
    ("pmean", lambda x: x - lax.pmean(x, "b")),
    ("pmax", lambda x: lax.pmax(x, "b") * x),
    ("psum_of_unmapped_part", lambda x: lax.psum(x * 0.0 + 1.0, "b")),
    ("all_gather", lambda x: lax.all_gather(x, "b")),
    ("axis_index", lambda x: x * lax.axis_index("b").astype(np.float32)),
    ("softmax_over_examples", lambda x: jnp.exp(x) / lax.psum(jnp.exp(x), "b")),
]


@pytest.mark.parametrize("name,f", COLLECTIVES, ids=[c[0] for c in COLLECTIVES])
def test_axis_name_collectives_equal_pmap(name, f):
    xs = _r(4, 3)
    got = weft.vmap(f, axis_name="b")(xs)
    _assert_same(got, np.asarray(weft.pmap(f, axis_name="b")(xs)))


def test_axis_name_psum_is_unmapped_with_out_axes_none():
    # psum over vmap's axis is the same for every example: out_axes=None takes it once (JAX).
    xs = _r(4, 3)
    got = weft.vmap(lambda x: lax.psum(x, "b"), axis_name="b", out_axes=None)(xs)
    _assert_same(got, np.asarray(weft.pmap(lambda x: lax.psum(x, "b"), axis_name="b")(xs))[0])


# ---- per-example gradients -------------------------------------------------------------------------------
def _loss(params, x, y):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"]
    return -jnp.sum(y * weft.nn.log_softmax(logits, axis=-1))


def test_per_example_gradients():
    params = {"w1": _r(5, 4), "b1": _r(4), "w2": _r(4, 3)}
    xs, ys = _r(6, 5), np.eye(3, dtype=np.float32)[RNG.integers(0, 3, 6)]
    got = weft.vmap(weft.grad(_loss), in_axes=(None, 0, 0))(params, xs, ys)
    for k in params:  # bit for bit, as any vmap against its examples
        _assert_same(got[k], np.stack([np.asarray(weft.grad(_loss)(params, xs[i], ys[i])[k]) for i in range(6)]))
    # ... and under jit, the same program
    jitted = weft.jit(weft.vmap(weft.grad(_loss), in_axes=(None, 0, 0)))(params, xs, ys)
    for k in params:
        _assert_same(jitted[k], np.asarray(got[k]))


# ---- composition ----------------------------------------------------------------------------------------
def test_jit_around_and_inside():
    f = lambda x, w: jnp.tanh(x @ w)
    xs = _r(4, 2, 5)
    want = weft.vmap(f, in_axes=(0, None))(xs, W)
    _assert_same(weft.jit(weft.vmap(f, in_axes=(0, None)))(xs, W), np.asarray(want))
    _assert_same(weft.vmap(weft.jit(f), in_axes=(0, None))(xs, W), np.asarray(want))
    # a tracer of the enclosing jit used by the vmapped function (a closure): shared by every example
    _assert_same(weft.jit(lambda xs, w: weft.vmap(lambda x: f(x, w))(xs))(xs, W), np.asarray(want))


def test_unmapped_tracer_of_an_enclosing_jit():
    # A jit argument passed unmapped through vmap reaches fun as the jit's tracer; a jvp / grad there inlines
    # its program into vmap's trace, which must take that tracer as its own input (it silently read another
    # value of the same number in vmap's program before).
    w, xs = _r(3), _r(2, 3)
    f = lambda w, xs: weft.vmap(lambda x: weft.jvp(lambda w: jnp.tanh(w) * x, (w,), (x,))[1])(xs)
    _assert_same(weft.jit(f)(w, xs), np.asarray(f(w, xs)))
    g = lambda w, xs: weft.vmap(lambda w, x: weft.jvp(lambda w: jnp.tanh(w) * x, (w,), (x,))[1],
                                in_axes=(None, 0))(w, xs)
    _assert_same(weft.jit(g)(w, xs), np.asarray(f(w, xs)))


def test_nested_vmap():
    # vmap of vmap, in_axes at the inner level: out[i, j] = f(x[j], y[i])
    x, y = _r(3, 5), _r(5, 2)
    f = lambda a, b: jnp.sum(a * b)
    got = weft.vmap(weft.vmap(f, in_axes=(0, None)), in_axes=(None, 1))(x, y)
    jitted = weft.jit(f)
    want = np.array([[np.asarray(jitted(x[j], y[:, i])) for j in range(3)] for i in range(2)])
    _assert_same(got, want)
    # named inner and outer axes: each collective over its own axis
    z = _r(2, 3, 4)
    g = lambda v: lax.psum(v, "inner") - lax.pmax(v, "outer")
    got = weft.vmap(weft.vmap(g, axis_name="inner"), axis_name="outer")(z)
    want = np.asarray(weft.pmap(weft.pmap(g, axis_name="inner"), axis_name="outer")(z))
    _assert_same(got, want)


def test_grad_of_vmap():
    # d/dw sum_i f(x_i, w) through the batched program, against the loop's sum of gradients.
    xs = _r(4, 5)
    f = lambda w, x: jnp.sum(jnp.tanh(x @ w))
    got = weft.grad(lambda w: jnp.sum(weft.vmap(f, in_axes=(None, 0))(w, xs)))(W)
    want = sum(np.asarray(weft.grad(f)(W, xs[i])) for i in range(4))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# ---- take with per-example indices: one gather, each example's indices into its own rows -----------------------
def test_per_example_take_nested_differentiated_and_refused_by_example():
    xs, idx = _r(2, 3, 5), RNG.integers(-5, 5, (2, 3, 4)).astype(np.int32)
    f = lambda x, i: jnp.take(x, i, axis=0)
    jitted = weft.jit(f)
    # vmap of vmap, both batching x and the indices (the inner gather's examples merged with the outer's)
    got = weft.vmap(weft.vmap(f))(xs, idx)
    _assert_same(got, np.array([[np.asarray(jitted(xs[a, b], idx[a, b])) for b in range(3)] for a in range(2)]))
    # the outer vmap batching x only (the inner gather along the next axis)
    got = weft.vmap(weft.vmap(f), in_axes=(0, None))(xs, idx[0])
    _assert_same(got, np.array([[np.asarray(jitted(xs[a, b], idx[0, b])) for b in range(3)] for a in range(2)]))
    # reverse and forward mode through the batched gather: the scatter-add of the cotangent into each
    # example's own row (repeated and negative indices summed), by numpy's add.at
    # example (float32: a repeated index's two terms may be added in another order)
    w = _r(3, 4)
    loss = lambda x: jnp.sum(weft.vmap(f)(x, idx[0]) * w)
    want = np.zeros((3, 5))
    for b in range(3):
        np.add.at(want[b], idx[0, b] % 5, w[b].astype(np.float64))
    np.testing.assert_allclose(np.asarray(weft.grad(loss)(xs[0])), want, rtol=1e-6)
    t = _r(3, 5)
    _, tangent = weft.jvp(lambda x: weft.vmap(f)(x, idx[0]), (xs[0],), (t,))
    _assert_same(np.asarray(tangent), np.stack([t[b][idx[0, b] % 5] for b in range(3)]))
    # an index out of its example's range: named by the example and its own value, as that example's run
    bad = idx[0].copy()
    bad[1, 2] = 7
    with pytest.raises(weft.InvalidArgument, match=r"take: index 7 of example 1 \(under vmap\) is out of bounds "
                                                   r"for its axis of size 5"):
        weft.vmap(f)(xs[0], bad)


def test_vmap_inside_pmap():
    # pmap of a function calling vmap with an axis name: collectives over both axes, as two nested pmaps.
    z = _r(2, 3, 4)
    g = lambda v: lax.psum(v, "b") * 2.0 + lax.psum(v, "i")
    got = np.asarray(weft.pmap(weft.vmap(g, axis_name="b"), axis_name="i")(z))
    want = np.asarray(weft.pmap(weft.pmap(g, axis_name="b"), axis_name="i")(z))
    _assert_same(got, want)
    # vmap without a name inside pmap: per replica, the examples' per-example values
    got = np.asarray(weft.pmap(lambda x: weft.vmap(lambda r: r * lax.psum(r, "i"))(x), axis_name="i")(z))
    want = z * np.sum(z, axis=0, keepdims=True)
    np.testing.assert_allclose(got, want, rtol=1e-6)


# ---- vmap of a pmapped function: the per-example pmaps stacked, bit for bit ---------------------------------
def _stacked_pmaps(pmapped, args, in_axes, size, out_axis=0):
    """The reference: the pmapped function on each example's arguments, stacked at out_axis."""
    outs = [pmapped(*[_take(a, ax, i) for a, ax in zip(args, in_axes)]) for i in range(size)]
    return np.stack([np.asarray(o) for o in outs], axis=out_axis)


VMAP_OF_PMAP = [
    # (name, pmapped function, vmap in_axes, args, vmap out_axes)
    ("psum", weft.pmap(lambda x: x * 2.0 + lax.psum(x, "i"), axis_name="i"), 0, (_r(3, 4, 5),), 0),
    ("batch axis 1", weft.pmap(lambda x: jnp.tanh(x) - lax.pmean(x, "i"), axis_name="i"), 1, (_r(4, 3, 5),), 0),
    ("out_axes 2", weft.pmap(lambda x: x * lax.psum(x, "i"), axis_name="i"), 0, (_r(3, 8, 2),), 2),
    ("pmap in_axes 1, out_axes 1",
     weft.pmap(lambda x: lax.all_gather(x, "i") @ jnp.ones((3,), np.float32), axis_name="i", in_axes=1, out_axes=1),
     0, (_r(2, 3, 4),), 0),
    ("shared weights, mapped data",  # w: every example's, split over devices; x: per example, broadcast
     weft.pmap(lambda w, x: lax.psum(x @ w, "i"), axis_name="i", in_axes=(0, None)), (None, 0),
     (_r(4, 3, 2), _r(5, 3)), 0),
    ("pmap out_axes None", weft.pmap(lambda x: lax.psum(x, "i"), axis_name="i", out_axes=None), 0, (_r(3, 4, 2),), 0),
    ("a dict of arguments", weft.pmap(lambda d: d["a"] * lax.pmax(d["b"], "i"), axis_name="i"), ({"a": 0, "b": None},),
     ({"a": _r(3, 4, 2), "b": _r(4, 2)},), 0),
    ("nested pmaps", weft.pmap(weft.pmap(lambda x: x + lax.psum(x, "j") * lax.psum(x, "i"), axis_name="j"),
                               axis_name="i"), 0, (_r(3, 2, 4, 3),), 0),
]


@pytest.mark.parametrize("name,pmapped,in_axes,args,out_axes", VMAP_OF_PMAP, ids=[c[0] for c in VMAP_OF_PMAP])
def test_vmap_of_pmap_is_the_per_example_pmaps_stacked(name, pmapped, in_axes, args, out_axes):
    got = weft.vmap(pmapped, in_axes=in_axes, out_axes=out_axes)(*args)
    axes = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
    first = next(ax for ax in axes if ax is not None)
    size = np.shape(args[axes.index(first)] if not isinstance(first, dict) else args[0]["a"])[
        first if isinstance(first, int) else 0]
    _assert_same(np.asarray(got), _stacked_pmaps(pmapped, args, axes, size, out_axes))


def test_vmap_with_an_axis_name_of_pmap_is_two_nested_pmaps():
    # Collectives over vmap's axis and pmap's: what pmap over ('b', 'i') gives, bit for bit.
    g = lambda v: lax.psum(v, "b") * 2.0 + lax.psum(v, "i") - lax.pmax(v, ("b", "i"))
    z = _r(2, 4, 3)
    got = np.asarray(weft.vmap(weft.pmap(g, axis_name="i"), axis_name="b")(z))
    want = np.asarray(weft.pmap(weft.pmap(g, axis_name="i"), axis_name="b")(z))
    _assert_same(got, want)


def test_vmap_inside_shard_map():
    mesh = weft.make_mesh((8,), ("d",))
    xs = _r(16, 3)

    @functools.partial(weft.shard_map, mesh=mesh, in_specs=weft.P("d"), out_specs=weft.P("d"))
    def body(block):  # block: (2, 3) per device; vmap over its rows
        return weft.vmap(lambda r: r * 2.0 + lax.psum(r, "d"))(block)

    got = np.asarray(body(xs))
    blocks = xs.reshape(8, 2, 3)
    want = (blocks * 2.0 + np.sum(blocks, axis=0, keepdims=True)).reshape(16, 3)
    np.testing.assert_allclose(got, want, rtol=1e-6)
