"""shard_map's two JAX signatures and the axis size as a concrete value (issue 47, part 1): jax.shard_map's
keyword form and decorator (@weft.shard_map(mesh=..., in_specs=..., out_specs=...)), the experimental
weft.experimental.shard_map.shard_map(f, mesh, in_specs, out_specs, check_rep=...), a shard_map called with
no arguments, lax.psum of a value that is no tracer (psum(1, 'i') is the axis size, a Python int, as JAX
gives it) and lax.axis_size.

Expected values are numpy's (blocks laid out by hand from the specs), sizes are the mesh's; messages are
checked by their text.
"""
import numpy as np
import pytest

import weft
import weft.numpy as jnp
from weft import P, lax
from weft.experimental.shard_map import shard_map as experimental_shard_map

N = 8


@pytest.fixture(scope="module", autouse=True)
def runtime():
    return weft.init(device_count=N)


@pytest.fixture(scope="module")
def mesh():
    return weft.Mesh(np.arange(N), ("i",))


@pytest.fixture(scope="module")
def mesh2():
    return weft.Mesh(np.arange(N).reshape(2, 4), ("x", "y"))


X = np.random.default_rng(4747).standard_normal((N * 2, 3)).astype(np.float32)


# ---- the signatures --------------------------------------------------------------------------------------------

def test_decorator_form_with_keywords(mesh):
    @weft.shard_map(mesh=mesh, in_specs=P("i"), out_specs=P())
    def total(x):
        return lax.psum(x.sum(0), "i")

    np.testing.assert_allclose(np.asarray(total(X)), X.astype(np.float64).sum(0), rtol=1e-5)


def test_keyword_and_positional_forms_agree(mesh):
    def f(x):
        return x * 2.0 + lax.axis_index("i")

    # Device d holds rows 2d, 2d+1 and adds d.
    want = X * 2.0 + np.repeat(np.arange(N), 2)[:, None]
    for g in (weft.shard_map(f, mesh, P("i"), P("i")),
              weft.shard_map(f, mesh=mesh, in_specs=P("i"), out_specs=P("i")),
              weft.shard_map(f, mesh=mesh, in_specs=(P("i"),), out_specs=P("i"), axis_names={"i"}, check_vma=True),
              experimental_shard_map(f, mesh, (P("i"),), P("i"), check_rep=True)):
        np.testing.assert_allclose(np.asarray(g(X)), want, rtol=1e-6)


def test_experimental_check_rep_is_check_vma(mesh):
    def ones(x):
        return x * 0.0 + 1.0  # equal on every device, typed as varying over 'i'

    with pytest.raises(ValueError, match=r"output 0 \(float32\[2, 3\]\) varies over mesh axes \('i',\) but its "
                                         r"out_spec P\(\) does not name them"):
        experimental_shard_map(ones, mesh, P("i"), P(), check_rep=True)(X)
    np.testing.assert_array_equal(np.asarray(experimental_shard_map(ones, mesh, P("i"), P(), check_rep=False)(X)),
                                  np.ones((2, 3), np.float32))


@pytest.mark.parametrize("call, error, message", [
    (lambda m: weft.shard_map(lambda x: x, mesh=m, in_specs=P()), TypeError, r"missing the required argument "
                                                                              r"'out_specs'"),
    (lambda m: weft.shard_map(lambda x: x, in_specs=P(), out_specs=P()), ValueError, r"mesh is required: weft has no "
                                                                                     r"context mesh"),
    (lambda m: weft.shard_map(lambda x: x, mesh=m, out_specs=P()), ValueError, r"in_specs is required: JAX infers it "
                                                                               r"only from arguments sharded over "
                                                                               r"Explicit mesh axes"),
    (lambda m: weft.shard_map(lambda x: x, mesh=m, in_specs=None, out_specs=P()), ValueError,
     r"in_specs=None \(every argument static\) is not supported"),
    (lambda m: weft.shard_map(lambda x: x, mesh=m, in_specs=P(), out_specs=P(), axis_names=["i"]), TypeError,
     r"`axis_names` argument of shard_map should be of type `frozenset` or `set`"),
    (lambda m: weft.shard_map(lambda x: x, mesh=m, in_specs=P(), out_specs=P(), axis_names={"j"}), ValueError,
     r"requires axis_names=\{'j'\} to be a subset of mesh.axis_names=\{'i'\}"),
    (lambda m: weft.shard_map(3, mesh=m, in_specs=P(), out_specs=P()), TypeError,
     r"shard_map requires a callable for its first argument, but got 3"),
    (lambda m: experimental_shard_map(lambda x: x, m, P(), P(), auto=frozenset({"i"})), ValueError,
     r"partially automatic axes \(\['i'\]: auto"),
])
def test_signature_misuse_is_named(mesh, call, error, message):
    with pytest.raises(error, match=message):
        call(mesh)


def test_axis_names_leaving_an_axis_out_is_partial_auto_and_refused(mesh2):
    with pytest.raises(ValueError, match=r"partially automatic axes \(\['y'\]: auto, or axis_names leaving them out\)"):
        weft.shard_map(lambda x: x, mesh=mesh2, in_specs=P(), out_specs=P(), axis_names={"x"})


# ---- no arguments ----------------------------------------------------------------------------------------------

def test_shard_map_without_arguments(mesh, mesh2):
    replicated = weft.shard_map(lambda: jnp.arange(4.0) * 2, mesh=mesh, in_specs=(), out_specs=P())
    np.testing.assert_array_equal(np.asarray(replicated()), np.arange(4.0) * 2)
    # Each device's block, concatenated along the mesh axis.
    per_device = weft.shard_map(lambda: jnp.zeros(2) + lax.axis_index("i"), mesh=mesh, in_specs=(), out_specs=P("i"))
    np.testing.assert_array_equal(np.asarray(per_device()), np.repeat(np.arange(N, dtype=np.float32), 2))

    @weft.shard_map(mesh=mesh2, in_specs=(), out_specs=P("x", "y"))
    def grid():
        return jnp.zeros((1, 1)) + 10 * lax.axis_index("x") + lax.axis_index("y")

    np.testing.assert_array_equal(np.asarray(grid()), 10 * np.arange(2)[:, None] + np.arange(4)[None, :])
    assert str(weft.make_program(replicated)()).startswith("{ lambda")  # lowered without arguments too


# ---- psum of a constant and axis_size ----------------------------------------------------------------------------

def test_psum_of_a_python_number_is_the_axis_size_as_a_python_int():
    seen = []

    def f(x):
        n = lax.psum(1, "i")
        seen.append(n)
        return x + jnp.zeros(n)  # usable as a shape: a concrete value

    out = weft.pmap(f, "i")(np.ones((N, N), np.float32))
    assert seen == [N] and type(seen[0]) is int
    np.testing.assert_array_equal(np.asarray(out), np.ones((N, N)))


@pytest.mark.parametrize("axes, want", [("x", 2), ("y", 4), (("x", "y"), 8)])
def test_psum_of_a_constant_over_mesh_axes(mesh2, axes, want):
    seen = {}

    def f(x):
        seen["int"] = lax.psum(1, axes)
        seen["float"] = lax.psum(0.5, axes)
        seen["array"] = lax.psum(np.array([1.0, -2.0], np.float32), axes)
        seen["size"] = lax.axis_size(axes)
        return x

    weft.shard_map(f, mesh=mesh2, in_specs=P("x", "y"), out_specs=P("x", "y"))(np.zeros((2, 4), np.float32))
    assert type(seen["int"]) is int and seen["int"] == want
    assert type(seen["float"]) is float and seen["float"] == 0.5 * want
    assert isinstance(seen["array"], np.ndarray) and seen["array"].dtype == np.float32
    np.testing.assert_array_equal(seen["array"], np.array([1.0, -2.0]) * want)
    assert type(seen["size"]) is int and seen["size"] == want


def test_psum_of_a_constant_makes_no_collective():
    p = weft.make_jaxpr(lambda x: x * lax.psum(2.0, "i"), axis_env=[("i", N)])(np.ones(3, np.float32))
    assert p.count("psum") == 0
    out = weft.pmap(lambda x: x * lax.psum(2.0, "i"), "i")(np.ones((N, 3), np.float32))
    np.testing.assert_array_equal(np.asarray(out), np.full((N, 3), 2.0 * N))


def test_psum_of_a_constant_with_groups_is_the_group_size():
    groups = [[0, 1, 2, 3], [4, 5, 6, 7]]
    seen = []
    weft.pmap(lambda x: seen.append(lax.psum(1, "i", axis_index_groups=groups)) or x, "i")(np.zeros(N, np.float32))
    assert seen == [4]


def test_psum_of_tracers_and_constants_together_is_a_collective():
    x = np.arange(N, dtype=np.float32)
    one, total = weft.pmap(lambda v: lax.psum((1.0, v), "i"), "i")(x)
    np.testing.assert_array_equal(np.asarray(one), np.full(N, float(N)))
    np.testing.assert_array_equal(np.asarray(total), np.full(N, x.astype(np.float64).sum()))


@pytest.mark.parametrize("eager", [False, True])
def test_axis_size_in_pmap(eager):
    seen = []
    weft.pmap(lambda v: seen.append(lax.axis_size("i")) or v, "i", eager=eager)(np.zeros(N, np.float32))
    assert set(seen) == {N} and all(type(n) is int for n in seen)


def test_psum_of_an_unbound_axis_name_is_refused():
    with pytest.raises(ValueError, match=r"weft\.lax\.psum: .*\bj\b"):
        weft.pmap(lambda v: v * lax.psum(1, "j"), "i")(np.zeros(N, np.float32))
