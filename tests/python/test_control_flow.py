"""weft.lax's control flow (issue 47 §2): cond, switch, scan, fori_loop, while_loop and map, each against the
Python it stands for: the same computation unrolled in Python under the same transformation (bit for bit:
the same kernels run either way), and JAX's documented semantics (the Python implementations in the
docstrings of jax.lax.scan / while_loop / fori_loop / switch, and the control-flow tutorial's examples)
checked with numpy. Under jit, pmap (collectives inside the body) and shard_map; pytrees; weak-typed
carries; errors as JAX words them."""
import functools

import numpy as np
import pytest

import weft
import weft.numpy as jnp
from weft import lax

N = 8  # replicas (the default device count)
RING = [(k, (k + 1) % N) for k in range(N)]
RNG = np.random.default_rng(47)


def same(a, b):
    """Bit-for-bit equality of two pytrees of arrays (dtypes and shapes included)."""
    la, ta = weft.tree_util.tree_flatten(a)
    lb, tb = weft.tree_util.tree_flatten(b)
    assert ta == tb, (ta, tb)
    for x, y in zip(la, lb):
        x, y = np.atleast_1d(np.asarray(x)), np.atleast_1d(np.asarray(y))
        assert x.dtype == y.dtype and x.shape == y.shape, (x.dtype, x.shape, y.dtype, y.shape)  # (0-d as 1-d)
        assert np.array_equal(x.view(np.uint8), y.view(np.uint8)), (x, y)


def python_scan(f, init, xs, length=None, reverse=False):
    """jax.lax.scan's documented semantics, unrolled (the xs pytree sliced leaf by leaf)."""
    leaves, treedef = weft.tree_util.tree_flatten(xs)
    n = length if not leaves else leaves[0].shape[0]
    carry, ys = init, [None] * n
    for i in (reversed(range(n)) if reverse else range(n)):
        carry, ys[i] = f(carry, weft.tree_util.tree_unflatten(treedef, [leaf[i] for leaf in leaves]))
    return carry, weft.tree_util.tree_map(lambda *y: jnp.stack(y), *ys)


# ---- scan ----------------------------------------------------------------------------------------------------

def rnn_step(carry, x):
    h, count = carry["h"], carry["n"]
    h = jnp.tanh(h @ x["w"] + x["b"])
    return {"h": h, "n": count + 1}, (h.sum(), h * 2)


XS = {"w": RNG.standard_normal((5, 3, 3)).astype(np.float32), "b": RNG.standard_normal((5, 3)).astype(np.float32)}
H0 = {"h": RNG.standard_normal(3).astype(np.float32), "n": np.int32(0)}


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_of_pytrees_equals_the_unrolled_loop_under_jit(reverse):
    got = weft.jit(lambda c, xs: lax.scan(rnn_step, c, xs, reverse=reverse))(H0, XS)
    want = weft.jit(lambda c, xs: python_scan(rnn_step, c, xs, reverse=reverse))(H0, XS)
    same(got, want)
    # the loop is one equation of the program, not five copies of the body
    program = weft.make_program(lambda c, xs: lax.scan(rnn_step, c, xs, reverse=reverse))(H0, XS)
    assert program.equations == ["scan"]


def test_scan_closes_over_values_and_takes_xs_none_with_length():
    w = RNG.standard_normal(4).astype(np.float32)

    def f(x, scale):
        return lax.scan(lambda c, _: (c * scale + w, c.sum()), x, None, length=6)

    x = RNG.standard_normal(4).astype(np.float32)
    same(weft.jit(f)(x, np.float32(0.5)),
         weft.jit(lambda x, s: python_scan(lambda c, _: (c * s + w, c.sum()), x, None, length=6))(x, np.float32(0.5)))


def test_scan_outside_jit_runs_as_under_jit_and_as_numpy_computes():
    # The control-flow tutorial's cumulative sum: the carry is the running total, each y the total so far.
    def cumsum(res, el):
        res = res + el
        return res, res
    array = np.arange(6, dtype=np.float32)
    final, result = lax.scan(cumsum, 0.0, array)
    np.testing.assert_array_equal(result, np.cumsum(array))
    assert float(final) == np.sum(array) and np.asarray(final).dtype == np.float32
    same((final, result), weft.jit(lambda a: lax.scan(cumsum, 0.0, a))(array))


def test_scan_weak_init_takes_the_bodys_dtype_as_jax_promotes_it():
    # A Python-number init is weakly typed: the body's int32 output keeps it int32 (JAX: _promote_weak_typed_input)
    final, ys = lax.scan(lambda c, x: (c + x, c), 0, np.arange(4, dtype=np.int32))
    assert np.asarray(final).dtype == np.int32 and ys.dtype == np.int32
    assert int(final) == 6 and list(ys) == [0, 0, 1, 3]
    # a weak float init meeting a float16 body is float16 from the start
    final, _ = lax.scan(lambda c, x: (c * x, None), 1.0, np.full(3, 2, np.float16))
    assert np.asarray(final).dtype == np.float16 and float(final) == 8.0


@pytest.mark.parametrize("kwargs, message", [
    ({"xs": None}, "scan got no values to scan over and `length` not provided."),
    ({"xs": np.zeros((3, 2)), "length": 4},
     "scan got `length` argument of 4 which disagrees with leading axis sizes [3]."),
    ({"xs": (np.zeros(3), np.zeros(4))}, "scan got values with different leading axis sizes: 3, 4."),
    ({"xs": 1.0}, "scan got value with no leading axis to scan over: 1.0."),
    ({"xs": np.zeros(3), "unroll": -1}, "`unroll` must be a `bool` or a non-negative `int`."),
])
def test_scan_length_errors_are_jaxs(kwargs, message):
    with pytest.raises(ValueError) as error:
        lax.scan(lambda c, x: (c, x), np.float32(0), **kwargs)
    assert str(error.value) == message


def test_scan_carry_errors_name_the_leaf_as_jax_does():
    with pytest.raises(TypeError) as error:
        lax.scan(lambda c, x: ((c[0], c[1] + 1.5), None), (np.float32(0), np.int32(0)), None, length=2)
    assert str(error.value) == (
        "scan body function carry input and carry output must have equal types, but they differ:\n\n"
        "The input carry component c[1] has type int32[] but the corresponding output carry component has type "
        "float32[], so the dtypes do not match.\n\n"
        "Revise the function so that all output types match the corresponding input types.")
    with pytest.raises(TypeError, match=r"carry input and carry output must have the same pytree structure.*\n\n"
                                        r"The input carry c is a pytree leaf but the corresponding component of the "
                                        r"carry output is a <class 'tuple'>, so their Python types differ"):
        lax.scan(lambda c, x: ((c, c), None), np.float32(0), None, length=2)
    with pytest.raises(TypeError, match=r"^scan body output must be a pair, got "):
        weft.jit(lambda x: lax.scan(lambda c, _: c, x, None, length=2))(np.float32(0))
    with pytest.raises(TypeError, match="lax.scan: f argument should be a callable."):
        lax.scan(None, 0, None, length=1)


# ---- while_loop and fori_loop ----------------------------------------------------------------------------------

def python_while(cond_fun, body_fun, val):
    while cond_fun(val):
        val = body_fun(val)
    return val


def grow(v):
    return {"x": v["x"] * np.float32(1.5) + v["y"], "y": v["y"], "steps": v["steps"] + 1}


def test_while_loop_of_pytrees_runs_as_pythons_while():
    for start in (0.5, 3.0, 700.0):
        v = {"x": np.full(3, start, np.float32), "y": np.float32(0.25), "steps": np.int32(0)}
        got = weft.jit(lambda v: lax.while_loop(lambda v: v["x"].sum() < 1e3, grow, v))(v)
        x, steps = v["x"], 0
        while x.sum() < 1e3:
            x, steps = x * np.float32(1.5) + np.float32(0.25), steps + 1
        np.testing.assert_array_equal(got["x"], x)
        assert int(got["steps"]) == steps and got["steps"].dtype == np.int32


def test_while_loop_documented_example_and_closed_over_bounds():
    # jax.lax.while_loop's documented semantics and the tutorial's example: count up to 10
    assert int(lax.while_loop(lambda x: x < 10, lambda x: x + 1, 0)) == 10
    limit, step = np.float32(100), np.float32(1.5)
    got = weft.jit(lambda x: lax.while_loop(lambda v: v.sum() < limit, lambda v: v * step, x))(np.ones(3, np.float32))
    want = python_while(lambda v: v.sum() < limit, lambda v: v * step, np.ones(3, np.float32))
    np.testing.assert_array_equal(got, want)


def test_fori_loop_static_bounds_is_a_scan_traced_bounds_a_while_loop():
    def body(i, x):
        return x * 0.5 + i

    x = RNG.standard_normal(4).astype(np.float32)
    got = weft.jit(lambda x: lax.fori_loop(2, 9, body, x))(x)
    want = weft.jit(lambda x: functools.reduce(lambda v, i: body(i, v), range(2, 9), x))(x)
    same(got, want)
    assert weft.make_program(lambda x: lax.fori_loop(2, 9, body, x))(x).equations == ["scan"]
    traced = weft.jit(lambda lo, hi, x: lax.fori_loop(lo, hi, body, x))
    same(traced(np.int32(2), np.int32(9), x), want)
    assert "while_loop" in weft.make_program(lambda lo, hi, x: lax.fori_loop(lo, hi, body, x))(
        np.int32(2), np.int32(9), x).equations
    # upper <= lower: no iterations (the documented range semantics)
    same(weft.jit(lambda x: lax.fori_loop(5, 3, body, x))(x), x)
    same(traced(np.int32(5), np.int32(3), x), x)
    # the tutorial's example
    assert int(lax.fori_loop(0, 10, lambda i, x: x + i, 0)) == 45


def test_fori_loop_bound_types_and_unroll_as_jax():
    with pytest.raises(TypeError, match="lower and upper arguments to fori_loop must have equal types, got int32 and "
                                        "float32"):
        lax.fori_loop(np.int32(0), np.float32(3), lambda i, x: x, 0)
    with pytest.raises(ValueError,
                       match="Can only use `unroll` in `fori_loop` if the loop bounds are statically known."):
        weft.jit(lambda n: lax.fori_loop(0, n, lambda i, x: x, 0.0, unroll=2))(np.int32(3))
    # a weak Python int bound takes the other's dtype
    assert int(weft.jit(lambda n: lax.fori_loop(0, n, lambda i, x: x + i, 0))(np.int32(5))) == 10


def test_while_loop_errors_are_jaxs():
    with pytest.raises(TypeError) as error:
        lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1].astype(np.int32)), (0, np.float32(1)))
    assert str(error.value) == (
        "while_loop body function carry input and carry output must have equal types, but they differ:\n\n"
        "The input carry component c[1] has type float32[] but the corresponding output carry component has type "
        "int32[], so the dtypes do not match.\n\n"
        "Revise the function so that all output types match the corresponding input types.")
    with pytest.raises(TypeError, match=r"cond_fun must return a boolean scalar, but got output type\(s\) "
                                        r"\[ShapedArray\(float32\[\]\)\]\."):
        lax.while_loop(lambda c: c * 1.0, lambda c: c, np.float32(1))
    with pytest.raises(TypeError,
                       match=r"cond_fun must return a boolean scalar, but got pytree PyTreeDef\(\(\*, \*\)\)"):
        lax.while_loop(lambda c: (c < 1, c < 2), lambda c: c, np.float32(1))


# ---- cond and switch -----------------------------------------------------------------------------------------

def test_cond_runs_the_branch_pred_picks_with_pytree_operands():
    a = RNG.standard_normal(3).astype(np.float32)
    u, v = RNG.standard_normal(3).astype(np.float32), RNG.standard_normal(3).astype(np.float32)

    def f(p, ops):  # the branches close over different values: each takes them all
        return lax.cond(p, lambda o: {"s": o[0] * a + o[1]}, lambda o: {"s": o[1] - u}, ops)

    for p in (True, False, np.int32(3), np.float32(0.0)):
        got = weft.jit(f)(p, (u, v))
        want = {"s": u * a + v} if p else {"s": v - u}
        same(got, weft.jit(lambda o: want)((u, v)))
    # the documented five-argument form and the `operand` keyword
    assert float(lax.cond(True, np.float32(2), lambda x: x + 1, np.float32(5), lambda x: x - 1)) == 3.0
    assert float(lax.cond(False, lambda x: x + 1, lambda x: x - 1, operand=np.float32(5))) == 4.0
    # the tutorial's example
    np.testing.assert_array_equal(lax.cond(True, lambda x: x + 1, lambda x: x - 1, np.array([0.], np.float32)), [1.])


def test_switch_clamps_its_index_as_jax_documents():
    branches = [lambda x: x + 1, lambda x: x * 10, lambda x: -x]
    f = weft.jit(lambda i, x: lax.switch(i, branches, x))
    x = np.float32(3)
    for i in (-5, 0, 1, 2, 3, 100):
        assert float(f(np.int32(i), x)) == branches[min(max(i, 0), 2)](float(x)), i
    assert float(lax.switch(7, branches, x)) == -3.0


def test_cond_output_weak_when_both_branches_are():
    out = weft.jit(lambda p: lax.cond(p, lambda: 1.0, lambda: 2.0) * np.float16(1))(True)
    assert out.dtype == np.float16  # weak: the float16 operand decides, as in JAX
    out = weft.jit(lambda p: lax.cond(p, lambda: 1.0, lambda: np.float32(2)) * np.float16(1))(True)
    assert out.dtype == np.float32


def test_cond_errors_name_both_branches():
    def true_fun(x):
        return {"a": x}

    def false_fun(x):
        return {"a": x.astype(np.int32)}
    with pytest.raises(TypeError) as error:
        lax.cond(True, true_fun, false_fun, np.float32(1))
    text = str(error.value)
    assert text.startswith("cond branches must have equal output types but they differ.\n\ntrue_fun is true_fun at ")
    assert "\nfalse_fun is false_fun at " in text
    assert ("The output of true_fun at path ['a'] has type float32[] but the corresponding output of false_fun has "
            "type int32[], so the dtypes do not match.\n\nRevise true_fun and/or false_fun so that all output types "
            "match.") in text
    with pytest.raises(TypeError, match=r"switch branch outputs must have the same pytree structure, but they differ"
                                        r"(.|\n)*branch 0 output is a tuple of length 2 but branch1 output is a tuple "
                                        r"of length 1, so the lengths do not match"):
        lax.switch(0, [lambda x: (x, x), lambda x: (x,)], np.float32(1))
    for pred, message in ((np.zeros(2), "Pred must be a scalar, got [0. 0.] of shape (2,)."),
                          ([True], "Pred must be a scalar, got [True] of type <class 'list'>"),
                          (None, "cond predicate is None")):
        with pytest.raises(TypeError) as error:
            lax.cond(pred, lambda: 1, lambda: 2)
        assert str(error.value) == message
    with pytest.raises(TypeError, match=r"Index type must be an integer, got 1.5 as float32"):
        lax.switch(1.5, [lambda: 1, lambda: 2])
    with pytest.raises(ValueError, match="Empty branch sequence"):
        lax.switch(0, [])


def test_python_if_on_a_traced_value_names_lax_cond():
    with pytest.raises(weft.TracerConversionError) as error:
        weft.jit(lambda x: x if x > 0 else -x)(np.float32(1))
    assert "weft.lax.cond" in str(error.value) and "weft.lax.while_loop" in str(error.value)


# ---- map -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("batch_size", [None, 0, 2, 3, 7, 10])
def test_map_equals_the_stacked_python_map(batch_size):
    xs = {"a": RNG.standard_normal((7, 3)).astype(np.float32), "b": np.arange(7, dtype=np.float32)}
    f = lambda x: (jnp.tanh(x["a"]) * x["b"], x["b"] + 1)  # noqa: E731
    got = weft.jit(lambda xs: lax.map(f, xs, batch_size=batch_size))(xs)
    want = (np.tanh(xs["a"]) * xs["b"][:, None], xs["b"] + 1)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got[1], want[1])
    if batch_size is None:
        same(got, weft.jit(lambda xs: python_scan(lambda c, x: (c, f(x)), (), xs)[1])(xs))
        same(lax.map(f, xs), got)  # outside jit too


# ---- collectives inside bodies: pmap, eager pmap, shard_map ---------------------------------------------------

def ring_scan(x):
    def body(c, w):
        c = lax.ppermute(c, "i", RING) * w + lax.psum(c, "i") * 0.125
        return c, lax.pmax(c, "i")
    return lax.scan(body, x, np.linspace(0.5, 1.5, 4, dtype=np.float32))


def ring_unrolled(x):
    return python_scan(lambda c, w: ((lax.ppermute(c, "i", RING) * w + lax.psum(c, "i") * 0.125),) * 2,
                       x, np.linspace(0.5, 1.5, 4, dtype=np.float32))


def ring_unrolled_pmax(x):
    c, ys = ring_unrolled(x)
    return c, lax.pmax(ys, "i")


def test_scan_with_collectives_under_pmap_equals_the_unrolled_loop():
    x = RNG.standard_normal((N, 3)).astype(np.float32)
    same(weft.pmap(ring_scan, axis_name="i")(x), weft.pmap(ring_unrolled_pmax, axis_name="i")(x))
    # in eager replicas the call is traced and run as each replica: the same values
    same(weft.pmap(ring_scan, axis_name="i", eager=True)(x), weft.pmap(ring_unrolled_pmax, axis_name="i")(x))


def test_cond_and_while_with_collectives_under_pmap():
    x = RNG.standard_normal((N, 3)).astype(np.float32)

    def f(x):
        # (the predicate is the same on every replica: each branch's collective meets the others')
        y = lax.cond(lax.psum(x.sum(), "i") > 0, lambda v: lax.psum(v, "i"), lambda v: lax.pmax(v * 2, "i"), x)
        # every replica loops until the global sum passes a bound: the same count everywhere
        z = lax.while_loop(lambda v: lax.psum(v, "i").sum() < 1e3, lambda v: jnp.abs(v) * 2 + 1, x)
        return y, z

    def unrolled(x):
        y = jnp.where(lax.psum(x.sum(), "i") > 0, lax.psum(x, "i"), lax.pmax(x * 2, "i"))
        z = x
        for _ in range(64):
            z = jnp.where(lax.psum(z, "i").sum() < 1e3, jnp.abs(z) * 2 + 1, z)
        return y, z
    for sign in (1, -1):
        same(weft.pmap(f, axis_name="i")(x * sign), weft.pmap(unrolled, axis_name="i")(x * sign))


def test_pmap_carry_that_becomes_varying_is_made_varying():
    # A carry that starts the same on every replica and picks up a mapped value: JAX's pmap keeps no varying
    # types, so it runs (weft makes the init vary, with no data moved).
    x = RNG.standard_normal((N, 3)).astype(np.float32)
    got = weft.pmap(lambda x: lax.fori_loop(0, 3, lambda i, c: c + x * i, jnp.zeros(3)), axis_name="i")(x)
    np.testing.assert_array_equal(np.asarray(got), x * 0 + x * 1 + x * 2)


def test_scan_with_ppermute_under_shard_map_equals_pmap_and_the_unrolled_loop():
    mesh = weft.Mesh(np.array(weft.devices()), ("i",))
    x = RNG.standard_normal((N, 3)).astype(np.float32)
    specs = dict(mesh=mesh, in_specs=weft.P("i"), out_specs=(weft.P("i"), weft.P("i")))

    def per_block(f):
        def g(x):
            c, ys = f(x[0])
            return c[None], ys[None]
        return g
    got = weft.shard_map(per_block(ring_scan), **specs)(x)
    want = weft.shard_map(per_block(ring_unrolled_pmax), **specs)(x)
    same(tuple(np.asarray(a) for a in got), tuple(np.asarray(a) for a in want))
    same(np.asarray(got[0]), np.asarray(weft.pmap(ring_scan, axis_name="i")(x)[0]))


def test_shard_map_carry_changing_varying_axes_is_jaxs_error():
    mesh = weft.Mesh(np.array(weft.devices()), ("i",))

    def f(x):
        return lax.fori_loop(0, 3, lambda i, c: c + x, jnp.zeros_like(x))
    with pytest.raises(TypeError) as error:
        weft.shard_map(f, mesh=mesh, in_specs=weft.P("i"), out_specs=weft.P("i"))(np.ones((N, 3), np.float32))
    text = str(error.value)
    assert ("The input carry component loop_carry[1] has type float32[1,3] but the corresponding output carry "
            "component has type float32[1,3]{V:i}, so the manual axis types do not match.") in text
    assert "applying `weft.lax.pvary(..., ('i',))` to the initial carry value" in text


# ---- transformations through the control-flow functions (their rules: src/program/ops/control.cc) ------------

def _rnn(x, w):
    def body(c, xi):
        c = jnp.tanh(c * xi + w)
        return c, c * 2.0
    c, ys = lax.scan(body, w, x)
    return jnp.sum(c) + jnp.sum(ys)


def _rnn_unrolled(x, w):
    c, total = w, 0.0
    for i in range(x.shape[0]):
        c = jnp.tanh(c * x[i] + w)
        total = total + jnp.sum(c * 2.0)
    return jnp.sum(c) + total


def test_grad_through_scan_equals_the_unrolled_gradient_in_float64():
    old = weft.config.jax_enable_x64
    weft.config.update("jax_enable_x64", True)
    try:
        r = np.random.default_rng(30)
        x, w = r.standard_normal((50, 3)), r.standard_normal(3)
        got = weft.grad(_rnn, argnums=(0, 1))(x, w)
        want = weft.grad(_rnn_unrolled, argnums=(0, 1))(x, w)
        for g, h in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), np.asarray(h), rtol=1e-12, atol=1e-13)
    finally:
        weft.config.update("jax_enable_x64", old)


def test_grad_inside_pmap_of_a_scan_whose_init_is_unmapped_is_each_replicas_own():
    # JAX's pmap: every replica differentiates its own function, so w (in_axes None) gets that replica's
    # gradient, not the replicas' sum (the scan's carry starts invariant and becomes varying: a pvary, whose
    # transpose under pmap's rules passes the cotangent through).
    r = np.random.default_rng(31)
    xs, w = r.standard_normal((4, 6, 3)).astype(np.float32), r.standard_normal(3).astype(np.float32)
    got = weft.pmap(weft.grad(_rnn, argnums=1), axis_name="i", in_axes=(0, None))(xs, w)
    want = np.stack([np.asarray(weft.grad(_rnn_unrolled, argnums=1)(x, w)) for x in xs])
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=1e-6)


def test_jvp_through_cond_and_while_loop_against_central_differences():
    old = weft.config.jax_enable_x64
    weft.config.update("jax_enable_x64", True)
    try:
        def f(x):
            y = lax.cond(jnp.sum(x) > 0, lambda v: jnp.tanh(v) * 3.0, lambda v: jnp.exp(v), x)
            _, z = lax.while_loop(lambda s: s[0] < 4, lambda s: (s[0] + 1, jnp.tanh(s[1] * 1.5 + y)), (0, y))
            return z
        r = np.random.default_rng(32)
        for x in (r.standard_normal(3) + 1.0, r.standard_normal(3) - 2.0):  # both branches
            v = r.standard_normal(3)
            _, t = weft.jvp(f, (x,), (v,))
            eps = 1e-6
            num = (np.asarray(f(x + eps * v)) - np.asarray(f(x - eps * v))) / (2 * eps)
            np.testing.assert_allclose(np.asarray(t), num, rtol=1e-7, atol=1e-9)
    finally:
        weft.config.update("jax_enable_x64", old)


def test_vmap_of_while_loop_with_a_batched_predicate_equals_each_example():
    def steps_to_pass(n, limit):  # how many times m -> 3m + 1 until m >= limit (each example its own count)
        return lax.while_loop(lambda s: s[1] < limit, lambda s: (s[0] + 1, s[1] * 3 + 1), (0, n))[0]
    ns = np.array([1, 2, 3, 6, 7, 27], np.int32)
    limits = np.array([10, 100, 5, 1000, 7, 28], np.int32)
    got = np.asarray(weft.vmap(steps_to_pass)(ns, limits))
    want = []
    for n, limit in zip(ns, limits):
        k, m = 0, int(n)
        while m < limit:
            k, m = k + 1, 3 * m + 1
        want.append(k)
    np.testing.assert_array_equal(got, np.array(want, np.int32))


def test_vmap_of_scan_and_cond_equals_stacking_each_example():
    r = np.random.default_rng(33)
    xs, ws = r.standard_normal((5, 6, 3)).astype(np.float32), r.standard_normal((5, 3)).astype(np.float32)
    f = lambda x, w: lax.cond(w[0] > 0, lambda: _rnn(x, w), lambda: _rnn(x, -w))
    got = np.asarray(weft.vmap(f)(xs, ws))
    want = np.stack([np.asarray(weft.jit(f)(x, w)) for x, w in zip(xs, ws)])
    np.testing.assert_array_equal(got, want)
