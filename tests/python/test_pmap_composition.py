"""Transformations around pmap (issue 47 §1): a pmapped function called while weft.jit, grad, vjp, jvp or vmap
traces its caller becomes one `pmap` equation of the caller's program (JAX's xla_pmap; src/program/ops/pmap.cc),
whose body is the per-replica program. Each result is checked against an independent one: the same pmap called
on its own (bit for bit), numpy's float64 derivative of the same math, central differences."""
import numpy as np
import pytest

import weft
import weft.numpy as jnp
from weft import lax

R = 4  # replicas along the pmap axis (the runtime has 8 devices; a pmap takes the first R)


def rng(seed=0):
    return np.random.default_rng(seed)


def scaled_by_total(x):
    return x * lax.psum(x, "i")


def layer(x, w):
    return jnp.tanh(x @ w)


CASES = [
    # (name, pmapped function, arguments)
    ("psum", weft.pmap(scaled_by_total, axis_name="i"), lambda r: (r.standard_normal((R, 3)).astype(np.float32),)),
    ("broadcast weight", weft.pmap(layer, axis_name="i", in_axes=(0, None)),
     lambda r: (r.standard_normal((R, 2, 3)).astype(np.float32), r.standard_normal((3, 5)).astype(np.float32))),
    ("in_axes 1, out_axes 1", weft.pmap(lambda x: x - lax.pmean(x, "i"), axis_name="i", in_axes=1, out_axes=1),
     lambda r: (r.standard_normal((3, R)).astype(np.float32),)),
    ("ppermute", weft.pmap(lambda x: lax.ppermute(x, "i", [(k, (k + 1) % R) for k in range(R)]), axis_name="i"),
     lambda r: (r.standard_normal((R, 2)).astype(np.float32),)),
    ("pytree", weft.pmap(lambda d: {"s": d["a"] + lax.psum(d["b"], "i"), "p": d["a"] * 2}, axis_name="i"),
     lambda r: ({"a": r.standard_normal((R, 2)).astype(np.float32), "b": r.standard_normal((R, 2)).astype(np.float32)},)),
]


@pytest.mark.parametrize("name, f, make", CASES, ids=[c[0] for c in CASES])
def test_jit_of_pmap_equals_the_pmap_bit_for_bit(name, f, make):
    args = make(rng())
    want = weft.tree_util.tree_map(np.asarray, f(*args))
    got = weft.tree_util.tree_map(np.asarray, weft.jit(f)(*args))
    for w, g in zip(weft.tree_util.tree_leaves(want), weft.tree_util.tree_leaves(got)):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def test_jit_of_pmap_is_one_pmap_equation_in_the_program():
    f = weft.pmap(scaled_by_total, axis_name="i")
    text = str(weft.make_jaxpr(lambda x: jnp.sum(f(x) ** 2))(np.ones((R, 3), np.float32)))
    assert text.count("pmap[") == 1 and "psum[axes=('i',)]" in text, text


def test_global_work_before_and_after_the_pmap_in_one_jit():
    f = weft.pmap(scaled_by_total, axis_name="i")
    x = rng(1).standard_normal((R, 3)).astype(np.float32)

    def g(x):
        return jnp.sum(f(jnp.exp(x)) * 3.0, axis=0)

    want = np.asarray(f(np.exp(x))).astype(np.float32).sum(axis=0) * np.float32(3)
    np.testing.assert_allclose(np.asarray(weft.jit(g)(x)), want, rtol=1e-6)


def test_grad_of_a_function_calling_pmap_matches_the_float64_derivative():
    # loss = sum_r sum_j x_rj * S_j with S = sum_r x_r: d loss / d x_rj = S_j + sum_r x_rj = 2 S_j.
    f = weft.pmap(scaled_by_total, axis_name="i")
    x = rng(2).standard_normal((R, 3)).astype(np.float32)
    g = weft.grad(lambda x: jnp.sum(f(x)))(x)
    want = np.broadcast_to(2 * x.astype(np.float64).sum(0), x.shape)
    np.testing.assert_allclose(np.asarray(g), want, rtol=1e-6)


def test_grad_of_a_broadcast_operand_sums_the_replicas_cotangents():
    # loss = sum_r sum tanh(x_r @ w): d/dw = sum_r x_r^T (1 - tanh(x_r @ w)^2), in float64.
    f = weft.pmap(layer, axis_name="i", in_axes=(0, None))
    r = rng(3)
    x = r.standard_normal((R, 2, 3)).astype(np.float32)
    w = r.standard_normal((3, 5)).astype(np.float32)
    gx, gw = weft.grad(lambda x, w: jnp.sum(f(x, w)), argnums=(0, 1))(x, w)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    t = np.tanh(x64 @ w64)
    np.testing.assert_allclose(np.asarray(gw), np.einsum("rij,rik->jk", x64, 1 - t * t), rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(gx), (1 - t * t) @ w64.T, rtol=2e-5, atol=1e-6)


def test_value_and_grad_and_jit_of_grad_through_pmap_agree():
    f = weft.pmap(lambda x: jnp.tanh(x) * lax.psum(x, "i"), axis_name="i")
    x = rng(4).standard_normal((R, 2)).astype(np.float32)
    loss = lambda x: jnp.sum(f(x))
    v, g = weft.value_and_grad(loss)(x)
    np.testing.assert_array_equal(np.asarray(weft.jit(weft.grad(loss))(x)), np.asarray(g))
    np.testing.assert_allclose(float(v), float(np.sum(np.asarray(f(x)))), rtol=1e-6)


def test_grad_through_pmap_against_central_differences_in_float64():
    with _x64():
        f = weft.pmap(lambda x, w: jnp.tanh(x * w + lax.psum(x, "i")), axis_name="i", in_axes=(0, None))
        x = rng(5).standard_normal((R, 3))
        w = rng(6).standard_normal(3)
        loss = lambda x, w: jnp.sum(f(x, w) ** 2)
        gx, gw = weft.grad(loss, argnums=(0, 1))(x, w)
        eps = 1e-6
        for arg, g, k in ((x, gx, 0), (w, gw, 1)):
            num = np.zeros_like(arg)
            for idx in np.ndindex(arg.shape):
                d = np.zeros_like(arg)
                d[idx] = eps
                plus = [x, w]
                minus = [x, w]
                plus[k], minus[k] = arg + d, arg - d
                num[idx] = (float(loss(*plus)) - float(loss(*minus))) / (2 * eps)
            np.testing.assert_allclose(np.asarray(g), num, rtol=1e-7, atol=1e-8)


class _x64:
    def __enter__(self):
        self.old = weft.config.jax_enable_x64
        weft.config.update("jax_enable_x64", True)

    def __exit__(self, *exc):
        weft.config.update("jax_enable_x64", self.old)


def test_jvp_through_pmap_matches_the_float64_derivative():
    f = weft.pmap(scaled_by_total, axis_name="i")
    x = rng(7).standard_normal((R, 3)).astype(np.float32)
    v = rng(8).standard_normal((R, 3)).astype(np.float32)
    y, t = weft.jvp(lambda x: f(x), (x,), (v,))
    x64, v64 = x.astype(np.float64), v.astype(np.float64)
    # d(x * S) = v * S + x * sum_r v_r
    np.testing.assert_allclose(np.asarray(t), v64 * x64.sum(0) + x64 * v64.sum(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(y), np.asarray(f(x)))


def test_vmap_of_a_function_calling_pmap_equals_the_stacked_calls():
    f = weft.pmap(layer, axis_name="i", in_axes=(0, None))
    r = rng(9)
    xs = r.standard_normal((5, R, 2, 3)).astype(np.float32)
    w = r.standard_normal((3, 4)).astype(np.float32)
    got = np.asarray(weft.vmap(lambda x: f(x, w))(xs))
    want = np.stack([np.asarray(f(x, w)) for x in xs])
    np.testing.assert_array_equal(got, want)


def test_a_closed_over_traced_value_reaches_every_replica_whole():
    x = rng(10).standard_normal((R, 3)).astype(np.float32)
    b = rng(11).standard_normal(3).astype(np.float32)

    def g(x, b):
        c = b * 2.0
        return weft.pmap(lambda v: v + c, axis_name="i")(x)

    np.testing.assert_array_equal(np.asarray(weft.jit(g)(x, b)), x + b * np.float32(2))
    gb = weft.grad(lambda x, b: jnp.sum(g(x, b)), argnums=1)(x, b)
    np.testing.assert_allclose(np.asarray(gb), np.full(3, 2.0 * R), rtol=1e-6)


def test_an_eager_pmap_under_jit_is_refused_naming_both():
    f = weft.pmap(lambda x: x, axis_name="i", eager=True)
    with pytest.raises(weft.InvalidArgument, match=r"eager pmap \(eager=True\) runs Python per replica and cannot "
                                                   r"be traced by jit"):
        weft.jit(lambda x: f(x))(np.ones((R, 2), np.float32))



# ---- shard_map inside jit / grad: the caller's program cuts the blocks, one pmap equation runs them ----------

def _mesh():
    return weft.make_mesh((4, 2), ("x", "y"))


def _sm_cases():
    P = weft.P
    mesh = _mesh()

    def partial_sums(a, b):
        return lax.psum(a * jnp.sum(b), "y"), a * 2.0

    def data_parallel_loss(w, x):  # the shard_map tutorial's data-parallel pattern: a mean over the batch shards
        return lax.pmean(jnp.mean(jnp.tanh(x @ w) ** 2), ("x", "y"))

    return [
        ("psum over y, replicated b", weft.shard_map(partial_sums, mesh=mesh, in_specs=(P("x", "y"), P()),
                                                    out_specs=(P("x"), P("x", "y"))),
         lambda r: (r.standard_normal((8, 6)), r.standard_normal(3))),
        ("data parallel", weft.shard_map(data_parallel_loss, mesh=mesh, in_specs=(P(), P(("x", "y"))), out_specs=P()),
         lambda r: (r.standard_normal((3, 2)), r.standard_normal((16, 3)))),
        ("no check_vma", weft.shard_map(lambda a, b: lax.psum(a * b, ("x", "y")), mesh=mesh,
                                        in_specs=(P("x", "y"), P()), out_specs=P(), check_vma=False),
         lambda r: (r.standard_normal((4, 2)), r.standard_normal(()))),
    ]


SM_CASES = _sm_cases()


@pytest.mark.parametrize("name, f, make", SM_CASES, ids=[c[0] for c in SM_CASES])
def test_jit_of_shard_map_equals_the_shard_map_bit_for_bit(name, f, make):
    args = [a.astype(np.float32) for a in make(rng(20))]
    want = weft.tree_util.tree_leaves(f(*args))
    got = weft.tree_util.tree_leaves(weft.jit(f)(*args))
    for w, g in zip(want, got):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


@pytest.mark.parametrize("name, f, make", SM_CASES, ids=[c[0] for c in SM_CASES])
def test_grad_through_shard_map_against_central_differences_in_float64(name, f, make):
    with _x64():
        args = list(make(rng(21)))

        def loss(*a):
            outs = weft.tree_util.tree_leaves(f(*a))
            return sum(jnp.sum(jnp.tanh(o) * (k + 1.0)) for k, o in enumerate(outs))

        grads = weft.grad(loss, argnums=tuple(range(len(args))))(*args)
        eps = 1e-6
        for k, (arg, g) in enumerate(zip(args, grads)):
            num = np.zeros_like(arg)
            for idx in np.ndindex(np.shape(arg)):
                d = np.zeros_like(arg)
                d[idx] = eps
                plus, minus = list(args), list(args)
                plus[k], minus[k] = arg + d, arg - d
                num[idx] = (float(loss(*plus)) - float(loss(*minus))) / (2 * eps)
            np.testing.assert_allclose(np.asarray(g), num, rtol=1e-6, atol=1e-9, err_msg=f"{name}: argument {k}")


def test_shard_map_between_global_work_in_one_jit_and_its_program():
    P = weft.P
    sm = weft.shard_map(lambda a: lax.psum(a, "y") * 2.0, mesh=_mesh(), in_specs=P("x", "y"), out_specs=P("x"))
    a = rng(22).standard_normal((8, 4)).astype(np.float32)
    g = lambda a: jnp.exp(sm(a + 1.0)) - 3.0
    # (the reference: the same ops outside jit, one after another: weft's exp kernel, not numpy's)
    want = np.asarray(jnp.exp(np.asarray(sm(a + np.float32(1))))) - np.float32(3)
    np.testing.assert_array_equal(np.asarray(weft.jit(g)(a)), want)
    text = str(weft.make_jaxpr(g)(a))
    assert text.count("pmap[") == 1 and "psum[axes=('y',)]" in text, text


def test_shard_map_on_a_mesh_of_other_devices_is_refused_inside_jit():
    P = weft.P
    mesh = weft.Mesh(np.arange(8)[::-1].reshape(4, 2), ("x", "y"))
    sm = weft.shard_map(lambda a: a, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    with pytest.raises(weft.InvalidArgument, match=r"inside jit\(<lambda>\), a shard_map runs on the runtime's "
                                                   r"first devices in order"):
        weft.jit(lambda a: sm(a))(np.ones((4, 2), np.float32))
