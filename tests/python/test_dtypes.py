"""JAX's dtype rules in weft's Python layer (issue 45, items 5 and 6): type promotion with weak types, and
64-bit types off by default (jax_enable_x64).

The expectation is JAX's documented binary promotion table ("Type promotion semantics", docs.jax.dev),
transcribed below for the dtypes weft has, cell by cell, checked at every entry: eager weft.numpy calls,
operators on tracers under weft.jit (Python numbers as arguments, which JAX traces weakly typed), the traced
weft.pmap and weft.shard_map (Python numbers inside the function), with x64 on and off. With x64 off JAX
holds no 64-bit values: its documented rule is that int64 / float64 become int32 / float32 (and a weak
int / float is 32-bit), applied to the table's entries and operands here. Also JAX's warning when a 64-bit
dtype is asked for by name with x64 off, and none when one merely comes in.
"""
import functools
import warnings

import numpy as np
import pytest

import weft
import weft.numpy as jnp
from weft import P


@pytest.fixture(scope="module", autouse=True)
def runtime():
    return weft.init(device_count=8)


@pytest.fixture(params=[False, True], ids=["x64_off", "x64_on"])
def x64(request):
    before = weft.config.read("jax_enable_x64")
    weft.config.update("jax_enable_x64", request.param)
    yield request.param
    weft.config.update("jax_enable_x64", before)


# JAX's binary promotion table (docs.jax.dev/en/latest/type_promotion.html), the rows and columns of weft's
# dtypes, in the page's notation: b1 bool, u1 uint8, i1 int8, i4 int32, i8 int64, bf bfloat16, f2 float16,
# f4 float32, f8 float64, i* a Python int (weakly typed int), f* a Python float (weakly typed float).
TABLE = """
     b1  u1  i1  i4  i8  bf  f2  f4  f8  i*  f*
b1   b1  u1  i1  i4  i8  bf  f2  f4  f8  i*  f*
u1   u1  u1  i2  i4  i8  bf  f2  f4  f8  u1  f*
i1   i1  i2  i1  i4  i8  bf  f2  f4  f8  i1  f*
i4   i4  i4  i4  i4  i8  bf  f2  f4  f8  i4  f*
i8   i8  i8  i8  i8  i8  bf  f2  f4  f8  i8  f*
bf   bf  bf  bf  bf  bf  bf  f4  f4  f8  bf  bf
f2   f2  f2  f2  f2  f2  f4  f2  f4  f8  f2  f2
f4   f4  f4  f4  f4  f4  f4  f4  f4  f8  f4  f4
f8   f8  f8  f8  f8  f8  f8  f8  f8  f8  f8  f8
i*   i*  u1  i1  i4  i8  bf  f2  f4  f8  i*  f*
f*   f*  f*  f*  f*  f*  bf  f2  f4  f8  f*  f*
"""
ROWS = [line.split() for line in TABLE.strip().splitlines()]
COLUMNS = ROWS[0]
CELLS = [(row[0], col, want) for row in ROWS[1:] for col, want in zip(COLUMNS, row[1:])]

STRONG = {"b1": np.bool_, "u1": np.uint8, "i1": np.int8, "i4": np.int32, "i8": np.int64, "bf": weft.bfloat16,
          "f2": np.float16, "f4": np.float32, "f8": np.float64}
# A weak operand: a Python number.
WEAK = {"i*": 3, "f*": 1.5}
# i2 (int16), the join of uint8 and int8, is not a weft dtype: weft computes that pair in int32, the next
# integer type it has (docs/python.md, "dtypes and x64").
NOT_IN_WEFT = {"i2": "i4"}


def expected(code, x64):
    """(numpy dtype, weak) of a table entry, with x64 off's 32-bit stand-ins for int64 / float64."""
    code = NOT_IN_WEFT.get(code, code)
    weak = code in WEAK
    dtype = {"i*": np.int64, "f*": np.float64}.get(code) or STRONG[code]
    dtype = np.dtype(dtype)
    if not x64:
        dtype = {np.dtype(np.int64): np.dtype(np.int32), np.dtype(np.float64): np.dtype(np.float32)}.get(dtype, dtype)
    return dtype, weak


def host_array(code):
    """An operand of dtype `code` as the host passes it (bfloat16, which numpy cannot hold, as float32 to be
    cast inside the traced function)."""
    dtype = np.float32 if code == "bf" else STRONG[code]
    return np.array([1, 0, 1, 1], dtype=dtype)


def inside(code, x):
    return x.astype(weft.bfloat16) if code == "bf" else x


def traced_cell(entry, a, b):
    """What `a + b`, `a * b` and `jnp.maximum(a, b)` give inside a function traced by `entry`: one (dtype,
    weak) when the three agree (read from the tracers), else the three. Under jit
    a weak operand is a Python number argument (JAX traces those weakly typed); under pmap and shard_map a
    Python number in the function, or, when both operands are weak, a traced weak value: where(mask, n, n)
    (JAX: where of two Python numbers is weakly typed)."""
    seen = []
    strong = [c for c in (a, b) if c not in WEAK]

    def record(x, y):
        outs = (x + y, x * y, jnp.maximum(x, y))
        seen.append({(np.dtype(out.dtype), bool(getattr(out, "weak_type", False))) for out in outs})
        out = outs[0]
        return out.astype(np.float32) if np.dtype(out.dtype) == np.dtype(weft.bfloat16) else out

    def body(mask, *args):
        it = iter(args)
        if strong:
            x, y = (WEAK[c] if c in WEAK else inside(c, next(it)) for c in (a, b))
        else:
            x, y = (jnp.where(mask, WEAK[c], WEAK[c]) for c in (a, b))
        return record(x, y)

    mask = np.array([True, False, True, True])
    if entry == "jit":
        args = [WEAK[c] if c in WEAK else host_array(c) for c in (a, b)]
        weft.jit(lambda x, y: record(x if a in WEAK else inside(a, x), y if b in WEAK else inside(b, y)))(*args)
    elif entry == "pmap":
        weft.pmap(body)(*[np.stack([v] * 8) for v in [mask] + [host_array(c) for c in strong]])
    else:
        mesh = weft.Mesh(np.array(weft.devices()), ("i",))
        weft.shard_map(body, mesh, in_specs=P(), out_specs=P())(mask, *[host_array(c) for c in strong])
    assert len(seen) == 1
    return next(iter(seen[0])) if len(seen[0]) == 1 else tuple(sorted(seen[0], key=str))


@pytest.mark.parametrize("entry", ["jit", "pmap", "shard_map"])
def test_promotion_table_on_tracers(entry, x64):
    wrong = []
    for a, b, want in CELLS:
        dtype, weak = expected(want, x64)
        got = traced_cell(entry, a, b)
        if got != (dtype, weak):
            wrong.append(f"{a} with {b}: got {got}, JAX's table says {want} ({dtype.name} weak={weak})")
    assert not wrong, "\n".join(wrong)


def test_promotion_table_eager(x64):
    """weft.numpy on concrete values (numpy arrays, Python numbers): every cell but bfloat16's (numpy holds
    no bfloat16 values). Eager results are numpy arrays, which carry no weak flag: the dtype is checked."""
    wrong = []
    for a, b, want in CELLS:
        if "bf" in (a, b):
            continue
        dtype, _ = expected(want, x64)
        ops = [WEAK[c] if c in WEAK else host_array(c) for c in (a, b)]
        for fn in (jnp.add, jnp.multiply, jnp.maximum):
            got = np.asarray(fn(*ops)).dtype
            if got != dtype:
                wrong.append(f"weft.numpy.{fn.__name__}({a}, {b}): got {got.name}, JAX's table says {want} "
                             f"({dtype.name})")
    assert not wrong, "\n".join(wrong)


def test_promotion_values_follow_the_dtype():
    """The promoted op computes in the promoted dtype: int8 + 2.5 is float32's 3.5 per element (not an int8
    truncation), uint8 + int8 is exact in int32 (no uint8 wrap-around)."""
    i8 = np.array([1, -2, 100], np.int8)
    out = weft.jit(lambda x: x + 2.5)(i8)
    assert out.dtype == np.float32 and np.array_equal(out, i8.astype(np.float64) + 2.5)
    u8 = np.array([200, 255, 0], np.uint8)
    out = weft.jit(lambda x, y: x + y)(u8, i8)
    assert out.dtype == np.int32 and np.array_equal(out, u8.astype(np.int64) + i8.astype(np.int64))


def test_python_number_arguments_are_weak_at_every_entry(x64):
    """A Python float or int passed as an argument is weakly typed (JAX traces it so): times a float16 / int8
    array it keeps the array's dtype, at jit, pmap (in_axes None) and shard_map (P()), x64 on or off."""
    mesh = weft.Mesh(np.array(weft.devices()), ("i",))
    for array, number in ((np.arange(8, dtype=np.float16), 1.5), (np.arange(8, dtype=np.int8), 3)):
        want = (array.astype(np.float64) * number).astype(array.dtype)
        outs = [weft.jit(lambda x, s: x * s)(array, number),
                weft.pmap(lambda x, s: x * s, in_axes=(0, None))(array, number),
                weft.shard_map(lambda x, s: x * s, mesh, in_specs=(P("i"), P()), out_specs=P("i"))(array, number)]
        for entry, out in zip(("jit", "pmap", "shard_map"), outs):
            assert np.asarray(out).dtype == array.dtype, (entry, np.asarray(out).dtype)
            assert np.array_equal(np.asarray(out), want), entry


def test_a_python_int_the_other_dtype_cannot_hold_overflows():
    """int8 + 300: JAX's OverflowError (the weak int takes int8, which cannot hold it), not numpy's wrap."""
    i8 = np.array([1, 2], np.int8)
    for fn in (lambda: jnp.add(i8, 300), lambda: weft.jit(lambda x: x + 300)(i8)):
        with pytest.raises(OverflowError, match="Python int 300 too large to convert to int8"):
            fn()
    assert np.array_equal(jnp.add(i8, 100), np.array([101, 102], np.int8))


def test_where_of_python_floats_is_weak():
    """jnp.where(c, 1.0, 0.0) is weakly typed float (JAX): times a float16 array it stays float16, and with
    no other operand it is float32 (not float64, which then promoted all that followed)."""
    c = np.array([True, False, True])

    def f(c, h):
        w = jnp.where(c, 1.0, 0.0)
        return w, w * h

    for fn in (weft.jit(f), functools.partial(_shard_mapped, f)):
        w, wh = fn(c, np.ones(3, np.float16))
        assert np.asarray(w).dtype == np.float32 and np.asarray(wh).dtype == np.float16
        assert np.array_equal(np.asarray(w), np.where(c, 1.0, 0.0))
    assert np.asarray(jnp.where(c, 1.0, 0.0)).dtype == np.float32


def _shard_mapped(f, *args):
    mesh = weft.Mesh(np.array(weft.devices()[:1]), ("i",))
    return weft.shard_map(f, mesh, in_specs=P(), out_specs=P())(*args)


def test_shard_map_python_scalars_keep_the_array_dtype():
    """Under shard_map as under jit: float32 * 2.0 is float32, int32 * 2 int32, and a Python float argument
    is float32 (issue 45 item 5)."""
    mesh = weft.Mesh(np.array(weft.devices()[:2]), ("i",))
    f32 = weft.shard_map(lambda a, s: a * 2.0 * s, mesh, in_specs=(P("i"), P()), out_specs=P("i"))
    out = f32(np.ones(4, np.float32), 3.0)
    assert out.dtype == np.float32 and np.array_equal(np.asarray(out), np.full(4, 6.0))
    i32 = weft.shard_map(lambda a: a * 2, mesh, in_specs=P("i"), out_specs=P("i"))
    out = i32(np.arange(4, dtype=np.int32))
    assert out.dtype == np.int32 and np.array_equal(np.asarray(out), np.arange(4) * 2)


# ---- x64 -------------------------------------------------------------------------------------------------
F64 = np.linspace(0, 1, 8).reshape(8, 1)  # numpy's default float64
I64 = np.arange(8).reshape(8, 1)          # numpy's default int64


@pytest.mark.parametrize("entry", ["eager", "jit", "pmap", "shard_map"])
def test_64_bit_inputs_follow_x64(entry, x64):
    """With x64 off (JAX's default) a float64 / int64 argument computes in float32 / int32, silently; with x64
    on it keeps 64 bits. The values are numpy's (float32-rounded with x64 off)."""
    def f(x, n):
        return x * 2, n + 1

    if entry == "eager":
        fn = lambda x, n: (jnp.multiply(x, 2), jnp.add(n, 1))  # noqa: E731
    elif entry == "jit":
        fn = weft.jit(f)
    elif entry == "pmap":
        fn = weft.pmap(f)
    else:
        mesh = weft.Mesh(np.array(weft.devices()), ("i",))
        fn = weft.shard_map(f, mesh, in_specs=P("i"), out_specs=P("i"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: nothing asked for 64 bits by name
        x, n = fn(F64, I64)
    fdt, idt = (np.float64, np.int64) if x64 else (np.float32, np.int32)
    assert np.asarray(x).dtype == fdt and np.asarray(n).dtype == idt
    assert np.array_equal(np.asarray(x), F64.astype(fdt) * 2)
    assert np.array_equal(np.asarray(n), I64 + 1)


def test_default_dtypes_follow_x64(x64):
    """jnp.array([1, 2]) is int32 with x64 off, int64 with it on; Python numbers and creation functions
    likewise (JAX's default int and float)."""
    fdt, idt = (np.float64, np.int64) if x64 else (np.float32, np.int32)
    assert jnp.array([1, 2]).dtype == idt
    assert jnp.asarray([1.5, 2.0]).dtype == fdt
    assert jnp.asarray(np.float64(2.0)).dtype == fdt
    assert jnp.zeros(3).dtype == fdt and jnp.ones((2, 2)).dtype == fdt
    assert jnp.arange(4).dtype == idt and jnp.arange(0.0, 1.0, 0.5).dtype == fdt
    assert jnp.full(3, 7).dtype == idt
    assert weft.jit(lambda x: x)(1.0).dtype == fdt
    assert weft.jit(lambda: jnp.add(1, 2))().dtype == idt


WARNING = ("Explicitly requested dtype float64 requested in {} is not available, and will be truncated to dtype "
           "float32")


@pytest.mark.parametrize("call,where", [
    (lambda: jnp.asarray([1.0], dtype=np.float64), "asarray"),
    (lambda: jnp.array([1.0], dtype="float64"), "array"),
    (lambda: jnp.zeros(2, dtype=np.float64), "zeros"),
    (lambda: jnp.ones(2, np.float64), "ones"),
    (lambda: weft.jit(lambda x: x.astype(np.float64))(np.ones(2, np.float32)), "astype"),
])
def test_warning_when_64_bits_are_asked_for(call, where):
    """JAX's UserWarning, with its text, when a 64-bit dtype is named with x64 off; the result is 32-bit.
    With x64 on, no warning and 64 bits."""
    weft.config.update("jax_enable_x64", False)
    with pytest.warns(UserWarning, match=WARNING.format(where)):
        out = call()
    assert np.asarray(out).dtype == np.float32
    weft.config.update("jax_enable_x64", True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert np.asarray(call()).dtype == np.float64
    finally:
        weft.config.update("jax_enable_x64", False)


def test_int64_request_warns_and_truncates():
    weft.config.update("jax_enable_x64", False)
    with pytest.warns(UserWarning, match="Explicitly requested dtype int64 requested in asarray is not available, "
                                         "and will be truncated to dtype int32"):
        assert jnp.asarray([1, 2], dtype=np.int64).dtype == np.int32


def test_config_names_its_one_option():
    with pytest.raises(weft.InvalidArgument, match="unknown option 'jax_enable_x32'.*jax_enable_x64"):
        weft.config.update("jax_enable_x32", True)


def test_environment_switch(tmp_path):
    """WEFT_ENABLE_X64=1 turns x64 on at import (JAX's JAX_ENABLE_X64)."""
    import os
    import subprocess
    import sys
    code = "import numpy as np, weft, weft.numpy as jnp; print(jnp.asarray(np.zeros(1)).dtype, " \
           "weft.config.read('jax_enable_x64'))"
    env = dict(os.environ)
    for value, want in (("1", "float64 True"), ("0", "float32 False")):
        env["WEFT_ENABLE_X64"] = value
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.split() == want.split()


def test_gelu_and_layer_norm_of_integers_compute_in_the_default_float(x64):
    """jax.nn.gelu and a layer norm of int8 / int32 / bool values compute in the default float (float32, float64
    with x64 on), eagerly as traced; the fuzzer found eager gelu giving int8 [1, -1] for [2, -3]."""
    want_dtype = np.float64 if x64 else np.float32
    for dtype in (np.int8, np.int32, np.bool_):
        x = np.array([[2, -3, 0, 1]], dtype=dtype) if dtype != np.bool_ else np.array([[True, False, True, True]])
        v = x.astype(np.float64)
        gelu = 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3)))
        mean = v.mean(-1, keepdims=True)
        norm = (v - mean) / np.sqrt(((v - mean) ** 2).mean(-1, keepdims=True) + 1e-5)
        for entry, f in (("eager", lambda g: g), ("jit", weft.jit)):
            got = np.asarray(f(weft.nn.gelu)(x))
            assert got.dtype == want_dtype, (entry, dtype, got.dtype)
            assert np.allclose(got, gelu, rtol=1e-6, atol=1e-6), (entry, dtype, got, gelu)
        for name in ("exp", "tanh", "sqrt", "log1p"):  # jnp's floating-point functions of integers alike
            for entry, f in (("eager", lambda g: g), ("jit", weft.jit)):
                got = np.asarray(f(getattr(jnp, name))(np.abs(x.astype(np.int32)).astype(dtype)))
                assert got.dtype == want_dtype, (name, entry, dtype, got.dtype)
        got = np.asarray(weft.nn.layer_norm(x, np.ones(4, want_dtype), np.zeros(4, want_dtype)))
        assert got.dtype == want_dtype and np.allclose(got, norm, rtol=1e-5, atol=1e-5), (dtype, got)


def test_an_eager_replicas_numpy_results_are_typed_as_jax_holds_them(x64):
    """An eager pmap's replica returning numpy scalars or arrays: a np.float64 scalar is float64 with x64 on (it
    came back float32: np.float64 is a Python float too), and 64-bit results are 32-bit with x64 off."""
    f64, i64 = (np.float64, np.int64) if x64 else (np.float32, np.int32)
    cases = [(np.sin, np.ones(8), f64, np.sin(1.0)), (np.sin, np.ones((8, 1)), f64, np.sin(1.0)),
             (lambda x: np.int64(3), np.ones(8), i64, 3), (lambda x: 2.5, np.ones(8), f64, 2.5),
             (lambda x: np.float32(0.5), np.ones(8), np.float32, 0.5)]
    for fun, x, dtype, value in cases:
        got = np.asarray(weft.pmap(fun, eager=True)(x))
        assert got.dtype == dtype and got.shape == x.shape, (fun, x.shape, got.dtype, got.shape)
        assert np.allclose(got.astype(np.float64), np.float64(value).astype(dtype)), (fun, got)


def test_eager_pmap_hands_broadcast_python_numbers_to_the_replicas_as_numbers(x64):
    """pmap(eager=True, in_axes=(0, None)) with a Python number: the replica gets the number itself, weakly
    typed as in JAX and the traced pmap (uint8 + 5 is uint8; it was a numpy array, so int32), and stop_gradient of
    a numpy float64 is what JAX holds (float32 with x64 off). Found by the fuzzer."""
    x = np.arange(8, dtype=np.uint8)
    for eager in (True, False):
        got = np.asarray(weft.pmap(lambda v, n: jnp.add(v, n), axis_name="i", eager=eager, in_axes=(0, None))(x, 5))
        assert got.dtype == np.uint8 and np.array_equal(got, x + 5), (eager, got.dtype)
    assert np.asarray(jnp.stop_gradient(np.ones(3))).dtype == (np.float64 if x64 else np.float32)


def test_a_floating_function_of_a_weak_int_is_a_weak_float(x64):
    """JAX's floating functions keep a weak operand weak (promote_dtypes_inexact): log(b + 1) of a bool b is a
    weak float, so adding it to a float16 gives float16 (the program fuzzer's seed 1007791 found float32)."""
    h = np.array([2.0, 3.0], np.float16)
    b = np.array([True, False])
    out = weft.jit(lambda b, h: h + jnp.log(b + 1))(b, h)
    assert np.asarray(out).dtype == np.float16
    want = (h.astype(np.float64) + np.log(b.astype(np.float64) + 1)).astype(np.float16)
    np.testing.assert_allclose(np.asarray(out, np.float64), want.astype(np.float64), rtol=1e-3)
    for fn in (jnp.exp, jnp.tanh, jnp.sqrt):  # a Python int argument is traced weakly typed (as JAX)
        assert np.asarray(weft.jit(lambda h, n: h + fn(n))(h, 2)).dtype == np.float16, fn.__name__
