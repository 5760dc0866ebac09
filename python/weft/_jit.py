"""weft.jit and weft.make_program: trace a Python function once per input signature (the pytree structure,
each leaf's shape and dtype, the static arguments) into a program, then run that program in C++.

    @weft.jit
    def step(w, x):
        return jnp.tanh(x @ w).sum()

    print(weft.make_program(step)(w, x))      # { lambda ; a:f32[4,4] b:f32[8,4] . let ... }

A jitted function called under another trace (inside a traced pmap) is inlined into that trace.
"""
import functools
import threading

import numpy as _np

from . import _dtypes, _tree, _weft
from ._trace import Trace, Tracer, current_trace, escaped, trace_of


def leaf_type(leaf, what):
    """(dtype, shape) a leaf is traced with: a Python number takes JAX's default type (float32, int32; 64-bit
    with x64 on), a 64-bit array its 32-bit stand-in with x64 off (weft/_dtypes.py; leaf_value converts it)."""
    if type(leaf) in (bool, int, float):
        return _dtypes.python_scalar_dtype(leaf), ()
    if isinstance(leaf, Tracer):
        return leaf.dtype, leaf.shape
    if getattr(leaf, "is_fully_addressable", True) is False:
        raise _weft.InvalidArgument(
            f"{what}: {leaf!r} is not fully addressable (its blocks are on other processes); it goes only back "
            f"into a shard_map over its mesh with its spec")
    try:
        return _dtypes.canonical(leaf.dtype), tuple(leaf.shape)
    except AttributeError:
        array = _np.asarray(leaf)
        if array.dtype == object:
            raise _weft.InvalidArgument(f"{what}: {type(leaf).__name__} is not an array") from None
        return _dtypes.canonical(array.dtype), array.shape


def leaf_weak(leaf):
    """Whether a leaf is traced weakly typed: a Python int or float (JAX's weak-typed arguments), or a weak
    tracer."""
    return isinstance(leaf, Tracer) and leaf.weak_type or type(leaf) in (int, float)


def leaf_value(leaf):
    """A leaf as the program takes it: a numpy array (64-bit narrowed with x64 off, as leaf_type says); a
    Python number as it is (C++ takes it as JAX's 32-bit default, refusing an int outside int32) or, with x64
    on, as a 64-bit numpy value; anything else (a device array) as it is."""
    if type(leaf) in (int, float):
        return _np.asarray(leaf, _dtypes.python_scalar_dtype(leaf)) if _dtypes.x64_enabled() else leaf
    if isinstance(leaf, _np.ndarray):
        return _dtypes.canonical_array(leaf)
    return leaf


def trace_function(fun, in_types, treedef, mesh, name, captured=None, shard_map_rules=None):
    """Traces fun(*unflatten(treedef, tracers)) with one input per (dtype, shape, varying[, weak]) of `in_types`:
    (the built weft._weft.Program, the result's treedef). Tracers of enclosing traces the function uses
    become further inputs, after those; `captured` (a list) receives them, in order (else they are an error).
    `shard_map_rules`: the collectives' rule set (None: that of the trace around this one, else pmap's)."""
    trace = Trace(mesh, name, shard_map_rules)
    with trace:
        tracers = [trace.input(*typ) for typ in in_types]
        out = fun(*_tree.unflatten(treedef, tracers))
        out_leaves, out_def = _tree.flatten(out)
        ids = []
        for leaf in out_leaves:
            if not isinstance(leaf, Tracer):
                leaf = trace.constant(leaf)
            elif leaf._trace.finished:
                raise escaped(f"{name}'s output", leaf._trace, leaf)
            elif leaf._trace is not trace and trace.encloses(leaf._trace):
                leaf = trace.capture(leaf)
            elif leaf._trace is not trace:
                raise _weft.InvalidArgument(f"{name}: an output is a tracer of another trace ({leaf._trace.name})")
            ids.append(leaf._id)
    trace.builder.set_outputs(ids)
    if trace.captured and captured is None:
        raise _weft.InvalidArgument(f"{name}: the function uses a value traced by another function around it "
                                    "(pass it as an argument)")
    if captured is not None:
        captured.extend(outer for outer, _ in trace.captured)
    return trace.builder.build(), out_def


class Program:
    """A traced program, as weft.make_program returns it (JAX's ClosedJaxpr): prints like a jaxpr."""

    def __init__(self, program, out_tree=None):
        self._program = program
        self.out_tree = out_tree

    def __str__(self):
        return str(self._program)

    __repr__ = __str__

    @property
    def equations(self):
        """One entry per equation: its op name (JAX's eqn.primitive.name), in program order."""
        return list(self._program.equation_ops)

    def count(self, op_name):
        return self._program.count(op_name)

    @property
    def in_avals(self):
        return [(shape, dtype) for dtype, shape, _ in self._program.input_types]

    @property
    def out_avals(self):
        return [(shape, dtype) for dtype, shape, _ in self._program.output_types]


def _split_static(args, static_argnums, name):
    static = tuple(sorted(a % len(args) if -len(args) <= a < len(args) else a for a in static_argnums))
    for a in static:
        if not 0 <= a < len(args):
            raise _weft.InvalidArgument(f"{name}: static_argnums {a} is out of range for {len(args)} arguments")
    dynamic = tuple(x for i, x in enumerate(args) if i not in static)
    values = tuple(args[i] for i in static)
    for i, v in zip(static, values):
        try:
            hash(v)
        except TypeError:
            raise _weft.InvalidArgument(f"{name}: static argument {i} ({type(v).__name__}) is not hashable; static "
                                        "arguments key the cache of traced programs, as in jax.jit") from None
    return static, values, dynamic


def _with_static(fun, static, values, n):
    """fun taking only the dynamic arguments, the static ones put back in their places."""
    if not static:
        return fun

    def call(*dynamic):
        it = iter(dynamic)
        fixed = dict(zip(static, values))
        return fun(*[fixed[i] if i in fixed else next(it) for i in range(n)])
    return call


class LowersItself:
    """A transformed function that makes its own program for given arguments, `lower(*args)` giving a Program
    (weft.shard_map's, whose program is the one every device runs): weft.make_program hands it over to that
    instead of tracing it as a Python function. (A base class here rather than an import of those modules:
    they build on this one.)"""

    def lower(self, *args):
        raise NotImplementedError


class _Jitted:
    def __init__(self, fun, static_argnums):
        self._fun = fun
        self._static_argnums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
        self._name = f"jit({getattr(fun, '__name__', 'fun')})"
        self._cache = {}
        self._lock = threading.Lock()
        functools.update_wrapper(self, fun, updated=())

    def _signature(self, args):
        static, values, dynamic = _split_static(args, self._static_argnums, self._name)
        leaves, treedef = _tree.flatten(dynamic)
        types = tuple(leaf_type(leaf, self._name) + (leaf_weak(leaf),) for leaf in leaves)
        return static, values, leaves, treedef, types

    def _program(self, args, axis_env=()):
        static, values, leaves, treedef, types = self._signature(args)
        # (the x64 switch decides the dtypes of the Python numbers and arrays the function makes)
        key = (static, values, treedef, types, tuple(axis_env), _dtypes.x64_enabled())
        with self._lock:
            entry = self._cache.get(key)
        if entry is None:
            fun = _with_static(self._fun, static, values, len(args))
            entry = trace_function(fun, [(d, s, (), w) for d, s, w in types], treedef, list(axis_env), self._name)
            with self._lock:
                self._cache[key] = entry
        return entry, leaves

    def __call__(self, *args, **kwargs):
        if kwargs:
            raise TypeError(f"{self._name}: jitted functions take positional arguments only, got {sorted(kwargs)}")
        if current_trace() is not None or trace_of(_tree.flatten(args)[0]) is not None:
            return self._fun(*args)  # inlined into the trace running
        (program, out_def), leaves = self._program(args)
        outs = _weft.run_program(program, [leaf_value(leaf) for leaf in leaves])
        return _tree.unflatten(out_def, outs)

    def lower(self, *args):
        return Program(*self._program(args)[0])


def jit(fun=None, static_argnums=(), **unsupported):
    """jax.jit: `fun` traced once per signature into a program run in C++. `donate_argnums`, `device`,
    `backend`, `in_shardings` and friends are not supported."""
    if unsupported:
        raise TypeError(f"weft.jit does not support {sorted(unsupported)}")
    if fun is None:
        return functools.partial(jit, static_argnums=static_argnums)
    return _Jitted(fun, static_argnums)


def make_program(fun, static_argnums=(), axis_env=None):
    """jax.make_jaxpr: make_program(f)(*args) is f's program for those arguments' signature. `axis_env`
    ([('i', 8)]) binds axis names for collectives, as make_jaxpr's axis_env does."""
    if isinstance(fun, LowersItself):
        return fun.lower
    jitted = fun if isinstance(fun, _Jitted) else _Jitted(fun, static_argnums)

    def make(*args):
        (program, out_def), _ = jitted._program(args, axis_env or ())
        return Program(program, out_def)
    return make
