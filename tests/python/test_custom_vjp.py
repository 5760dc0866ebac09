"""weft.custom_vjp (jax.custom_vjp; issue 23): a function's reverse-mode rule given by the user as
defvjp(fwd, bwd). JAX's documented examples (a numerically stable log1pexp, clip_gradient), a bwd that
deliberately differs from the true derivative (so the gradient proves bwd ran, not autodiff of fun), pytrees
of residuals, inside a traced pmap with a pmean'ed loss, under jit, second order, and the errors. Expected
values are numpy's (float64).
"""
import functools

import numpy as np
import pytest

import weft
import weft.numpy as jnp
from weft import lax

# 64-bit types on (JAX's jax_enable_x64; conftest.py): float64 gradients compared with numpy's to 1e-12.
pytestmark = pytest.mark.usefixtures("jax_enable_x64")


@pytest.fixture(scope="module", autouse=True)
def runtime():
    return weft.init(device_count=8)


RNG = np.random.default_rng(2324)


# ---- JAX's examples -----------------------------------------------------------------------------------------
@weft.custom_vjp
def log1pexp(x):
    return jnp.log1p(jnp.exp(x))


def log1pexp_fwd(x):
    return log1pexp(x), x


def log1pexp_bwd(x, g):
    return (g * (1 - 1 / (1 + jnp.exp(x))),)


log1pexp.defvjp(log1pexp_fwd, log1pexp_bwd)


def test_log1pexp_gets_its_stable_gradient_where_autodiff_gives_nan():
    x = np.float32(100.0)
    # exp(100) is inf in float32: autodiff's exp(x) / (1 + exp(x)) is inf / inf.
    assert np.isnan(weft.grad(lambda x: jnp.log1p(jnp.exp(x)))(x))
    assert float(weft.grad(log1pexp)(x)) == 1.0
    xs = np.linspace(-5, 5, 11)
    g = weft.grad(lambda x: jnp.sum(log1pexp(x)))(xs)
    np.testing.assert_allclose(g, 1 / (1 + np.exp(-xs)), rtol=1e-12)


def test_outside_differentiation_it_computes_fun():
    calls = []

    @weft.custom_vjp
    def f(x):
        calls.append("fun")
        return x * 3.0

    def fwd(x):
        calls.append("fwd")
        return x * 3.0, None

    f.defvjp(fwd, lambda res, g: (g,))
    x = np.arange(3.0)
    np.testing.assert_allclose(f(x), 3 * x)
    assert calls == ["fun"]  # eager: fwd not run, as in JAX
    np.testing.assert_allclose(weft.jit(f)(x), 3 * x)  # traced: the output comes from fwd
    assert calls == ["fun", "fwd"]
    np.testing.assert_allclose(log1pexp(np.array([2.0])), np.log1p(np.exp([2.0])), rtol=1e-12)


@weft.custom_vjp
def clip_gradient(lo, hi, x):
    return x  # the identity


def clip_gradient_fwd(lo, hi, x):
    return x, (lo, hi)  # the bounds as residuals


def clip_gradient_bwd(res, g):
    lo, hi = res
    return (None, None, jnp.clip(g, lo, hi))  # None: zero cotangents for lo and hi


clip_gradient.defvjp(clip_gradient_fwd, clip_gradient_bwd)


def test_clip_gradient_clips_the_cotangent_not_the_value():
    x = np.linspace(-3, 3, 13)
    loss = lambda x: jnp.sum(clip_gradient(-0.75, 0.75, x) ** 3)
    np.testing.assert_allclose(weft.grad(loss)(x), np.clip(3 * x ** 2, -0.75, 0.75), rtol=1e-12)
    np.testing.assert_allclose(weft.jit(lambda x: clip_gradient(-0.75, 0.75, x))(x), x)
    # The bounds as traced arguments: their cotangents (None) are zeros.
    g_lo, g_x = weft.grad(lambda lo, x: jnp.sum(clip_gradient(lo, 0.5, x) ** 3), argnums=(0, 1))(-0.25, x)
    assert float(g_lo) == 0.0
    np.testing.assert_allclose(g_x, np.clip(3 * x ** 2, -0.25, 0.5), rtol=1e-12)


def test_nondiff_argnums_pass_static_values_to_bwd_first():
    @functools.partial(weft.custom_vjp, nondiff_argnums=(0,))
    def scaled(scale, x):
        return x * scale

    def fwd(scale, x):
        return x * scale, None

    def bwd(scale, res, g):
        assert res is None and isinstance(scale, float)
        return (g * (scale + 1.0),)  # deliberately not the derivative (scale)

    scaled.defvjp(fwd, bwd)
    x = np.arange(4.0)
    np.testing.assert_allclose(weft.grad(lambda x: jnp.sum(scaled(2.0, x)))(x), np.full(4, 3.0))
    # A keyword argument is bound to its position first (JAX's rule), so fwd and bwd see the same list.
    np.testing.assert_allclose(weft.grad(lambda x: jnp.sum(scaled(2.0, x=x)))(x), np.full(4, 3.0))


# ---- bwd, not autodiff of fun -------------------------------------------------------------------------------
@weft.custom_vjp
def doubled_tanh(x):
    return jnp.tanh(x)


def doubled_tanh_fwd(x):
    y = jnp.tanh(x)
    return y, y


def doubled_tanh_bwd(y, g):
    return (2 * g * (1 - y * y),)  # twice the derivative: only bwd gives this


doubled_tanh.defvjp(doubled_tanh_fwd, doubled_tanh_bwd)


def test_the_gradient_is_bwds_not_autodiff_of_fun():
    x = RNG.standard_normal(5)
    want = 2 * (1 - np.tanh(x) ** 2)
    np.testing.assert_allclose(weft.grad(lambda x: jnp.sum(doubled_tanh(x)))(x), want, rtol=1e-12)
    out, pullback = weft.vjp(doubled_tanh, x)
    np.testing.assert_allclose(out, np.tanh(x), rtol=1e-12)
    ct = RNG.standard_normal(5)
    np.testing.assert_allclose(pullback(ct)[0], ct * want, rtol=1e-12)
    # Composed with ordinary rules on both sides: d/dx sum(3 * doubled_tanh(x * x)).
    g = weft.grad(lambda x: jnp.sum(3.0 * doubled_tanh(x * x)))(x)
    np.testing.assert_allclose(g, 3 * 2 * (1 - np.tanh(x * x) ** 2) * 2 * x, rtol=1e-12)


def test_the_program_holds_the_call_and_bwds_equations():
    x = RNG.standard_normal(5)
    text = str(weft.make_program(lambda x: doubled_tanh(x))(x))
    assert "custom_vjp_call[name='doubled_tanh' outputs=1 primals=1 rule=" in text
    # The differentiated program: fwd's tanh once, then bwd's equations alone: one subtract (1 - y * y) and
    # three multiplies (2 * g, y * y, their product), where tanh's own rule would have emitted one subtract
    # and two multiplies (out * out, g times it); the sum's rule multiplies nothing. The forward's call stays
    # where its output is one of the program's (value_and_grad), so a differentiation around this one would
    # use bwd again.
    program = weft.make_program(weft.value_and_grad(lambda x: jnp.sum(doubled_tanh(x))))(x)
    assert program.count("tanh") == 1
    assert program.count("subtract") == 1
    assert program.count("multiply") == 3
    assert program.count("custom_vjp_call") == 1


def test_residuals_as_a_pytree_and_arguments_as_pytrees():
    @weft.custom_vjp
    def affine(p, x):
        return jnp.tanh(x @ p["w"] + p["b"]), jnp.sum(x)

    def fwd(p, x):
        y = jnp.tanh(x @ p["w"] + p["b"])
        return (y, jnp.sum(x)), {"p": p, "x": x, "d": 1 - y * y}

    def bwd(res, g):
        gy, gs = g
        dz = gy * res["d"]
        return {"w": res["x"].T @ dz, "b": jnp.sum(dz, axis=0)}, dz @ res["p"]["w"].T + gs

    affine.defvjp(fwd, bwd)
    p = {"w": RNG.standard_normal((4, 3)), "b": RNG.standard_normal(3)}
    x = RNG.standard_normal((6, 4))

    def loss(f):
        return lambda p, x: (lambda y, s: jnp.sum(y ** 2) + 2.0 * s)(*f(p, x))

    got = weft.grad(loss(affine), argnums=(0, 1))(p, x)
    want = weft.grad(loss(affine.fun), argnums=(0, 1))(p, x)  # autodiff of fun: the same derivative here
    for a, b in zip(weft.tree_util.tree_leaves(got), weft.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


# ---- pmap, jit, second order, checkpoint --------------------------------------------------------------------
def test_inside_a_traced_pmap_with_a_pmeaned_loss():
    # fwd uses pmax, which has no VJP rule: differentiating works only because fwd's equations are not
    # transposed. bwd hands the cotangent to the replicas holding the maximum (a pmax's subgradient).
    @weft.custom_vjp
    def replica_max(x):
        return lax.pmax(x, "i")

    def fwd(x):
        m = lax.pmax(x, "i")
        return m, (x, m)

    def bwd(res, g):
        x, m = res
        return (jnp.where(x == m, lax.psum(g, "i"), 0.0),)

    replica_max.defvjp(fwd, bwd)
    xs = RNG.standard_normal((8, 5))

    def step(x):
        loss, g = weft.value_and_grad(lambda x: lax.pmean(jnp.sum(replica_max(x) * doubled_tanh(x)), "i"))(x)
        return loss, g

    loss, g = weft.pmap(step, axis_name="i")(xs)
    m = xs.max(axis=0)
    np.testing.assert_allclose(np.asarray(loss), np.full(8, np.sum(m * np.tanh(xs), axis=1).mean()), rtol=1e-12)
    # JAX's pmap rules: a pmean'ed loss seeds each replica's own loss with 1 (the pmean transposes to a
    # pmean), so replica r gets doubled_tanh's bwd 2 * m * (1 - tanh(x_r)^2) plus, where it holds the max,
    # the max's cotangent summed over the replicas, sum_s tanh(x_s).
    for r in range(8):
        want = 2 * m * (1 - np.tanh(xs[r]) ** 2) + np.where(xs[r] == m, np.tanh(xs).sum(axis=0), 0.0)
        np.testing.assert_allclose(np.asarray(g)[r], want, rtol=1e-12)


def test_under_jit_both_ways_and_inlined_into_an_outer_trace():
    x = RNG.standard_normal(5)
    want = 2 * (1 - np.tanh(x) ** 2)
    loss = lambda x: jnp.sum(doubled_tanh(x))
    np.testing.assert_allclose(weft.jit(weft.grad(loss))(x), want, rtol=1e-12)
    np.testing.assert_allclose(weft.grad(weft.jit(loss))(x), want, rtol=1e-12)  # the call inlined from jit's program


def test_second_order_differentiates_bwd():
    # d/dx of bwd's 2 * (1 - tanh(x)^2) is -4 tanh(x) (1 - tanh(x)^2): the outer grad transposes the inlined
    # bwd's equations and fwd's tanh by their own rules (as JAX differentiates a bwd).
    x = RNG.standard_normal(5)
    gg = weft.grad(lambda x: jnp.sum(weft.grad(lambda x: jnp.sum(doubled_tanh(x)))(x)))(x)
    t = np.tanh(x)
    np.testing.assert_allclose(gg, -4 * t * (1 - t * t), rtol=1e-12)


def test_inside_a_checkpoint_region():
    x = RNG.standard_normal(5)
    f = weft.checkpoint(lambda x: jnp.sum(doubled_tanh(x * 1.5)))
    np.testing.assert_allclose(weft.grad(f)(x), 1.5 * 2 * (1 - np.tanh(1.5 * x) ** 2), rtol=1e-12)


# ---- errors -------------------------------------------------------------------------------------------------
def with_bwd(bwd, fwd=None):
    @weft.custom_vjp
    def two_args(x, y):
        return x * y

    two_args.defvjp(fwd or (lambda x, y: (x * y, (x, y))), bwd)
    return two_args


def error_of(f, *args):
    with pytest.raises(weft.InvalidArgument) as info:
        weft.grad(lambda *a: jnp.sum(f(*a)), argnums=(0, 1))(*args)
    return str(info.value)


X3, Y3 = np.arange(3.0), np.ones(3)


def test_bwd_returning_the_wrong_number_of_cotangents_is_named():
    text = error_of(with_bwd(lambda res, g: (g * res[1],)), X3, Y3)
    assert "custom_vjp(two_args)" in text and "bwd returned 1 cotangents for 2 differentiable argument" in text


def test_bwd_returning_a_wrong_shape_is_named():
    text = error_of(with_bwd(lambda res, g: (jnp.sum(g), g)), X3, Y3)
    assert "custom_vjp(two_args)" in text
    assert "cotangent for argument 0 is float64[], the argument is float64[3]" in text
    assert "has its primal's shape and dtype" in text


def test_bwd_returning_a_wrong_dtype_or_structure_or_no_tuple_is_named():
    text = error_of(with_bwd(lambda res, g: (g.astype(np.float32), g)), X3, Y3)
    assert "custom_vjp(two_args)" in text and "float32[3], the argument is float64[3]" in text
    text = error_of(with_bwd(lambda res, g: ((g, g), g)), X3, Y3)
    assert "custom_vjp(two_args)" in text and "has structure PyTreeDef((*, *)), the argument PyTreeDef(*)" in text
    text = error_of(with_bwd(lambda res, g: g), X3, Y3)
    assert "custom_vjp(two_args): bwd must return a tuple of cotangents" in text


def test_fwd_not_returning_a_pair_and_a_missing_defvjp_are_named():
    text = error_of(with_bwd(lambda res, g: (g, g), fwd=lambda x, y: x * y), X3, Y3)
    assert "custom_vjp(two_args): fwd must return a pair (output, residuals)" in text

    @weft.custom_vjp
    def undefined(x):
        return x

    with pytest.raises(AttributeError, match="No VJP defined for custom_vjp function undefined"):
        weft.grad(lambda x: jnp.sum(undefined(x)))(X3)


def test_bwd_closing_over_a_traced_value_is_refused():
    def loss(x, y):
        return jnp.sum(with_bwd(lambda res, g: (g * y, g * x))(x, y))  # x, y: tracers of grad's trace

    with pytest.raises(weft.InvalidArgument, match=r"custom_vjp\(two_args\): bwd uses a traced value from outside"):
        weft.grad(loss)(X3, Y3)
