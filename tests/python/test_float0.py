"""float0 (issue 46): JAX's tangent dtype of integer and boolean values, jax.dtypes.float0, in weft's
forward and reverse mode. The expected behaviour is JAX's documented one (the autodiff cookbook and
jax.dtypes.float0: integer inputs take float0 tangents; grad refuses integer inputs unless allow_int=True and
then gives float0 zeros; vjp gives float0 cotangents for integer primals and wants float0 cotangents for
integer outputs) with JAX's error texts; the floating parts against numpy float64.
"""
import numpy as np
import pytest

import weft
import weft.numpy as jnp

pytestmark = pytest.mark.usefixtures("jax_enable_x64")

FLOAT0 = np.dtype([("float0", "V")])  # JAX's definition of jax.dtypes.float0


@pytest.fixture(scope="module", autouse=True)
def runtime():
    return weft.init(device_count=1)


def _is_float0_zeros(x, shape):
    return isinstance(x, np.ndarray) and x.dtype == FLOAT0 and x.shape == tuple(shape)


def test_float0_is_jaxs_dtype():
    assert weft.float0 == FLOAT0 and weft.float0.itemsize == 0


INT_DTYPES = [np.int32, np.int64, np.bool_, np.uint8]


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_jvp_integer_primals_and_outputs(dtype):
    x, n = np.array([0.5, -1.5, 2.0]), np.array([1, 0, 1], dtype)
    f = lambda x, n: (x * n, n)
    out, t = weft.jvp(f, (x, n), (np.ones(3), np.zeros(3, FLOAT0)))
    np.testing.assert_array_equal(t[0], n.astype(np.float64))
    assert _is_float0_zeros(t[1], (3,))  # the integer output's tangent is float0, as JAX's
    # an integer array of zeros is not a float0 tangent: JAX's TypeError
    with pytest.raises(TypeError) as info:
        weft.jvp(f, (x, n), (np.ones(3), np.zeros(3, dtype)))
    name = np.dtype(dtype).name
    assert str(info.value).startswith(
        "primal and tangent arguments to jax.jvp do not match; dtypes must be equal, or in case of int/bool primal "
        f"dtype the tangent dtype must be float0. Got primal dtype {name} and so expected tangent dtype float0, "
        f"but got tangent dtype {name} instead."), str(info.value)


def test_linearize_integer_primals_and_outputs():
    x, n = np.array([0.5, -1.5]), np.array([2, 3])
    out, f_jvp = weft.linearize(lambda x, n: (jnp.tanh(x) * n, n * 2), x, n)
    t = f_jvp(np.ones(2), np.zeros(2, FLOAT0))
    np.testing.assert_allclose(t[0], n / np.cosh(x) ** 2, rtol=1e-14)
    assert _is_float0_zeros(t[1], (2,))
    with pytest.raises(ValueError, match=r"got tangent aval int64\[2\] for primal aval int64\[2\] but expected "
                                         r"float0\[2\]"):
        f_jvp(np.ones(2), np.zeros(2, np.int64))


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_grad_refuses_integer_inputs(dtype):
    n = np.array([1, 0, 1], dtype)
    for call in (lambda: weft.grad(lambda n: jnp.sum(n * 2.0))(n),
                 lambda: weft.value_and_grad(lambda x, n: jnp.sum(x * n), argnums=(0, 1))(np.ones(3), n)):
        with pytest.raises(TypeError) as info:
            call()
        assert str(info.value) == (
            "grad requires real- or complex-valued inputs (input dtype that is a sub-dtype of np.inexact), but got "
            f"{np.dtype(dtype).name}. If you want to use Boolean- or integer-valued inputs, use vjp or set allow_int "
            "to True.")


def test_grad_allow_int_gives_float0():
    x, n = np.array([0.5, -1.5, 2.0]), np.array([1, 2, 3])
    gx, gn = weft.grad(lambda x, n: jnp.sum(jnp.tanh(x) * n), argnums=(0, 1), allow_int=True)(x, n)
    np.testing.assert_allclose(gx, n / np.cosh(x) ** 2, rtol=1e-14)
    assert _is_float0_zeros(gn, (3,))
    # a pytree with an integer leaf: that leaf's gradient is float0, the others' the true ones
    params = {"w": x, "step": np.array(7)}
    (value, g) = weft.value_and_grad(lambda p: jnp.sum(p["w"] ** 2) * p["step"], allow_int=True)(params)
    np.testing.assert_allclose(value, 7 * np.sum(x ** 2), rtol=1e-14)
    np.testing.assert_allclose(g["w"], 14 * x, rtol=1e-14)
    assert _is_float0_zeros(g["step"], ())


def test_vjp_float0_cotangents():
    x, n = np.array([0.5, -1.5]), np.array([2, 3])
    (y, m), vjp_fn = weft.vjp(lambda x, n: (x * n, n + 1), x, n)
    gx, gn = vjp_fn((np.ones(2), np.zeros(2, FLOAT0)))
    np.testing.assert_array_equal(gx, n.astype(np.float64))
    assert _is_float0_zeros(gn, (2,))  # an integer primal's cotangent is float0
    with pytest.raises(TypeError) as info:
        vjp_fn((np.ones(2), np.zeros(2, np.int64)))
    assert str(info.value) == ("Type of cotangent input to vjp pullback function (int64) is not the expected "
                               "tangent type (float0) of corresponding primal output with dtype int64.")
    # with has_aux, an integer aux takes no cotangent at all (only the value's are given)
    y, vjp_aux, aux = weft.vjp(lambda x, n: (x * n, n + 1), x, n, has_aux=True)
    np.testing.assert_array_equal(aux, n + 1)
    (gx, gn) = vjp_aux(np.ones(2))
    np.testing.assert_array_equal(gx, n.astype(np.float64))
    assert _is_float0_zeros(gn, (2,))


def test_jacobians_with_integers():
    x, n = np.array([0.5, -1.5, 2.0]), np.array([1, 2, 3])
    jx, jn = weft.jacrev(lambda x, n: x * n, argnums=(0, 1), allow_int=True)(x, n)
    np.testing.assert_array_equal(jx, np.diag(n.astype(np.float64)))
    assert _is_float0_zeros(jn, (3, 3))
    with pytest.raises(TypeError, match=r"^jacrev requires real- or complex-valued inputs \(input dtype that is a "
                                        r"sub-dtype of np.inexact\), but got int64. If you want to use Boolean- or "
                                        r"integer-valued inputs, use vjp or set allow_int to True.$"):
        weft.jacrev(lambda x, n: x * n, argnums=1)(x, n)
    # jacfwd of a function with an integer output: that output's Jacobian is float0 (JAX's jvp gives float0)
    jy, jm = weft.jacfwd(lambda x: (x * 2.0, jnp.argmax(x)))(x)
    np.testing.assert_array_equal(jy, 2 * np.eye(3))
    assert _is_float0_zeros(jm, (3,))
