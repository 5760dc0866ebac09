"""weft.custom_jvp (jax.custom_jvp; issue 46): a function's forward-mode rule given by the user as defjvp(jvp)
or defjvps(*jvps). JAX's custom-derivatives tutorial (a numerically stable log1pexp, defjvps, a function
argument in nondiff_argnums), rules that deliberately differ from the true derivative (so a derivative proves
the rule ran, not autodiff of f), forward mode (through _weft.jvp_program: weft.jvp is not this file's),
reverse mode (JAX transposes the rule), second order, pytrees, jit, a traced pmap, vmap (through
_weft.batch_program), and JAX's checks of the rule's outputs.
Expected values are numpy's (float64) or written out by hand.
"""
import functools

import numpy as np
import pytest

import weft
import weft.numpy as jnp
from weft import _weft, lax

# 64-bit types on (JAX's jax_enable_x64; conftest.py): float64 derivatives compared with numpy's to 1e-12.
pytestmark = pytest.mark.usefixtures("jax_enable_x64")


@pytest.fixture(scope="module", autouse=True)
def runtime():
    return weft.init(device_count=8)


RNG = np.random.default_rng(4646)


def jvp(f, primals, tangents):
    """Forward mode on f's traced program: (outputs, their tangents), flat."""
    program = weft.make_program(f)(*primals)._program
    ins = [np.asarray(p) for p in primals] + [np.asarray(t) for t in tangents]
    outs = list(_weft.run_program(_weft.jvp_program(program), ins))
    n = len(outs) // 2
    return [np.asarray(o) for o in outs[:n]], [np.asarray(t) for t in outs[n:]]


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


# ---- JAX's examples -----------------------------------------------------------------------------------------
@weft.custom_jvp
def log1pexp(x):
    return jnp.log1p(jnp.exp(x))


@log1pexp.defjvp
def log1pexp_jvp(primals, tangents):
    x, = primals
    t, = tangents
    return log1pexp(x), t * (1 - 1 / (1 + jnp.exp(x)))


def test_log1pexp_gets_its_stable_derivative_where_autodiff_gives_nan():
    x = np.float32(100.0)
    # exp(100) is inf in float32: autodiff's exp(x) / (1 + exp(x)) is inf / inf.
    assert np.isnan(weft.grad(lambda x: jnp.log1p(jnp.exp(x)))(x))
    assert float(weft.grad(log1pexp)(x)) == 1.0
    out, tangent = jvp(log1pexp, [x], [np.float32(1.0)])
    assert float(tangent[0]) == 1.0  # (the value is f's own, inf in float32, as in JAX)
    xs = np.linspace(-5, 5, 11)
    np.testing.assert_allclose(weft.grad(lambda x: jnp.sum(log1pexp(x)))(xs), sigmoid(xs), rtol=1e-12)
    ts = RNG.standard_normal(11)
    out, tangent = jvp(log1pexp, [xs], [ts])
    np.testing.assert_allclose(out[0], np.log1p(np.exp(xs)), rtol=1e-12)
    np.testing.assert_allclose(tangent[0], ts * sigmoid(xs), rtol=1e-12)


# f(x) = x tanh(x) with a deliberately different rule, 2 (1 - tanh(x)^2) t (the true one is tanh(x) +
# x (1 - tanh(x)^2)): every mode must give the rule's number, not f's derivative.
@weft.custom_jvp
def skewed(x):
    return x * jnp.tanh(x)


@skewed.defjvp
def skewed_jvp(primals, tangents):
    x, = primals
    t, = tangents
    return skewed(x), 2.0 * (1 - jnp.tanh(x) ** 2) * t


def skewed_rule(x):
    return 2 * (1 - np.tanh(x) ** 2)


MODES = {
    "grad": lambda f, x: weft.grad(lambda x: jnp.sum(f(x)))(x),
    "jit(grad)": lambda f, x: weft.jit(weft.grad(lambda x: jnp.sum(f(x))))(x),
    "grad(jit)": lambda f, x: weft.grad(weft.jit(lambda x: jnp.sum(f(x))))(x),
    "vjp": lambda f, x: weft.vjp(f, x)[1](np.ones_like(x))[0],
    "jvp": lambda f, x: jvp(f, [x], [np.ones_like(x)])[1][0],  # elementwise f: the diagonal
}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_the_derivative_is_the_rules_not_autodiff_of_f(mode):
    x = RNG.standard_normal(6)
    np.testing.assert_allclose(MODES[mode](skewed, x), skewed_rule(x), rtol=1e-12)


def test_outside_differentiation_it_computes_f_and_under_jit_records_the_call():
    calls = []

    @weft.custom_jvp
    def f(x):
        calls.append("f")
        return jnp.tanh(x) * 3.0

    @f.defjvp
    def f_jvp(primals, tangents):
        calls.append("jvp")
        return f(primals[0]), tangents[0]

    x = RNG.standard_normal(4)
    np.testing.assert_allclose(f(x), 3 * np.tanh(x), rtol=1e-12)
    assert calls == ["f"]
    np.testing.assert_allclose(weft.jit(f)(x), 3 * np.tanh(x), rtol=1e-12)
    text = str(weft.make_program(f)(x))
    assert "custom_jvp_call[name='f' outputs=1 primals=1 rule=" in text
    # The differentiated program: f's tanh for the value, the rule's equations transposed for the gradient
    # (the identity here), and not tanh's rule (which would emit 1 - y * y).
    program = weft.make_program(weft.value_and_grad(lambda x: jnp.sum(f(x))))(x)
    assert program.count("tanh") == 1 and program.count("subtract") == 0 and program.count("custom_jvp_call") == 1


# ---- defjvps ------------------------------------------------------------------------------------------------
# The tutorial's f(x, y) = sin(x) y, with tanh for sin (weft has no sin): each argument's rule on its own.
@weft.custom_jvp
def tanh_times(x, y):
    return jnp.tanh(x) * y


tanh_times.defjvps(lambda x_dot, ans, x, y: (1 - jnp.tanh(x) ** 2) * x_dot * y,
                   lambda y_dot, ans, x, y: jnp.tanh(x) * y_dot)


@weft.custom_jvp
def only_x(x, y):
    return jnp.tanh(x) * y


only_x.defjvps(lambda x_dot, ans, x, y: (1 - jnp.tanh(x) ** 2) * x_dot * y, None)


DEFJVPS = [
    # (function, d/dx, d/dy), by hand
    (tanh_times, lambda x, y: (1 - np.tanh(x) ** 2) * y, lambda x, y: np.tanh(x)),
    (only_x, lambda x, y: (1 - np.tanh(x) ** 2) * y, lambda x, y: np.zeros_like(x)),  # None: no contribution
]


@pytest.mark.parametrize("f, dx, dy", DEFJVPS, ids=["both", "none_for_y"])
def test_defjvps_adds_each_arguments_rule(f, dx, dy):
    x, y = RNG.standard_normal(5), RNG.standard_normal(5)
    gx, gy = weft.grad(lambda x, y: jnp.sum(f(x, y)), argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gx, dx(x, y), rtol=1e-12)
    np.testing.assert_allclose(gy, dy(x, y), rtol=1e-12, atol=0)
    tx, ty = RNG.standard_normal(5), RNG.standard_normal(5)
    out, tangent = jvp(f, [x, y], [tx, ty])
    np.testing.assert_allclose(out[0], np.tanh(x) * y, rtol=1e-12)
    np.testing.assert_allclose(tangent[0], dx(x, y) * tx + dy(x, y) * ty, rtol=1e-12)


# ---- nondiff_argnums ----------------------------------------------------------------------------------------
# The tutorial's app(f, x): a function argument, static, passed first to the rule (which says 2 x_dot).
@functools.partial(weft.custom_jvp, nondiff_argnums=(0,))
def app(f, x):
    return f(x)


@app.defjvp
def app_jvp(f, primals, tangents):
    x, = primals
    x_dot, = tangents
    return f(x), 2.0 * x_dot


# A gradient scaled by a Python number given at the call (clip_gradient's shape: static values first).
@functools.partial(weft.custom_jvp, nondiff_argnums=(1,))
def scale_gradient(x, scale):
    return x


@scale_gradient.defjvp
def scale_gradient_jvp(scale, primals, tangents):
    return primals[0], scale * tangents[0]


def test_nondiff_argnums_a_function_and_python_values():
    x = np.float64(3.0)
    assert float(app(lambda y: y ** 2, x)) == 9.0
    assert float(weft.grad(lambda x: app(lambda y: y ** 2, x))(x)) == 2.0  # the rule's, not 2 x = 6
    assert float(jvp(lambda x: app(lambda y: y ** 2, x), [x], [np.float64(0.5)])[1][0]) == 1.0
    xs = RNG.standard_normal(4)
    for scale in (2.0, -3.0):  # each value its own rule (the cache is keyed by the static values)
        np.testing.assert_allclose(weft.grad(lambda x: jnp.sum(scale_gradient(x, scale)))(xs), np.full(4, scale))


def test_pytrees_in_and_out():
    @weft.custom_jvp
    def affine(params, x):
        y = params["w"] * x + params["b"]
        return {"y": y, "sq": (y * y,)}

    @affine.defjvp
    def affine_jvp(primals, tangents):
        (params, x), (dparams, dx) = primals, tangents
        y = params["w"] * x + params["b"]
        dy = dparams["w"] * x + params["w"] * dx + dparams["b"]
        return {"y": y, "sq": (y * y,)}, {"y": dy, "sq": (3.0 * y * dy,)}  # 3 y dy, deliberately (true: 2)

    params = {"w": RNG.standard_normal(3), "b": RNG.standard_normal(3)}
    x = RNG.standard_normal(3)
    # (a keyword argument is bound to its position, as JAX does)
    grads = weft.grad(lambda p, x: jnp.sum(affine(p, x=x)["sq"][0]) + jnp.sum(affine(p, x)["y"]))(params, x)
    y = params["w"] * x + params["b"]
    np.testing.assert_allclose(grads["w"], (3 * y + 1) * x, rtol=1e-12)
    np.testing.assert_allclose(grads["b"], 3 * y + 1, rtol=1e-12)


def test_integer_inputs_and_outputs():
    # An integer argument's tangent is zeros of its dtype (JAX's float0), an integer output's tangent zeros
    # whatever the rule says; the float parts follow the rule (3 n t, deliberately: f's own is n t).
    @weft.custom_jvp
    def scaled(x, n):
        return x * n, n + 1

    @scaled.defjvp
    def scaled_jvp(primals, tangents):
        (x, n), (t, nt) = primals, tangents
        assert nt.dtype == n.dtype
        return (x * n, n + 1), (3.0 * t * n, nt + 7)

    x, n = RNG.standard_normal(4), np.arange(4, dtype=np.int64)
    np.testing.assert_allclose(weft.grad(lambda x: jnp.sum(scaled(x, n)[0]))(x), 3.0 * n, rtol=1e-15)
    outs, tangents = jvp(scaled, [x, n], [np.ones(4), np.zeros(4, np.int64)])
    np.testing.assert_allclose(tangents[0], 3.0 * n, rtol=1e-15)
    np.testing.assert_array_equal(tangents[1], np.zeros(4, np.int64))
    np.testing.assert_array_equal(outs[1], n + 1)


def test_second_order_differentiates_the_rule():
    # d/dx of the rule's 2 (1 - tanh^2): -4 tanh (1 - tanh^2), not f's second derivative.
    x = RNG.standard_normal(5)
    g2 = weft.grad(lambda x: jnp.sum(weft.grad(lambda x: jnp.sum(skewed(x)))(x)))(x)
    np.testing.assert_allclose(g2, -4 * np.tanh(x) * (1 - np.tanh(x) ** 2), rtol=1e-12)
    xs = np.linspace(-4, 4, 9)  # sigmoid's derivative, from log1pexp's rule differentiated
    g2 = weft.grad(lambda x: jnp.sum(weft.grad(lambda x: jnp.sum(log1pexp(x)))(x)))(xs)
    np.testing.assert_allclose(g2, sigmoid(xs) * (1 - sigmoid(xs)), rtol=1e-12)


def test_the_rule_is_traced_once_per_signature(monkeypatch):
    register = _weft.register_custom_jvp
    registered = []
    monkeypatch.setattr(_weft, "register_custom_jvp", lambda *a: registered.append(a) or register(*a))

    @weft.custom_jvp
    def f(x):
        return jnp.tanh(x)

    f.defjvp(lambda p, t: (f(p[0]), t[0]))
    for _ in range(3):
        weft.grad(lambda x: jnp.sum(f(x)))(RNG.standard_normal(3))
    weft.grad(lambda x: jnp.sum(f(x)))(RNG.standard_normal(4))  # a new shape: a new rule
    assert len(registered) == 2


# ---- pmap, vmap ---------------------------------------------------------------------------------------------
def test_inside_a_traced_pmap_with_a_pmeaned_loss():
    # f is pmax, which has no derivative rule: differentiating works only because f's equations are not. The
    # rule hands the tangent of the replicas holding the maximum to all (linear in t: its transpose, by JAX's
    # pmap rules psum -> psum, gives them the cotangents summed over the replicas).
    @weft.custom_jvp
    def replica_max(x):
        return lax.pmax(x, "i")

    @replica_max.defjvp
    def replica_max_jvp(primals, tangents):
        x, = primals
        t, = tangents
        m = lax.pmax(x, "i")
        return m, lax.psum(jnp.where(x == m, t, 0.0), "i")

    xs = RNG.standard_normal((8, 5))
    loss, g = weft.pmap(weft.value_and_grad(lambda x: lax.pmean(jnp.sum(replica_max(x) * jnp.tanh(x)), "i")),
                        axis_name="i")(xs)
    m = xs.max(axis=0)
    np.testing.assert_allclose(np.asarray(loss), np.full(8, np.sum(m * np.tanh(xs), axis=1).mean()), rtol=1e-12)
    for r in range(8):  # a pmean'ed loss seeds each replica's own loss with 1 (JAX's pmap rules)
        want = m * (1 - np.tanh(xs[r]) ** 2) + np.where(xs[r] == m, np.tanh(xs).sum(axis=0), 0.0)
        np.testing.assert_allclose(np.asarray(g)[r], want, rtol=1e-12)


def test_vmap_batches_the_rule():
    # (through _weft.batch_program: weft.vmap is not this file's) f(x) = 2 x, the rule says 3 t.
    @weft.custom_jvp
    def tripled(x):
        return x + x

    tripled.defjvp(lambda p, t: (p[0] + p[0], t[0] + t[0] + t[0]))
    program = weft.make_program(tripled)(np.zeros(3))._program
    batched, out_batched = _weft.batch_program(program, [True], 4)
    assert list(out_batched) == [True]
    xs, ts = RNG.standard_normal((4, 3)), RNG.standard_normal((4, 3))
    np.testing.assert_allclose(_weft.run_program(batched, [xs])[0], 2 * xs, rtol=1e-15)
    np.testing.assert_allclose(_weft.run_program(_weft.jvp_program(batched), [xs, ts])[1], 3 * ts, rtol=1e-15)
    np.testing.assert_allclose(_weft.run_program(_weft.vjp_program(batched, [0]), [xs, ts])[1], 3 * ts, rtol=1e-15)


# ---- errors -------------------------------------------------------------------------------------------------
def _with_rule(rule, nondiff_argnums=()):
    @functools.partial(weft.custom_jvp, nondiff_argnums=nondiff_argnums)
    def f(x, y=None):
        return x * 2.0

    f.defjvp(rule)
    return f


ERRORS = [
    ("a tangent of the wrong shape", lambda p, t: (p[0] * 2.0, jnp.reshape(t[0], (1,))), TypeError,
     "custom_jvp(f): the jvp rule's tangent output 0 is float64[1] for a float64[] primal output (a tangent has "
     "its primal's shape and dtype)"),
    ("a tangent of the wrong dtype", lambda p, t: (p[0] * 2.0, t[0].astype(np.float32)), TypeError,
     "custom_jvp(f): the jvp rule's tangent output 0 is float32[] for a float64[] primal output"),
    ("not a pair", lambda p, t: t[0], TypeError,
     "custom_jvp(f): the jvp rule must return a pair (primal_out, tangent_out)"),
    ("structures differ", lambda p, t: (p[0] * 2.0, (t[0], t[0])), TypeError,
     "custom_jvp(f): the jvp rule's primal and tangent outputs have structures PyTreeDef(*) and PyTreeDef((*, *))"),
    ("a primal output unlike f's", lambda p, t: (jnp.stack([p[0], p[0]]), t[0]), TypeError,
     "custom_jvp(f): the jvp rule's primal output 0 is float64[2], f's output 0 is float64[] (they must be the "
     "same)"),
    ("a primal structure unlike f's", lambda p, t: ((p[0],), (t[0],)), TypeError,
     "custom_jvp(f): the jvp rule's primal output has structure PyTreeDef((*,)), f's output PyTreeDef(*)"),
]


@pytest.mark.parametrize("rule, error, text", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_the_rules_outputs_are_checked_at_the_call(rule, error, text):
    f = _with_rule(rule)
    with pytest.raises(error) as info:
        weft.grad(f)(np.float64(1.5))
    assert text in str(info.value)


def test_misuse_is_named():
    @weft.custom_jvp
    def undefined(x):
        return x

    with pytest.raises(AttributeError, match="No JVP defined for custom_jvp function undefined"):
        undefined(1.0)
    f = _with_rule(lambda y, p, t: (p[0] * 2.0, t[0] * 2.0), nondiff_argnums=(1,))
    with pytest.raises(weft.errors.UnexpectedTracerError,
                       match=r"custom_jvp\(f\): argument 1 is in nondiff_argnums but is a traced array"):
        weft.grad(lambda x: f(x, x))(np.float64(1.0))
    with pytest.raises(TypeError, match=r"custom_jvp\(f\)\.defjvps can't be used with nondiff_argnums"):
        f.defjvps(None)
    with pytest.raises(NotImplementedError, match="symbolic_zeros=True is not supported"):
        f.defjvp(lambda *a: a, symbolic_zeros=True)
    # The rule may not close over a traced value (pass it as an argument).
    closing = []
    h = _with_rule(lambda p, t: (p[0] * 2.0, t[0] * closing[0]))
    with pytest.raises(weft.InvalidArgument, match=r"custom_jvp\(f\): the jvp rule uses a traced value from outside it"):
        weft.grad(lambda x: closing.append(x) or h(x))(np.float64(1.0))
    # Forward mode through a custom_vjp function is refused, as JAX refuses it.
    g = weft.custom_vjp(lambda x: x + x)
    g.defvjp(lambda x: (x + x, None), lambda r, ct: (ct + ct,))
    program = weft.make_program(g)(np.float64(1.0))._program
    with pytest.raises(weft.InvalidArgument, match=r"can't apply forward-mode autodiff \(jvp\) to a custom_vjp"):
        _weft.jvp_program(program)


# ---- reverse mode needs a rule linear in the tangents -----------------------------------------------------------
# JAX differentiates a custom_jvp function in reverse mode by transposing the rule's tangent part and raises
# where that part is not linear in the tangents (a missing transpose rule, e.g. "for 'sin' not implemented").
# weft transposed such a rule at zero tangents, silently giving the rule's slope at t = 0.
NONLINEAR = [
    ("tanh of the tangent", lambda p, t: (p[0] * 2.0, jnp.tanh(t[0])), "= tanh"),
    ("tangent squared", lambda p, t: (p[0] * 2.0, t[0] * t[0] * p[0]), "= multiply"),
    ("a branch on the tangent", lambda p, t: (p[0] * 2.0, jnp.where(t[0] > 0, t[0], 0.0)), "made from a tangent"),
]


@pytest.mark.parametrize("rule, equation", [c[1:] for c in NONLINEAR], ids=[c[0] for c in NONLINEAR])
def test_reverse_mode_refuses_a_rule_not_linear_in_its_tangents(rule, equation):
    f = _with_rule(rule)
    with pytest.raises(weft.InvalidArgument) as info:
        weft.grad(f)(np.float64(1.5))
    text = str(info.value)
    assert "custom_jvp(f): the jvp rule is not linear in its tangents, so reverse mode cannot transpose it" in text
    assert equation in text
    # Forward mode runs the rule as written (nothing to transpose): the rule's own tangent.
    _, tangent = jvp(f, [np.float64(1.5)], [np.float64(0.5)])
    assert float(tangent[0]) == float(np.asarray(rule([np.float64(1.5)], [np.float64(0.5)])[1]))


def test_reverse_mode_transposes_a_rule_linear_in_its_tangents_with_any_primal_coefficients():
    # Coefficients made of the primals by any function (a branch on x, a quotient by x) are still linear in t.
    f = _with_rule(lambda p, t: (p[0] * 2.0, jnp.where(p[0] > 0, t[0] / p[0], -t[0]) * jnp.tanh(p[0])))
    for x in (1.5, -0.5):
        want = (1 / x if x > 0 else -1.0) * np.tanh(x)
        np.testing.assert_allclose(weft.grad(f)(np.float64(x)), want, rtol=1e-12)
