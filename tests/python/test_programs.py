"""Traced programs from Python (issue 22): weft.jit, weft.make_program and the traced weft.pmap.

Each traced result is compared with an independent computation: numpy on the same inputs (with the dtype JAX
gives written out), or the eager pmap. Also: the function is traced once per signature (a counter in it),
printed programs against golden text, tracer misuse raising weft.TracerConversionError naming the operation,
and trace-time errors naming the equation and the user's line.
"""
import sys

import numpy as np
import pytest

import weft
import weft.numpy as jnp
from weft import lax


@pytest.fixture(scope="module", autouse=True)
def runtime():
    return weft.init(device_count=8)


RNG = np.random.default_rng(22)
A = RNG.standard_normal((4, 6)).astype(np.float32)
B = RNG.standard_normal((6, 3)).astype(np.float32)
V = RNG.standard_normal((6,)).astype(np.float32)
I = np.arange(12, dtype=np.int32).reshape(3, 4)


def np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# (name, traced function, arguments, numpy's expectation (computed here, independently), expected dtype)
CASES = [
    ("add-broadcast", lambda a, v: a + v, (A, V), lambda: A + V, np.float32),
    ("weak-int-scalar", lambda a: a * 2 + 1, (A,), lambda: A * 2 + 1, np.float32),
    ("weak-float-on-int", lambda i: i * 2.5, (I,), lambda: (I * 2.5).astype(np.float32), np.float32),
    ("int-true-divide", lambda i: i / 2, (I,), lambda: (I / 2).astype(np.float32), np.float32),
    ("int-pow", lambda i: i ** 3, (I,), lambda: I ** 3, np.int32),
    ("square-exact", lambda a: a ** 2, (A,), lambda: A * A, np.float32),
    ("bool-plus-int", lambda i: (i > 5) + 1, (I,), lambda: ((I > 5) + 1).astype(np.int32), np.int32),
    ("matmul", lambda a, b: a @ b, (A, B), lambda: A @ B, np.float32),
    ("numpy-on-the-left", lambda b: A @ b, (B,), lambda: A @ B, np.float32),
    ("dot-vector", lambda a, v: jnp.dot(a, v), (A, V), lambda: A @ V, np.float32),
    ("einsum", lambda a, b: jnp.einsum("ij,jk->ki", a, b), (A, B), lambda: np.einsum("ij,jk->ki", A, B), np.float32),
    ("einsum-batch", lambda a: jnp.einsum("bij,bkj->bik", a, a), (A.reshape(2, 2, 6),),
     lambda: np.einsum("bij,bkj->bik", A.reshape(2, 2, 6), A.reshape(2, 2, 6)), np.float32),
    ("sum-axis", lambda a: jnp.sum(a, axis=1), (A,), lambda: A.sum(1), np.float32),
    ("mean-keepdims", lambda a: a.mean(axis=0, keepdims=True), (A,), lambda: A.mean(0, keepdims=True), np.float32),
    ("max-min", lambda a: a.max() - jnp.min(a, axis=(0, 1)), (A,), lambda: A.max() - A.min(), np.float32),
    ("argmax", lambda a: jnp.argmax(a, axis=1), (A,), lambda: A.argmax(1).astype(np.int32), np.int32),
    ("int-sum", lambda i: i.sum(0), (I,), lambda: I.sum(0), np.int32),
    ("cumsum", lambda a: jnp.cumsum(a, axis=1), (A,), lambda: np.cumsum(A, axis=1), np.float32),
    ("cumprod-flattened", lambda a: jnp.cumprod(a), (A,), lambda: np.cumprod(A), np.float32),
    ("exp-log-tanh", lambda a: jnp.tanh(jnp.exp(a)) + jnp.log1p(jnp.abs(a)), (A,),
     lambda: np.tanh(np.exp(A)) + np.log1p(np.abs(A)), np.float32),
    ("softmax", lambda a: weft.nn.softmax(a, axis=-1), (A,), lambda: np_softmax(A), np.float32),
    ("log_softmax", lambda a: weft.nn.log_softmax(a), (A,), lambda: np.log(np_softmax(A)), np.float32),
    ("relu-where-clip", lambda a: jnp.where(a > 0, weft.nn.relu(a), jnp.clip(a, -0.5, 0.5)), (A,),
     lambda: np.where(A > 0, np.maximum(A, 0), np.clip(A, -0.5, 0.5)), np.float32),
    ("reshape-transpose", lambda a: a.reshape(2, 12).T.reshape((-1, 4)), (A,), lambda: A.reshape(2, 12).T.reshape(-1, 4),
     np.float32),
    ("swapaxes-expand-squeeze", lambda a: jnp.squeeze(jnp.expand_dims(jnp.swapaxes(a, 0, 1), 0), 0), (A,),
     lambda: A.T, np.float32),
    ("slices-with-steps", lambda a: a[1:, ::2] + a[:-1, 1::2], (A,), lambda: A[1:, ::2] + A[:-1, 1::2], np.float32),
    ("reverse-and-index", lambda a: a[::-1, 2] * a[-1, :4], (A,), lambda: A[::-1, 2] * A[-1, :4], np.float32),
    ("ellipsis-none", lambda a: a[..., None, 0], (A,), lambda: A[..., None, 0], np.float32),
    ("concatenate-stack-split", lambda a: jnp.concatenate(jnp.split(jnp.stack([a, -a], axis=1), 2, axis=0), axis=2),
     (A,), lambda: np.concatenate(np.split(np.stack([A, -A], axis=1), 2, axis=0), axis=2), np.float32),
    ("take", lambda a: jnp.take(a, np.array([3, 0, 3]), axis=0), (A,), lambda: A[[3, 0, 3]], np.float32),
    ("one_hot", lambda i: weft.nn.one_hot(i[0], 5), (I,), lambda: np.eye(5, dtype=np.float32)[[0, 1, 2, 3]],
     np.float32),
    ("astype-bitwise", lambda i: (i & 6) ^ (i | 1).astype(np.int32), (I,), lambda: (I & 6) ^ (I | 1), np.int32),
    ("zeros-ones-full-like", lambda a: jnp.zeros_like(a) + jnp.ones_like(a) * jnp.full((6,), 3.0), (A,),
     lambda: np.zeros_like(A) + np.ones_like(A) * np.full((6,), 3.0, np.float32), np.float32),
]


@pytest.mark.parametrize("name,fn,args,want,dtype", CASES, ids=[c[0] for c in CASES])
def test_jit_matches_numpy(name, fn, args, want, dtype):
    got = weft.jit(fn)(*args)
    expected = want()
    assert got.dtype == np.dtype(dtype), f"{name}: dtype {got.dtype}, JAX's rules give {np.dtype(dtype)}"
    assert got.shape == expected.shape, f"{name}: shape {got.shape}, want {expected.shape}"
    np.testing.assert_allclose(got, expected.astype(dtype), rtol=2e-6, atol=2e-6)


def test_square_is_bit_exact_as_jax_integer_pow():
    assert weft.jit(lambda a: a ** 2)(A).tobytes() == (A * A).tobytes()


def test_a_function_is_traced_once_per_signature():
    calls = {"jit": 0, "pmap": 0}

    def body(key, x):
        calls[key] += 1
        return x * 2 + 1

    jitted = weft.jit(lambda x: body("jit", x))
    pmapped = weft.pmap(lambda x: lax.psum(body("pmap", x), "i"), axis_name="i")
    x = np.ones((8, 3), np.float32)
    for _ in range(1000):
        jitted(x)
        pmapped(x)
    assert calls == {"jit": 1, "pmap": 1}
    jitted(np.ones((8, 4), np.float32))       # a new shape: a new trace
    pmapped(np.ones((8, 3), np.int32))        # a new dtype: a new trace
    assert calls == {"jit": 2, "pmap": 2}


def test_static_argnums_key_the_cache():
    traces = []

    def f(x, n):
        traces.append(n)
        return x * n

    g = weft.jit(f, static_argnums=(1,))
    np.testing.assert_array_equal(g(V, 3), V * 3)
    np.testing.assert_array_equal(g(V, 3), V * 3)
    np.testing.assert_array_equal(g(V, 4), V * 4)
    assert traces == [3, 4]


def test_make_program_prints_like_a_jaxpr():
    p = weft.make_program(lambda a, b: lax.psum(a + b, "i"), axis_env=[("i", 8)])(
        np.zeros((4, 8), np.float32), np.zeros(8, np.float32))
    assert str(p) == ("{ lambda ; a:f32[4,8] b:f32[8] . let\n"
                      "    c:f32[4,8] = add a b\n"
                      "    d:f32[4,8] = psum[axes=('i',)] c\n"
                      "  in (d,) }")
    assert p.equations == ["add", "psum"] and p.count("psum") == 1 and len(p.equations) == 2


def test_constants_print_before_the_semicolon_and_dead_code_goes():
    w = np.arange(3, dtype=np.float32)

    def f(x):
        unused = jnp.exp(x)  # noqa: F841 (dead: not in the program)
        return x * w

    p = weft.make_program(f)(np.zeros(3, np.float32))
    assert str(p) == ("{ lambda a:f32[3] ; b:f32[3] . let\n"
                      "    c:f32[3] = multiply b a\n"
                      "  in (c,) }")


def test_a_chain_of_elementwise_ops_keeps_two_buffers_live():
    def chain(x):
        for _ in range(20):
            x = jnp.tanh(x) + 1.0
        return x

    x = np.zeros(1000, np.float32)
    p = weft.make_program(chain)(x)
    assert p.count("tanh") == 20
    # The input, and at each step the operand and its result: freed after their last use, never 40 buffers.
    assert p._program.peak_live_bytes <= 3 * x.nbytes + 64


FUSION_CHILD = """
import hashlib, numpy as np, weft, weft.numpy as jnp
def chain(x, y):
    for _ in range(6):
        x = jnp.tanh(x * y + 0.5) - jnp.exp(-jnp.abs(x)) / 3.0 + jnp.maximum(x, y) * (x > 0)
    return x, jnp.sqrt(jnp.abs(x)) + 1
rng = np.random.default_rng(3)
x = rng.standard_normal(3 << 19).astype(np.float32)
y = rng.standard_normal(3 << 19).astype(np.float32)
x[:4] = [np.nan, np.inf, -np.inf, -0.0]
print(hashlib.sha256(b"".join(o.tobytes() for o in weft.jit(chain)(x, y))).hexdigest(),
      weft.make_program(chain)(x, y)._program.fused_runs)
"""


def test_fusion_gives_the_unfused_bits():
    # A long elementwise chain over 1.5 M elements (above the fusion threshold; a size that is not a multiple
    # of the block): fused (the default) and WEFT_FUSION=off give the same bytes, NaN and inf included.
    from conftest import run_python
    digests = {}
    for setting in ("auto", "off"):
        done, _ = run_python(FUSION_CHILD, 120, WEFT_FUSION=setting)
        assert done.returncode == 0, done.stderr
        digests[setting], runs = done.stdout.split()
        assert (int(runs) > 0) == (setting == "auto"), (setting, runs)
    assert digests["auto"] == digests["off"] and len(digests["auto"]) == 64


@pytest.mark.parametrize("what,action", [
    ("numpy.asarray", lambda t: np.asarray(t)),
    ("float()", lambda t: float(t[0])),
    ("bool()", lambda t: bool(t.sum() > 0)),
    ("numpy.exp", lambda t: np.exp(t)),
    ("numpy.stack", lambda t: np.stack([t, t])),
    (".item()", lambda t: t[0].item()),
])
def test_a_tracer_handed_to_numpy_raises_naming_the_operation(what, action):
    with pytest.raises(weft.TracerConversionError) as error:
        weft.jit(action)(V)
    assert what in str(error.value) and "weft.numpy" in str(error.value), str(error.value)
    assert isinstance(error.value, TypeError)  # as JAX's TracerArrayConversionError
    with pytest.raises(weft.TracerConversionError, match="numpy.asarray"):
        weft.pmap(lambda x: np.asarray(x) + 1, axis_name="i")(np.ones((8, 2), np.float32))


def test_numpy_arrays_mix_in_as_constants():
    np.testing.assert_allclose(weft.jit(lambda b: A @ b * np.float32(2))(B), A @ B * 2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(weft.jit(lambda v: V * v + np.ones(6, np.float32))(V), V * V + 1, rtol=1e-6)


def test_trace_errors_name_the_equation_and_the_users_line():
    def f(a, b):
        return a @ b  # this line is named

    line = f.__code__.co_firstlineno + 1
    with pytest.raises(weft.InvalidArgument) as error:
        weft.jit(f)(A, A)
    text = str(error.value)
    assert text.startswith("equation 0 `matmul a b` ("), text
    assert f"test_programs.py:{line}): contracting dimensions differ: f32[4,6] @ f32[4,6]" in text, text


def test_traced_pmap_equals_eager_pmap():
    def step(x, w):
        h = jnp.tanh(x @ w)
        g = lax.all_gather(h, "i", axis=0, tiled=True)
        r = lax.ppermute(h, "i", [(k, (k + 1) % 8) for k in range(8)])
        return lax.pmean(h, "i") + r * lax.axis_index("i"), g.sum(0)

    x = RNG.standard_normal((8, 2, 6)).astype(np.float32)
    traced = weft.pmap(step, axis_name="i", in_axes=(0, None))(x, B)
    eager = weft.pmap(step, axis_name="i", in_axes=(0, None), eager=True)(x, B)
    for t, e in zip(traced, eager):
        np.testing.assert_allclose(np.asarray(t), np.asarray(e), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("eager", [False, True])
def test_pbroadcast_gives_every_replica_the_sources_value_and_its_gradient_to_the_source(eager):
    """jax.lax.pbroadcast: every replica gets replica `source`'s value; d/dx of sum(w_r * pbroadcast(x)_r) is the
    sum of every replica's w at the source and zeros elsewhere (JAX's transpose: psum to the source)."""
    x = RNG.standard_normal((8, 3)).astype(np.float32)
    w = RNG.standard_normal((8, 3)).astype(np.float32)
    got = weft.pmap(lambda v: lax.pbroadcast(v, "i", 5), axis_name="i", eager=eager)(x)
    np.testing.assert_array_equal(np.asarray(got), np.broadcast_to(x[5], (8, 3)))
    if eager:
        return
    grads = weft.pmap(lambda v, u: weft.grad(lambda v: jnp.sum(u * lax.pbroadcast(v, "i", 5)))(v), axis_name="i")(x, w)
    want = np.zeros((8, 3), np.float32)
    want[5] = w.sum(0)
    np.testing.assert_allclose(np.asarray(grads), want, rtol=1e-6)


@pytest.mark.parametrize("name,call,dtype,want", [
    ("int true divide", lambda: jnp.divide(I, 2), np.float32, I / 2),
    ("weak float on int", lambda: jnp.multiply(I, 2.5), np.float32, I * 2.5),
    ("int32 + float32", lambda: jnp.add(I, np.float32(1)), np.float32, I + 1.0),
    ("mean of ints", lambda: jnp.mean(I), np.float32, I.mean()),
    ("sum of bools", lambda: jnp.sum(I > 5), np.int32, 6),
    ("cumsum of bools", lambda: jnp.cumsum(I > 5, axis=0), np.int32, np.cumsum(I > 5, axis=0)),
    ("cumprod of int8", lambda: jnp.cumprod(I.astype(np.int8) - 5), np.int32, np.cumprod(I.astype(np.int32) - 5)),
    ("exp of ints", lambda: jnp.exp(I[0]), np.float32, np.exp(I[0])),
    ("int power", lambda: jnp.power(I, 2), np.int32, I ** 2),
    ("where with a weak float", lambda: jnp.where(I > 5, I, 0.5), np.float32, np.where(I > 5, I, 0.5)),
    ("concatenate promotes", lambda: jnp.concatenate([I[0], V[:2]]), np.float32, np.concatenate([I[0], V[:2]])),
    ("Python numbers", lambda: jnp.add(1, 2.5), np.float32, 3.5),
])
def test_weft_numpy_on_concrete_arrays_has_jaxs_dtypes(name, call, dtype, want):
    # numpy would give float64 or int64 in most of these; JAX's (and a traced program's) dtypes are these.
    got = call()
    assert got.dtype == np.dtype(dtype), f"{name}: {got.dtype}"
    np.testing.assert_allclose(got, np.asarray(want).astype(dtype), rtol=1e-6)


def test_weft_numpy_concrete_errors_and_numpy_names():
    with pytest.raises(weft.InvalidArgument, match=r"weft.numpy.add: shapes \[3\] and \[4\] do not broadcast"):
        jnp.add(np.ones(3, np.float32), np.ones(4, np.float32))
    assert jnp.float32 is np.float32 and jnp.pi == np.pi
    assert jnp.sort(np.array([3, 1, 2])).tolist() == [1, 2, 3]  # a numpy name weft does not trace


def test_eager_keeps_arbitrary_python_per_replica():
    out = weft.pmap(lambda x: np.sort(x)[::-1].copy(), axis_name="i", eager=True)(
        RNG.standard_normal((8, 5)).astype(np.float32))
    assert all(np.all(np.diff(np.asarray(s)) <= 0) for s in out.shards)


def test_a_refilled_numpy_buffer_is_captured_with_its_value_at_each_use():
    """Issue 45 item 3: a buffer refilled in a loop and added each time adds each row once (JAX copies a
    numpy constant where it is used), not the first row three times; an unchanged array used twice is one
    constant."""
    rows = RNG.standard_normal((3, 6)).astype(np.float32)

    def f(x):
        buf = np.empty(6, np.float32)
        for row in rows:
            buf[:] = row
            x = x + buf
        return x

    np.testing.assert_allclose(weft.jit(f)(V), V + rows[0] + rows[1] + rows[2], rtol=1e-6)
    # (constants print before the ';')
    assert str(weft.make_program(f)(V)).split(";")[0].count("f32[6]") == 3
    assert str(weft.make_program(lambda x: x + V + V)(V)).split(";")[0].count("f32[6]") == 1


@pytest.mark.parametrize("use", [
    ("an operator", lambda t: t + 1),
    ("a weft.numpy function", lambda t: jnp.tanh(t)),
    ("a weft.nn function", lambda t: weft.nn.relu(t)),
    ("a method", lambda t: t.sum()),
], ids=lambda u: u[0] if isinstance(u, tuple) else None)
def test_a_tracer_used_after_its_trace_ended_raises(use):
    """Issue 45 item 11: a tracer kept past its trace (a global) refuses ops, naming the trace it came from
    (JAX's UnexpectedTracerError), outside any trace and inside another one; the finished program is
    unchanged."""
    kept = []

    def leak(x):
        kept.append(x)
        return x * 2

    jitted = weft.jit(leak)
    before = str(jitted.lower(V))
    _, action = use
    with pytest.raises(weft.errors.UnexpectedTracerError) as error:
        action(kept[0])
    text = str(error.value)
    assert "jit(leak)" in text and "after that trace ended" in text, text
    with pytest.raises(weft.errors.UnexpectedTracerError, match=r"jit\(leak\)"):
        weft.jit(lambda y: y + kept[0])(V)
    with pytest.raises(weft.errors.UnexpectedTracerError, match=r"output.*jit\(leak\)"):
        weft.jit(lambda y: (y, kept[0]))(V)
    assert str(jitted.lower(V)) == before
    np.testing.assert_allclose(jitted(V), V * 2)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
