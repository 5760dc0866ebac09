"""A differential fuzzer for weft programs (issue 45; docs/testing.md, "Differential fuzzer").

Each seed makes one random typed program: a DAG over the ops of weft.numpy / weft.lax / weft.nn (the C++ op
registry's ops; COVERS / EXCLUDED say which), with every dtype the rules accept (bool, int8, uint8, int32,
int64, bfloat16, float16, float32, float64), broadcasting, Python scalars (weak types), keepdims, indexing
and slicing, reductions, and in SPMD programs the collectives with and without axis_index_groups, over shapes
from scalars to ~100 000 elements (some past the 64 Ki elements where shared runs start). The generator
evaluates the program as it builds it in numpy (the reference, class R): integer and bool values exactly in
the dtype JAX gives (JAX's wrap-around included), floating values in float64 rounded to the op's dtype after
every op, each element with a bound on how far an implementation that rounds correctly up to a few ulps may be
from it. A comparison or conversion whose operands are within that bound of the edge makes its element
"unknown" (bound inf): it and what depends on it are not checked against the reference (only across modes).

The program then runs in every mode that applies (run_modes): eager (weft.numpy on numpy arrays, one replica
after another; weft.pmap(eager=True) for SPMD programs), weft.jit per replica, the traced weft.pmap over 8
devices (with the program's groups, if any), weft.shard_map over a mesh of 8 (programs without groups), under
WEFT_SHARED_RUNS 0, 1 and 2 (weft.init(shared_runs=...)) for programs with a value of >= 64 Ki elements, and in
child processes with WEFT_FUSION=off and with WEFT_SCHEDULER=fibers (the traced modes: their replicas run C++
only). Every mode's outputs must be the same bits with the same dtype; the first mode's are checked against the
reference: JAX's result dtype (result_type below, written from JAX's "Type promotion semantics" page; the
differences weft documents are in DEVIATIONS) and the values within the propagated bound (tolerance below).
Each program has one setting of jax_enable_x64 (x64_of(seed): off, JAX's default, for three seeds in four), under
which both the reference (x64_model) and weft (weft.config) run it.

VJPs: vjp_case(seed) takes one differentiable op on float64 inputs away from its singular points, and compares
weft.grad of sum(op(x) * w) with central differences of the float64 reference.

Replay one program: WEFT_FUZZ_SEED=<seed> WEFT_FUZZ_COUNT=1 pytest tests/python/test_fuzz_programs.py; print it:
python3 tests/python/fuzz_programs.py <seed>.
"""
import contextlib
import os
import pickle
import subprocess
import sys
import tempfile
import warnings

import numpy as np

N = 8  # devices; every program runs on all of them
AXIS = "i"
LARGE = 65536  # elements of a value from which shared runs split a fused run (docs/settings.md)

# ---- dtypes and JAX's promotion ------------------------------------------------------------------------------
# JAX's type promotion lattice (docs.jax.dev, "Type promotion semantics"): each type's immediate successors.
# "i*" and "f*" are the weak types of Python ints and floats. promote(a, b) is the least upper bound.
_LATTICE = {
    "bool": ("i*",), "i*": ("uint8", "int8"), "uint8": ("uint16", "int16"), "uint16": ("uint32", "int32"),
    "uint32": ("uint64", "int64"), "uint64": ("f*",), "int8": ("int16",), "int16": ("int32",),
    "int32": ("int64",), "int64": ("f*",), "f*": ("bfloat16", "float16"), "bfloat16": ("float32",),
    "float16": ("float32",), "float32": ("float64",), "float64": (),
}


def _upper(t):
    seen, todo = set(), [t]
    while todo:
        x = todo.pop()
        if x not in seen:
            seen.add(x)
            todo.extend(_LATTICE[x])
    return seen


_UP = {t: _upper(t) for t in _LATTICE}
# weft has no int16 (include/weft/dtype.hpp: "uint8 with int8 -> int32"): the lattice's int16 is int32 here.
_ABSENT = {"int16": "int32"}


# ---- jax_enable_x64 -------------------------------------------------------------------------------------------
# JAX's "jax_enable_x64" (docs.jax.dev: "Type promotion semantics", "Double (64bit) precision"): off by default.
# Off, every 64-bit value entering the API (an argument, a captured constant, a dtype asked for by name) is its
# 32-bit type (canonicalize_dtype), and the defaults (a weak int or float, integer sums, means and true division
# of integers, transcendental functions of integers, argmax) are int32 / float32; on, they are int64 / float64.
# The model reads the setting of the program being generated (x64_model); weft runs it with the same setting.
class _Model:
    x64 = False


MODEL = _Model()
_NARROW = {"float64": "float32", "int64": "int32", "uint64": "uint32"}


@contextlib.contextmanager
def x64_model(on):
    """The reference model with jax_enable_x64 `on` (restored after)."""
    before, MODEL.x64 = MODEL.x64, bool(on)
    try:
        yield
    finally:
        MODEL.x64 = before


def canon(dt):
    """JAX's canonical dtype: 64-bit types are their 32-bit ones with x64 off."""
    return dt if MODEL.x64 else _NARROW.get(dt, dt)


def default_int():
    return "int64" if MODEL.x64 else "int32"


def default_float():
    return "float64" if MODEL.x64 else "float32"


def promote(a, b):
    """JAX's result type of a and b (names, "i*"/"f*" for weak), before canonicalisation."""
    common = _UP[a] & _UP[b]
    return next(x for x in common if common <= _UP[x])


def result_type(*types):
    """(dtype, weak) of an op over operands given as (dtype, weak): JAX's rules, in weft's dtypes."""
    t = None
    for dt, weak in types:
        key = ("i*" if dt in INTS else "f*") if weak and dt != "bool" else dt
        t = key if t is None else promote(t, key)
    weak = t in ("i*", "f*")
    dt = default_int() if t == "i*" else default_float() if t == "f*" else t
    return canon(_ABSENT.get(dt, dt)), weak


INTS = ("int8", "uint8", "int32", "int64")
FLOATS = ("bfloat16", "float16", "float32", "float64")
DTYPES = ("bool",) + INTS + FLOATS
INPUT_DTYPES = ("bool",) + INTS + ("float16", "float32", "float64")  # numpy holds these; bfloat16 via astype
BF16_MAX = (2 - 2.0 ** -7) * 2.0 ** 127
EPS = {"bfloat16": 2.0 ** -7, "float16": 2.0 ** -10, "float32": 2.0 ** -23, "float64": 2.0 ** -52}
TINY = {"bfloat16": 1.2e-38, "float16": 6.1e-5, "float32": 1.2e-38, "float64": 2.3e-308}
INT_RANGE = {"int8": (-128, 127), "uint8": (0, 255), "int32": (-2 ** 31, 2 ** 31 - 1), "int64": (-2 ** 63, 2 ** 63 - 1)}

# Where weft documents a difference from JAX, the fuzzer expects weft's documented result:
# (what, dtype JAX gives, dtype weft gives, where weft says so).
DEVIATIONS = {
    "weak_results": ("eager only: a value computed from weak values only (where(c, 1.0, 0.0)) used by a later op",
                     "still weak (times a float16 array: float16)", "strong (a numpy array: float32)",
                     "docs/python.md 'dtypes and x64': concrete weft.numpy results are numpy arrays, which carry "
                     "no weak flag (the program's eager mode is not run; the traced modes carry it as JAX)"),
    "layer_norm_dtype": ("nn.layer_norm of a bfloat16 x with float32 scale and bias (flax.linen.LayerNorm's place; "
                         "jax.nn has none)", "their promotion, float32 (flax's default dtype=None)", "x's, bfloat16",
                         "src/program/shape_rules.cc, layer_norm: the result has x's type"),
}

# Tolerance (docs/testing.md): every op may be off by ULPS[op] units in the last place of its dtype (EPS) at its
# result's magnitude, plus what its inputs' bounds propagate to (first order, or the exact interval for monotone
# functions); a sum of n terms by n ulps of the sum of magnitudes. Modes are compared bitwise; the first mode
# with the reference within SLACK times the bound (the bounds are first-order estimates).
ULPS_ROUNDED = 1.0  # + - * / sqrt, conversions: correctly rounded (once more for float64 -> float32 -> bfloat16)
ULPS_TRANSCENDENTAL = 4.0  # exp log log1p tanh sigmoid gelu rsqrt power softmax ...
SLACK = 2.0


def np_dtype(dt):
    return np.dtype(dt)


def rnd(dt, v):
    """float64 values rounded to dt (round to nearest even), as float64."""
    v = np.asarray(v, dtype=np.float64)
    if dt == "float64":
        return v
    if dt == "bfloat16":  # rounded once, from float64 (through float32 would round twice: JAX's converts once)
        with np.errstate(over="ignore", invalid="ignore"):
            _, e = np.frexp(v)
            q = np.maximum(e - 8, -133)  # 8 significant bits; below 2**-126 the subnormals' fixed step 2**-133
            out = np.ldexp(np.rint(np.ldexp(v, -q)), q)  # (rint: round half to even)
            return np.where(np.abs(out) > BF16_MAX, np.copysign(np.inf, v), out)
    with np.errstate(over="ignore", invalid="ignore"):
        return v.astype(np_dtype(dt)).astype(np.float64)


def ulp(dt, v):
    return EPS[dt] * np.abs(np.nan_to_num(v, nan=0.0, posinf=0.0, neginf=0.0)) + TINY[dt]


class R:
    """A reference value: v of shape [N, *shape] (float64 for floating dtypes, else exact in dt), e the bound of
    each element's distance from what weft may give (0 exact; inf unknown), dt its JAX dtype, weak JAX's weak
    type."""
    __slots__ = ("v", "e", "dt", "weak")

    def __init__(self, v, dt, e=None, weak=False):
        self.dt, self.weak = dt, weak
        self.v = np.asarray(v, dtype=np.float64 if dt in FLOATS else np_dtype(dt))
        self.e = np.zeros(self.v.shape) if e is None else np.broadcast_to(np.asarray(e, dtype=np.float64),
                                                                            self.v.shape).copy()
        self.e[np.isnan(self.e)] = np.inf

    @property
    def shape(self):
        return self.v.shape[1:]

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    def f64(self):
        return self.v.astype(np.float64)

    def lo_hi(self):
        return self.f64() - self.e, self.f64() + self.e


def to_dtype(r, dt):
    """r converted to dt as JAX's convert_element_type: floats rounded, float -> int truncated (the generator
    keeps such values in range), narrowing ints wrap, anything -> bool is != 0."""
    if dt == r.dt:
        return r
    if dt == "bool":
        lo, hi = r.lo_hi()
        unknown = (r.e > 0) & (lo <= 0) & (hi >= 0)
        return R(r.v != 0, "bool", np.where(unknown, np.inf, 0.0))
    if dt in FLOATS:
        out = rnd(dt, r.f64())
        e = r.e + (np.where(r.e > 0, ulp(dt, out), 0.0) if r.dt in FLOATS else 0.0)
        if r.dt in FLOATS and r.dt != dt:
            e = np.where(r.e > 0, e + ulp(dt, out) * ULPS_ROUNDED, e)
        return R(out, dt, e)
    if r.dt in FLOATS:
        lo, hi = r.lo_hi()
        unknown = (r.e > 0) & (np.trunc(lo) != np.trunc(hi))
        with np.errstate(invalid="ignore"):
            out = np.trunc(np.nan_to_num(r.v)).astype(np.int64).astype(np_dtype(dt))
        return R(out, dt, np.where(unknown, np.inf, 0.0))
    return R(r.v.astype(np.int64).astype(np_dtype(dt)) if r.dt != "bool" else r.v.astype(np_dtype(dt)), dt,
             np.where(r.e > 0, np.inf, 0.0))


def scalar_ref(value, shape_like=()):
    """A Python number as an operand: weakly typed, of the default int / float (the generator's numbers are
    exact in every float dtype)."""
    if isinstance(value, bool):
        return R(np.full((N,), value), "bool")
    if isinstance(value, int):
        return R(np.full((N,), value, dtype=np.int64).astype(default_int()), default_int(), weak=True)
    return R(rnd(default_float(), np.full((N,), value, dtype=np.float64)), default_float(), weak=True)


def canonical_ref(r):
    """A value entering the API (an argument, a captured constant): its canonical dtype, rounded to it."""
    return to_dtype(r, canon(r.dt))


def _expand(r, ndim):
    """r's arrays with scalars' per-replica shape broadcast to ndim dims (after the replica axis)."""
    v, e = r.v, r.e
    while v.ndim - 1 < ndim:
        v, e = v[:, None], e[:, None]
    return v, e


def _aligned(refs):
    nd = max(len(r.shape) for r in refs)
    out = []
    for r in refs:
        v, e = r.v.reshape((N,) + (1,) * (nd - len(r.shape)) + r.shape), r.e.reshape((N,) + (1,) * (nd - len(r.shape)) + r.shape)
        out.append((v, e))
    return out


# ---- the reference's ops ------------------------------------------------------------------------------------
def ref_binary(op, a, b):
    """Elementwise binary arithmetic with JAX's promotion; a or b may be a weak scalar."""
    dt, weak = result_type((a.dt, a.weak), (b.dt, b.weak))
    if op == "divide" and dt not in FLOATS:  # true division of integers: the default float (weak if both were)
        dt = default_float()
    (av, ae), (bv, be) = _aligned([a, b])
    if dt in FLOATS:
        ca, cb = to_dtype(R(av, a.dt, ae), dt), to_dtype(R(bv, b.dt, be), dt)
        x, y, ex, ey = ca.v, cb.v, ca.e, cb.e
        with np.errstate(all="ignore"):
            if op == "add":
                r, e = x + y, ex + ey
            elif op == "subtract":
                r, e = x - y, ex + ey
            elif op == "multiply":
                r, e = x * y, np.abs(x) * ey + np.abs(y) * ex + ex * ey
            elif op == "divide":
                r = x / y
                den = np.abs(y) - ey
                e = np.where(den > 0, (ex + np.abs(r) * ey) / np.where(den > 0, den, 1.0), np.inf)
                e = np.where((ex == 0) & (ey == 0), 0.0, e)
            elif op == "maximum":
                r, e = np.maximum(x, y), np.maximum(ex, ey)
            elif op == "minimum":
                r, e = np.minimum(x, y), np.maximum(ex, ey)
            elif op == "power":
                r = np.power(x, y)
                lo = x - ex
                e = np.where(lo > 0, np.abs(r) * (np.abs(y) * ex / np.where(lo > 0, lo, 1.0)
                                                  + np.abs(np.log(np.where(x > 0, x, 1.0))) * ey), np.inf)
                e = np.where((ex == 0) & (ey == 0), 0.0, e)
            else:
                raise KeyError(op)
            out = rnd(dt, r)
            k = ULPS_TRANSCENDENTAL if op == "power" else (0.0 if op in ("maximum", "minimum") else ULPS_ROUNDED)
            exact_in = (ex == 0) & (ey == 0)
            # correctly rounded ops of exact inputs give exactly `out`; otherwise allow k ulps of the result
            e = np.where(exact_in & (op != "power"), 0.0, e + k * ulp(dt, out))
        return R(out, dt, e, weak)
    x, y = to_dtype(R(av, a.dt, ae), dt), to_dtype(R(bv, b.dt, be), dt)
    with np.errstate(all="ignore"):
        if dt == "bool":
            r = {"add": np.logical_or, "multiply": np.logical_and, "maximum": np.logical_or,
                 "minimum": np.logical_and}[op](x.v, y.v)
        else:
            r = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "maximum": np.maximum,
                 "minimum": np.minimum}[op](x.v, y.v)
    return R(r, dt, np.where((x.e > 0) | (y.e > 0), np.inf, 0.0), weak)


def ref_compare(op, a, b):
    dt, _ = result_type((a.dt, a.weak), (b.dt, b.weak))
    (av, ae), (bv, be) = _aligned([a, b])
    x, y = to_dtype(R(av, a.dt, ae), dt), to_dtype(R(bv, b.dt, be), dt)
    fn = {"equal": np.equal, "not_equal": np.not_equal, "less": np.less, "less_equal": np.less_equal,
          "greater": np.greater, "greater_equal": np.greater_equal}[op]
    r = fn(x.v, y.v)
    with np.errstate(invalid="ignore"):
        close = np.abs(x.f64() - y.f64()) <= x.e + y.e
    unknown = np.isinf(x.e) | np.isinf(y.e) | (((x.e > 0) | (y.e > 0)) & close)
    return R(r, "bool", np.where(unknown, np.inf, 0.0))


def ref_where(c, a, b):
    dt, weak = result_type((a.dt, a.weak), (b.dt, b.weak))
    (cv, ce), (av, ae), (bv, be) = _aligned([c, a, b])
    x, y = to_dtype(R(av, a.dt, ae), dt), to_dtype(R(bv, b.dt, be), dt)
    cond = np.broadcast_to(cv, np.broadcast_shapes(cv.shape, x.v.shape, y.v.shape))
    r = np.where(cond, x.v, y.v)
    e = np.where(ce > 0, np.inf, np.where(cond, x.e, y.e))
    return R(r, dt, e, weak)


def ref_unary(op, a):
    """The elementwise unary ops. Float functions are evaluated over [v - e, v + e] for their bound."""
    if op in FLOAT_UNARY:
        dt = a.dt if a.dt in FLOATS else default_float()  # of integers: the default float (weak if a is)
        x = to_dtype(a, dt)
        fn = FLOAT_UNARY[op]
        with np.errstate(all="ignore"):
            r = fn(x.v)
            if op == "gelu_tanh":  # not monotone (slope within [-0.13, 1.13]); JAX's formula 0.5 x (1 + tanh(..))
                # cancels for negative x: a few ulps of |x| rather than of the result
                e = 1.13 * x.e + ULPS_TRANSCENDENTAL * ulp(dt, x.v)
            else:
                lo, hi = fn(x.v - x.e), fn(x.v + x.e)
                e = np.maximum(np.abs(lo - r), np.abs(hi - r))
            out = rnd(dt, r)
            k = ULPS_ROUNDED if op == "sqrt" else ULPS_TRANSCENDENTAL
            e = np.where((x.e == 0) & (op == "sqrt"), 0.0, e + k * ulp(dt, out))
        return R(out, dt, e, a.weak)
    if a.dt in FLOATS:
        x = a.v
        if op == "abs":
            return R(np.abs(x), a.dt, a.e, a.weak)
        if op == "negative":
            return R(-x, a.dt, a.e, a.weak)
        if op in ("stop_gradient",):
            return a
        if op == "relu":
            return R(np.maximum(x, 0.0), a.dt, a.e, a.weak)
        if op == "sign":
            unknown = (a.e > 0) & (np.abs(x) <= a.e)
            return R(np.sign(x), a.dt, np.where(unknown, np.inf, 0.0), a.weak)
    x = a.v
    with np.errstate(all="ignore"):
        r = {"abs": np.abs, "negative": np.negative, "sign": np.sign, "stop_gradient": lambda t: t,
             "relu": lambda t: np.maximum(t, np.zeros((), t.dtype)), "bitwise_not": np.invert}[op](x)
    return R(r.astype(x.dtype), a.dt, np.where(a.e > 0, np.inf, 0.0), a.weak and a.dt != "bool")


def _gelu(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


FLOAT_UNARY = {"exp": np.exp, "log": np.log, "log1p": np.log1p, "tanh": np.tanh, "sqrt": np.sqrt,
               "rsqrt": lambda x: 1.0 / np.sqrt(x), "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
               "gelu_tanh": _gelu}


def ref_bitwise(op, a, b):
    dt, weak = result_type((a.dt, a.weak), (b.dt, b.weak))
    (av, ae), (bv, be) = _aligned([a, b])
    x, y = to_dtype(R(av, a.dt, ae), dt), to_dtype(R(bv, b.dt, be), dt)
    r = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor}[op](x.v, y.v)
    return R(r, dt, np.where((x.e > 0) | (y.e > 0), np.inf, 0.0), weak)


def ref_integer_pow(a, n):
    if a.dt in FLOATS:
        with np.errstate(all="ignore"):
            r = a.v ** n
            lo, hi = (a.v - a.e) ** n, (a.v + a.e) ** n
            e = np.maximum(np.abs(lo - r), np.abs(hi - r))
            if n < 0:
                e = np.where((a.v - a.e) * (a.v + a.e) <= 0, np.inf, e)
            out = rnd(a.dt, r)
            e = np.where((a.e == 0) & (n in (0, 1)), 0.0, e + (abs(n) + 1) * ulp(a.dt, out))
        return R(out, a.dt, e, a.weak)
    with np.errstate(all="ignore"):
        r = np.ones_like(a.v)
        for _ in range(n):
            r = (r * a.v).astype(a.v.dtype)
    return R(r, a.dt, np.where(a.e > 0, np.inf, 0.0), a.weak)


def _axes_of(axes, nd):
    return tuple(range(nd)) if axes is None else tuple(axes)


def sum_dtype(dt):
    """jnp.sum's result (promote_integers): bool and integers narrower than the default int accumulate in the
    default int, int32 / int64 with x64 off / on (unsigned in uint32 / uint64, which weft lacks: the signed type
    with the same values is accepted); others keep their dtype."""
    narrower = ("bool", "int8", "uint8") + (("int32",) if MODEL.x64 else ())
    return default_int() if dt in narrower else dt


def ref_reduce(op, a, axes, keepdims):
    nd = len(a.shape)
    ax = tuple(x + 1 for x in _axes_of(axes, nd))
    n = int(np.prod([a.v.shape[x] for x in ax], dtype=np.int64)) if ax else 1
    unknown_in = np.isinf(a.e).any(axis=ax, keepdims=keepdims)
    if op in ("max", "min"):
        fn = np.max if op == "max" else np.min
        r = fn(a.v, axis=ax, keepdims=keepdims)
        e = np.max(a.e, axis=ax, keepdims=keepdims)
        return R(r, a.dt, e)
    if op == "sum":
        dt = sum_dtype(a.dt)
        if dt in FLOATS:
            s = np.sum(a.v, axis=ax, keepdims=keepdims)
            mag = np.sum(np.abs(a.v), axis=ax, keepdims=keepdims)
            out = rnd(dt, s)
            e = np.sum(a.e, axis=ax, keepdims=keepdims) + n * EPS[dt] * mag + ulp(dt, out)
            return R(out, dt, e)
        s = np.sum(a.v.astype(np.int64), axis=ax, keepdims=keepdims)
        return R(s.astype(np_dtype(dt)), dt, np.where(unknown_in, np.inf, 0.0))
    if op == "mean":
        dt = a.dt if a.dt in FLOATS else default_float()
        m = np.mean(a.v.astype(np.float64), axis=ax, keepdims=keepdims)
        mag = np.mean(np.abs(a.v.astype(np.float64)), axis=ax, keepdims=keepdims)
        out = rnd(dt, m)
        e = np.mean(a.e, axis=ax, keepdims=keepdims) + (n + 1) * EPS[dt] * mag + ulp(dt, out)
        if a.dt not in FLOATS:
            e = np.where(unknown_in, np.inf, e)
        return R(out, dt, e)
    raise KeyError(op)


def ref_cumulative(op, a, axis):
    """jnp.cumsum / jnp.cumprod along `axis` (None: of the flattened value), sum's dtype (promote_integers).
    Floating: the float64 scan rounded once, each position's bound its inputs' (a sum's: their bounds added; a
    product's: prod(|x| + e) - prod(|x|), its terms all non-negative) plus n roundings of the running
    magnitude, n the axis length. Integers: the int64 scan wrapped to the dtype (wrap-around is modular, so
    the same as scanning in the dtype); unknown from the first unknown element on."""
    dt = sum_dtype(a.dt)
    v, e = a.v, a.e
    if axis is None:
        v, e = v.reshape(N, -1), e.reshape(N, -1)
        ax = 1
    else:
        ax = axis + 1
    n = v.shape[ax]
    if dt in FLOATS:
        x = v.astype(np.float64)
        with np.errstate(all="ignore"):
            if op == "cumsum":
                r = np.cumsum(x, axis=ax)
                mag = np.cumsum(np.abs(x), axis=ax)
                prop = np.cumsum(e, axis=ax)
            else:
                r = np.cumprod(x, axis=ax)
                mag = np.cumprod(np.abs(x) + e, axis=ax)
                prop = mag - np.cumprod(np.abs(x), axis=ax)
        out = rnd(dt, r)
        return R(out, dt, prop + n * EPS[dt] * mag + ulp(dt, out))
    fn = np.cumsum if op == "cumsum" else np.cumprod
    with np.errstate(all="ignore"):
        r = fn(v.astype(np.int64), axis=ax).astype(np_dtype(dt))
    unknown = np.maximum.accumulate(np.isinf(e), axis=ax)
    return R(r, dt, np.where(unknown, np.inf, 0.0))


def ref_arg(op, a, axis, keepdims):
    v = a.f64()
    e = a.e
    if axis is None:
        v, e = v.reshape(N, -1), e.reshape(N, -1)
        ax = 1
    else:
        ax = axis + 1
    idx = np.argmax(v, axis=ax) if op == "argmax" else np.argmin(v, axis=ax)
    best = np.take_along_axis(v, np.expand_dims(idx, ax), ax)
    best_e = np.take_along_axis(e, np.expand_dims(idx, ax), ax)
    near = np.abs(v - best) <= e + best_e
    contenders = near.sum(axis=ax) > 1
    unknown = contenders & ((e > 0).any(axis=ax)) | np.isinf(e).any(axis=ax)
    if keepdims:
        if axis is None:
            idx, unknown = idx.reshape((N,) + (1,) * len(a.shape)), unknown.reshape((N,) + (1,) * len(a.shape))
        else:
            idx, unknown = np.expand_dims(idx, ax), np.expand_dims(unknown, ax)
    return R(idx.astype(default_int()), default_int(), np.where(unknown, np.inf, 0.0))


def ref_matmul(a, b):
    dt, weak = result_type((a.dt, a.weak), (b.dt, b.weak))
    x, y = to_dtype(a, dt), to_dtype(b, dt)
    xv, yv, xe, ye = x.v, y.v, x.e, y.e
    vec_a, vec_b = len(a.shape) == 1, len(b.shape) == 1
    if vec_a:
        xv, xe = xv[:, None, :], xe[:, None, :]
    if vec_b:
        yv, ye = yv[:, :, None], ye[:, :, None]
    if len(b.shape) <= 2 and len(a.shape) >= 2:
        pass
    k = xv.shape[-1]
    if dt in FLOATS:
        r = np.matmul(xv, yv)
        e = np.matmul(np.abs(xv), ye) + np.matmul(xe, np.abs(yv)) + np.matmul(xe, ye)
        e = e + (k + 1) * EPS[dt] * np.matmul(np.abs(xv), np.abs(yv))
        out = rnd(dt, r)
        e = e + ulp(dt, out)
    else:
        out = np.matmul(xv.astype(np.int64), yv.astype(np.int64)).astype(np_dtype(dt))
        e = np.where(np.matmul((xe > 0).astype(np.int64), np.ones_like(yv, dtype=np.int64)) +
                     np.matmul(np.ones_like(xv, dtype=np.int64), (ye > 0).astype(np.int64)) > 0, np.inf, 0.0)
    if vec_a:
        out, e = out[..., 0, :], e[..., 0, :]
    if vec_b:
        out, e = out[..., 0], e[..., 0]
    return R(out, dt, e, weak)


def ref_softmax(op, a, axis, keepdims=False):
    dt = a.dt if a.dt in FLOATS else "float32"
    x = to_dtype(a, dt)
    ax = axis + 1
    v = x.v
    m = np.max(v, axis=ax, keepdims=True)
    emax = np.max(x.e, axis=ax, keepdims=True)
    with np.errstate(all="ignore"):
        lse = m + np.log(np.sum(np.exp(v - m), axis=ax, keepdims=True))
        mag = np.max(np.abs(v), axis=ax, keepdims=True)
        n = v.shape[ax]
        if op == "softmax":
            r = np.exp(v - lse)
            e = 2 * r * emax + (ULPS_TRANSCENDENTAL + n) * EPS[dt] * (r + r * mag)
        elif op == "log_softmax":
            r = v - lse
            e = 2 * emax + (ULPS_TRANSCENDENTAL + n) * EPS[dt] * (np.abs(r) + mag + np.abs(lse))
        else:
            r = lse if keepdims else np.squeeze(lse, ax)
            emax = emax if keepdims else np.squeeze(emax, ax)
            mg = (mag if keepdims else np.squeeze(mag, ax))
            e = emax + (ULPS_TRANSCENDENTAL + n) * EPS[dt] * (np.abs(r) + mg)
    out = rnd(dt, r)
    return R(out, dt, e + ulp(dt, out))


def ref_layer_norm(x, scale, bias, eps):
    dt = x.dt  # DEVIATIONS["layer_norm_dtype"]: x's dtype, whatever scale's and bias's
    v = x.v
    mean = v.mean(-1, keepdims=True)
    var = ((v - mean) ** 2).mean(-1, keepdims=True)
    sd = np.sqrt(var + eps)
    xn = (v - mean) / sd
    r = xn * scale.v[:, None] if False else xn * scale.v.reshape((N,) + (1,) * (v.ndim - 2) + scale.shape) \
        + bias.v.reshape((N,) + (1,) * (v.ndim - 2) + bias.shape)
    s = np.abs(scale.v.reshape((N,) + (1,) * (v.ndim - 2) + scale.shape))
    cdt = "float32" if x.dt in ("bfloat16", "float16") else x.dt
    d = v.shape[-1]
    ex = np.max(x.e, axis=-1, keepdims=True)
    dev = np.max(np.abs(v), axis=-1, keepdims=True)
    e = s * (3 * ex + (16 + 2 * d) * EPS[cdt] * dev) / sd + np.abs(xn) * scale.e.reshape(s.shape[:1] + (1,) * (v.ndim - 2) + scale.shape) \
        + bias.e.reshape(s.shape[:1] + (1,) * (v.ndim - 2) + bias.shape) + (ULPS_TRANSCENDENTAL) * ulp(dt, r) \
        + s * 8 * EPS[x.dt] * (np.abs(xn) + 1)
    out = rnd(dt, r)
    return R(out, dt, e + ulp(dt, out))


# ---- collectives over the replica axis ----------------------------------------------------------------------
def group_of(groups):
    """replica -> (its group's members in order, its position)."""
    groups = groups or [list(range(N))]
    out = {}
    for g in groups:
        for pos, r in enumerate(g):
            out[r] = (list(g), pos)
    return out


def ref_all_reduce(op, a, groups):
    gs = group_of(groups)
    dt = a.dt
    v = np.empty_like(a.v)
    e = np.empty_like(a.e)
    for r in range(N):
        members, _ = gs[r]
        vals = a.v[members]
        errs = a.e[members]
        if op == "psum":
            if dt in FLOATS:
                v[r] = rnd(dt, vals.sum(0))
                e[r] = errs.sum(0) + len(members) * EPS[dt] * np.abs(vals).sum(0) + ulp(dt, v[r])
            else:
                v[r] = vals.astype(np.int64).sum(0).astype(v.dtype) if dt != "bool" else vals.any(0)
                e[r] = np.where(np.isinf(errs).any(0), np.inf, 0.0)
        elif op == "pmean":
            v[r] = rnd(dt, vals.mean(0))
            e[r] = errs.mean(0) + (len(members) + 1) * EPS[dt] * np.abs(vals).mean(0) + ulp(dt, v[r])
        else:
            v[r] = vals.max(0) if op == "pmax" else vals.min(0)
            e[r] = errs.max(0)
    return R(v, dt, e)


def ref_all_gather(a, groups, axis, tiled):
    gs = group_of(groups)
    vs, es = [], []
    for r in range(N):
        members, _ = gs[r]
        if tiled:
            vs.append(np.concatenate(list(a.v[members]), axis=axis))
            es.append(np.concatenate(list(a.e[members]), axis=axis))
        else:
            vs.append(np.stack(list(a.v[members]), axis=axis))
            es.append(np.stack(list(a.e[members]), axis=axis))
    return R(np.stack(vs), a.dt, np.stack(es))


def ref_psum_scatter(a, groups, dim, tiled):
    red = ref_all_reduce("psum", a, groups)
    gs = group_of(groups)
    vs, es = [], []
    for r in range(N):
        members, pos = gs[r]
        n = len(members)
        if tiled:
            k = a.shape[dim] // n
            sl = [slice(None)] * len(a.shape)
            sl[dim] = slice(pos * k, (pos + 1) * k)
            vs.append(red.v[r][tuple(sl)])
            es.append(red.e[r][tuple(sl)])
        else:
            vs.append(np.take(red.v[r], pos, axis=dim))
            es.append(np.take(red.e[r], pos, axis=dim))
    return R(np.stack(vs), red.dt, np.stack(es))


def ref_all_to_all(a, groups, split, concat, tiled):
    gs = group_of(groups)
    vs, es = [], []
    for r in range(N):
        members, pos = gs[r]
        n = len(members)
        k = a.shape[split] // n
        sl = [slice(None)] * len(a.shape)
        sl[split] = slice(pos * k, (pos + 1) * k)
        chunks = [a.v[m][tuple(sl)] for m in members]
        echunks = [a.e[m][tuple(sl)] for m in members]
        if tiled:
            vs.append(np.concatenate(chunks, axis=concat))
            es.append(np.concatenate(echunks, axis=concat))
        else:  # split == concat, size n: chunk of size 1 from each member, in member order
            vs.append(np.concatenate(chunks, axis=concat))
            es.append(np.concatenate(echunks, axis=concat))
    return R(np.stack(vs), a.dt, np.stack(es))


def ref_ppermute(a, perm):
    v = np.zeros_like(a.v)
    e = np.zeros_like(a.e)
    for src, dst in perm:
        v[dst], e[dst] = a.v[src], a.e[src]
    return R(v, a.dt, e)


def ref_pbroadcast(a, source):
    """Every member gets member `source`'s value (jax.lax.pbroadcast)."""
    return R(np.stack([a.v[source]] * len(a.v)), a.dt, np.stack([a.e[source]] * len(a.e)))


def ref_reshape(refs, p):
    r = refs[0]
    return R(r.v.reshape((N,) + tuple(p["shape"])), r.dt, r.e.reshape((N,) + tuple(p["shape"])), r.weak)


def ref_transpose(refs, p):
    r = refs[0]
    full = (0,) + tuple(k + 1 for k in p["perm"])
    return R(r.v.transpose(full), r.dt, r.e.transpose(full), r.weak)


def ref_broadcast_to(refs, p):
    r, shape = refs[0], tuple(p["shape"])
    full = (N,) + shape
    return R(np.broadcast_to(_expand_to(r.v, len(shape)), full), r.dt,
             np.broadcast_to(_expand_to(r.e, len(shape)), full), r.weak)


def ref_slice(refs, p):
    r = refs[0]
    full = (slice(None),) + p["index"]
    return R(r.v[full], r.dt, r.e[full], r.weak)


def ref_take(refs, p):
    r, idx = refs
    return R(np.take(r.v, idx, axis=p["axis"] + 1), r.dt, np.take(r.e, idx, axis=p["axis"] + 1), r.weak)


def ref_concatenate(refs, p):
    dt, weak = result_type(*[(q.dt, q.weak) for q in refs])
    conv = [to_dtype(q, dt) for q in refs]
    return R(np.concatenate([q.v for q in conv], axis=p["axis"] + 1), dt,
             np.concatenate([q.e for q in conv], axis=p["axis"] + 1), weak)


# ---- the program generator ----------------------------------------------------------------------------------
GROUPINGS = ([[0, 1, 2, 3], [4, 5, 6, 7]], [[0, 2, 4, 6], [1, 3, 5, 7]], [[0, 1], [2, 3], [4, 5], [6, 7]],
             [[7, 6, 5, 4], [3, 2, 1, 0]])


class Program:
    """steps: ("input", k) or (op, operands, params), each making one value; an operand is ("v", value index),
    ("py", a Python number) or ("c", a numpy constant). refs: each value's reference. outputs: value indices."""

    def __init__(self, seed):
        self.seed = seed
        self.steps, self.refs, self.inputs, self.outputs = [], [], [], []
        self.spmd = False
        self.groups = None
        self.bf16 = False
        self.x64 = False  # jax_enable_x64 the program is generated and run with (the model's when generated)
        self.scalar_args = set()  # values that are Python numbers passed as arguments
        self.weak_used = False  # an op reads a computed weak value (DEVIATIONS["weak_results"]: no eager mode)
        self.deviations = set()

    @property
    def collectives(self):
        return any(s[0] in COLLECTIVES for s in self.steps)

    @property
    def large(self):
        return any(int(np.prod(t[2], dtype=np.int64)) >= LARGE for t in self.types)

    def without_refs(self):
        """A copy to run elsewhere (a child process): the steps, inputs and types, no references."""
        p = Program(self.seed)
        p.__dict__.update({k: v for k, v in self.__dict__.items() if k != "refs"})
        p.refs = {}
        return p

    def compact(self):
        """Keeps each value's type and the references of the outputs only (the others are large and done with)."""
        self.types = [(r.dt, r.weak, r.shape) for r in self.refs]
        self.refs = {k: self.refs[k] for k in self.outputs}

    def text(self):
        lines = [f"# seed {self.seed}: {'SPMD' if self.spmd else 'local'} program over {N} replicas"
                 + (f", groups {self.groups}" if self.groups else "")
                 + f", jax_enable_x64 {'on' if self.x64 else 'off'}"]
        for k, step in enumerate(self.steps):
            dt, weak, shape = self.types[k]
            typ = f"{dt}{'(weak)' if weak else ''}{list(shape)}"
            if step[0] == "input":
                a = self.inputs[step[1]]
                lines.append(f"v{k} = input{step[1]}  # {typ}" if isinstance(a, np.ndarray) else
                             f"v{k} = input{step[1]} = {a!r}  # a Python number passed as an argument")
                continue
            op, operands, params = step
            args = ", ".join(f"v{o[1]}" if o[0] == "v" else repr(o[1]) if o[0] == "py" else
                             f"const({o[1].dtype}{list(o[1].shape)}: {o[1].ravel()[:8].tolist()})" for o in operands)
            ps = "".join(f", {k2}={v!r}" for k2, v in params.items())
            lines.append(f"v{k} = {op}({args}{ps})  # {typ}")
        lines.append("return " + ", ".join(f"v{o}" for o in self.outputs))
        return "\n".join(lines)


class Gen:
    def __init__(self, seed, vjp_op=None):
        self.rng = np.random.default_rng(seed)
        self.p = Program(seed)
        self.p.x64 = MODEL.x64
        self.vjp, self.vjp_op = vjp_op is not None, vjp_op

    # -- values
    def add(self, step, ref):
        if step[0] != "input" and any(o[0] == "v" and o[1] not in self.p.scalar_args and self.p.refs[o[1]].weak
                                      for o in step[1]):
            self.p.deviations.add("weak_results")  # eager results are numpy arrays: strong
            self.p.weak_used = True
        self.p.steps.append(step)
        self.p.refs.append(ref)
        if ref.dt == "bfloat16":
            self.p.bf16 = True
        return len(self.p.refs) - 1

    def input_values(self, dt, shape):
        rng = self.rng
        full = (N,) + tuple(shape)
        if self.vjp:  # away from the op's singular points: positive where its domain asks
            lo = 0.4 if self.vjp_op in DOMAIN or self.vjp_op == "power" else -2.0
            return rng.uniform(lo, 2.5, full).astype(np.float64)
        if dt == "bool":
            return rng.random(full) < 0.5
        if dt in INTS:
            lo, hi = INT_RANGE[dt]
            if dt in ("int8", "uint8") and rng.random() < 0.5:
                return rng.integers(lo, hi + 1, full).astype(dt)
            if dt == "uint8":
                return rng.integers(0, 11, full).astype(dt)
            return rng.integers(-20, 21, full).astype(dt)
        if rng.random() < 0.25:  # small integers as floats: exact arithmetic, ties
            return rng.integers(-4, 5, full).astype(dt)
        return (rng.standard_normal(full) * rng.choice([0.5, 1.0, 3.0])).astype(dt)

    def new_scalar_input(self, value):
        """A Python number passed as an argument of the program (weakly typed, as JAX types it)."""
        k = len(self.p.inputs)
        self.p.inputs.append(value)
        self.p.steps.append(("input", k))
        self.p.refs.append(scalar_ref(value))
        self.p.scalar_args.add(len(self.p.refs) - 1)
        return len(self.p.refs) - 1

    def new_input(self, dt, shape):
        values = self.input_values(dt, shape)
        k = len(self.p.inputs)
        self.p.inputs.append(values)
        # (a float64 / int64 argument is float32 / int32 with x64 off)
        return self.add(("input", k), canonical_ref(R(values.astype(np.float64) if dt in FLOATS else values, dt)))

    def raw_int64(self, k):
        """Value k is an int64 numpy argument with x64 off (weft narrows it where JAX does)."""
        step = self.p.steps[k]
        return not MODEL.x64 and step[0] == "input" and getattr(self.p.inputs[step[1]], "dtype", None) == np.int64

    def ref(self, o):
        if o[0] == "v":
            return self.p.refs[o[1]]
        if o[0] == "c":  # a numpy array the program captures: a constant of the trace, the same on every replica
            a = o[1]
            full = np.broadcast_to(a, (N,) + a.shape)
            return canonical_ref(R(full.astype(np.float64) if a.dtype.kind == "f" else full, a.dtype.name))
        return scalar_ref(o[1])

    def pick(self, pred=lambda r: True, fresh=None, weak=False):
        """A value satisfying pred (recent ones more likely); None if none (or, with `fresh` (dtype, shape), a
        new input of that type). Never a Python-number argument; a weak computed value only where `weak` (the
        elementwise ops, whose weak-type rule is JAX's promotion lattice)."""
        candidates = [k for k, r in enumerate(self.p.refs) if pred(r) and k not in self.p.scalar_args
                      and (weak or not r.weak)]
        if candidates and (fresh is None or self.rng.random() < 0.85):
            w = np.arange(1, len(candidates) + 1, dtype=np.float64) ** 2
            return int(self.rng.choice(candidates, p=w / w.sum()))
        if fresh is not None:
            return self.new_input(*fresh)
        return None

    def dtype(self, allowed=DTYPES):
        allowed = [d for d in allowed if d in INPUT_DTYPES]
        if self.vjp:
            return "float64"
        return str(self.rng.choice(allowed))

    def broadcast_partner(self, shape):
        """A shape that broadcasts with `shape` (the same, a suffix, or with some dimensions 1)."""
        rng = self.rng
        shape = list(shape)
        c = rng.random()
        if c < 0.5 or not shape:
            return tuple(shape)
        if c < 0.7:
            return tuple(shape[rng.integers(0, len(shape) + 1):])
        return tuple(d if rng.random() < 0.5 else 1 for d in shape)

    def scalar_for(self, r):
        rng = self.rng
        if r.dt == "uint8":  # a negative Python int does not fit uint8: JAX refuses it (OverflowError)
            return int(rng.choice([2, 3, 1, 5]))
        if r.dt in FLOATS or rng.random() < 0.3:
            return float(rng.choice([2.0, 0.5, -1.5, 3.0, 0.25, 1.0]))
        return int(rng.choice([2, -1, 3, 1, 5]))

    def partner(self, a, kinds=DTYPES, allow_scalar=True):
        """A second operand for value a: a Python number (weak), an existing value that broadcasts with it, or a
        new input."""
        rng = self.rng
        ra = self.p.refs[a]
        if allow_scalar and not self.vjp and rng.random() < 0.3:
            v = self.scalar_for(ra)
            if isinstance(v, float) and not any(d in FLOATS for d in kinds):
                v = int(v)
            return ("v", self.new_scalar_input(v)) if rng.random() < 0.3 else ("py", v)

        def ok(r):
            try:
                shape = np.broadcast_shapes(r.shape, ra.shape)
            except ValueError:
                return False
            return r.dt in kinds and int(np.prod(shape, dtype=np.int64)) <= max(ra.size, r.size, 1)
        dt = ra.dt if ra.dt in kinds and ra.dt in INPUT_DTYPES and rng.random() < 0.6 else self.dtype(kinds)
        if not self.vjp and rng.random() < 0.12:  # a captured numpy array (its dtype is strong, as JAX's)
            return ("c", self.input_values(dt, self.broadcast_partner(ra.shape))[0])
        return ("v", self.pick(ok, fresh=(dt, self.broadcast_partner(ra.shape)), weak=True))


COLLECTIVES = {"psum", "pmean", "pmax", "pmin", "all_gather", "psum_scatter", "all_to_all", "ppermute", "pbroadcast",
               "axis_index"}
NUMERIC = INTS + FLOATS
NONBOOL = NUMERIC


def _is(*dts):
    return lambda r: r.dt in dts


def make_binary(op):
    kinds = {"power": FLOATS, "divide": NUMERIC}.get(op, DTYPES)

    def make(g):
        if op == "power":
            a = g.pick(lambda r: r.dt in FLOATS and r.size > 0 and np.all(r.v - r.e > 0.2) and np.all(r.v < 6))
            if a is None:
                return None
            if g.rng.random() < 0.5 and not g.vjp:
                b = ("py", float(g.rng.choice([0.5, 1.5, 2.5, -0.5])))
            else:
                b = ("v", g.pick(lambda r: r.dt in FLOATS and np.all(np.abs(r.v) < 3) and _bcast_ok(r, g.p.refs[a]),
                                 fresh=(g.dtype(("float32", "float64", "float16")), g.broadcast_partner(g.p.refs[a].shape))))
                if not np.all(np.abs(g.ref(b).v) < 3):
                    return None
        else:
            a = g.pick(lambda r: r.dt in kinds, fresh=(g.dtype(kinds), g.shape()), weak=True)
            b = g.partner(a, kinds)
        operands = [("v", a), b] if g.rng.random() < 0.7 else [b, ("v", a)]
        if op == "subtract" and all(g.ref(o).dt == "bool" for o in operands):
            return None  # JAX refuses - on bools
        if op == "divide" and any(g.ref(o).dt == "bool" for o in operands):
            return None
        refs = [g.ref(o) for o in operands]
        out = ref_binary(op, *refs)
        (av, _), (bv, _) = _aligned(refs)
        if g.vjp and op in ("maximum", "minimum") and np.any(np.abs(av - bv) < 0.1):
            return None
        if op == "divide" and g.vjp and np.any(np.abs(refs[1].v) < 0.2):
            return None
        return operands, {}, out
    return make


def _bcast_ok(r, ra):
    try:
        np.broadcast_shapes(r.shape, ra.shape)
        return True
    except ValueError:
        return False


def make_compare(op):
    def make(g):
        a = g.pick(fresh=(g.dtype(), g.shape()), weak=True)
        b = g.partner(a)
        operands = [("v", a), b]
        out = ref_compare(op, *[g.ref(o) for o in operands])
        return operands, {}, out
    return make


def make_where(g):
    rng = g.rng
    c = g.pick(lambda r: r.dt == "bool", fresh=("bool", g.shape()))
    rc = g.p.refs[c]
    ops = []
    for _ in range(2):
        if rng.random() < 0.35 and not g.vjp:
            v = g.scalar_for(rc) if rng.random() < 0.5 else float(rng.choice([1.0, 0.0, -2.5]))
            ops.append(("v", g.new_scalar_input(v)) if rng.random() < 0.3 else ("py", v))
        else:
            ops.append(("v", g.pick(lambda r: _bcast_ok(r, rc) and r.size <= max(rc.size, 1) * 4,
                                    fresh=(g.dtype(), g.broadcast_partner(rc.shape)), weak=True)))
    operands = [("v", c)] + ops
    refs = [g.ref(o) for o in operands]
    try:
        np.broadcast_shapes(*[r.shape for r in refs])
    except ValueError:
        return None  # x and y each broadcast with the condition, not with each other
    if any(r.dt == "uint8" for r in refs[1:]) and any(r.weak and r.dt in INTS and r.v.min() < 0 for r in refs[1:]):
        return None  # a negative Python int does not fit uint8: JAX refuses it (OverflowError)
    out = ref_where(*refs)
    return operands, {}, out


DOMAIN = {"log": 0.05, "sqrt": 0.0, "rsqrt": 0.05, "log1p": -0.95}


# lax.rsqrt and jax.nn.sigmoid (lax.logistic) accept floating operands only (JAX raises TypeError on integers), so
# the fuzzer gives them none; jnp's exp, log, ... and nn.gelu compute integers in the default float.
FLOAT_ONLY = {"rsqrt", "sigmoid"}


def make_unary(op):
    def make(g):
        kinds = FLOATS if op in FLOAT_ONLY else NUMERIC
        if op in DOMAIN:
            lo = DOMAIN[op] + (0.3 if g.vjp else 0.0)
            a = g.pick(lambda r: r.dt in kinds and r.size > 0 and np.all(r.f64() - r.e > lo) and np.all(r.e < 1e3),
                       weak=True)
            if a is None:
                return None
        elif op in ("abs", "negative", "sign", "relu"):
            a = g.pick(lambda r: r.dt in NUMERIC, fresh=(g.dtype(NUMERIC), g.shape()), weak=True)
            if g.vjp and np.any(np.abs(g.p.refs[a].v) < 0.1):
                return None
        elif op == "bitwise_not":
            a = g.pick(lambda r: r.dt in INTS + ("bool",), fresh=(g.dtype(INTS + ("bool",)), g.shape()), weak=True)
        elif op == "exp":
            a = g.pick(lambda r: r.dt != "bool" and np.all(r.f64() < 60), fresh=(g.dtype(NUMERIC), g.shape()),
                       weak=True)
            if not np.all(g.p.refs[a].f64() < 60):
                return None
        else:
            a = g.pick(lambda r: r.dt in kinds, fresh=(g.dtype(kinds), g.shape()), weak=True)
        if op == "stop_gradient" and g.raw_int64(a):
            return None  # JAX returns a non-float operand unchanged: eagerly, the numpy int64 array itself
        return [("v", a)], {}, ref_unary(op, g.p.refs[a])
    return make


def make_bitwise(op):
    def make(g):
        kinds = INTS + ("bool",)
        a = g.pick(lambda r: r.dt in kinds, fresh=(g.dtype(kinds), g.shape()), weak=True)
        b = g.partner(a, kinds)
        if b[0] == "py" and isinstance(b[1], float):
            b = ("py", int(b[1]))
        operands = [("v", a), b]
        return operands, {}, ref_bitwise(op, *[g.ref(o) for o in operands])
    return make


def make_integer_pow(g):
    n = int(g.rng.choice([0, 1, 2, 3, -1, -2, 4]))
    if n < 0:
        a = g.pick(lambda r: r.dt in FLOATS and np.all(np.abs(r.f64()) - r.e > 0.2), weak=True)
    else:
        a = g.pick(lambda r: r.dt in NUMERIC and np.all(np.abs(r.f64()) < 50), weak=True)
    if a is None:
        return None
    return [("v", a)], {"n": n}, ref_integer_pow(g.p.refs[a], n)


def make_astype(g):
    a = g.pick(fresh=(g.dtype(), g.shape()))
    r = g.p.refs[a]
    dt = str(g.rng.choice(DTYPES)) if not g.vjp else str(g.rng.choice(["float64", "float32"]))
    got = canon(dt)  # a 64-bit dtype asked for with x64 off: the 32-bit one (and JAX's UserWarning)
    if got == r.dt:
        return None
    if r.dt in FLOATS and got in INTS:
        lo, hi = INT_RANGE[got]
        if not (np.all(r.v - r.e > lo - 1 + 0.5) and np.all(r.v + r.e < hi)):
            return None
    return [("v", a)], {"dtype": dt}, to_dtype(r, got)


def make_reduce(op):
    def make(g):
        kinds = DTYPES if op in ("max", "min", "sum") else NUMERIC + ("bool",)
        a = g.pick(lambda r: r.dt in kinds and r.size > 0, fresh=(g.dtype(kinds), g.shape()))
        r = g.p.refs[a]
        nd = len(r.shape)
        if nd == 0 or g.rng.random() < 0.25:
            axes = None
        else:
            axes = sorted(int(x) for x in g.rng.choice(nd, size=g.rng.integers(1, nd + 1), replace=False))
        keepdims = bool(g.rng.random() < 0.4)
        if g.vjp and op in ("max", "min"):
            return None
        return [("v", a)], {"axis": None if axes is None else tuple(axes), "keepdims": keepdims}, \
            ref_reduce(op, r, axes, keepdims)
    return make


def make_cumulative(op):
    def make(g):
        # cumprod: small factors along a short axis (no overflow to inf, no int64 wrap the model would miss)
        short = op == "cumprod"

        def ok(r):
            if r.size == 0 or len(r.shape) == 0 or r.dt not in DTYPES or not np.all(np.isfinite(r.e) | (r.dt not in FLOATS)):
                return False
            if r.dt in FLOATS and not np.all(np.isfinite(r.v)):
                return False
            return not short or (np.all(np.abs(r.v.astype(np.float64)) <= 20) and min(r.shape) <= 8)

        a = g.pick(ok, fresh=(g.dtype(), g.shape(min_rank=1)))
        r = g.p.refs[a]
        if not ok(r):
            return None
        nd = len(r.shape)
        short_axes = [d for d in range(nd) if r.shape[d] <= 8] if short else list(range(nd))
        if (not short or r.size <= 8) and g.rng.random() < 0.2:
            axis = None
        else:
            axis = int(g.rng.choice(short_axes))
        return [("v", a)], {"axis": axis}, ref_cumulative(op, r, axis)
    return make


def make_arg(op):
    def make(g):
        a = g.pick(lambda r: r.dt != "bool" and r.size > 0, fresh=(g.dtype(NUMERIC), g.shape()))
        r = g.p.refs[a]
        nd = len(r.shape)
        axis = None if nd == 0 or g.rng.random() < 0.3 else int(g.rng.integers(0, nd))
        keepdims = bool(g.rng.random() < 0.4)
        return [("v", a)], {"axis": axis, "keepdims": keepdims}, ref_arg(op, r, axis, keepdims)
    return make


def _factor_shape(rng, size):
    dims = []
    while size > 1 and len(dims) < 3:
        divisors = [d for d in range(2, min(size, 64) + 1) if size % d == 0]
        if not divisors:
            break
        d = int(rng.choice(divisors))
        dims.append(d)
        size //= d
    if size > 1:
        dims.append(size)
    rng.shuffle(dims)
    return tuple(dims)


def make_reshape(g):
    a = g.pick(fresh=(g.dtype(), g.shape()))
    r = g.p.refs[a]
    shape = _factor_shape(g.rng, r.size)
    if g.rng.random() < 0.2:
        shape = shape + (1,)
    return [("v", a)], {"shape": shape}, ref_reshape([r], {"shape": shape})


def make_transpose(g):
    a = g.pick(lambda r: len(r.shape) >= 2)
    if a is None:
        return None
    r = g.p.refs[a]
    perm = tuple(int(x) for x in g.rng.permutation(len(r.shape)))
    return [("v", a)], {"perm": perm}, ref_transpose([r], {"perm": perm})


def make_broadcast_to(g):
    a = g.pick(lambda r: r.size <= 20000)
    if a is None:
        return None
    r = g.p.refs[a]
    shape = tuple(int(g.rng.integers(2, 5)) if d == 1 and g.rng.random() < 0.7 else d for d in r.shape)
    if g.rng.random() < 0.5 or shape == r.shape:
        shape = (int(g.rng.integers(1, 4)),) + shape
    return [("v", a)], {"shape": shape}, ref_broadcast_to([r], {"shape": shape})


def _expand_to(v, nd):
    return v.reshape((v.shape[0],) + (1,) * (nd - (v.ndim - 1)) + v.shape[1:])


def make_slice(g):
    a = g.pick(lambda r: len(r.shape) >= 1)
    if a is None:
        return None
    r = g.p.refs[a]
    rng = g.rng
    index = []
    for d in r.shape:
        c = rng.random()
        if c < 0.3:
            index.append(slice(None))
        elif c < 0.5:
            index.append(int(rng.integers(-d, d)))
        else:
            lo, hi = sorted(int(x) for x in rng.integers(-d, d + 1, 2))
            step = int(rng.choice([1, 1, 2, 3, -1, -2]))
            s = slice(lo, hi if hi != lo else None, step) if step > 0 else slice(hi if hi < d else None, lo, step)
            if len(range(*s.indices(d))) == 0:
                s = slice(None)
            index.append(s)
    if rng.random() < 0.2:
        index.insert(int(rng.integers(0, len(index) + 1)), None)
    if rng.random() < 0.2 and len(index) > 1:
        cut = int(rng.integers(1, len(index)))
        index = index[:cut] + [Ellipsis]
    index = tuple(index)
    return [("v", a)], {"index": index}, ref_slice([r], {"index": index})


def make_take(g):
    a = g.pick(lambda r: len(r.shape) >= 1)
    if a is None:
        return None
    r = g.p.refs[a]
    axis = int(g.rng.integers(0, len(r.shape)))
    n = r.shape[axis]
    idx = g.rng.integers(0, n, size=tuple(int(x) for x in g.rng.integers(1, 4, g.rng.integers(1, 3)))).astype(np.int32)
    return [("v", a), ("c", idx)], {"axis": axis}, ref_take([r, idx], {"axis": axis})


def make_concatenate(g):
    a = g.pick(lambda r: len(r.shape) >= 1 and r.size <= 50000)
    if a is None:
        return None
    r = g.p.refs[a]
    axis = int(g.rng.integers(0, len(r.shape)))
    others = []
    for _ in range(int(g.rng.integers(1, 3))):
        shape = list(r.shape)
        shape[axis] = int(g.rng.integers(1, 4))
        b = g.pick(lambda q: len(q.shape) == len(r.shape) and all(x == y for k, (x, y) in enumerate(zip(q.shape, shape))
                                                                    if k != axis),
                   fresh=(g.dtype() if g.rng.random() < 0.4 or r.dt not in INPUT_DTYPES else r.dt, tuple(shape)))
        others.append(b)
    operands = [("v", a)] + [("v", b) for b in others]
    return operands, {"axis": axis}, ref_concatenate([g.ref(o) for o in operands], {"axis": axis})


def make_matmul(g):
    kinds = FLOATS + ("int32",)
    a = g.pick(lambda r: r.dt in kinds and 1 <= len(r.shape) <= 2 and r.size <= 4096 and
               (r.dt in FLOATS or np.all(np.abs(r.v) < 100)))
    if a is None:
        return None
    ra = g.p.refs[a]
    k = ra.shape[-1]
    if g.rng.random() < 0.3:
        shape = (k,)
    else:
        shape = (k, int(g.rng.integers(1, 6)))
    dt = ra.dt if ra.dt in INPUT_DTYPES and g.rng.random() < 0.7 else g.dtype(("float32", "float64", "float16"))
    b = g.pick(lambda r: r.dt in kinds and r.shape == shape and (r.dt in FLOATS or np.all(np.abs(r.v) < 100)),
               fresh=(dt, shape))
    operands = [("v", a), ("v", b)]
    return operands, {}, ref_matmul(ra, g.p.refs[b])


def make_softmax(op):
    def make(g):
        a = g.pick(lambda r: r.dt in FLOATS and len(r.shape) >= 1 and r.size <= 20000 and np.all(np.isfinite(r.e))
                   and np.all(np.abs(r.v) < 50), fresh=(g.dtype(("float32", "float64", "float16")), g.shape(min_rank=1)))
        r = g.p.refs[a]
        if not (r.dt in FLOATS and len(r.shape) >= 1):
            return None
        axis = int(g.rng.integers(0, len(r.shape)))
        keepdims = bool(g.rng.random() < 0.4) if op == "logsumexp" else False
        params = {"axis": axis, "keepdims": keepdims} if op == "logsumexp" else {"axis": axis}
        return [("v", a)], params, ref_softmax(op, r, axis, keepdims)
    return make


def make_one_hot(g):
    a = g.pick(lambda r: r.dt in INTS and r.size <= 2000 and np.all(r.e == 0), fresh=("int32", g.shape()))
    r = g.p.refs[a]
    n = int(g.rng.integers(1, 6))
    dt = str(g.rng.choice(["float32", "bfloat16", "int32", "float64", "bool", "int8"]))
    v = r.v.astype(np.int64)[..., None] == np.arange(n)
    return [("v", a)], {"num_classes": n, "dtype": dt}, R(v.astype(np.float64) if dt in FLOATS else v.astype(dt),
                                                          canon(dt))


def make_layer_norm(g):
    a = g.pick(lambda r: r.dt in FLOATS and len(r.shape) >= 1 and r.shape[-1] >= 2 and r.size <= 20000
               and np.all(np.isfinite(r.e)) and np.all(np.abs(r.v) < 100),
               fresh=(g.dtype(("float32", "float64")), g.shape(min_rank=1, min_last=2)))
    r = g.p.refs[a]
    if not (r.dt in FLOATS and len(r.shape) >= 1 and r.shape[-1] >= 2):
        return None
    var = r.v.var(-1)
    if np.any(var < 1e-2):
        return None  # a near-constant row: the normalisation amplifies rounding without bound
    d = r.shape[-1]
    pdt = r.dt if r.dt in INPUT_DTYPES else "float32"
    scale = g.new_input(pdt, (d,))
    bias = g.new_input(pdt, (d,))
    if g.p.refs[scale].dt != r.dt:
        g.p.deviations.add("layer_norm_dtype")
    eps = 1e-5
    return [("v", a), ("v", scale), ("v", bias)], {"eps": eps}, \
        ref_layer_norm(r, g.p.refs[scale], g.p.refs[bias], eps)


# -- collectives (SPMD programs)
def _group_size(g):
    return len(g.p.groups[0]) if g.p.groups else N


def make_all_reduce(op):
    def make(g):
        kinds = FLOATS if op == "pmean" else NUMERIC
        a = g.pick(lambda r: r.dt in kinds, fresh=(g.dtype(kinds), g.shape()))
        return [("v", a)], {"groups": g.p.groups}, ref_all_reduce(op, g.p.refs[a], g.p.groups)
    return make


def make_all_gather(g):
    a = g.pick(lambda r: r.size <= 20000)
    if a is None:
        return None
    r = g.p.refs[a]
    nd = len(r.shape)
    tiled = bool(nd >= 1 and g.rng.random() < 0.5)
    axis = int(g.rng.integers(0, nd + (0 if tiled else 1))) if nd or not tiled else 0
    return [("v", a)], {"groups": g.p.groups, "axis": axis, "tiled": tiled}, ref_all_gather(r, g.p.groups, axis, tiled)


def make_psum_scatter(g):
    n = _group_size(g)
    tiled = bool(g.rng.random() < 0.5)
    ok = (lambda d: d % n == 0) if tiled else (lambda d: d == n)
    a = g.pick(lambda r: r.dt in NUMERIC and any(ok(d) for d in r.shape))
    if a is None:
        shape = list(g.shape(min_rank=1))
        shape[int(g.rng.integers(0, len(shape)))] = n * (int(g.rng.integers(1, 3)) if tiled else 1)
        a = g.new_input(g.dtype(NUMERIC), tuple(shape))
    r = g.p.refs[a]
    dims = [k for k, d in enumerate(r.shape) if ok(d)]
    dim = int(g.rng.choice(dims))
    return [("v", a)], {"groups": g.p.groups, "dim": dim, "tiled": tiled}, ref_psum_scatter(r, g.p.groups, dim, tiled)


def make_all_to_all(g):
    n = _group_size(g)
    tiled = bool(g.rng.random() < 0.6)
    a = g.pick(lambda r: any((d % n == 0) if tiled else d == n for d in r.shape) and r.size <= 50000)
    if a is None:
        shape = list(g.shape(min_rank=1))
        shape[int(g.rng.integers(0, len(shape)))] = n * (int(g.rng.integers(1, 3)) if tiled else 1)
        a = g.new_input(g.dtype(), tuple(shape))
    r = g.p.refs[a]
    splits = [k for k, d in enumerate(r.shape) if ((d % n == 0) if tiled else d == n)]
    split = int(g.rng.choice(splits))
    concat = int(g.rng.integers(0, len(r.shape))) if tiled else split
    return [("v", a)], {"groups": g.p.groups, "split": split, "concat": concat, "tiled": tiled}, \
        ref_all_to_all(r, g.p.groups, split, concat, tiled)


def make_ppermute(g):
    a = g.pick(fresh=(g.dtype(), g.shape()))
    k = int(g.rng.integers(1, N + 1))
    src = [int(x) for x in g.rng.permutation(N)[:k]]
    dst = [int(x) for x in g.rng.permutation(N)[:k]]
    perm = tuple(zip(src, dst))
    return [("v", a)], {"perm": perm}, ref_ppermute(g.p.refs[a], perm)


def make_pbroadcast(g):
    a = g.pick(fresh=(g.dtype(), g.shape()))
    source = int(g.rng.integers(0, N))
    return [("v", a)], {"source": source}, ref_pbroadcast(g.p.refs[a], source)


def make_axis_index(g):
    return [], {}, R(np.arange(N, dtype=np.int32), "int32")


# ---- the ops: how to make one, how weft is called, the registry ops it exercises ------------------------------
class Op:
    def __init__(self, make, call, weight=1.0, covers=(), spmd=False, large=False, vjp=None):
        self.make, self.call, self.weight, self.covers = make, call, weight, covers
        self.spmd, self.large, self.vjp = spmd, large, vjp  # vjp: the reference as a function of (refs, params)


def _groups(p):
    return p.get("groups")


def _dt(name):
    import weft
    return weft.bfloat16 if name == "bfloat16" else np.dtype(name)


OPS = {}
for _name in ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power"):
    OPS[_name] = Op(make_binary(_name), (lambda n: lambda api, a, p: getattr(api.jnp, n)(*a))(_name),
                    weight=3.0 if _name in ("add", "multiply") else 1.5, covers=(_name,), large=True,
                    vjp=(lambda n: lambda refs, p: ref_binary(n, *refs))(_name))
for _name in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal"):
    OPS[_name] = Op(make_compare(_name), (lambda n: lambda api, a, p: getattr(api.jnp, n)(*a))(_name),
                    weight=0.5, covers=(_name,), large=True)
OPS["where"] = Op(make_where, lambda api, a, p: api.jnp.where(*a), weight=1.5, covers=("where",), large=True,
                  vjp=lambda refs, p: ref_where(*refs))
for _name, _call in (("exp", "jnp.exp"), ("log", "jnp.log"), ("log1p", "jnp.log1p"), ("tanh", "jnp.tanh"),
                     ("sqrt", "jnp.sqrt"), ("rsqrt", "ops.rsqrt"), ("sigmoid", "nn.sigmoid"),
                     ("gelu_tanh", "nn.gelu"), ("abs", "jnp.abs"), ("negative", "jnp.negative"),
                     ("sign", "jnp.sign"), ("relu", "nn.relu"), ("stop_gradient", "jnp.stop_gradient"),
                     ("bitwise_not", "jnp.bitwise_not")):
    _mod, _fn = _call.split(".")
    OPS[_name] = Op(make_unary(_name), (lambda m, f: lambda api, a, p: getattr(getattr(api, m), f)(*a))(_mod, _fn),
                    weight=0.8, covers=(_name,), large=_name in ("exp", "tanh", "sqrt", "abs", "negative"),
                    vjp=None if _name in ("sign", "bitwise_not", "stop_gradient")
                    else (lambda n: lambda refs, p: ref_unary(n, refs[0]))(_name))
for _name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    OPS[_name] = Op(make_bitwise(_name), (lambda n: lambda api, a, p: getattr(api.jnp, n)(*a))(_name),
                    weight=0.5, covers=(_name,))
OPS["integer_pow"] = Op(make_integer_pow, lambda api, a, p: api.jnp.power(a[0], p["n"]), covers=("integer_pow",),
                        vjp=lambda refs, p: ref_integer_pow(refs[0], p["n"]))
OPS["astype"] = Op(make_astype, lambda api, a, p: api.jnp.asarray(a[0], _dt(p["dtype"])), weight=1.5,
                   covers=("astype",), large=True)
for _name in ("sum", "mean", "max", "min"):
    OPS[_name] = Op(make_reduce(_name), (lambda n: lambda api, a, p: getattr(api.jnp, n)(
        a[0], axis=p["axis"], keepdims=p["keepdims"]))(_name), weight=1.5, covers=(_name,), large=True,
        vjp=(lambda n: lambda refs, p: ref_reduce(n, refs[0], p["axis"], p["keepdims"]))(_name)
        if _name in ("sum", "mean") else None)
for _name in ("argmax", "argmin"):
    OPS[_name] = Op(make_arg(_name), (lambda n: lambda api, a, p: getattr(api.jnp, n)(
        a[0], axis=p["axis"], keepdims=p["keepdims"]))(_name), weight=0.5, covers=(_name,))
OPS["reshape"] = Op(make_reshape, lambda api, a, p: api.jnp.reshape(a[0], p["shape"]), covers=("reshape",),
                    vjp=ref_reshape)
OPS["transpose"] = Op(make_transpose, lambda api, a, p: api.jnp.transpose(a[0], p["perm"]), covers=("transpose",),
                      vjp=ref_transpose)
OPS["broadcast_to"] = Op(make_broadcast_to, lambda api, a, p: api.jnp.broadcast_to(a[0], p["shape"]),
                         weight=0.7, covers=("broadcast_to",), vjp=ref_broadcast_to)
# (through jnp.asarray: in the eager mode an input is a numpy array, which indexing alone would leave float64 with
# x64 off; JAX's eager user indexes a jax Array)
OPS["slice"] = Op(make_slice, lambda api, a, p: api.jnp.asarray(a[0])[p["index"]], covers=("slice", "reshape"),
                  vjp=ref_slice)
OPS["take"] = Op(make_take, lambda api, a, p: api.jnp.take(a[0], a[1], axis=p["axis"]), weight=0.6, covers=("take",),
                 vjp=ref_take)
OPS["concatenate"] = Op(make_concatenate, lambda api, a, p: api.jnp.concatenate(a, axis=p["axis"]), weight=0.7,
                        covers=("concatenate",), vjp=ref_concatenate)
OPS["matmul"] = Op(make_matmul, lambda api, a, p: api.jnp.matmul(*a), covers=("matmul",),
                   vjp=lambda refs, p: ref_matmul(*refs))
OPS["softmax"] = Op(make_softmax("softmax"), lambda api, a, p: api.nn.softmax(a[0], axis=p["axis"]), weight=0.6,
                    covers=("softmax",), vjp=lambda refs, p: ref_softmax("softmax", refs[0], p["axis"]))
OPS["log_softmax"] = Op(make_softmax("log_softmax"), lambda api, a, p: api.nn.log_softmax(a[0], axis=p["axis"]),
                        weight=0.6, covers=("log_softmax",),
                        vjp=lambda refs, p: ref_softmax("log_softmax", refs[0], p["axis"]))
OPS["logsumexp"] = Op(make_softmax("logsumexp"), lambda api, a, p: api.nn.logsumexp(a[0], axis=p["axis"],
                                                                                      keepdims=p["keepdims"]),
                      weight=0.6, covers=("logsumexp",),
                      vjp=lambda refs, p: ref_softmax("logsumexp", refs[0], p["axis"], p["keepdims"]))
for _name in ("cumsum", "cumprod"):
    OPS[_name] = Op(make_cumulative(_name), (lambda n: lambda api, a, p: getattr(api.jnp, n)(a[0], axis=p["axis"]))(
        _name), weight=0.6, covers=(_name,), vjp=(lambda n: lambda refs, p: ref_cumulative(n, refs[0], p["axis"]))(_name))
OPS["one_hot"] = Op(make_one_hot, lambda api, a, p: api.nn.one_hot(a[0], p["num_classes"], dtype=_dt(p["dtype"])),
                    weight=0.5, covers=("one_hot",))
OPS["layer_norm"] = Op(make_layer_norm, lambda api, a, p: api.nn.layer_norm(*a, eps=p["eps"]), weight=0.5,
                       covers=("layer_norm",), vjp=lambda refs, p: ref_layer_norm(*refs, p["eps"]))
for _name in ("psum", "pmean", "pmax", "pmin"):
    OPS[_name] = Op(make_all_reduce(_name), (lambda n: lambda api, a, p: getattr(api.lax, n)(
        a[0], AXIS, axis_index_groups=_groups(p)))(_name), weight=2.0, covers=(_name,), spmd=True, large=True)
OPS["all_gather"] = Op(make_all_gather, lambda api, a, p: api.lax.all_gather(
    a[0], AXIS, axis_index_groups=_groups(p), axis=p["axis"], tiled=p["tiled"]), covers=("all_gather",), spmd=True)
OPS["psum_scatter"] = Op(make_psum_scatter, lambda api, a, p: api.lax.psum_scatter(
    a[0], AXIS, scatter_dimension=p["dim"], axis_index_groups=_groups(p), tiled=p["tiled"]),
    covers=("psum_scatter",), spmd=True)
OPS["all_to_all"] = Op(make_all_to_all, lambda api, a, p: api.lax.all_to_all(
    a[0], AXIS, p["split"], p["concat"], axis_index_groups=_groups(p), tiled=p["tiled"]),
    covers=("all_to_all",), spmd=True)
OPS["ppermute"] = Op(make_ppermute, lambda api, a, p: api.lax.ppermute(a[0], AXIS, p["perm"]), covers=("ppermute",),
                     spmd=True)
OPS["pbroadcast"] = Op(make_pbroadcast, lambda api, a, p: api.lax.pbroadcast(a[0], AXIS, p["source"]), weight=0.5,
                       covers=("pbroadcast",), spmd=True)
OPS["axis_index"] = Op(make_axis_index, lambda api, a, p: api.lax.axis_index(AXIS), weight=0.5,
                       covers=("axis_index",), spmd=True)

# Registry ops the fuzzer does not generate, and why. A registry op in neither list fails the coverage test.
# (The VJP check also runs the backward ops: gelu_tanh_derivative for gelu, layer_norm_vjp for layer_norm.)
EXCLUDED = {
    "copy": "emitted by passes only (an output that is an input); no weft.numpy function makes it",
    "gelu_tanh_derivative": "gelu_tanh's backward op: run by the VJP check (vjp_case) on nn.gelu",
    "layer_norm_vjp": "layer_norm's backward op: run by the VJP check (vjp_case) on nn.layer_norm",
    "pprod": "no weft.lax function (PopXL's replicated all-reduce 'mul' only): test_popxl_* cover it",
    "pvary": "a typing op of shard_map with no value change: every shard_map run here inserts it where the rules "
             "ask, and test_shard_map.py checks its rules",
    "all_reduce_identical_inputs": "PopXL's session op (weft.popxl), not a JAX op: test_popxl_*",
    "all_reduce_identical_grad_inputs": "PopXL's session op (weft.popxl), not a JAX op: test_popxl_*",
    "replicated_reduce_scatter": "PopXL's session op (weft.popxl), not a JAX op: test_popxl_*",
    "replica_sharded_slice": "PopXL's session op (weft.popxl), not a JAX op: test_popxl_*",
    "gather_shards": "PopXL's session op (weft.popxl), not a JAX op: test_popxl_*",
    "host_load": "a session effect (host streams), not array math: test_popxl_*, test_api.py",
    "host_store": "a session effect (host streams), not array math: test_popxl_*, test_api.py",
    "remote_load": "a session effect (remote buffers), not array math: test_popxl_*",
    "remote_store": "a session effect (remote buffers), not array math: test_popxl_*",
    "variable_read": "a session effect (variables), not array math: test_popxl_*",
    "variable_update": "a session effect (variables), not array math: test_popxl_*",
    "custom_vjp_call": "a user's custom_vjp rule (weft.custom_vjp), not an op of its own: test_custom_vjp.py",
    "custom_jvp_call": "a user's custom_jvp rule (weft.custom_jvp), not an op of its own: test_custom_jvp.py",
    "cond": "control flow: the generator makes straight-line programs; test_control_flow.py checks each control "
            "primitive against its unrolled Python, and transform_rules_test its rules",
    "while_loop": "control flow: as cond",
    "scan": "control flow: as cond",
    "pmap": "a pmap called inside jit/grad (one equation): test_pmap_composition.py checks it against the pmap "
            "called alone, numpy's float64 derivative and central differences",
}


def covered_ops():
    return sorted({c for op in OPS.values() for c in op.covers})


# ---- programs -----------------------------------------------------------------------------------------------
LARGE_FRACTION = 0.07
HUGE = 1 << 20  # elements: fusion's block-by-block runs
HUGE_FRACTION = 0.1  # of the large programs


def _shape_method(self, min_rank=0, min_last=1):
    base = self.base
    if len(base) >= min_rank and (not base or base[-1] >= min_last):
        partner = self.broadcast_partner(base) if self.rng.random() < 0.3 else base
        ok = len(partner) >= min_rank and (not partner or partner[-1] >= min_last)
        return partner if ok else base
    rank = max(min_rank, 1)
    return tuple(int(x) for x in self.rng.integers(max(min_last, 1), 6, rank))


Gen.shape = _shape_method


X64_EVERY = 4  # one program in X64_EVERY runs with jax_enable_x64 on (the others with JAX's default, off)


def x64_of(seed):
    return seed % X64_EVERY == 0


def generate(seed):
    """The program of `seed` (deterministic on every machine), its reference under x64_of(seed)."""
    with np.errstate(all="ignore"), x64_model(x64_of(seed)):  # (inf and nan are expected values, with bounds)
        return _generate(seed)


def _generate(seed):
    g = Gen(seed)
    rng, p = g.rng, g.p
    large = bool(rng.random() < LARGE_FRACTION)
    p.spmd = bool(rng.random() < (0.75 if large else 0.5))
    if p.spmd and rng.random() < 0.5:
        p.groups = GROUPINGS[int(rng.integers(len(GROUPINGS)))]
    huge = large and bool(rng.random() < HUGE_FRACTION)
    if huge:  # past the 1 Mi elements from which fusion runs a chain block by block (docs/programs.md)
        g.base = (int(rng.integers(HUGE, HUGE + 4097)),)
    elif large:
        g.base = (int(rng.integers(LARGE, 100001)),) if rng.random() < 0.6 else \
            (int(rng.integers(256, 330)), int(rng.integers(256, 330)))
    else:
        g.base = tuple(int(x) for x in rng.integers(1, 7, int(rng.choice([0, 1, 1, 2, 2, 3]))))
    main_dt = "float32" if large and rng.random() < 0.7 else g.dtype()
    for _ in range(int(rng.integers(1, 3))):
        g.new_input(main_dt if rng.random() < 0.7 else g.dtype(), g.broadcast_partner(g.base))
    if large and p.spmd:
        # An all-reduce of a large value, then plain arithmetic on it (what shared runs split among the replicas
        # the types prove equal): with groups, only a group's replicas hold equal values.
        if p.groups is None and rng.random() < 0.6:
            p.groups = GROUPINGS[int(rng.integers(len(GROUPINGS)))]
        a = g.new_input(str(rng.choice(["float32", "float64", "int32"])), g.base)
        op = str(rng.choice(["psum", "pmax", "pmin", "pmean"] if g.p.refs[a].dt in FLOATS else ["psum", "pmax"]))
        v = g.add((op, [("v", a)], {"groups": p.groups}), ref_all_reduce(op, g.p.refs[a], p.groups))
        for _ in range(int(rng.integers(2, 5))):  # a fused run is two or more consecutive equations
            op = str(rng.choice(["add", "multiply", "subtract", "maximum", "minimum"]))
            b = ("py", g.scalar_for(g.p.refs[v])) if rng.random() < 0.6 else ("v", v)
            v = g.add((op, [("v", v), b], {}), ref_binary(op, g.p.refs[v], g.ref(b)))
        chain_end = v  # an output: dead code would be dropped before any run is shared
    names = [n for n, op in OPS.items() if (p.spmd or not op.spmd) and (op.large or not large)]
    weights = np.array([OPS[n].weight for n in names])
    n_ops = int(rng.integers(2, 9)) if not huge else int(rng.integers(2, 5))
    made, tries = 0, 0
    first = len(p.steps)
    while made < n_ops and tries < 80:
        tries += 1
        name = str(rng.choice(names, p=weights / weights.sum()))
        res = OPS[name].make(g)
        if res is None:
            continue
        operands, params, ref = res
        g.add((name, operands, params), ref)
        made += 1
    ops_at = [k for k in range(first, len(p.steps)) if p.steps[k][0] != "input"]
    if not ops_at:
        res = OPS["negative"].make(g) or OPS["add"].make(g)
        g.add(("negative" if res and len(res[0]) == 1 else "add",) + tuple(res[:2]), res[2])
        ops_at = [len(p.steps) - 1]
    outs = {ops_at[-1]}
    if large and p.spmd:
        outs.add(chain_end)
    for _ in range(int(rng.integers(0, 3))):
        outs.add(int(rng.choice(ops_at)))
    p.outputs = sorted(outs)
    p.compact()
    return p


class Api:
    """The weft modules a program calls (one home for the imports, made after the environment is set)."""

    def __init__(self):
        import weft
        import weft.numpy as jnp
        from weft import lax, nn, ops
        self.weft, self.jnp, self.lax, self.nn, self.ops = weft, jnp, lax, nn, ops


def program_fn(p, api):
    def f(*args):
        env = []
        for step in p.steps:
            if step[0] == "input":
                env.append(args[step[1]])
                continue
            op, operands, params = step
            vals = [env[o[1]] if o[0] == "v" else o[1] for o in operands]
            env.append(OPS[op].call(api, vals, params))
        return tuple(env[o] for o in p.outputs)
    return f


def _dtype_name(dt):
    """A dtype's name; weft.bfloat16 (a one-field structured stand-in) is 'bfloat16'."""
    dt = np.dtype(dt)
    return "bfloat16" if dt.kind == "V" else dt.name


def _host(x):
    """(dtype name, numpy array) of a result. bfloat16 results read as float32 on the host (docs/python.md): a
    ShardedArray's dtype still says bfloat16; a MeshArray's and a numpy result's say float32."""
    dt = getattr(x, "dtype", None)
    a = np.asarray(x)
    return (_dtype_name(dt) if dt is not None else a.dtype.name), a


def _is_array(a):
    return isinstance(a, np.ndarray)


def _replica(a, r):
    """Replica r's argument: its slice of an array, or the Python number itself."""
    return np.asarray(a[r]) if _is_array(a) else a


def run_mode(p, mode, api):
    """The program's outputs in `mode`: a list of (dtype name, array [N, ...]), or the error's text. Arrays
    are split over the replicas (pmap in_axes 0, shard_map P('i')); Python numbers go whole to each (in_axes
    None, P())."""
    weft = api.weft
    before = weft.config.read("jax_enable_x64")
    weft.config.update("jax_enable_x64", p.x64)
    try:
        with warnings.catch_warnings():  # astype(float64) with x64 off: JAX's truncation warning, expected
            warnings.simplefilter("ignore", UserWarning)
            return _run_mode(p, mode, api)
    finally:
        weft.config.update("jax_enable_x64", before)


def _run_mode(p, mode, api):
    weft, jnp = api.weft, api.jnp
    f = program_fn(p, api)
    in_axes = tuple(0 if _is_array(a) else None for a in p.inputs)
    try:
        if mode == "eager" and not p.spmd:
            per = [f(*[_replica(a, r) for a in p.inputs]) for r in range(N)]
            outs = [[_host(per[r][k]) for r in range(N)] for k in range(len(p.outputs))]
            return [(o[0][0], np.stack([x[1] for x in o])) for o in outs]
        if mode == "eager":
            res = weft.pmap(f, axis_name=AXIS, eager=True, in_axes=in_axes)(*p.inputs)
        elif mode == "jit":
            jf = weft.jit(f)
            per = [jf(*[_replica(a, r) for a in p.inputs]) for r in range(N)]
            outs = [[_host(per[r][k]) for r in range(N)] for k in range(len(p.outputs))]
            # jit's results are numpy arrays (bfloat16 as float32): the dtypes are the program's
            avals = weft.make_program(f)(*[_replica(a, 0) for a in p.inputs]).out_avals
            return [(_dtype_name(t[1]), np.stack([x[1] for x in o])) for o, t in zip(outs, avals)]
        elif mode == "pmap":
            res = weft.pmap(f, axis_name=AXIS, in_axes=in_axes)(*p.inputs)
        elif mode == "shard_map":
            mesh = weft.Mesh(np.array(weft.devices()[:N]), (AXIS,))

            def block(*blocks):
                args = [b[0] if axis == 0 else b for b, axis in zip(blocks, in_axes)]
                return tuple(jnp.expand_dims(o, 0) for o in f(*args))
            in_specs = tuple(weft.P(AXIS) if axis == 0 else weft.P() for axis in in_axes)
            res = weft.shard_map(block, mesh, in_specs=in_specs, out_specs=(weft.P(AXIS),) * len(p.outputs))(
                *p.inputs)
        else:
            raise KeyError(mode)
        return [_host(x) for x in res]
    except Exception as error:  # noqa: BLE001 (any failure of a valid program is a finding)
        return f"{type(error).__name__}: {error}"


def modes_of(p, config):
    """The (mode, shared_runs) pairs a configuration runs for p."""
    modes = []
    traced = [m for m in ("jit", "pmap", "shard_map") if (m != "jit" or not p.spmd) and (m != "shard_map" or not p.groups)]
    if config == "main":
        if not p.bf16 and not p.weak_used:
            modes.append(("eager", 1))
        modes += [(m, 1) for m in traced]
        if p.large:
            modes += [(m, s) for s in (0, 2) for m in traced if m != "jit"]
    elif config == "fusion_off":
        modes += [(m, 1) for m in traced]
        if p.large:
            modes += [(m, 0) for m in traced if m != "jit"]
    elif config == "fibers":
        modes += [(m, 1) for m in traced]
    return modes


CONFIG_ENV = {"fusion_off": {"WEFT_FUSION": "off", "WEFT_SCHEDULER": "threads"},
              "fibers": {"WEFT_SCHEDULER": "fibers"}}


def run_config(programs, config):
    """{(seed, mode, shared_runs): outputs} for every program in this process (its environment is the config's)."""
    api = Api()
    out = {}
    for shared in (1, 0, 2):
        todo = [(p, m) for p in programs for (m, s) in modes_of(p, config) if s == shared]
        if not todo:
            continue
        api.weft.init(device_count=N, shared_runs=shared)
        for p, m in todo:
            out[(p.seed, m, shared)] = run_mode(p, m, api)
    return out


def start_children(programs, configs=("fusion_off", "fibers")):
    """Child processes running the traced modes under other settings read once per process (WEFT_FUSION,
    WEFT_SCHEDULER), given the programs (without their references); collect() gathers their results."""
    fd, programs_path = tempfile.mkstemp(prefix="weft-fuzz-programs-", suffix=".pkl")
    with os.fdopen(fd, "wb") as fh:
        pickle.dump([p.without_refs() for p in programs], fh)
    children = []
    for config in configs:
        fd, path = tempfile.mkstemp(prefix=f"weft-fuzz-{config}-", suffix=".pkl")
        os.close(fd)
        env = dict(os.environ, **CONFIG_ENV[config])
        cmd = [sys.executable, os.path.abspath(__file__), "--child", config, path, programs_path]
        children.append((config, path, subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                                        stderr=subprocess.STDOUT)))
    return children, programs_path


def collect(children, timeout):
    results, problems = {}, []
    for config, path, proc in children:
        try:
            text, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            text, _ = proc.communicate()
            problems.append(f"child {config} ran past {timeout} s")
        if proc.returncode != 0:
            problems.append(f"child {config} exited {proc.returncode}:\n{text.decode(errors='replace')[-3000:]}")
        else:
            with open(path, "rb") as fh:
                for key, value in pickle.load(fh).items():
                    results[(config,) + key] = value
        os.unlink(path)
    return results, problems


# ---- checking -----------------------------------------------------------------------------------------------
def _bits(a):
    a = np.ascontiguousarray(a)
    return a.dtype.name, a.shape, a.tobytes()


def _first_diff(got, want, bad):
    where = np.argwhere(bad)[:4]
    return "; ".join(f"replica {w[0]} at {tuple(int(x) for x in w[1:])}: got {got[tuple(w)]!r}, want {want[tuple(w)]!r}"
                     for w in where)


def _host_dtype(name):
    return "float32" if name == "bfloat16" else name


# weft.nn's gelu and layer_norm on numpy arrays are numpy's arithmetic (weft/nn.py), not weft's kernels: their
# eager results are checked against the reference only, not bitwise against the traced modes.
EAGER_NUMPY_OPS = {"gelu_tanh", "layer_norm"}


def check_reference(p, outputs, mode):
    """Problems of one mode's outputs against the reference: dtype (JAX's), shape, values within the bound."""
    problems = []
    for k, (dt, got) in zip(p.outputs, outputs):
        ref = p.refs[k]
        if mode == "shard_map" and ref.dt == "bfloat16" and dt == "float32":
            dt = "bfloat16"  # a MeshArray of bfloat16 says float32 (its host copy's dtype)
        if dt != ref.dt and not ((ref.dt, dt) in (("int32", "uint32"), ("int64", "uint64"))):
            problems.append(f"v{k}: dtype {dt}, JAX gives {ref.dt}")
            continue
        if got.shape != ref.v.shape:
            problems.append(f"v{k}: shape {got.shape[1:]}, JAX gives {ref.v.shape[1:]}")
            continue
        known = np.isfinite(ref.e)
        if ref.dt in FLOATS:
            g64, w = got.astype(np.float64), ref.v
            both_nan = np.isnan(g64) & np.isnan(w)
            same_inf = np.isinf(w) & (g64 == w)
            with np.errstate(invalid="ignore"):
                close = np.abs(g64 - w) <= SLACK * ref.e + ulp(ref.dt, w)
            bad = known & ~(close | both_nan | same_inf)
        else:
            bad = known & (got.astype(np.int64) != ref.v.astype(np.int64))
        if bad.any():
            problems.append(f"v{k} ({ref.dt}): {int(bad.sum())} of {bad.size} elements differ from numpy "
                            f"(bound: the propagated one x{SLACK}): " + _first_diff(got, ref.v, bad))
    return problems


def check_program(p, results):
    """Problems of program p given {(config, mode, shared_runs): outputs}."""
    problems = []
    runs = {(k[0],) + k[2:]: v for k, v in results.items() if k[1] == p.seed}
    if not runs:
        return [f"seed {p.seed}: no mode ran"]
    errors = {k: v for k, v in runs.items() if isinstance(v, str)}
    for k, v in errors.items():
        problems.append(f"{_mode_name(k)} failed: {v}")
    good = {k: v for k, v in runs.items() if not isinstance(v, str)}
    ops = {s[0] for s in p.steps}
    if good:
        first = next(iter(good))
        base = good[first]
        for k, v in good.items():
            if k == first:
                continue
            for out_k, (a, b) in enumerate(zip(base, v)):
                if EAGER_NUMPY_OPS & ops and "eager" in (first[1], k[1]):
                    continue
                if _host_dtype(a[0]) != _host_dtype(b[0]) or _bits(a[1]) != _bits(b[1]):
                    detail = f"dtype {a[0]} vs {b[0]}" if a[0] != b[0] else (
                        f"shape {a[1].shape} vs {b[1].shape}" if a[1].shape != b[1].shape else
                        _first_diff(b[1], a[1], ~((a[1] == b[1]) | (np.isnan(a[1].astype(np.float64)) &
                                                                   np.isnan(b[1].astype(np.float64))))))
                    problems.append(f"{_mode_name(k)} differs from {_mode_name(first)} in output "
                                    f"v{p.outputs[out_k]}: {detail}")
        for k, v in good.items():  # every mode against JAX's dtype and numpy
            for q in check_reference(p, v, k[1]):
                problems.append(f"{_mode_name(k)}: {q}")
    return problems


def _mode_name(k):
    config, mode, shared = k
    return f"{mode} [{config}, WEFT_SHARED_RUNS={shared}]"


CHUNK = 150  # programs run together: their references and outputs are in memory at once


def run_programs(first_seed, count, child_timeout=600):
    """Seeds first_seed .. first_seed + count - 1 in every configuration, CHUNK programs at a time:
    (statistics, {seed: the failing program's report}, problems of the child processes)."""
    stats = {"programs": 0, "large": 0, "huge": 0, "groups": 0, "ops": {}}
    failures, child_problems = {}, []
    for start in range(first_seed, first_seed + count, CHUNK):
        seeds = list(range(start, min(start + CHUNK, first_seed + count)))
        programs = [generate(s) for s in seeds]
        children, programs_path = start_children(programs)
        results = {("main",) + k: v for k, v in run_config(programs, "main").items()}
        child_results, problems = collect(children, child_timeout)
        os.unlink(programs_path)
        child_problems += problems
        results.update(child_results)
        by_seed = {}
        for key, value in results.items():
            by_seed.setdefault(key[1], {})[key] = value
        for p in programs:
            with np.errstate(all="ignore"):  # inf - inf and the like are compared as values, not warned about
                found = check_program(p, by_seed.get(p.seed, {}))
            if found:
                failures[p.seed] = report(p, found)
            stats["programs"] += 1
            stats["large"] += p.large
            stats["huge"] += any(int(np.prod(t[2], dtype=np.int64)) >= HUGE for t in p.types)
            stats["groups"] += p.groups is not None
            for step in p.steps:
                if step[0] != "input":
                    stats["ops"][step[0]] = stats["ops"].get(step[0], 0) + 1
    return stats, failures, child_problems


def report(p, problems, limit=12):
    lines = [f"WEFT_FUZZ_SEED={p.seed} WEFT_FUZZ_COUNT=1 (replay) -- {len(problems)} problem(s):"]
    lines += ["  " + q for q in problems[:limit]]
    if p.deviations:
        lines.append("  (documented deviations applied: " + ", ".join(sorted(p.deviations)) + ")")
    lines.append(p.text())
    return "\n".join(lines)


# ---- VJPs against central differences -----------------------------------------------------------------------
VJP_OPS = sorted(n for n, op in OPS.items() if op.vjp is not None)


def vjp_case(seed):
    """(op, checked, problem or None): weft.grad of sum(op(x) * w) in float64 (jax_enable_x64 on, in the model
    and in weft) against central differences of the reference, at a random point away from the op's singular
    points."""
    weft = Api().weft
    before = weft.config.read("jax_enable_x64")
    weft.config.update("jax_enable_x64", True)
    try:
        with x64_model(True):
            return _vjp_case(seed)
    finally:
        weft.config.update("jax_enable_x64", before)


def _vjp_case(seed):
    rng = np.random.default_rng(seed)
    name = VJP_OPS[seed % len(VJP_OPS)]
    for attempt in range(20):
        g = Gen(seed * 100 + attempt, vjp_op=name)
        g.base = tuple(int(x) for x in g.rng.integers(2, 5, int(g.rng.integers(1, 3))))
        g.new_input("float64", g.base)
        res = OPS[name].make(g)
        if res is not None:
            break
    else:
        return name, False, None
    operands, params, ref = res
    if ref.dt != "float64" or not np.all(np.isfinite(ref.v)):
        return name, False, None
    api = Api()
    inputs = [k for k, o in enumerate(operands) if o[0] == "v"]
    x0 = [np.array(g.p.refs[o[1]].v[0], dtype=np.float64) if o[0] == "v" else o[1] for o in operands]
    w = rng.standard_normal(ref.v.shape[1:])

    def loss_ref(xs):
        refs = [R(np.broadcast_to(x, (N,) + np.shape(x)), "float64") if k in inputs else
                (scalar_ref(x) if operands[k][0] == "py" else x) for k, x in enumerate(xs)]
        return float(np.sum(OPS[name].vjp(refs, params).v[0] * w))

    def loss(*xs):
        vals = list(x0)
        for k, x in zip(inputs, xs):
            vals[k] = x
        return api.jnp.sum(api.jnp.multiply(OPS[name].call(api, vals, params), w))

    try:
        grads = api.weft.grad(loss, argnums=tuple(range(len(inputs))))(*[x0[k] for k in inputs])
    except Exception as error:  # noqa: BLE001
        return name, True, f"weft.grad failed: {type(error).__name__}: {error}"
    for gk, k in zip(grads, inputs):
        gk = np.asarray(gk, dtype=np.float64)
        cd = np.zeros_like(x0[k])
        for idx in np.ndindex(cd.shape):
            h = 1e-6 * max(1.0, abs(x0[k][idx]))
            xs_p, xs_m = list(x0), list(x0)
            xp, xm = x0[k].copy(), x0[k].copy()
            xp[idx] += h
            xm[idx] -= h
            xs_p[k], xs_m[k] = xp, xm
            cd[idx] = (loss_ref(xs_p) - loss_ref(xs_m)) / (2 * h)
        scale = max(1.0, float(np.abs(cd).max()))
        if gk.shape != cd.shape or not np.all(np.abs(gk - cd) <= 1e-5 * scale):
            return name, True, (f"d/d operand {k}: weft.grad {gk.ravel()[:6].tolist()} vs central differences "
                                f"{cd.ravel()[:6].tolist()} (params {params}, at {np.ravel(x0[k])[:6].tolist()})")
    return name, True, None


def _child(config, path, programs_path):
    with open(programs_path, "rb") as fh:
        programs = pickle.load(fh)
    with open(path, "wb") as fh:
        pickle.dump(run_config(programs, config), fh)


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        _child(*sys.argv[2:5])
    else:
        for s in sys.argv[1:]:
            print(generate(int(s)).text())
