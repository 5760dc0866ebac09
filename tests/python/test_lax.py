"""weft.lax's collectives are one definition each (issue 46, item 1): the same call traced (the default pmap) and
eager (pmap(eager=True)) gives the same values, numpy's per-replica reference computed here, for every
collective and its parameters (axis_index_groups, axis, tiled, split/concat axes, perm, source); a pytree's
element-wise reduction is one collective per dtype under a trace too; and the "axis has no name" refusal of a
pmap made without axis_name reads the same on both paths, for every function that takes an axis name.
"""
import numpy as np
import pytest

import weft
from weft import lax

N = 4  # replicas


@pytest.fixture(autouse=True)
def four_devices():
    return weft.init(device_count=N)


def per_replica(shape):
    """N distinct integer-valued float32 arrays (sums are exact in any order), stacked."""
    count = int(np.prod(shape))
    return np.stack([(np.arange(count) * (r + 2) % 11 - 5).reshape(shape) for r in range(N)]).astype(np.float32)


def gathered(xs, group, axis, tiled):
    parts = [xs[k] for k in group]
    return np.concatenate(parts, axis) if tiled else np.stack(parts, axis)


def group_of(r, groups):
    return next(g for g in groups if r in g)


def permuted(xs, perm):
    out = [np.zeros_like(xs[0]) for _ in range(N)]  # a replica no pair sends to gets zeros (JAX's ppermute)
    for source, destination in perm:
        out[destination] = xs[source]
    return out


PAIRS = [[0, 1], [2, 3]]
STRIDED = [[0, 2], [1, 3]]

# (name, the function each replica runs, per-replica shape, numpy's results from the replicas' inputs)
CASES = [
    ("psum", lambda x: lax.psum(x, "i"), (3, 2), lambda xs: [xs.sum(0)] * N),
    ("psum groups", lambda x: lax.psum(x, "i", axis_index_groups=PAIRS), (3, 2),
     lambda xs: [xs[group_of(r, PAIRS)].sum(0) for r in range(N)]),
    ("pmean", lambda x: lax.pmean(x, "i"), (3, 2), lambda xs: [xs.mean(0)] * N),
    ("pmax groups", lambda x: lax.pmax(x, "i", axis_index_groups=STRIDED), (3, 2),
     lambda xs: [xs[group_of(r, STRIDED)].max(0) for r in range(N)]),
    ("pmin", lambda x: lax.pmin(x, ("i",)), (3, 2), lambda xs: [xs.min(0)] * N),
    ("all_gather", lambda x: lax.all_gather(x, "i"), (3, 2), lambda xs: [gathered(xs, range(N), 0, False)] * N),
    ("all_gather axis=1", lambda x: lax.all_gather(x, "i", axis=1), (3, 2),
     lambda xs: [gathered(xs, range(N), 1, False)] * N),
    ("all_gather tiled", lambda x: lax.all_gather(x, "i", axis=1, tiled=True), (3, 2),
     lambda xs: [gathered(xs, range(N), 1, True)] * N),
    ("all_gather groups", lambda x: lax.all_gather(x, "i", axis_index_groups=STRIDED), (3, 2),
     lambda xs: [gathered(xs, group_of(r, STRIDED), 0, False) for r in range(N)]),
    ("psum_scatter", lambda x: lax.psum_scatter(x, "i"), (N, 3), lambda xs: [xs.sum(0)[r] for r in range(N)]),
    ("psum_scatter tiled dim 1", lambda x: lax.psum_scatter(x, "i", scatter_dimension=1, tiled=True), (3, 2 * N),
     lambda xs: [xs.sum(0)[:, 2 * r:2 * r + 2] for r in range(N)]),
    ("psum_scatter groups", lambda x: lax.psum_scatter(x, "i", axis_index_groups=PAIRS), (2, 3),
     lambda xs: [xs[group_of(r, PAIRS)].sum(0)[group_of(r, PAIRS).index(r)] for r in range(N)]),
    ("all_to_all", lambda x: lax.all_to_all(x, "i", 0, 0), (N, 3),
     lambda xs: [np.stack([xs[j][r] for j in range(N)]) for r in range(N)]),
    ("all_to_all tiled", lambda x: lax.all_to_all(x, "i", 0, 0, tiled=True), (2 * N, 3),
     lambda xs: [np.concatenate([xs[j][2 * r:2 * r + 2] for j in range(N)]) for r in range(N)]),
    ("ppermute ring", lambda x: lax.ppermute(x, "i", [(r, (r + 1) % N) for r in range(N)]), (3,),
     lambda xs: permuted(xs, [(r, (r + 1) % N) for r in range(N)])),
    ("ppermute partial", lambda x: lax.ppermute(x, "i", [(0, 1), (1, 0)]), (3,),
     lambda xs: permuted(xs, [(0, 1), (1, 0)])),
    ("pshuffle", lambda x: lax.pshuffle(x, "i", [3, 0, 1, 2]), (3,),
     lambda xs: [xs[[3, 0, 1, 2][r]] for r in range(N)]),
    ("pbroadcast", lambda x: lax.pbroadcast(x, "i", 2), (3, 2), lambda xs: [xs[2]] * N),
    ("axis_index", lambda x: x * lax.axis_index("i"), (3,), lambda xs: [xs[r] * r for r in range(N)]),
    ("axis_size", lambda x: x * lax.axis_size("i"), (3,), lambda xs: [xs[r] * N for r in range(N)]),
]


@pytest.mark.parametrize("eager", [False, True], ids=["traced", "eager"])
@pytest.mark.parametrize("name, f, shape, reference", CASES, ids=[c[0] for c in CASES])
def test_each_collective_traced_and_eager_gives_numpys_values(name, f, shape, reference, eager):
    xs = per_replica(shape)
    got = np.asarray(weft.pmap(f, axis_name="i", eager=eager)(xs))
    want = np.stack([np.asarray(w, np.float64) for w in reference(xs.astype(np.float64))])
    np.testing.assert_array_equal(got, want.astype(np.float32))


TREE_DTYPES = {"a": np.float32, "b": np.float32, "c": np.int32, "d": np.float32}


def tree_of(x):
    return {"a": x, "b": x[0] * 2, "c": (x * 3).astype(np.int32), "d": x.sum()}


@pytest.mark.parametrize("eager", [False, True], ids=["traced", "eager"])
@pytest.mark.parametrize("reduction, numpy_reduction", [(lax.psum, np.sum), (lax.pmax, np.max), (lax.pmean, np.mean)])
def test_a_pytrees_reduction_gives_numpys_values_per_leaf(reduction, numpy_reduction, eager):
    xs = per_replica((3, 2))
    got = weft.pmap(lambda x: reduction(tree_of(x), "i"), axis_name="i", eager=eager)(xs)
    leaves = [tree_of(xs[r].astype(np.float64)) for r in range(N)]
    for key, dtype in TREE_DTYPES.items():
        want = numpy_reduction(np.stack([leaf[key] for leaf in leaves]), axis=0)
        if numpy_reduction is np.mean and dtype == np.int32:
            # JAX's pmean is psum(x) / n, a true division: an int32 leaf's mean is float32, traced (the program's
            # declared type) as eager. The sums of small integers over 4 replicas divide exactly.
            dtype = np.float32
        assert np.asarray(got[key]).dtype == dtype, key
        np.testing.assert_array_equal(np.asarray(got[key])[0], want.astype(dtype), err_msg=key)


@pytest.mark.parametrize("dtype, mean_dtype", [(np.int32, "f32"), (np.uint8, "f32"), (np.float16, "f16")])
def test_a_pmeans_declared_type_is_the_true_divisions(dtype, mean_dtype):
    # JAX's pmean is psum(x) / n: integers give a float; the program declares what the collective gives.
    program = weft.make_program(lambda x: lax.pmean(x, "i"), axis_env=[("i", N)])(np.zeros((3,), dtype))
    assert f"{mean_dtype}[3] = pmean[" in str(program), program


def test_a_traced_pytree_reduction_is_one_collective_per_dtype():
    # float32 leaves a, b, d and a Python number (a float32 constant) in one psum; the int32 leaf in another.
    program = weft.make_program(lambda x: lax.psum({**tree_of(x), "e": 2.0}, "i"), axis_env=[("i", N)])(
        np.zeros((3, 2), np.float32))
    assert program.count("psum") == 2, program


# Every weft.lax function that takes an axis name, called in a pmap made without axis_name.
NAMING = {
    "psum": lambda x: lax.psum(x, "i"),
    "pmean": lambda x: lax.pmean(x, "i"),
    "pmax": lambda x: lax.pmax(x, "i"),
    "pmin": lambda x: lax.pmin(x, "i"),
    "all_gather": lambda x: lax.all_gather(x, "i"),
    "psum_scatter": lambda x: lax.psum_scatter(x.reshape(-1), "i", tiled=True),
    "all_to_all": lambda x: lax.all_to_all(x.reshape(-1), "i", 0, 0, tiled=True),
    "ppermute": lambda x: lax.ppermute(x, "i", [(0, 1)]),
    "pbroadcast": lambda x: lax.pbroadcast(x, "i", 0),
    "pvary": lambda x: lax.pvary(x, "i"),
    "axis_index": lambda x: x + lax.axis_index("i"),
    "axis_size": lambda x: x * lax.axis_size("i"),
}


def refusal(f, eager):
    with pytest.raises(weft.InvalidArgument) as error:
        weft.pmap(f, eager=eager)(per_replica((N,)))
    text = str(error.value)
    start = text.index("weft.lax.")
    return text[start:text.index("axis_name='i')", text.index("@functools")) + len("axis_name='i')")]


@pytest.mark.parametrize("name", NAMING)
def test_an_axis_without_a_name_is_refused_alike_traced_and_eager(name):
    want = (f"weft.lax.{name}: axis name 'i' is not bound: this pmap was made without axis_name, so its axis has "
            "no name; name it where the pmap is made, e.g. weft.pmap(f, axis_name='i') or "
            "@functools.partial(weft.pmap, axis_name='i')")
    assert refusal(NAMING[name], eager=False) == want
    assert refusal(NAMING[name], eager=True) == want


@pytest.mark.parametrize("eager", [False, True], ids=["traced", "eager"])
def test_a_numpy_float64_scalar_keeps_its_dtype_as_a_0d_array_does(eager):
    # numpy.float64 subclasses Python's float; the eager path once took it for a Python number (JAX's float32
    # default), so with jax_enable_x64 on its pmean came back float32 where the traced path and a 0-d array gave
    # float64 (found by the program fuzzer, seed 1000948).
    before = weft.config.read("jax_enable_x64")
    weft.config.update("jax_enable_x64", True)
    try:
        def f(x):
            scalar = lax.pmean(np.float64(1.5) * (x[0, 0] * 0 + 1), "i")
            zero_d = lax.pmean(np.asarray(1.5, np.float64), "i")
            return scalar, zero_d
        scalar, zero_d = weft.pmap(f, axis_name="i", eager=eager)(per_replica((3, 2)).astype(np.float64))
    finally:
        weft.config.update("jax_enable_x64", before)
    assert np.asarray(zero_d).dtype == np.float64
    assert np.asarray(scalar).dtype == np.float64
    np.testing.assert_array_equal(np.asarray(scalar), np.full(N, 1.5))
