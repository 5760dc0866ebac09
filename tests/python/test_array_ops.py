"""weft's array math from Python (weft.ops, weft.nn): every numpy-computed case of tests/data/array-cases.json
(105, the file weft-conformance runs in C++) through the Python functions, the same functions inside a pmap
(replicas computing at once, against numpy), and their errors."""
import numpy as np
import pytest

import weft
import weft.numpy as jnp
from weft import lax
from conftest import compare, json_array, load_json

CASES = load_json("array-cases.json")["cases"]
EXTRA = load_json("array-cases-extra.json")["cases"]


def run_case(case):
    """The case's op through weft.ops / weft.nn, its params spelled as the Python API spells them."""
    op, p = case["op"], case["params"]
    x = [json_array(i) for i in case["inputs"]]
    if "b" in p:  # a Python number as the last operand (it takes the array's dtype)
        x.append(float(p["b"]))
    if op == "matmul":
        return weft.ops.matmul(x[0], x[1], transpose_a=p.get("transpose_a", False),
                               transpose_b=p.get("transpose_b", False))
    if op == "transpose":
        return weft.ops.transpose(x[0], p.get("perm"))
    if op in ("maximum", "minimum", "where", "take"):
        fn = getattr(weft.ops, op)
        return fn(*x, axis=p.get("axis")) if op == "take" else fn(*x)
    if op == "clip":
        return weft.ops.clip(x[0], p.get("min"), p.get("max"))
    if op in ("softmax", "log_softmax"):
        return getattr(weft.nn, op)(x[0], axis=p.get("axis", -1))
    if op == "logsumexp":
        return weft.nn.logsumexp(x[0], axis=p.get("axis", -1), keepdims=p.get("keepdims", False))
    if op in ("sum", "mean", "max", "min"):
        axes = p.get("axes")
        return getattr(weft.ops, op)(x[0], axis=None if axes is None else tuple(axes),
                                     keepdims=p.get("keepdims", False))
    if op in ("argmax", "argmin"):
        return getattr(weft.ops, op)(x[0], axis=p.get("axis"), keepdims=p.get("keepdims", False))
    if op == "one_hot":
        return weft.nn.one_hot(x[0], p["num_classes"], dtype=p.get("dtype"))
    return getattr(weft.ops, op)(*x)


@pytest.mark.parametrize("case", CASES + EXTRA, ids=[c["name"] for c in CASES + EXTRA])
def test_array_case(case):
    unknown = set(case["params"]) - {"transpose_a", "transpose_b", "perm", "axis", "axes", "keepdims", "min", "max",
                                     "num_classes", "dtype", "b"}
    if unknown:
        pytest.skip(f"params {sorted(unknown)} have no Python spelling here")
    got = run_case(case)
    problem = compare(got, json_array(case["expected"]), case["exact"], case.get("rtol", 1e-5), case.get("atol", 1e-6))
    assert problem is None, f"{case['name']}: {problem}"


def test_every_case_of_the_numpy_file_ran():
    assert len(CASES) == 105


def test_results_are_read_only_numpy_arrays_of_jax_dtypes():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = weft.ops.exp(x)
    assert isinstance(y, np.ndarray) and y.dtype == np.float32
    with pytest.raises(ValueError):
        y[0, 0] = 1
    # A Python number takes the array's dtype (JAX's weak typing), not float64.
    assert weft.ops.maximum(x, 2.5).dtype == np.float32
    np.testing.assert_array_equal(weft.ops.maximum(x, 2.5), np.maximum(x, np.float32(2.5)))
    assert weft.ops.argmax(x, axis=1).dtype == np.int32


def test_replicas_compute_with_the_ops_in_a_pmap():
    """A dense layer and a softmax in every replica, then a psum: numpy computes the same per replica."""
    n = weft.device_count()
    rng = np.random.default_rng(7)
    x = rng.standard_normal((n, 16, 32)).astype(np.float32)
    w = rng.standard_normal((32, 10)).astype(np.float32)

    def step(xs):
        logits = weft.ops.matmul(xs, w)
        probs = weft.nn.softmax(logits, axis=-1)
        return lax.psum(weft.ops.sum(probs * weft.ops.relu(logits), axis=0), "i")

    got = np.asarray(weft.pmap(step, axis_name="i")(x))
    logits = x @ w
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    want = (probs * np.maximum(logits, 0)).sum(axis=1).sum(axis=0)
    for r in range(n):
        np.testing.assert_allclose(got[r], want, rtol=1e-4, atol=1e-5)


def test_matmul_names_its_library_and_computes_large_products_right():
    backend = weft.ops.matmul_backend()
    assert backend.startswith(("float32: ", "Eigen 3.4")), backend
    rng = np.random.default_rng(3)
    a = rng.standard_normal((40, 70)).astype(np.float32)  # large enough for a BLAS (from 32^3 multiply-adds)
    b = rng.standard_normal((70, 50)).astype(np.float32)
    np.testing.assert_allclose(weft.ops.matmul(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_errors_name_the_op_and_the_rule():
    with pytest.raises(weft.InvalidArgument, match=r"matmul: contracting dimensions differ: \(4, 7\) @ \(6, 2\)"):
        weft.ops.matmul(np.zeros((4, 7), np.float32), np.zeros((6, 2), np.float32))
    with pytest.raises(ValueError, match="take"):  # InvalidArgument is also a ValueError
        weft.ops.take(np.zeros(3, np.float32), np.array([5], np.int32))


@pytest.mark.parametrize("make, want", [
    (lambda: jnp.zeros((2, 3), np.float16), np.zeros((2, 3), np.float16)),
    (lambda: jnp.ones(4, "int32"), np.ones(4, np.int32)),
    (lambda: jnp.eye(2, 3, 1, np.int8), np.eye(2, 3, 1, dtype=np.int8)),
    (lambda: jnp.zeros((2,)), np.zeros(2, np.float32)),           # jnp's default dtype, not numpy's
])
def test_creation_takes_dtype_by_position_as_numpy_does(make, want):
    got = make()
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_creation_refuses_dtype_twice():
    with pytest.raises(TypeError, match="zeros\\(\\) got dtype by name and by position"):
        jnp.zeros((2,), np.float32, dtype=np.float64)


# JAX's accumulation dtypes for reductions (issue 45, item 4): bool, int8 and uint8 sum in int32 (JAX: uint32
# for uint8, which weft lacks: int32 holds the same sums), int32 in int32; the mean of integers is float32. A
# hundred int8 100s are int32 10000, not int8's wrapped 16. Eager weft.numpy, weft.jit and a traced pmap, the
# values against numpy's int64 sums.
SUMS = [("int8", 100, 100), ("int8", -128, 300), ("uint8", 200, 100), ("uint8", 255, 70000), ("bool", 1, 1000)]


@pytest.mark.parametrize("entry", ["eager", "jit", "pmap"])
@pytest.mark.parametrize("dtype,value,count", SUMS)
def test_small_integer_sums_accumulate_in_int32_as_jaxs(entry, dtype, value, count):
    x = np.full((2, count), value, dtype=dtype)
    want_total, want_rows = x[0].astype(np.int64).sum(), x[0].reshape(10, -1).astype(np.int64).sum(1)

    def f(v):
        return jnp.sum(v), jnp.sum(v.reshape(10, -1), axis=1), jnp.mean(v)

    if entry == "eager":
        results = [f(x[0])]
    elif entry == "jit":
        results = [weft.jit(f)(x[0])]
    else:
        results = list(zip(*[np.asarray(r) for r in weft.pmap(f, axis_name="i", devices=weft.devices()[:2])(x)]))
    for total, rows, mean in results:
        assert np.asarray(total).dtype == np.int32 and np.asarray(rows).dtype == np.int32, (entry, dtype)
        assert int(total) == want_total and (np.asarray(rows) == want_rows).all(), (entry, dtype, total)
        assert np.asarray(mean).dtype == np.float32 and float(mean) == np.float32(x[0].astype(np.float64).mean())


def test_sum_with_a_dtype_accumulates_in_that_dtype():
    # jnp.sum(x, dtype=d) converts, then sums (JAX's): int32 values summed as float32 round each partial sum.
    x = np.array([2 ** 24, 1, 1], np.int32)
    # In float32 2^24 + 1 rounds back to 2^24 (twice); summed in int32 and then converted it would be 2^24 + 2.
    assert float(jnp.sum(x, dtype=np.float32)) == 2.0 ** 24
    assert int(jnp.sum(np.full(100, 100, np.int8), dtype=np.int32)) == 10000


@pytest.mark.usefixtures("jax_enable_x64")
@pytest.mark.parametrize("entry", ["eager", "jit"])
@pytest.mark.parametrize("dtype", ["bool", "int8", "uint8", "int32"])
def test_with_x64_integer_sums_are_int64_means_float64_and_indices_int64(entry, dtype):
    # JAX with jax_enable_x64: the default int and float are 64-bit, and reductions accumulate in them.
    x = np.full(70000, 1 if dtype == "bool" else 100, dtype=dtype)
    if dtype == "int32":
        x[:] = 2 ** 30  # 70000 of them overflow int32
    want = x.astype(np.int64).sum()

    def f(v):
        return jnp.sum(v), jnp.mean(v), jnp.argmax(v)

    total, mean, index = weft.jit(f)(x) if entry == "jit" else f(x)
    assert np.asarray(total).dtype == np.int64 and int(total) == want, (entry, dtype, total)
    assert np.asarray(mean).dtype == np.float64 and float(mean) == want / x.size
    assert np.asarray(index).dtype == np.int64 and int(index) == 0
