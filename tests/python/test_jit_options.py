"""jax.jit's options on weft.jit (issue 47, part 1): keyword arguments traced like positional ones,
static_argnums / static_argnames, donate_argnums / donate_argnames, jit(f).lower(*args) with .as_text() and
.compile(), the decorator form, the options refused, and weft.make_jaxpr.

Expected values are numpy's on the same inputs (float64 rounded to the dtype JAX gives) and trace counts are
what JAX's rules say: one trace per signature of the dynamic arguments and per value of the static ones
(compared by type and value); messages are checked by their text.
"""
import re
import warnings

import numpy as np
import pytest

import weft
import weft.numpy as jnp


@pytest.fixture(scope="module", autouse=True)
def runtime():
    return weft.init(device_count=8)


RNG = np.random.default_rng(47)
X = RNG.standard_normal(5).astype(np.float32)
Y = RNG.standard_normal(5).astype(np.float32)
M = RNG.standard_normal((3, 5)).astype(np.float32)


def f64(*arrays):
    return [np.asarray(a, np.float64) for a in arrays]


# ---- keyword arguments -----------------------------------------------------------------------------------------

def test_keyword_arguments_are_traced_like_positional_ones():
    traces = []

    def f(x, y=None, *, scale, tree):
        traces.append(1)
        return x * scale + y + (tree["b"] @ tree["a"]).sum()

    g = weft.jit(f)
    tree = {"a": X, "b": M}
    x, y, m = f64(X, Y, M)
    want = (x * 2.5 + y + (m @ x).sum()).astype(np.float32)
    np.testing.assert_allclose(g(X, Y, scale=np.float32(2.5), tree=tree), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(g(X, y=Y, scale=np.float32(2.5), tree=tree), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(g(x=X, y=Y, scale=np.float32(2.5), tree=tree), want, rtol=1e-5, atol=1e-5)
    assert len(traces) == 3  # y positional, y by keyword, x by keyword: three signatures (JAX retraces too)
    g(x=X, y=Y, scale=np.float32(2.5), tree=tree)
    assert len(traces) == 3  # the same signature: the cached program
    # A keyword argument's value is an input, not a constant: another value, the same program.
    np.testing.assert_allclose(g(x=X, y=Y, scale=np.float32(-1.0), tree=tree),
                               (-x + y + (m @ x).sum()).astype(np.float32), rtol=1e-5, atol=1e-5)
    assert len(traces) == 3
    g(x=X, y=Y, scale=np.float32(1.0), tree={"a": Y, "b": M[:2]})  # another shape: another trace
    assert len(traces) == 4


def test_keyword_argument_program_takes_it_as_an_input():
    p = weft.make_jaxpr(lambda x, *, k: x * k)(np.zeros(3, np.float32), k=np.float32(2))
    assert len(p.in_avals) == 2 and p.in_avals[1] == ((), np.dtype(np.float32))


# ---- static arguments ------------------------------------------------------------------------------------------

def _counting(log):
    def f(x, y, z, flag=False, flag2=False):
        del flag2
        log.append(None)
        assert flag  # a static argument is a Python value during tracing
        return 100 * x + 10 * y + z
    return f


def test_static_argnums_retrace_per_value():
    # JAX's test_jit_static_args, with numpy arrays for the dynamic arguments.
    one, two, three = (np.asarray(v, np.int32) for v in (1, 2, 3))
    side = []
    f1 = weft.jit(_counting(side), static_argnums=(3, 4))
    assert int(f1(one, two, three, True, False)) == 123 and len(side) == 1
    assert int(f1(two, one, three, True, False)) == 213 and len(side) == 1   # same signature
    assert int(f1(two, one, three, True, True)) == 213 and len(side) == 2    # another static value
    side.clear()
    f2 = weft.jit(_counting(side), static_argnums=(0, 2, 3, 4))
    assert int(f2(1, two, 3, True, False)) == 123 and len(side) == 1
    assert int(f2(1, three, 3, True, False)) == 133 and len(side) == 1
    assert int(f2(2, two, 3, True, False)) == 223 and len(side) == 2


@pytest.mark.parametrize("options, call", [
    ({"static_argnums": 1}, lambda g: g(X, 3)),
    ({"static_argnums": 1}, lambda g: g(X, n=3)),        # static_argnames inferred from the signature
    ({"static_argnames": "n"}, lambda g: g(X, n=3)),
    ({"static_argnames": "n"}, lambda g: g(X, 3)),       # static_argnums inferred from the signature
    ({"static_argnums": -1}, lambda g: g(X, 3)),         # counted from the end of the call's arguments
    ({"static_argnums": (1,), "static_argnames": ("n",)}, lambda g: g(X, n=3)),
])
def test_static_argument_by_number_or_name(options, call):
    def f(x, n):
        out = x
        for _ in range(n):  # Python control flow on the static value
            out = out * 2
        return out

    np.testing.assert_allclose(call(weft.jit(f, **options)), X * 8, rtol=0)


def test_static_arguments_compare_by_type_and_value():
    side = []

    def f(x, s):
        side.append(s)
        return x

    g = weft.jit(f, static_argnums=1)
    g(X, 1)
    g(X, 1.0)   # 1 == 1.0 but of another type: JAX traces again
    g(X, 1)

    class A:
        def __hash__(self):
            return 1

        def __eq__(self, other):
            return isinstance(other, A)

    g(X, A())
    g(X, A())   # equal by __eq__: the cached program
    assert [type(s) for s in side] == [int, float, A]


@pytest.mark.parametrize("value, path", [("train", "mode"), (object(), "mode"), ({"k": "v"}, "args[1]")])
def test_non_array_dynamic_argument_says_to_make_it_static(value, path):
    g = weft.jit(lambda x, mode: x)
    with pytest.raises(TypeError, match=rf"Error interpreting argument to .* as an abstract array\. The problematic "
                                        rf"value is of type .* and was passed to the function at path "
                                        rf"{re.escape(path)}\.\nThis typically means .* not marked as static"):
        g(X, value)
    np.testing.assert_array_equal(weft.jit(lambda x, mode: x, static_argnames="mode")(X, "train"), X)


@pytest.mark.parametrize("call", [lambda g: g(X, [1, 2]), lambda g: g(X, n={"a": 1})])
def test_unhashable_static_argument_is_refused_as_jax_does(call):
    g = weft.jit(lambda x, n: x, static_argnames="n")
    with pytest.raises(ValueError, match=r"Non-hashable static arguments are not supported\. An error occurred while "
                                         r"trying to hash an object of type <class '(list|dict)'>.*\n"
                                         r"TypeError: unhashable type"):
        call(g)


def test_static_argument_whose_eq_raises():
    class HashableWithoutEq:
        def __hash__(self):
            return 1

        def __eq__(self, other):
            raise NotImplementedError("no equality")

    g = weft.jit(lambda x, s: x, static_argnums=1)
    with pytest.raises(ValueError, match=r"static arguments should be comparable using __eq__.*\n"
                                         r"NotImplementedError: no equality"):
        g(X, HashableWithoutEq())
        g(X, HashableWithoutEq())


@pytest.mark.parametrize("options, message", [
    ({"static_argnums": 3}, r"Jitted function has static_argnums=\(3,\), but only accepts 2 positional arguments"),
    ({"static_argnums": -3}, r"Jitted function has static_argnums=\(-3,\), but only accepts 2 positional arguments"),
    ({"donate_argnums": (0, 2)}, r"Jitted function has donate_argnums=\(0, 2\), but only accepts 2 positional"),
    ({"static_argnames": "q"}, r"Jitted function has invalid argnames \{'q'\} in static_argnames\. Function does "
                               r"not take these args"),
    ({"static_argnames": "x", "donate_argnames": "x"}, r"static_argnames and donate_argnames cannot intersect\. "
                                                       r"Argument names \{'x'\} appear in both"),
    ({"static_argnums": 0, "donate_argnums": 0}, r"static_argnames and donate_argnames cannot intersect"),
])
def test_argnum_settings_checked_against_the_signature(options, message):
    with pytest.raises(ValueError, match=message):
        weft.jit(lambda x, y: x, **options)


def test_positional_only_parameter_cannot_be_named():
    def f(x, /, y):
        return x

    with pytest.raises(ValueError, match=r"invalid argnames \{'x'\} in static_argnames\. These are positional-only"):
        weft.jit(f, static_argnames="x")


def test_varargs_function_takes_any_static_position():
    g = weft.jit(lambda *args: args[0] * args[2], static_argnums=2)
    np.testing.assert_allclose(g(X, None, 3), X * 3, rtol=0)


def test_decorator_form_with_options():
    @weft.jit(static_argnames=("axis",))
    def total(x, axis):
        return jnp.sum(x, axis=axis)

    np.testing.assert_allclose(total(M, axis=1), M.astype(np.float64).sum(1), rtol=1e-5)
    np.testing.assert_allclose(total(M, 0), M.astype(np.float64).sum(0), rtol=1e-5)


def test_static_self_of_a_method():
    # JAX's test_static_argnum_on_method: a jitted method binds self, which static_argnums=0 makes static.
    class A:
        def __init__(self, k):
            self.k = k

        @weft.jit(static_argnums=(0,))
        def scaled(self, x):
            return x * self.k

    np.testing.assert_allclose(A(3.0).scaled(X), X * 3, rtol=1e-6)
    np.testing.assert_allclose(A(-2.0).scaled(X), X * -2, rtol=1e-6)  # another self: another trace
    assert isinstance(A.__dict__["scaled"], type(weft.jit(lambda x: x)))


def test_nested_jit_with_static_argument_is_inlined():
    inner = weft.jit(lambda x, n: x * n, static_argnums=1)
    outer = weft.jit(lambda x: inner(x, 3) + 1)
    np.testing.assert_allclose(outer(X), X * 3 + 1, rtol=1e-6)
    with pytest.raises(ValueError, match="Non-hashable static arguments"):
        weft.jit(lambda x: inner(x, [3]))(X)


# ---- donation --------------------------------------------------------------------------------------------------

def _warnings_of(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = call()
    return out, [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


def test_donation_with_a_matching_output_is_silent_and_leaves_the_argument():
    x = X.copy()
    g = weft.jit(lambda x: x * 2 + 1, donate_argnums=0)
    out, caught = _warnings_of(lambda: g(x))
    np.testing.assert_allclose(out, X * 2 + 1, rtol=1e-6)
    assert caught == []
    np.testing.assert_array_equal(x, X)  # weft.jit never writes into the caller's array


@pytest.mark.parametrize("options", [{"donate_argnums": (0, 1)}, {"donate_argnames": ("x", "y")}])
def test_donation_no_output_can_take_warns_as_jax_on_cpu(options):
    # JAX's test_jit_donate_warning_raised: the result is a scalar, so neither donated buffer is usable.
    g = weft.jit(lambda x, y: x.sum() + y.sum().astype(np.float32), **options)
    xi = np.array([1, 2], np.int32)
    out, caught = _warnings_of(lambda: g(np.array([1.0, 2.0], np.float32), xi))
    assert float(out) == 6.0
    assert len(caught) == 1
    assert caught[0].startswith("Some donated buffers were not usable: ShapedArray(float32[2]), "
                                "ShapedArray(int32[2]).\nSee an explanation at")
    _, again = _warnings_of(lambda: g(np.array([3.0, 4.0], np.float32), xi))
    assert again == []  # once per trace, as JAX warns once per compilation


def test_donation_matches_outputs_by_shape_and_dtype_first_come():
    # Two donated float32[5] inputs and one float32[5] output: the first is taken, the second is named.
    g = weft.jit(lambda a, b, c: (a + b, c.sum()), donate_argnums=(0, 1, 2))
    _, caught = _warnings_of(lambda: g(X, Y, M))
    assert len(caught) == 1 and "not usable: ShapedArray(float32[5]), ShapedArray(float32[3,5])." in caught[0]


def test_donated_positions_count_static_arguments():
    # JAX's test_jit_donate_static_argnums: donate_argnums count every positional argument, statics included.
    g = weft.jit(lambda a, b, c, d: (a + b + c, a + b + d), static_argnums=(0, 1), donate_argnums=(2, 3))
    c, d = np.array([2.0, 2.0], np.float32), np.ones(4, np.float32)
    (e, f), caught = _warnings_of(lambda: g(1, 2, c, d))
    np.testing.assert_array_equal(e, [5.0, 5.0])
    np.testing.assert_array_equal(f, [4.0] * 4)
    assert caught == []
    # By name, for arguments passed by keyword (JAX's test_jit_donate_argnames_kwargs_static_argnums).
    h = weft.jit(lambda a, b, c, d, e: (a + b + c, a + b + d, a + b + e), static_argnums=(0, 1),
                 donate_argnames=("d", "e"))
    (_, _, out), caught = _warnings_of(lambda: h(1, 2, c, d=d, e=np.full(4, 3.0, np.float32)))
    np.testing.assert_array_equal(out, [6.0] * 4)
    assert caught == []


# ---- lower / compile -------------------------------------------------------------------------------------------

def test_lower_as_text_prints_the_program():
    def f(x, w):
        return jnp.tanh(w @ x).sum()

    lowered = weft.jit(f).lower(X, M)
    assert isinstance(lowered.as_text(), str)
    assert lowered.as_text() == str(weft.make_program(f)(X, M))
    assert lowered.as_text().startswith("{ lambda ; a:f32[5] b:f32[3,5] . let")
    assert "tanh" in lowered.as_text()
    with pytest.raises(ValueError, match=r"dialect 'stablehlo' is not available"):
        lowered.as_text("stablehlo")


def test_compiled_is_callable_with_the_dynamic_arguments():
    compiled = weft.jit(lambda x, n, *, k: x * n + k, static_argnums=1).lower(X, 3, k=np.float32(1)).compile()
    np.testing.assert_allclose(compiled(Y, k=np.float32(2)), Y * 3 + 2, rtol=1e-6)
    assert compiled.as_text() == weft.jit(lambda x, *, k: x * 3 + k).lower(X, k=np.float32(1)).as_text()


def test_compiled_refuses_another_signature():
    compiled = weft.jit(lambda x: jnp.sqrt(x ** 2) + 1.0).lower(X).compile()
    np.testing.assert_allclose(compiled(Y), np.sqrt(Y.astype(np.float64) ** 2) + 1, rtol=1e-6)
    with pytest.raises(TypeError, match="Function compiled with input pytree does not match the input pytree it was "
                                        "called with"):
        compiled([Y])
    with pytest.raises(TypeError, match=r"Argument types differ .*The mismatches are:\n"
                                        r"Argument 'x' compiled with float32\[5\] and called with int32\[5\]"):
        compiled(np.arange(5, dtype=np.int32))
    with pytest.raises(TypeError, match="Cannot apply JAX transformations to a function lowered and compiled"):
        weft.grad(lambda x: compiled(x).sum())(X)


# ---- make_jaxpr and the options accepted or refused ------------------------------------------------------------

def test_make_jaxpr_is_make_program():
    assert weft.make_jaxpr is weft.make_program
    p = weft.make_jaxpr(lambda x, n: x * n, static_argnums=1)(X, 2)
    assert str(p) == str(weft.make_program(lambda x: x * 2)(X))
    with pytest.raises(ValueError, match="return_shape=True is not supported"):
        weft.make_jaxpr(lambda x: x, return_shape=True)


@pytest.mark.parametrize("options", [{"keep_unused": True}, {"inline": True}, {"backend": "cpu"},
                                     {"in_shardings": None}])
def test_options_accepted(options):
    np.testing.assert_allclose(weft.jit(lambda x, y: x + 1, **options)(X, Y), X + 1, rtol=1e-6)


@pytest.mark.parametrize("options, message", [
    ({"in_shardings": (0,)}, r"in_shardings is not supported.*weft\.shard_map"),
    ({"out_shardings": (0,)}, r"out_shardings is not supported"),
    ({"device": "cpu:0"}, r"device= is not supported"),
    ({"backend": "gpu"}, r"unknown backend 'gpu'; weft has one platform, 'cpu'"),
    ({"abstracted_axes": ("n",)}, r"abstracted_axes \(dynamic shapes\) is not supported"),
    ({"compiler_options": {"xla_cpu_enable_fast_math": True}}, r"compiler_options are not supported"),
])
def test_options_refused_name_themselves(options, message):
    with pytest.raises(ValueError, match=message):
        weft.jit(lambda x: x, **options)


def test_static_argnums_is_keyword_only_as_in_jax():
    with pytest.raises(TypeError):
        weft.jit(lambda x, n: x, (1,))
