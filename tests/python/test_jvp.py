"""weft.jvp, weft.linearize, weft.jacfwd, weft.jacrev, weft.hessian (issue 46): forward mode with JAX's
signatures. Expected values are independent of weft: central differences of the same function written with
numpy (float64), and PyTorch's torch.autograd.functional.jacobian / hessian / hvp (float64; Debian's
python3-torch, the tests that need it are skipped without it). Also JAX's argument checks and their texts,
the jacobians' pytree layout (out_shape + in_shape, pytrees of pytrees), and composition with jit, grad,
pmap and each other.
"""
import numpy as np
import pytest

import weft
import weft.numpy as jnp
from weft import lax

from conftest import assert_close

try:
    import torch
except ImportError:  # (Debian's python3-torch; apt-get install -y --no-install-recommends python3-torch)
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch (Debian's python3-torch) is not installed: the "
                                                       "jacobian / hessian references come from it")

# 64-bit types on (JAX's jax_enable_x64; conftest.py): float64 against float64 differences and PyTorch.
pytestmark = pytest.mark.usefixtures("jax_enable_x64")


@pytest.fixture(scope="module", autouse=True)
def runtime():
    return weft.init(device_count=8)


RNG = np.random.default_rng(46)


def _softmax(m, x):
    e = m.exp(x - m.max(x, axis=-1, keepdims=True))
    return e / m.sum(e, axis=-1, keepdims=True)


# name, f(m, *args) written once for numpy (m = np) and weft.numpy (m = jnp), its PyTorch twin, argument shapes.
# Each exercises a family of primitives' JVP rules (elementwise, matmul, reductions, shapes, indexing).
CASES = [
    ("tanh_times_x", lambda m, x: m.tanh(x) * x, lambda x: torch.tanh(x) * x, [(5,)]),
    ("rational", lambda m, x: x / (1.0 + x * x), lambda x: x / (1.0 + x * x), [(2, 3)]),
    ("softplus", lambda m, x: m.log(1.0 + m.exp(x)), lambda x: torch.log(1.0 + torch.exp(x)), [(4,)]),
    ("tanh_matmul", lambda m, w, x: m.tanh(x @ w), lambda w, x: torch.tanh(x @ w), [(3, 2), (4, 3)]),
    ("softmax", _softmax, lambda x: torch.softmax(x, -1), [(2, 5)]),
    ("mean_of_squares", lambda m, x: m.mean(x * x, axis=0), lambda x: torch.mean(x * x, dim=0), [(3, 4)]),
    ("sum_keepdims", lambda m, x: x * m.sum(x, axis=1, keepdims=True),
     lambda x: x * torch.sum(x, dim=1, keepdim=True), [(2, 3)]),
    ("reshape_transpose", lambda m, x: (x.reshape(3, 4).T * x.reshape(4, 3)),
     lambda x: x.reshape(3, 4).T * x.reshape(4, 3), [(12,)]),
    ("indexing", lambda m, x: x[1:3] * x[0], lambda x: x[1:3] * x[0], [(4, 2)]),
    ("two_args_exp", lambda m, a, b: m.exp(a) * b - a / b, lambda a, b: torch.exp(a) * b - a / b, [(3,), (3,)]),
]
SCALAR_CASES = [  # scalar outputs: hessians
    ("sum_tanh_sq", lambda m, x: m.sum(m.tanh(x) * x * x), lambda x: torch.sum(torch.tanh(x) * x * x), [(4,)]),
    ("quadratic_form", lambda m, w, x: m.sum((x @ w) ** 2), lambda w, x: torch.sum((x @ w) ** 2), [(3, 2), (2, 3)]),
    ("logsumexp", lambda m, x: m.log(m.sum(m.exp(x))), lambda x: torch.logsumexp(x, 0), [(5,)]),
]
IDS = [c[0] for c in CASES]
SCALAR_IDS = [c[0] for c in SCALAR_CASES]


def _args(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(0.5, 1.5, s) * rng.choice([-1.0, 1.0], s) for s in shapes]


def _central_jvp(f, primals, tangents, eps=1e-6):
    up = f(*[p + eps * t for p, t in zip(primals, tangents)])
    down = f(*[p - eps * t for p, t in zip(primals, tangents)])
    return (up - down) / (2 * eps)


def _torch_args(args):
    return tuple(torch.from_numpy(np.array(a)) for a in args)


# ---- jvp against central differences ---------------------------------------------------------------------
@pytest.mark.parametrize("name,f,tf,shapes", CASES + SCALAR_CASES, ids=IDS + SCALAR_IDS)
def test_jvp_matches_central_differences(name, f, tf, shapes):
    primals = _args(shapes)
    tangents = _args(shapes, seed=1)
    out, tangent_out = weft.jvp(lambda *a: f(jnp, *a), tuple(primals), tuple(tangents))
    assert_close(out, f(np, *primals), rtol=1e-12)
    assert np.asarray(tangent_out).dtype == np.float64
    assert_close(tangent_out, _central_jvp(lambda *a: f(np, *a), primals, tangents), rtol=1e-7)


@pytest.mark.parametrize("name,f,tf,shapes", CASES[:4], ids=IDS[:4])
def test_linearize_equals_jvp(name, f, tf, shapes):
    primals = _args(shapes)
    out, f_jvp = weft.linearize(lambda *a: f(jnp, *a), *primals)
    assert_close(out, f(np, *primals), rtol=1e-12)
    for seed in (1, 2):  # f_jvp is linear: any tangent, as often as asked
        tangents = _args(shapes, seed=seed)
        assert_close(f_jvp(*tangents), _central_jvp(lambda *a: f(np, *a), primals, tangents), rtol=1e-7)


def test_linearize_has_aux():
    x, t = _args([(3,)])[0], _args([(3,)], seed=1)[0]
    out, f_jvp, aux = weft.linearize(lambda x: (jnp.exp(x) * x, {"twice": x * 2.0}), x, has_aux=True)
    assert_close(out, np.exp(x) * x, rtol=1e-15)
    assert_close(aux["twice"], 2 * x, rtol=1e-15)
    assert_close(f_jvp(t), np.exp(x) * (x + 1) * t, rtol=1e-14)


def test_jvp_pytrees_and_aux():
    # Primals and tangents are pytrees; the output pytree's tangents have its structure; aux is passed through.
    params = {"w": _args([(3, 2)])[0], "b": _args([(2,)], seed=3)[0]}
    dparams = {"w": _args([(3, 2)], seed=4)[0], "b": _args([(2,)], seed=5)[0]}
    x = _args([(4, 3)], seed=6)[0]

    def f(m, p, x):
        h = m.tanh(x @ p["w"] + p["b"])
        return {"h": h, "s": m.sum(h)}

    out, t_out, aux = weft.jvp(lambda p: (f(jnp, p, x), p["b"] * 2), (params,), (dparams,), has_aux=True)
    assert set(out) == set(t_out) == {"h", "s"}
    assert_close(aux, params["b"] * 2, rtol=1e-15)
    for key in ("h", "s"):
        want = _central_jvp(lambda w, b: f(np, {"w": w, "b": b}, x)[key], [params["w"], params["b"]],
                            [dparams["w"], dparams["b"]])
        assert_close(t_out[key], want, rtol=1e-7)


def test_jvp_integer_primal_takes_float0():
    # JAX's rule: an integer primal's tangent is float0 (an integer array of zeros is refused:
    # tests/python/test_float0.py), and an integer output's tangent is float0 zeros.
    x = _args([(3,)])[0]
    n = np.arange(3, dtype=np.int64)
    out, t = weft.jvp(lambda x, n: x * n, (x, n), (np.ones(3), np.zeros(3, weft.float0)))
    np.testing.assert_array_equal(out, x * n)
    np.testing.assert_array_equal(t, n.astype(np.float64))  # d(x n) = n dx, dn = 0


# JAX's checks (jax._src.api._jvp), by the kind of mistake: the error type and the start of JAX's text.
JVP_ERRORS = [
    ("not_tuples", lambda: weft.jvp(lambda x: x, np.ones(2), np.ones(2)), TypeError,
     "primal and tangent arguments to jax.jvp must be tuples or lists; found ndarray and ndarray"),
    ("tree_structure", lambda: weft.jvp(lambda x, y: x * y, (np.ones(2),), ()), TypeError,
     "primal and tangent arguments to jax.jvp must have the same tree structure"),
    ("tuple_vs_list", lambda: weft.jvp(lambda x: x, (np.ones(2),), [np.ones(2)]), TypeError,
     "primal and tangent arguments to jax.jvp must have the same tree structure"),
    ("dtype", lambda: weft.jvp(lambda x: -x, (np.ones(2, np.float32),), (np.ones(2, np.float64),)), TypeError,
     "primal and tangent arguments to jax.jvp do not match; dtypes must be equal"),
    ("int_needs_float0", lambda: weft.jvp(lambda x: x, (np.arange(2),), (np.ones(2),)), TypeError,
     "primal and tangent arguments to jax.jvp do not match; dtypes must be equal, or in case of int/bool primal "
     "dtype the tangent dtype must be float0. Got primal dtype int64 and so expected tangent dtype float0"),
    ("shape", lambda: weft.jvp(lambda x: x + 1, (np.ones(3),), (np.ones(4),)), ValueError,
     "jvp called with different primal and tangent shapes;Got primal shape (3,) and tangent shape as (4,)"),
]


@pytest.mark.parametrize("name,call,error,text", JVP_ERRORS, ids=[e[0] for e in JVP_ERRORS])
def test_jvp_argument_checks(name, call, error, text):
    with pytest.raises(error) as info:
        call()
    assert str(info.value).startswith(text), str(info.value)


def test_linearize_checks_tangents():
    _, f_jvp = weft.linearize(lambda x: x * 2.0, np.ones(3))
    with pytest.raises(ValueError, match="linearized function called on tangent values inconsistent with the "
                                         "original primal values: got tangent aval float64\\[4\\]"):
        f_jvp(np.ones(4))
    with pytest.raises(ValueError, match="the tangents have tree structure"):
        f_jvp(np.ones(3), np.ones(3))


# ---- jacobians against PyTorch ---------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("mode", ["jacfwd", "jacrev"])
@pytest.mark.parametrize("name,f,tf,shapes", CASES + SCALAR_CASES, ids=IDS + SCALAR_IDS)
def test_jacobian_matches_torch(mode, name, f, tf, shapes):
    args = _args(shapes)
    argnums = tuple(range(len(args)))
    jac = getattr(weft, mode)(lambda *a: f(jnp, *a), argnums=argnums)(*args)
    want = torch.autograd.functional.jacobian(tf, _torch_args(args))
    assert isinstance(jac, tuple) and len(jac) == len(args)
    for got, w in zip(jac, want):
        w = w.numpy()
        assert np.asarray(got).shape == w.shape and np.asarray(got).dtype == np.float64
        assert_close(got, w, rtol=1e-12)


@needs_torch
@pytest.mark.parametrize("name,f,tf,shapes", SCALAR_CASES, ids=SCALAR_IDS)
def test_hessian_matches_torch(name, f, tf, shapes):
    args = _args(shapes)
    argnums = tuple(range(len(args)))
    hess = weft.hessian(lambda *a: f(jnp, *a), argnums=argnums)(*args)
    want = torch.autograd.functional.hessian(tf, _torch_args(args))
    for i in argnums:
        for j in argnums:
            w = want[i][j].numpy()
            assert np.asarray(hess[i][j]).shape == w.shape == args[i].shape + args[j].shape
            assert_close(hess[i][j], w, rtol=1e-11)
    # argnums an int: the bare array, in_shape + in_shape
    h0 = weft.hessian(lambda *a: f(jnp, *a))(*args)
    assert_close(h0, want[0][0].numpy(), rtol=1e-11)


@needs_torch
def test_jacobian_pytree_layout():
    # A dict argument and a (tuple, dict) output: jac[output path][argument path], out_shape + in_shape each.
    p = {"w": _args([(3, 2)])[0], "b": _args([(2,)], seed=2)[0]}
    x = _args([(4, 3)], seed=3)[0]

    def f(m, p):
        h = m.tanh(x @ p["w"] + p["b"])
        return (m.sum(h, axis=0), {"h": h})

    w_t, b_t, x_t = _torch_args([p["w"], p["b"], x])
    want = torch.autograd.functional.jacobian(
        lambda w, b: (torch.sum(torch.tanh(x_t @ w + b), dim=0), torch.tanh(x_t @ w + b)), (w_t, b_t))
    for mode in (weft.jacfwd, weft.jacrev):
        jac = mode(lambda p: f(jnp, p))(p)
        assert isinstance(jac, tuple) and isinstance(jac[1], dict) and set(jac[0]) == {"w", "b"}
        assert_close(jac[0]["w"], want[0][0].numpy(), rtol=1e-12)
        assert_close(jac[0]["b"], want[0][1].numpy(), rtol=1e-12)
        assert np.shape(jac[1]["h"]["w"]) == (4, 2, 3, 2)
        assert_close(jac[1]["h"]["w"], want[1][0].numpy(), rtol=1e-12)
        assert_close(jac[1]["h"]["b"], want[1][1].numpy(), rtol=1e-12)


def test_jacobian_has_aux_and_unused_input():
    # has_aux: (jacobian, aux); an input the output does not depend on has a zero block (unbatched, broadcast).
    x, y = _args([(3,), (2,)])
    for mode in (weft.jacfwd, weft.jacrev):
        jac, aux = mode(lambda x, y: (x * 3.0, {"y": y}), argnums=(0, 1), has_aux=True)(x, y)
        np.testing.assert_array_equal(jac[0], 3.0 * np.eye(3))
        np.testing.assert_array_equal(jac[1], np.zeros((3, 2)))
        np.testing.assert_array_equal(aux["y"], y)


def test_jacobian_passes_other_arguments_as_they_are():
    # JAX's argnums_partial: an argument not differentiated reaches fun untouched (a flag usable in an `if`).
    x = _args([(3,)])[0]
    f = lambda x, cube: x * x * x if cube else x * x
    for mode in (weft.jacfwd, weft.jacrev):
        assert_close(mode(f)(x, True), np.diag(3 * x * x), rtol=1e-15)
        assert_close(mode(f)(x, False), np.diag(2 * x), rtol=1e-15)


@pytest.mark.parametrize("mode", ["jacfwd", "jacrev", "hessian"])
def test_jacobian_is_one_program_not_a_loop(mode):
    # The basis is one batched input, not a loop of JVPs / VJPs: the program's size does not grow with n.
    f = lambda x: jnp.sum(jnp.tanh(x) * x) if mode == "hessian" else jnp.tanh(x) * x
    sizes = {n: len(weft.make_program(getattr(weft, mode)(f))(np.ones(n)).equations) for n in (2, 40)}
    assert sizes[2] == sizes[40], sizes


def test_jacrev_allow_int():
    # allow_int: an integer argument's block is float0 zeros (as JAX's), the floating one's the Jacobian.
    x, n = _args([(3,)])[0], np.arange(3)
    jx, jn = weft.jacrev(lambda x, n: x * n, argnums=(0, 1), allow_int=True)(x, n)
    np.testing.assert_array_equal(jx, np.diag(n.astype(np.float64)))
    assert np.shape(jn) == (3, 3) and jn.dtype == weft.float0


def test_jacobian_refuses_integers():
    with pytest.raises(TypeError, match=r"jacfwd requires real-valued inputs \(input dtype that is a sub-dtype of "
                                        r"np.floating\), but got int64"):
        weft.jacfwd(lambda x: x * 2)(np.arange(3))
    with pytest.raises(TypeError, match=r"jacrev requires real-valued outputs \(output dtype that is a sub-dtype "
                                        r"of np.floating\), but got int64"):
        weft.jacrev(lambda x: jnp.argmax(x))(np.ones(3))
    with pytest.raises(TypeError, match="jacfwd with holomorphic=True requires inputs with complex dtype"):
        weft.jacfwd(lambda x: x, holomorphic=True)(np.ones(3))


# ---- composition ----------------------------------------------------------------------------------------
@needs_torch
def test_forward_over_reverse_and_reverse_over_forward():
    # Hessian-vector products two ways against torch's hvp: jvp of grad, and grad of a jvp.
    name, f, tf, shapes = SCALAR_CASES[0]
    x, v = _args(shapes)[0], _args(shapes, seed=7)[0]
    _, want = torch.autograd.functional.hvp(tf, torch.from_numpy(x), torch.from_numpy(v))
    fwd_rev = weft.jvp(weft.grad(lambda x: f(jnp, x)), (x,), (v,))[1]
    rev_fwd = weft.grad(lambda x: weft.jvp(lambda x: f(jnp, x), (x,), (v,))[1])(x)
    assert_close(fwd_rev, want.numpy(), rtol=1e-12)
    assert_close(rev_fwd, want.numpy(), rtol=1e-12)


def test_under_jit_and_jit_inside():
    name, f, tf, shapes = CASES[3]
    args = _args(shapes)
    tangents = _args(shapes, seed=1)
    g = lambda *a: f(jnp, *a)
    want = _central_jvp(lambda *a: f(np, *a), args, tangents)
    assert_close(weft.jit(lambda *a: weft.jvp(g, a[:2], a[2:])[1])(*args, *tangents), want, rtol=1e-7)
    assert_close(weft.jvp(weft.jit(g), tuple(args), tuple(tangents))[1], want, rtol=1e-7)
    eager = weft.jacfwd(g, argnums=(0, 1))(*args)
    jitted = weft.jit(weft.jacfwd(g, argnums=(0, 1)))(*args)
    for a, b in zip(eager, jitted):
        np.testing.assert_array_equal(a, b)
    # a tracer of the enclosing trace used by the function (a closure): a constant of the JVP, zero tangent
    closed = weft.jit(lambda w, x, t: weft.jvp(lambda x: jnp.tanh(x @ w), (x,), (t,))[1])(args[0], args[1],
                                                                                          tangents[1])
    want_x = _central_jvp(lambda x: np.tanh(x @ args[0]), [args[1]], [tangents[1]])
    assert_close(closed, want_x, rtol=1e-7)


def test_inside_pmap_with_collectives():
    # Per replica: the JVP of a psum'ed function (psum is linear: its JVP is the psum of the tangents).
    xs = _args([(4, 3)])[0]
    ts = _args([(4, 3)], seed=1)[0]

    def step(x, t):
        return weft.jvp(lambda x: lax.psum(jnp.tanh(x), "i"), (x,), (t,))[1]

    got = np.asarray(weft.pmap(step, axis_name="i")(xs, ts))
    want = np.sum((1 - np.tanh(xs) ** 2) * ts, axis=0)
    for row in got:
        assert_close(row, want, rtol=1e-12)
    # jacrev per replica of a pmean'ed loss: each replica's own derivative (JAX's pmap rule: pmean's
    # cotangent is the pmean of the replicas' cotangents, 1), as weft.grad gives
    jac = np.asarray(weft.pmap(lambda x: weft.jacrev(lambda x: lax.pmean(jnp.sum(x * x), "i"))(x),
                               axis_name="i")(xs))
    assert_close(jac, 2 * xs, rtol=1e-12)
