"""weft.numpy's functions (JAX's jnp): on tracers they record program equations (weft/_trace.py); on
concrete values the arithmetic, elementwise math, reductions, where, matmul and concatenate run the same op
through weft's kernels (a one-equation program, cached per op and signature), so they give what the traced
program gives: JAX's dtypes (weft/_dtypes.py: JAX's promotion lattice, a Python number weakly typed, integer
true division float, 64-bit inputs narrowed to 32 with x64 off) and read-only results. Shape-only functions
(reshape, transpose, ...) are numpy's on concrete arrays, after the same narrowing. Shapes broadcast as
numpy's.
"""
import builtins
import math
import operator

import numpy as _np

from . import _dtypes, _weft
from ._trace import Tracer, bind, bind_many, current_trace, is_tracer, trace_of

_pyslice = builtins.slice
_canonical = _dtypes.canonical_array


_CONCRETE = {}  # (op, params, input signature) -> the one-equation program


def _concrete(op, args, params=()):
    """op[params](args) on concrete values through weft's kernels: the equation a trace would record, run.
    `args`: numpy arrays (or Python numbers), of the dtypes the op is to compute in."""
    values = [_canonical(a) for a in args]
    key = (op, tuple(tuple(tuple(x) if isinstance(x, list) else x for x in p) for p in params),
           tuple((v.dtype.str, v.shape) for v in values))
    program = _CONCRETE.get(key)
    if program is None:
        builder = _weft.ProgramBuilder([])
        ids = [builder.input(v.dtype, list(v.shape), []) for v in values]
        try:
            (out, _), = builder.emit(op, ids, list(params), "")
        except _weft.InvalidArgument as error:
            rule = str(error).split("`: ", 1)[-1]  # the rule, without the one-equation program's prefix
            raise _weft.InvalidArgument(f"weft.numpy.{op}: {rule}") from None
        builder.set_outputs([out])
        program = _CONCRETE[key] = builder.build()
    return _weft.run_program(program, values)[0]


def _any_tracer(*xs):
    return any(isinstance(x, Tracer) for x in xs)


def _promote(xs, dtype=None):
    """The operands of an elementwise op in the dtype JAX computes it in (their join on the promotion
    lattice; `dtype` to override it), and whether the result is weakly typed. With a tracer among them, every
    operand becomes a value of its trace (a Python number a weak constant), cast where its dtype differs;
    without, numpy arrays."""
    joined, weak = _dtypes.result_type(*xs)
    dtype = joined if dtype is None else dtype
    trace = (current_trace() or trace_of(xs)) if _any_tracer(*xs) else None
    if trace is None:
        return [_number(x, dtype) if _dtypes.is_python_scalar(x) else _canonical(x).astype(dtype, copy=False)
                for x in xs], weak
    out = []
    for x in xs:
        if not isinstance(x, Tracer):
            x_weak = _dtypes.is_python_scalar(x) and not isinstance(x, bool)
            # (bfloat16 has no numpy values: the number goes in as float32 and is cast in the program)
            # (an array as it is: the trace narrows it, and knows it again by its identity and contents)
            value = _number(x, _np.float32 if dtype == _dtypes.BF16 else dtype) if _dtypes.is_python_scalar(x) else x
            x = trace.constant(value, weak=x_weak)
        if x.dtype != dtype:
            x = bind("astype", [x], [("dtype", dtype)])
        out.append(x)
    return out, weak


def _number(x, dtype):
    """A Python number as a 0-d array of `dtype`, the dtype weak typing gave it; an int it cannot hold is
    JAX's OverflowError (numpy would wrap it around)."""
    dtype = _np.dtype(dtype)
    if dtype.kind in "iu" and not isinstance(x, bool):
        info = _np.iinfo(dtype)
        if not info.min <= x <= info.max:
            raise OverflowError(f"Python int {x} too large to convert to {dtype.name} (the dtype of the array it "
                                "meets: a Python number is weakly typed, as in JAX)")
    return _np.asarray(x, dtype=dtype)


def _traced(op, xs, params=(), dtype=None):
    """op[params](xs) recorded with xs promoted: its result, weak as the promotion says."""
    values, weak = _promote(xs, dtype)
    return bind(op, values, params).weakly(weak)


def _norm_axis(axis, ndim, what):
    if not -ndim <= axis < ndim:
        raise _weft.InvalidArgument(f"{what}: axis {axis} is out of bounds for an array of dimension {ndim}")
    return axis % ndim if ndim else 0


def _axes_tuple(axis, ndim, what):
    if axis is None:
        return None
    if isinstance(axis, int):
        axis = (axis,)
    return tuple(_norm_axis(int(a), ndim, what) for a in axis)


# ---- elementwise --------------------------------------------------------------------------------------
def _unary(op, np_fn, inexact=False):
    def fn(x):
        if inexact:  # JAX computes it in floating point: an integer or bool operand in the default float
            x = _to_inexact(x)
        if isinstance(x, Tracer):
            return bind(op, [x])
        return _concrete(op, [x])
    fn.__name__ = op
    return fn


def _to_inexact(x):
    """x, converted to the default float (float32; float64 with x64 on) when it is an integer or bool, as JAX
    computes its floating-point functions (the kernels' own rule gives float32 whatever the setting). Also
    weft.nn's gelu and layer_norm on concrete values."""
    dtype = _inexact((x,))
    current, weak = _dtypes.dtype_and_weak(x)
    if dtype == current:
        return x
    out = asarray(x, dtype, "a floating-point function")
    # A weak integer stays weak as a float (JAX's promote_dtypes_inexact keeps weak_type): log(n + 1) of a
    # traced Python int then joins a float16 as a float16, not float32.
    return out.weakly(True) if weak and isinstance(out, Tracer) else out


def _inexact(xs):
    """The dtype JAX's true division computes in: the operands' join, or the default float for integers."""
    dtype, _ = _dtypes.result_type(*xs)
    return dtype if dtype.kind == "f" or dtype == _dtypes.BF16 else _dtypes.default_float()


def _binary(op, np_fn, inexact=False):
    def fn(a, b):
        dtype = _inexact((a, b)) if inexact else None
        if _any_tracer(a, b):
            return _traced(op, (a, b), dtype=dtype)
        return _concrete(op, _promote((a, b), dtype)[0])
    fn.__name__ = op
    return fn


exp = _unary("exp", _np.exp, inexact=True)
log = _unary("log", _np.log, inexact=True)
log1p = _unary("log1p", _np.log1p, inexact=True)
tanh = _unary("tanh", _np.tanh, inexact=True)
sqrt = _unary("sqrt", _np.sqrt, inexact=True)
abs = _unary("abs", _np.abs)  # noqa: A001 (jnp's name)
absolute = abs
negative = _unary("negative", _np.negative)
sign = _unary("sign", _np.sign)
bitwise_not = _unary("bitwise_not", _np.bitwise_not)
invert = bitwise_not

add = _binary("add", _np.add)
subtract = _binary("subtract", _np.subtract)
multiply = _binary("multiply", _np.multiply)
divide = _binary("divide", _np.true_divide, inexact=True)
true_divide = divide
maximum = _binary("maximum", _np.maximum)
minimum = _binary("minimum", _np.minimum)
equal = _binary("equal", _np.equal)
not_equal = _binary("not_equal", _np.not_equal)
less = _binary("less", _np.less)
less_equal = _binary("less_equal", _np.less_equal)
greater = _binary("greater", _np.greater)
greater_equal = _binary("greater_equal", _np.greater_equal)
bitwise_and = _binary("bitwise_and", _np.bitwise_and)
bitwise_or = _binary("bitwise_or", _np.bitwise_or)
bitwise_xor = _binary("bitwise_xor", _np.bitwise_xor)
_matmul = _binary("matmul", _np.matmul)


def power(a, b):
    # x ** n for a Python int n is JAX's integer_pow: exact repeated multiplication, x's dtype.
    if isinstance(a, Tracer) and isinstance(b, int) and not isinstance(b, bool):
        return bind("integer_pow", [a], [("y", b)])
    if _any_tracer(a, b):
        return _traced("power", (a, b))
    if isinstance(b, int) and not isinstance(b, bool):
        return _concrete("integer_pow", [a], [("y", b)])
    return _concrete("power", _promote((a, b))[0])


def matmul(a, b):
    return _matmul(a, b)


def dot(a, b):
    """numpy.dot for operands of rank <= 2 (matmul; a scalar operand multiplies)."""
    if not _any_tracer(a, b):
        a, b = _promote((a, b))[0]
        return _np.dot(a, b)
    a_nd, b_nd = _np.ndim(a) if not isinstance(a, Tracer) else a.ndim, _np.ndim(b) if not isinstance(b, Tracer) else b.ndim
    if a_nd == 0 or b_nd == 0:
        return multiply(a, b)
    if a_nd > 2 or b_nd > 2:
        raise _weft.InvalidArgument("weft.numpy.dot: operands of rank > 2 are not supported on tracers (use matmul "
                                    "or einsum)")
    return matmul(a, b)


def where(condition, x, y):
    # The result's dtype and weak type are x's and y's (the condition's are not part of it), as JAX's.
    if _any_tracer(condition, x, y):
        c = condition
        if not (isinstance(c, Tracer) and c.dtype == _np.bool_):
            c = not_equal(c, 0) if isinstance(c, Tracer) else _np.asarray(c).astype(bool)
        (x, y), weak = _promote((x, y))
        return bind("where", [c, x, y]).weakly(weak)
    c = _np.asarray(condition)
    return _concrete("where", [c if c.dtype == _np.bool_ else c != 0] + _promote((x, y))[0])


def clip(a, a_min=None, a_max=None):
    if not isinstance(a, Tracer):
        return _np.clip(_canonical(a), a_min, a_max)
    if a_min is not None:
        a = maximum(a, a_min)
    if a_max is not None:
        a = minimum(a, a_max)
    return a


def asarray(a, dtype=None, what="asarray"):
    """jnp.asarray: `a` as weft's JAX API holds it (64-bit narrowed with x64 off); `dtype`, asked for by name,
    with JAX's warning when x64 is off and it is 64-bit. A named dtype makes a weak value strong."""
    if dtype is not None:
        dtype = _dtypes.requested(dtype, what)
    if isinstance(a, Tracer):
        if dtype is None:
            return a
        if dtype == a.dtype:
            return a.weakly(False)
        return bind("astype", [a], [("dtype", dtype)])
    if dtype is None:
        return _canonical(a)
    return _np.asarray(_canonical(a), dtype=dtype)


def array(a, dtype=None):
    out = asarray(a, dtype, "array")
    return out if isinstance(out, Tracer) or out is not a else _np.array(out)  # a copy, as jnp.array's


# ---- reductions ---------------------------------------------------------------------------------------
def _x64_accumulation(op, a):
    """With x64 on, JAX sums bool and integers in the default int (int64) and takes the mean of integers in
    the default float (float64); weft's kernels give JAX's x64-off dtypes (int32 sums, float32 means), so the
    operand is widened first. Unsigned sums, uint64 in JAX, are int64 here (weft has no uint64)."""
    if not _dtypes.x64_enabled() or a.dtype.kind not in "biu":
        return a
    if op == "sum" and a.dtype != _np.int64:
        return asarray(a, _np.int64, op)
    if op == "mean":
        return asarray(a, _np.float64, op)
    return a


def _reduction(op, np_fn):
    def fn(a, axis=None, dtype=None, keepdims=False):
        concrete = not isinstance(a, Tracer)
        if concrete:
            a = _canonical(a)
        if dtype is not None:  # JAX's: converted first, so the reduction accumulates in `dtype`
            a = asarray(a, dtype, op)
        else:
            a = _x64_accumulation(op, a)
        params = [("keepdims", bool(keepdims))]
        axes = _axes_tuple(axis, a.ndim, op)
        if axes is not None:
            params.append(("axes", list(axes)))
        return _concrete(op, [a], params) if concrete else bind(op, [a], params)
    fn.__name__ = op
    return fn


sum = _reduction("sum", _np.sum)  # noqa: A001
mean = _reduction("mean", _np.mean)
max = _reduction("max", _np.max)  # noqa: A001
min = _reduction("min", _np.min)  # noqa: A001
amax, amin = max, min


def _arg_reduction(op, np_fn):
    def fn(a, axis=None, keepdims=False):
        concrete = not isinstance(a, Tracer)
        if concrete:
            a = _canonical(a)
        params = [("keepdims", bool(keepdims))]
        if axis is not None:
            params.append(("axis", _norm_axis(int(axis), a.ndim, op)))
        out = _concrete(op, [a], params) if concrete else bind(op, [a], params)
        # JAX's index dtype is the default int: int64 with x64 on (weft's kernels give int32).
        return asarray(out, _np.int64, op) if _dtypes.x64_enabled() else out
    fn.__name__ = op
    return fn


argmax = _arg_reduction("argmax", _np.argmax)
argmin = _arg_reduction("argmin", _np.argmin)


def _cumulative(op):
    def fn(a, axis=None, dtype=None):
        a = _x64_accumulation("sum", asarray(a, dtype, op) if dtype is not None else asarray(a))
        if axis is None:  # numpy's: along the flattened array
            a, axis = reshape(a, (-1,)), 0
        params = [("axis", _norm_axis(int(axis), a.ndim, op))]
        return bind(op, [a], params) if isinstance(a, Tracer) else _concrete(op, [a], params)
    fn.__name__ = op
    return fn


cumsum, cumprod = _cumulative("cumsum"), _cumulative("cumprod")


# ---- shapes -------------------------------------------------------------------------------------------
def reshape(a, newshape, order="C"):
    if not isinstance(a, Tracer):
        return _np.reshape(_canonical(a), newshape, order=order)
    if order != "C":
        raise _weft.InvalidArgument("weft.numpy.reshape: only order='C' on tracers")
    if isinstance(newshape, int):
        newshape = (newshape,)
    return bind("reshape", [a], [("shape", [int(d) for d in newshape])])


def transpose(a, axes=None):
    if not isinstance(a, Tracer):
        return _np.transpose(_canonical(a), axes)
    params = [] if axes is None else [("perm", [_norm_axis(int(x), a.ndim, "transpose") for x in axes])]
    return bind("transpose", [a], params)


def swapaxes(a, axis1, axis2):
    if not isinstance(a, Tracer):
        return _np.swapaxes(_canonical(a), axis1, axis2)
    perm = list(range(a.ndim))
    i, j = _norm_axis(axis1, a.ndim, "swapaxes"), _norm_axis(axis2, a.ndim, "swapaxes")
    perm[i], perm[j] = perm[j], perm[i]
    return transpose(a, perm)


def moveaxis(a, source, destination):
    if not isinstance(a, Tracer):
        return _np.moveaxis(_canonical(a), source, destination)
    perm = [d for d in range(a.ndim) if d != _norm_axis(source, a.ndim, "moveaxis")]
    perm.insert(_norm_axis(destination, a.ndim, "moveaxis"), _norm_axis(source, a.ndim, "moveaxis"))
    return transpose(a, perm)


def expand_dims(a, axis):
    if not isinstance(a, Tracer):
        return _np.expand_dims(_canonical(a), axis)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    rank = a.ndim + len(axes)
    shape = list(a.shape)
    for ax in sorted(_norm_axis(x, rank, "expand_dims") for x in axes):
        shape.insert(ax, 1)
    return reshape(a, shape)


def squeeze(a, axis=None):
    if not isinstance(a, Tracer):
        return _np.squeeze(_canonical(a), axis)
    axes = _axes_tuple(axis, a.ndim, "squeeze")
    if axes is None:
        axes = tuple(i for i, d in enumerate(a.shape) if d == 1)
    for ax in axes:
        if a.shape[ax] != 1:
            raise _weft.InvalidArgument(f"weft.numpy.squeeze: cannot select an axis to squeeze out which has size "
                                        f"not equal to one (axis {ax} of shape {a.shape})")
    return reshape(a, [d for i, d in enumerate(a.shape) if i not in axes])


def broadcast_to(a, shape):
    if not isinstance(a, Tracer):
        return _np.broadcast_to(_canonical(a), shape)
    return bind("broadcast_to", [a], [("shape", [int(d) for d in shape])])


def concatenate(arrays, axis=0):
    arrays = list(arrays)
    if not arrays:
        raise _weft.InvalidArgument("weft.numpy.concatenate: need at least one array to concatenate")
    if not _any_tracer(*arrays):
        arrays = _promote([_np.asarray(a) for a in arrays])[0]
        return _concrete("concatenate", arrays, [("axis", _norm_axis(axis, arrays[0].ndim, "concatenate"))])
    ndim = next(x for x in arrays if isinstance(x, Tracer)).ndim
    return _traced("concatenate", arrays, [("axis", _norm_axis(axis, ndim, "concatenate"))])


def stack(arrays, axis=0):
    arrays = list(arrays)
    if not _any_tracer(*arrays):
        return _np.stack(_promote([_np.asarray(a) for a in arrays])[0], axis=axis)
    ndim = next(x for x in arrays if isinstance(x, Tracer)).ndim
    axis = _norm_axis(axis, ndim + 1, "stack")
    return concatenate([expand_dims(x if isinstance(x, Tracer) else _np.asarray(x), axis) for x in arrays], axis)


def split(ary, indices_or_sections, axis=0):
    if not isinstance(ary, Tracer):
        return _np.split(_canonical(ary), indices_or_sections, axis=axis)
    axis = _norm_axis(axis, ary.ndim, "split")
    n = ary.shape[axis]
    if isinstance(indices_or_sections, int):
        if n % indices_or_sections:
            raise _weft.InvalidArgument("weft.numpy.split: array split does not result in an equal division")
        step = n // indices_or_sections
        bounds = [i * step for i in range(indices_or_sections + 1)]
    else:
        bounds = [0] + [builtins.min(builtins.max(int(i), 0), n) for i in indices_or_sections] + [n]
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        index = [_pyslice(None)] * ary.ndim
        index[axis] = _pyslice(lo, builtins.max(lo, hi))
        out.append(ary[tuple(index)])
    return out


def take(a, indices, axis=None):
    if not _any_tracer(a, indices):
        return _np.take(_canonical(a), indices, axis=axis)
    params = [] if axis is None else [("axis", _norm_axis(axis, a.ndim, "take"))]
    if axis is None and isinstance(a, Tracer):
        a = reshape(a, (-1,))
    return bind("take", [a, indices], params)


# The dtype JAX gives a Python number used as an index (its default types): what its refusal names.
_PY_INDEX_DTYPES = {float: "float32", complex: "complex64"}


def _check_indexer(i, position):
    """Refuses an index entry that is not an integer, a slice, None, Ellipsis or an integer (or boolean) array,
    as JAX does (a float would otherwise be truncated: x[0.7] reading x[0]). JAX's TypeError for numbers and
    arrays of another dtype; numpy's IndexError for anything else."""
    if i is None or i is Ellipsis or isinstance(i, _pyslice):
        return
    if isinstance(i, (Tracer, _np.ndarray, _np.generic, list)) or type(i) in _PY_INDEX_DTYPES:
        dtype = _PY_INDEX_DTYPES.get(type(i)) or (i.dtype if isinstance(i, Tracer) else _np.asarray(i).dtype).name
        if _np.dtype(dtype).kind in "iub":
            return
        raise TypeError(f"Indexer must have integer or boolean type, got indexer with type {dtype} at position "
                        f"{position}, indexer value {i}")
    try:
        operator.index(i)
    except TypeError:
        raise IndexError("only integers, slices (`:`), ellipsis (`...`), numpy.newaxis (`None`) and integer or "
                         f"boolean arrays are valid indices, got {i!r} at position {position}") from None


def _getitem(x, index):
    """Basic indexing of a tracer: ints, slices (steps included), None, Ellipsis; an integer array indexes
    the first axis (take)."""
    if not isinstance(index, tuple):
        index = (index,)
    for position, i in enumerate(index):
        _check_indexer(i, position)
    if builtins.any(isinstance(i, (Tracer, _np.ndarray, list)) for i in index):
        if len(index) == 1:
            return take(x, index[0] if isinstance(index[0], Tracer) else _np.asarray(index[0]), axis=0)
        raise _weft.InvalidArgument("weft.numpy: advanced indexing on tracers supports one integer array over the "
                                    "first axis only")
    explicit = builtins.sum(1 for i in index if i is not None and i is not Ellipsis)
    if explicit > x.ndim:
        raise _weft.InvalidArgument(f"too many indices for array: array is {x.ndim}-dimensional, but {explicit} were "
                                    "indexed")
    if builtins.sum(1 for i in index if i is Ellipsis) > 1:
        raise _weft.InvalidArgument("an index can only have a single ellipsis ('...')")
    expanded = []
    for i in index:
        if i is Ellipsis:
            expanded.extend([_pyslice(None)] * (x.ndim - explicit))
        else:
            expanded.append(i)
    if Ellipsis not in index:
        expanded.extend([_pyslice(None)] * (x.ndim - explicit))
    start, limit, step, shape = [], [], [], []
    axis = 0
    for i in expanded:
        if i is None:
            shape.append(1)
            continue
        n = x.shape[axis]
        if isinstance(i, _pyslice):
            lo, hi, st = i.indices(n)
            start.append(lo)
            limit.append(hi)
            step.append(st)
            shape.append(len(range(lo, hi, st)))
        else:
            k = operator.index(i)
            if not -n <= k < n:
                raise IndexError(f"index {k} is out of bounds for axis {axis} with size {n}")
            k %= n
            start.append(k)
            limit.append(k + 1)
            step.append(1)
        axis += 1
    out = x
    if start != [0] * x.ndim or limit != list(x.shape) or step != [1] * x.ndim:
        out = bind("slice", [x], [("start", start), ("limit", limit), ("step", step)])
    if tuple(shape) != out.shape:
        out = reshape(out, shape)
    return out


# ---- einsum (two operands), lowered to transpose, reshape and matmul -----------------------------------
def einsum(subscripts, *operands):
    if not _any_tracer(*operands):
        return _np.einsum(subscripts, *_promote([_np.asarray(x) for x in operands])[0])
    if len(operands) != 2 or "->" not in subscripts or "." in subscripts:
        raise _weft.InvalidArgument("weft.numpy.einsum on tracers takes two operands and explicit output subscripts "
                                    "('ij,jk->ik'), without '...'")
    lhs, out = subscripts.replace(" ", "").split("->")
    sa, sb = lhs.split(",")
    a, b = _promote(operands)[0]
    # An index in one operand only and not in the output is summed away first.
    gone = [k for k, c in enumerate(sa) if c not in out and c not in sb]
    if gone:
        a, sa = sum(a, axis=tuple(gone)), "".join(c for k, c in enumerate(sa) if k not in gone)
    gone = [k for k, c in enumerate(sb) if c not in out and c not in sa]
    if gone:
        b, sb = sum(b, axis=tuple(gone)), "".join(c for k, c in enumerate(sb) if k not in gone)
    batch = [c for c in sa if c in sb and c in out]
    contract = [c for c in sa if c in sb and c not in out]
    free_a = [c for c in sa if c not in sb]
    free_b = [c for c in sb if c not in sa]
    size = {}
    for s, x in ((sa, a), (sb, b)):
        for c, d in zip(s, _np.shape(x) if not isinstance(x, Tracer) else x.shape):
            size[c] = d
    prod = lambda cs: int(_np.prod([size[c] for c in cs], dtype=_np.int64))  # noqa: E731
    a3 = reshape(transpose(a, [sa.index(c) for c in batch + free_a + contract]),
                 (prod(batch), prod(free_a), prod(contract)))
    b3 = reshape(transpose(b, [sb.index(c) for c in batch + contract + free_b]),
                 (prod(batch), prod(contract), prod(free_b)))
    r = reshape(matmul(a3, b3), [size[c] for c in batch + free_a + free_b])
    order = batch + free_a + free_b
    return transpose(r, [order.index(c) for c in out])


# ---- creation: concrete arrays (as jnp's, these are constants of a trace) -----------------------------
def _dtype_or(dtype, default, what):
    """A dtype asked for by name (JAX's warning when it is 64-bit with x64 off), else `default()`."""
    return _dtypes.requested(dtype, what) if dtype is not None else default()


def _creation(np_fn, dtype_position):
    """np_fn with jnp's default dtype (the default float); dtype may come by name or at numpy's position
    (zeros(shape, dtype))."""
    def fn(*args, dtype=None, **kwargs):
        if len(args) > dtype_position:
            if dtype is not None:
                raise TypeError(f"{np_fn.__name__}() got dtype by name and by position")
            dtype, args = args[dtype_position], args[:dtype_position] + args[dtype_position + 1:]
        return np_fn(*args, dtype=_dtype_or(dtype, _dtypes.default_float, np_fn.__name__), **kwargs)
    fn.__name__ = np_fn.__name__
    return fn


zeros = _creation(_np.zeros, 1)
ones = _creation(_np.ones, 1)
eye = _creation(_np.eye, 3)


def full(shape, fill_value, dtype=None):
    if isinstance(fill_value, Tracer):
        v = fill_value if dtype is None else asarray(fill_value, dtype, "full")
        return broadcast_to(v, (shape,) if isinstance(shape, int) else tuple(shape))
    dtype = _dtype_or(dtype, lambda: _dtypes.dtype_and_weak(fill_value)[0], "full")
    return _np.full(shape, fill_value, dtype=dtype)


def zeros_like(a, dtype=None):
    if isinstance(a, Tracer):
        return broadcast_to(_np.zeros((), _dtype_or(dtype, lambda: a.dtype, "zeros_like")), a.shape)
    return _np.zeros_like(_canonical(a), dtype=_dtype_or(dtype, lambda: None, "zeros_like"))


def ones_like(a, dtype=None):
    if isinstance(a, Tracer):
        return broadcast_to(_np.ones((), _dtype_or(dtype, lambda: a.dtype, "ones_like")), a.shape)
    return _np.ones_like(_canonical(a), dtype=_dtype_or(dtype, lambda: None, "ones_like"))


def arange(start, stop=None, step=None, dtype=None):
    if _any_tracer(start, stop, step):
        raise _weft.InvalidArgument("weft.numpy.arange needs concrete bounds (its size is the program's shape)")
    floats = builtins.any(isinstance(v, float) for v in (start, stop, step))
    dtype = _dtype_or(dtype, _dtypes.default_float if floats else _dtypes.default_int, "arange")
    args = [v for v in (start, stop, step) if v is not None]
    return _np.arange(*args, dtype=dtype)


# ---- nn (weft.nn re-exports these on tracers) ----------------------------------------------------------
def _axis_op(op):
    def fn(x, axis=-1):
        return bind(op, [x], [("axis", _norm_axis(int(axis), x.ndim, op))])
    return fn


softmax_traced = _axis_op("softmax")
log_softmax_traced = _axis_op("log_softmax")


def logsumexp_traced(x, axis=-1, keepdims=False):
    return bind("logsumexp", [x], [("axis", _norm_axis(int(axis), x.ndim, "logsumexp")),
                                   ("keepdims", bool(keepdims))])


def one_hot_traced(x, num_classes, dtype=_np.float32):
    return bind("one_hot", [x], [("num_classes", int(num_classes)), ("dtype", _np.dtype(dtype))])


def gelu_traced(x, approximate=True):
    if not approximate:
        raise _weft.InvalidArgument("weft.nn.gelu: approximate=False (erf) is not available on tracers")
    # One equation (a fused kernel, and one for its derivative under weft.grad), not the eight of
    # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
    return bind("gelu_tanh", [_to_inexact(x)])


def integer_cube(x):
    return bind("integer_pow", [x], [("y", 3)])


def stop_gradient(x):
    return bind("stop_gradient", [x]) if isinstance(x, Tracer) else _canonical(x)


# weft.numpy's names: not the helpers weft.nn uses (*_traced, integer_cube) nor this module's imports.
__all__ = [n for n in dir() if not n.startswith("_") and not n.endswith("_traced") and n not in (
    "builtins", "math", "Tracer", "bind", "bind_many", "current_trace", "is_tracer", "trace_of", "integer_cube")]
