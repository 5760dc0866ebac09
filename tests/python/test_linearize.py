"""Partial evaluation (weft._weft.partial_eval, JAX's partial_eval_jaxpr_nounits) and weft.linearize built on
it (issue 46): the known program runs the primal computation once, f_jvp only the linear program. Expected
values are independent of weft: numpy float64 of the same math and central differences; the split's shape is
checked against JAX's documented example (docstring of partial_eval_jaxpr_nounits).
"""
import numpy as np
import pytest

import weft
import weft.numpy as jnp
from weft import _weft, lax

from conftest import assert_close

pytestmark = pytest.mark.usefixtures("jax_enable_x64")


@pytest.fixture(scope="module", autouse=True)
def runtime():
    return weft.init(device_count=4)


def _program(f, *args, axis_env=None):
    return weft.make_program(f, axis_env=axis_env)(*args)._program


def _ops(program):
    return list(program.equation_ops)


def _central_jvp(f, primals, tangents, eps=1e-6):
    up = f(*[p + eps * t for p, t in zip(primals, tangents)])
    down = f(*[p - eps * t for p, t in zip(primals, tangents)])
    return (up - down) / (2 * eps)


def test_partial_eval_jax_docstring_example():
    # JAX's example (a, b) -> (cos a, -sin a * b) with exp for cos and tanh for sin (weft has no sin), b
    # unknown: the known program computes exp a and the residual -tanh a; the unknown one only the product.
    a, b = np.array([0.3, -1.2]), np.array([2.0, 0.5])
    program = _program(lambda a, b: (jnp.exp(a), -jnp.tanh(a) * b), a, b)
    known, unknown, out_unknowns, n_res = _weft.partial_eval(program, [False, True])
    assert out_unknowns == [False, True] and n_res == 1
    assert sorted(_ops(known)) == ["exp", "negative", "tanh"] and _ops(unknown) == ["multiply"]
    exp_a, res = _weft.run_program(known, [a])
    assert_close(exp_a, np.exp(a), rtol=1e-15)
    (prod,) = _weft.run_program(unknown, [res, b])
    assert_close(prod, -np.tanh(a) * b, rtol=1e-15)


def test_partial_eval_instantiate_and_inputs():
    # instantiate moves a known output to the unknown program, as a residual passed through; an output that is
    # an input stays on its input's side; an unknown output that needs nothing known takes no residual.
    x, y = np.array([1.0, 2.0]), np.array([3.0, -4.0])
    program = _program(lambda x, y: (jnp.exp(x), x, y * 2.0, jnp.exp(x)), x, y)
    known, unknown, out_unknowns, n_res = _weft.partial_eval(program, [False, True], [False, False, False, True])
    assert out_unknowns == [False, False, True, True] and n_res == 1
    e, x_out, res = _weft.run_program(known, [x])
    assert_close(e, np.exp(x), rtol=1e-15) and assert_close(x_out, x, rtol=0)
    y2, e2 = _weft.run_program(unknown, [res, y])
    assert_close(y2, y * 2, rtol=0)
    assert_close(e2, np.exp(x), rtol=1e-15)
    assert "exp" not in _ops(unknown)


def test_partial_eval_residuals_once_each():
    # A known value two unknown equations read is one residual.
    x, y = np.array([0.5, 2.0]), np.array([2.0, -1.0])

    def f(x, y):
        t = jnp.tanh(x)
        return t * y, t.sum() + y

    program = _program(f, x, y)
    assert program.count("tanh") == 1
    known, unknown, out_unknowns, n_res = _weft.partial_eval(program, [False, True])
    assert out_unknowns == [True, True] and n_res == 2  # tanh x and its sum
    res = _weft.run_program(known, [x])
    assert_close(res[0], np.tanh(x), rtol=1e-15) and assert_close(res[1], np.tanh(x).sum(), rtol=1e-15)
    p, s = _weft.run_program(unknown, res + [y])
    assert_close(p, np.tanh(x) * y, rtol=1e-15) and assert_close(s, np.tanh(x).sum() + y, rtol=1e-15)


def test_partial_eval_collectives_follow_their_operand():
    # A collective whose operand is known stays in the known program, one over an unknown operand goes to the
    # unknown one (every replica splits the same program alike, so they still meet in the same order).
    x, y = np.ones(3), np.ones(3)
    program = _program(lambda x, y: (lax.psum(jnp.exp(x), "i"), lax.pmax(y * x, "i")), x, y, axis_env=[("i", 4)])
    known, unknown, out_unknowns, _ = _weft.partial_eval(program, [False, True])
    assert out_unknowns == [False, True]
    assert known.count("psum") == 1 and known.count("pmax") == 0 and known.count("exp") == 1
    assert unknown.count("pmax") == 1 and unknown.count("psum") == 0 and unknown.count("exp") == 0


@pytest.mark.parametrize("unknowns,instantiate,text", [
    ([True], [], "partial_eval: 1 unknown flags for a program of 2 inputs (one per input)"),
    ([True, False], [True], "partial_eval: 1 instantiate flags for a program of 2 outputs (one per output, or none)"),
])
def test_partial_eval_checks_its_flags(unknowns, instantiate, text):
    program = _program(lambda x, y: (x * y, x + y), np.ones(2), np.ones(2))
    with pytest.raises(_weft.InvalidArgument) as info:
        _weft.partial_eval(program, unknowns, instantiate)
    assert str(info.value) == text


# ---- linearize --------------------------------------------------------------------------------------------

def _deep(m, x, w):
    # An expensive primal: tanh and exp chains and a matmul, whose derivatives need only their values.
    h = m.tanh(m.tanh(x @ w) @ w.T)
    return m.sum(m.exp(h) * h, axis=-1)


def test_linearize_runs_only_the_linear_program():
    rng = np.random.default_rng(7)
    x, w = rng.normal(size=(4, 3)), rng.normal(size=(3, 3))
    out, f_jvp = weft.linearize(lambda x, w: _deep(jnp, x, w), x, w)
    assert_close(out, _deep(np, x, w), rtol=1e-13)
    dx, dw = rng.normal(size=(4, 3)), rng.normal(size=(3, 3))
    # f_jvp's program (traced: the residuals become its constants) holds no primal equation, only products and
    # sums of the tangents with the residuals.
    linear = weft.make_program(f_jvp)(dx, dw)
    assert linear.count("tanh") == 0 and linear.count("exp") == 0, str(linear)
    assert linear.count("matmul") == 4  # d(x @ w) and d(h @ w.T): two products each, tangents in every one
    jvp_program = weft.make_program(lambda x, w, dx, dw: weft.jvp(lambda x, w: _deep(jnp, x, w), (x, w),
                                                                    (dx, dw))[1])(x, w, dx, dw)
    assert jvp_program.count("tanh") == 2 and len(linear.equations) < len(jvp_program.equations)
    for seed in range(2):  # linear: any tangent, as often as asked; the same as jvp and central differences
        r = np.random.default_rng(seed)
        dx, dw = r.normal(size=(4, 3)), r.normal(size=(3, 3))
        t = f_jvp(dx, dw)
        assert_close(t, weft.jvp(lambda x, w: _deep(jnp, x, w), (x, w), (dx, dw))[1], rtol=1e-12)
        assert_close(t, _central_jvp(lambda x, w: _deep(np, x, w), [x, w], [dx, dw]), rtol=1e-7)


def test_linearize_inside_jit_and_closures():
    # Linearized inside a jit, f_jvp's linear program is inlined into the jit's trace; a closed-over array is
    # a constant with no tangent.
    c = np.array([0.5, -2.0, 1.5])
    f = lambda x: jnp.tanh(x) * c

    @weft.jit
    def step(x, t):
        y, f_jvp = weft.linearize(f, x)
        return y, f_jvp(t), f_jvp(2.0 * t)

    x, t = np.array([0.1, 0.2, 0.3]), np.array([1.0, -1.0, 0.5])
    y, t1, t2 = step(x, t)
    assert_close(y, np.tanh(x) * c, rtol=1e-15)
    assert_close(t1, c * t / np.cosh(x) ** 2, rtol=1e-15)
    assert_close(t2, 2 * c * t / np.cosh(x) ** 2, rtol=1e-15)
    assert weft.make_program(step)(x, t).count("tanh") == 1


@pytest.mark.parametrize("tangent,text", [
    (np.ones(4), "got tangent aval float64[4] for primal aval float64[3] but expected float64[3]"),
    (np.ones(3, np.float32), "got tangent aval float32[3] for primal aval float64[3] but expected float64[3]"),
])
def test_linearize_tangent_checks_as_jax(tangent, text):
    _, f_jvp = weft.linearize(lambda x: jnp.tanh(x), np.ones(3))
    with pytest.raises(ValueError) as info:
        f_jvp(tangent)
    assert str(info.value) == ("linearized function called on tangent values inconsistent with the original "
                               f"primal values: {text} (linearize(<lambda>))")
