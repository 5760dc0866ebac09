"""Tracing: a Python function run once on tracers records a typed program (weft._weft.ProgramBuilder) that
weft.jit and weft.pmap then run in C++, every replica at once, without Python or the GIL.

A Tracer stands for an array while a trace runs: it has a shape and a dtype (static, usable in Python
control flow) but no values. Every operation on it (its operators and methods, weft.numpy, weft.nn,
weft.lax) becomes an equation of the program. numpy arrays and Python numbers it meets become constants,
with the values they have when the op records them (as JAX's); Python numbers are weakly typed as in JAX (x *
2 keeps x's dtype: weft/_dtypes.py). Handing a tracer to numpy, float() or `if` raises
TracerConversionError, as JAX's TracerArrayConversionError does; a tracer used after its trace ended (kept in
a global or a closure) raises UnexpectedTracerError, as JAX's does.
"""
import threading

import numpy as _np

from . import _dtypes, _weft


class TracerConversionError(TypeError):
    """A tracer (a value being traced, with no data yet) was handed to something that needs its values:
    numpy, float(), bool(), int(), .item(). JAX's TracerArrayConversionError / ConcretizationTypeError."""


class UnexpectedTracerError(_weft.InvalidArgument):
    """A tracer was used after the trace it belongs to ended: a value computed inside a traced function
    escaped it (stored in a global, a closure or a container) and an op met it later (jax.errors'
    UnexpectedTracerError). Its program is finished; the op would have no program to go to."""


def escaped(op, trace, tracer=None):
    """The UnexpectedTracerError for `tracer` (of `trace`, which has ended) met by `op`."""
    what = f"a tracer ({tracer!r})" if tracer is not None else "a tracer"
    return UnexpectedTracerError(
        f"{op}: {what} of {trace.name}'s trace was used after that trace ended: a value "
        f"computed inside a traced function escaped it (kept in a global, a closure or a container) and has no "
        "data. Return it from the traced function instead, and use the result")


_local = threading.local()


def current_trace():
    """The innermost trace running on this thread, or None."""
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else None


class Trace:
    """One function being traced: its builder, its mesh (axis name -> size), the constants captured."""

    def __init__(self, mesh, name, shard_map_rules=None):
        self.mesh = list(mesh)
        self.axis_sizes = dict(self.mesh)
        self.name = name
        # shard_map's rule set (weft/_shard_map.py; pvary inserted, psum transposing to pvary), else pmap's. A
        # trace started inside another (weft.grad, weft.jit, a custom_vjp's bwd) follows the one around it.
        if shard_map_rules is None:
            outer = current_trace()
            shard_map_rules = outer is not None and outer.shard_map_rules
        self.shard_map_rules = bool(shard_map_rules)
        self.builder = _weft.ProgramBuilder(self.mesh, self.shard_map_rules)
        # id(numpy array) -> (array, its value when captured, tracer): one constant per captured array while
        # its value stays the same; (dtype, bytes) -> (None, None, tracer) for scalars
        self._constants = {}
        # Tracers of enclosing traces this one used (a closure inside weft.grad): each became an input of this
        # program, (outer tracer, inner input tracer), in order; the caller passes them in (JAX's closure
        # conversion).
        self.captured = []
        self._captured_ids = {}
        # The checkpoint region (an int, weft.checkpoint) the equations recorded now belong to, or None, and its
        # policy (weft/ad_checkpoint.py: which equations' values the VJP keeps instead of recomputing), or None.
        self.region = None
        self.policy = None
        # Set when the trace ends: its program is finished, and its tracers take no more ops.
        self.finished = False

    def capture(self, outer):
        """The input of this trace standing for `outer`, a tracer of an enclosing trace."""
        inner = self._captured_ids.get(id(outer))
        if inner is None:
            inner = self.input(outer.dtype, outer.shape, outer._varying, outer._weak)
            self.captured.append((outer, inner))
            self._captured_ids[id(outer)] = inner
        return inner

    def encloses(self, other):
        """Whether `other` is a trace running around this one (on this thread's stack, below it)."""
        stack = getattr(_local, "stack", [])
        return other in stack and self in stack and stack.index(other) < stack.index(self)

    def __enter__(self):
        stack = getattr(_local, "stack", None)
        if stack is None:
            stack = _local.stack = []
        stack.append(self)
        return self

    def __exit__(self, *exc):
        _local.stack.pop()
        self.finished = True
        return False

    def input(self, dtype, shape, varying, weak=False):
        ident = self.builder.input(_np.dtype(dtype), list(shape), list(varying))
        return Tracer(self, ident, (_np.dtype(dtype), tuple(shape), tuple(varying)), weak)

    def constant(self, value, weak=None):
        """`value` (a numpy array, a Python number, a MeshArray, ...) as a constant of the program, with the
        value it has now: an array captured again keeps its constant only while its contents are the same (a
        buffer refilled between two uses gives two constants, as JAX, which copies it at each use). 64-bit
        values are narrowed with x64 off (weft/_dtypes.py); a Python number is weak unless `weak` says."""
        if weak is None:
            weak = _dtypes.is_python_scalar(value) and not isinstance(value, bool)
        if isinstance(value, _np.ndarray) and value.ndim > 0:
            known = self._constants.get(id(value))
            if known is not None and known[0] is value and _same_contents(known[1], value):
                return known[2]
        array = _dtypes.canonical_array(value)
        if array.ndim == 0:  # scalars (x * 2, x + 0.5): one constant per value and dtype
            key = (array.dtype.str, array.tobytes())
            known = self._constants.get(key)
            if known is not None:
                return known[2].weakly(weak)
        snapshot = _np.array(array, order="C")  # (ascontiguousarray makes 0-d 1-d); a copy: the value now
        ident, typ = self.builder.constant(snapshot)
        tracer = Tracer(self, ident, typ)
        if array.ndim == 0:
            self._constants[(array.dtype.str, array.tobytes())] = (None, None, tracer)
        elif isinstance(value, _np.ndarray):
            # (compared with `value` at its next use: its own dtype, before any narrowing)
            self._constants[id(value)] = (value, snapshot if array.dtype == value.dtype else value.copy(), tracer)
        return tracer.weakly(weak)

    def _saveable(self, op, inputs, params):
        """Whether the checkpoint policy keeps this equation's values (recorded without the region's marker)."""
        if self.policy is None:
            return False
        avals = [x if isinstance(x, Tracer) else _np.asarray(x) for x in inputs]
        return bool(self.policy(Primitive(op), *avals, **dict(params)))

    def emit(self, op, inputs, params, nout=1):
        if self.finished:
            raise escaped(op, self, next((x for x in inputs if isinstance(x, Tracer) and x._trace is self), None))
        ids, weak, first = [], bool(inputs), None
        for x in inputs:
            if not isinstance(x, Tracer):
                x = self.constant(x)
            elif x._trace.finished:
                raise escaped(op, x._trace, x)
            elif x._trace is not self and self.encloses(x._trace):
                x = self.capture(x)
            elif x._trace is not self:
                raise _weft.InvalidArgument(
                    f"{op}: a tracer of another trace ({x._trace.name}) reached {self.name}: a value from one traced "
                    "function was kept and used in another (return it instead)")
            ids.append(x._id)
            weak = weak and x._weak
            first = x.dtype if first is None else first
        params = list(params)
        if self.region is not None and not self._saveable(op, inputs, params):
            params.append(("checkpoint", self.region))
        outs = self.builder.emit(op, ids, params, _weft.caller_source())
        # JAX's rule for weak types through an op: a result is weak when every operand is and the op kept
        # their dtype (not a comparison's bool, nor a cast's or an argmax's dtype of its own).
        return [Tracer(self, ident, typ, weak and _np.dtype(typ[0]) == first and first != _np.bool_)
                for ident, typ in outs]


class Primitive(str):
    """An op's name as checkpoint policies receive it (weft/ad_checkpoint.py): a str with JAX's .name."""

    @property
    def name(self):
        return str(self)


def _same_contents(a, b):
    """Whether two arrays hold the same bytes (the same values, NaNs included)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return _np.array_equal(_np.ascontiguousarray(a).reshape(-1).view(_np.uint8),
                           _np.ascontiguousarray(b).reshape(-1).view(_np.uint8))


def is_tracer(x):
    return isinstance(x, Tracer)


def trace_of(values):
    """The trace of the first tracer among `values`, else the current one (None outside any trace)."""
    for v in values:
        if isinstance(v, Tracer):
            return v._trace
    return None


def bind(op, inputs, params=(), trace=None):
    """Records `op[params](inputs)` in the innermost trace running (tracers of traces around it are captured
    as its inputs), else in the trace of its tracer inputs; returns the single result."""
    trace = trace or current_trace() or trace_of(inputs)
    return trace.emit(op, inputs, params)[0]


def bind_many(op, inputs, params=(), trace=None):
    trace = trace or current_trace() or trace_of(inputs)
    return trace.emit(op, inputs, params)


def conversion_error(what, hint=""):
    return TracerConversionError(
        f"{what} was given a traced value (a Tracer of a function being traced by weft.jit / weft.pmap): it has "
        f"no data until the program runs. {hint}Use weft.numpy / weft.lax on it instead of numpy, or weft.pmap(f, "
        "eager=True) for code that needs concrete values.")


class Tracer:
    """A traced array: shape and dtype known, values not. Behaves as a JAX array under trace."""

    __slots__ = ("_trace", "_id", "dtype", "shape", "_varying", "_weak")
    __array_priority__ = 1000

    def __init__(self, trace, ident, typ, weak=False):
        self._trace = trace
        self._id = ident
        self.dtype, self.shape, self._varying = _np.dtype(typ[0]), tuple(typ[1]), tuple(typ[2])
        self._weak = bool(weak)  # weakly typed (JAX's weak_type: from Python numbers only; weft/_dtypes.py)

    @property
    def weak_type(self):
        return self._weak

    def weakly(self, weak):
        """This value with weak type `weak` (the same program value: only promotion reads the flag)."""
        if bool(weak) == self._weak:
            return self
        return Tracer(self._trace, self._id, (self.dtype, self.shape, self._varying), weak)

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(_np.prod(self.shape, dtype=_np.int64))

    def __repr__(self):
        name = "bfloat16" if self.dtype == _dtypes.BF16 else self.dtype.name
        return f"Traced<{name}[{','.join(map(str, self.shape))}]{', weak_type=True' if self._weak else ''}>"

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object (a scalar tracer)")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d tracer")
        return (self[i] for i in range(self.shape[0]))

    __hash__ = object.__hash__

    # ---- conversions that need values ----
    def __array__(self, dtype=None, copy=None):
        raise conversion_error("numpy.asarray (or a numpy function)")

    def __bool__(self):
        raise conversion_error("bool() (an `if` or `while` on a traced value)",
                               "Branch on it with weft.lax.cond (or lax.switch, jnp.where) and loop on it with "
                               "weft.lax.while_loop (or lax.fori_loop), as in JAX. ")

    def __float__(self):
        raise conversion_error("float()")

    def __int__(self):
        raise conversion_error("int()")

    def __index__(self):
        raise conversion_error("an index (operator.index)")

    def item(self):
        raise conversion_error(".item()")

    def tolist(self):
        raise conversion_error(".tolist()")

    def __array_function__(self, func, types, args, kwargs):
        raise conversion_error(f"numpy.{func.__name__} (use weft.numpy.{func.__name__})")

    # Its operators and array methods (+, @, [], .sum(), .T, numpy's ufuncs) are weft.numpy's functions, set on
    # this class by weft/_tracer_methods.py.
