"""weft.jit and weft.make_program (weft.make_jaxpr): trace a Python function once per input signature (the
pytree structure of the dynamic arguments, positional and keyword, each leaf's shape and dtype, the static
arguments' values) into a program, then run that program in C++. jax.jit's options follow its rules (static and
donated arguments by number or name, each inferred from the other through the signature); jit(f).lower(*args)
gives a Lowered whose as_text() prints the program and whose compile() gives a Compiled to call.

    @weft.jit
    def step(w, x):
        return jnp.tanh(x @ w).sum()

    print(weft.make_program(step)(w, x))      # { lambda ; a:f32[4,4] b:f32[8,4] . let ... }

A jitted function called under another trace (inside a traced pmap) is inlined into that trace.
"""
import functools
import inspect
import operator
import threading
from types import MethodType
import warnings

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


def trace_function(fun, in_types, treedef, mesh, name, captured=None, shard_map_rules=None, out_weak=None):
    """Traces fun(*unflatten(treedef, tracers)) with one input per (dtype, shape, varying[, weak]) of `in_types`:
    (the built weft._weft.Program, the result's treedef). Tracers of enclosing traces the function uses
    become further inputs, after those; `captured` (a list) receives them, in order (else they are an error).
    `shard_map_rules`: the collectives' rule set (None: that of the trace around this one, else pmap's).
    `out_weak` (a list), when given, receives whether each output is weakly typed (programs keep no weak types)."""
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
            if out_weak is not None:
                out_weak.append(leaf._weak)
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


class LowersItself:
    """A transformed function that makes its own program for given arguments, `lower(*args)` giving a Program
    (weft.shard_map's, whose program is the one every device runs): weft.make_program hands it over to that
    instead of tracing it as a Python function. (A base class here rather than an import of those modules:
    they build on this one.)"""

    def lower(self, *args):
        raise NotImplementedError


# ---- static and donated arguments: jax.jit's rules (jax/_src/api_util.py), shared with weft.pmap ----------

class StaticArg:
    """A static argument as part of a cache key: equal to another when their types are the same and their values
    compare equal (jax.jit's rule: f(x, 1) and f(x, 1.0) trace twice), hashed once, here, so that an unhashable
    value is refused with JAX's words before anything is traced."""

    __slots__ = ("value", "_hash")

    def __init__(self, value, name, where):
        try:
            self._hash = hash(value)
        except TypeError as error:
            raise _weft.InvalidArgument(
                f"Non-hashable static arguments are not supported. An error occurred while trying to hash an object of "
                f"type {type(value)}, {value}. The error was:\nTypeError: {error}\n({name}: {where} is static; static "
                "arguments key the cache of traced programs, so they must be hashable, as in JAX)") from None
        self.value = value

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        if type(self.value) is not type(other.value):
            return False
        try:
            return bool(self.value == other.value)
        except Exception as error:  # noqa: BLE001  (any error of a user's __eq__, reported as JAX does)
            raise _weft.InvalidArgument(
                f"static arguments should be comparable using __eq__. The following error was raised when comparing "
                f"two objects of types {type(self.value)} and {type(other.value)}. The error was:\n"
                f"{type(error).__name__}: {error}") from None


def index_tuple(value, setting, name):
    """An int or a collection of ints (JAX's argnums settings) as a tuple; None as ()."""
    if value is None:
        return ()
    try:
        return (operator.index(value),)
    except TypeError:
        pass
    try:
        return tuple(operator.index(i) for i in value)
    except TypeError:
        raise TypeError(f"{name}: {setting} must be an int or a collection of ints, got {value!r}") from None


def _str_tuple(value, setting, name):
    if value is None:
        return ()
    names = (value,) if isinstance(value, str) else tuple(value)
    for n in names:
        if not isinstance(n, str):
            raise TypeError(f"{name}: {setting} must be a string or a collection of strings, got {value!r}")
    return names


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def fun_signature(fun):
    """inspect.signature(fun), or None for the callables that have none (some builtins)."""
    try:
        return inspect.signature(fun)
    except (TypeError, ValueError):
        return None


def _infer_argnums_and_argnames(sig, argnums, argnames, what, name):
    """JAX's completion of an argnums/argnames pair: the one not given is inferred from the other through the
    function's positional-or-keyword parameters; both given are taken as they are."""
    if argnums is None and argnames is None:
        return (), ()
    if argnums is not None and argnames is not None:
        return index_tuple(argnums, f"{what}_argnums", name), _str_tuple(argnames, f"{what}_argnames", name)
    params = list(sig.parameters.items())
    if argnums is None:
        argnames = _str_tuple(argnames, f"{what}_argnames", name)
        argnums = tuple(i for i, (k, p) in enumerate(params)
                        if p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD and k in argnames)
    else:
        argnums = index_tuple(argnums, f"{what}_argnums", name)
        argnames = tuple(k for i, (k, p) in enumerate(params)
                         if p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD and i in argnums)
    return argnums, argnames


def _validate_argnums(sig, argnums, setting, name):
    """Every index names a positional parameter (any does when the function takes *args), as jax.jit checks."""
    count = 0
    for p in sig.parameters.values():
        if p.kind in _POSITIONAL:
            count += 1
        elif p.kind is inspect.Parameter.VAR_POSITIONAL:
            return
    if argnums and (-min(argnums) > count or max(argnums) >= count):
        raise _weft.InvalidArgument(f"{name}: Jitted function has {setting}={argnums}, but only accepts {count} "
                                    "positional arguments.")


def _validate_argnames(sig, argnames, setting, name):
    """Every name is a parameter that can be passed by keyword (any is, but a positional-only one, when the
    function takes **kwargs), as jax.jit checks."""
    valid, positional_only, var_kwargs = set(), set(), False
    for k, p in sig.parameters.items():
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY):
            valid.add(k)
        elif p.kind is inspect.Parameter.VAR_KEYWORD:
            var_kwargs = True
        else:
            positional_only.add(k)
    named = positional_only & set(argnames)
    if named:
        raise _weft.InvalidArgument(f"{name}: Jitted function has invalid argnames {named} in {setting}. These are "
                                    "positional-only")
    if not var_kwargs and set(argnames) - valid:
        raise _weft.InvalidArgument(f"{name}: Jitted function has invalid argnames {set(argnames) - valid} in "
                                    f"{setting}. Function does not take these args.")


def resolve_argnums(fun, name, static_argnums, static_argnames, donate_argnums, donate_argnames):
    """jax.jit's static_argnums / static_argnames / donate_argnums / donate_argnames: each pair completed from the
    function's signature and checked against it; a name both static and donated is refused."""
    sig = fun_signature(fun)
    if sig is None:  # (no signature: nothing to infer from or check against)
        if donate_argnames is not None:
            raise _weft.InvalidArgument(f"{name}: Getting the signature of function {fun} failed. Pass donate_argnums "
                                        "instead of donate_argnames.")
        static = index_tuple(static_argnums, "static_argnums", name)
        return static, _str_tuple(static_argnames, "static_argnames", name), index_tuple(donate_argnums,
                                                                                           "donate_argnums", name), ()
    static_argnums, static_argnames = _infer_argnums_and_argnames(sig, static_argnums, static_argnames, "static", name)
    donate_argnums, donate_argnames = _infer_argnums_and_argnames(sig, donate_argnums, donate_argnames, "donate", name)
    _validate_argnums(sig, static_argnums, "static_argnums", name)
    _validate_argnames(sig, static_argnames, "static_argnames", name)
    _validate_argnums(sig, donate_argnums, "donate_argnums", name)
    _validate_argnames(sig, donate_argnames, "donate_argnames", name)
    both = set(static_argnames) & set(donate_argnames)
    if both:
        raise _weft.InvalidArgument(f"{name}: static_argnames and donate_argnames cannot intersect. Argument names "
                                    f"{both} appear in both static_argnames and donate_argnames")
    return static_argnums, static_argnames, donate_argnums, donate_argnames


def rebase_donate_argnums(donate_argnums, static_argnums, name):
    """Donated positions counted among the dynamic arguments only (JAX's rebase_donate_argnums): (3, 4) with
    static (0, 1) is (1, 2). A position both static and donated is refused."""
    static, donate = sorted(set(static_argnums)), sorted(set(donate_argnums))
    both = set(static) & set(donate)
    if both:
        raise _weft.InvalidArgument(f"{name}: `static_argnums` {static} and `donate_argnums` {donate} cannot "
                                    "intersect.")
    return tuple(d - sum(1 for s in static if s < d) for d in donate)


def check_backend(backend, name):
    """A `backend` setting (jax.jit's, jax.pmap's, jax.devices'): None or 'cpu', weft's one platform."""
    if backend not in (None, "cpu"):
        raise _weft.InvalidArgument(f"{name}: unknown backend {backend!r}; weft has one platform, 'cpu'")


def _type_text(dtype, shape):
    """A type as JAX prints it: float32[2,3]."""
    return f"{_np.dtype(dtype).name}[{','.join(str(n) for n in shape)}]"


def _aval_text(dtype, shape, weak):
    """An argument's type as JAX's messages name it: ShapedArray(float32[2,3])."""
    return f"ShapedArray({_type_text(dtype, shape)}{', weak_type=True' if weak else ''})"


def _warn_unused_donations(types, donated, program, name):
    """JAX's warning for donated inputs no output can take: as XLA:CPU aliases them, each output takes the first
    donated input not yet taken of its shape and dtype; the donated inputs left over are named. (weft.jit itself
    never writes into its arguments: they are the caller's numpy arrays; docs/python.md, "jit".)"""
    free = {}
    for index, ((dtype, shape, _), d) in enumerate(zip(types, donated)):
        if d:
            free.setdefault((_np.dtype(dtype), tuple(shape)), []).append(index)
    for dtype, shape, _ in program.output_types:
        waiting = free.get((_np.dtype(dtype), tuple(shape)))
        if waiting:
            waiting.pop(0)
    unused = sorted(i for waiting in free.values() for i in waiting)
    if unused:
        warnings.warn(f"Some donated buffers were not usable: {', '.join(_aval_text(*types[i]) for i in unused)}.\n"
                      f"See an explanation at https://docs.jax.dev/en/latest/faq.html#buffer-donation. ({name})",
                      UserWarning, stacklevel=4)


def bind_static(fun, n, fixed, extra=None, kwargs_last=False):
    """fun as a function of its dynamic positional arguments (then, with kwargs_last, a dict of keyword
    arguments), for calls of n positional arguments: the static ones, `fixed` ({position: value}) and `extra`
    ({name: value}), put back in their places. jit's and pmap's static arguments both go through it."""
    extra = extra or {}

    def call(*parts):
        dynamic, kw = (parts[:-1], parts[-1]) if kwargs_last else (parts, {})
        it = iter(dynamic)
        return fun(*[fixed[i] if i in fixed else next(it) for i in range(n)], **kw, **extra)
    return call


# ---- weft.jit ------------------------------------------------------------------------------------------------

class _Call:
    """One call's arguments split as jax.jit splits them: the static ones (positional by index, keyword by name)
    as cache keys, the dynamic ones as the pytree the program takes: the positional arguments' tuple, the
    keyword arguments' dict one more entry when there are dynamic keyword arguments (traced like the rest)."""

    __slots__ = ("static", "static_kw", "dyn_args", "dyn_kw", "tree", "nargs")

    def __init__(self, jitted, args, kwargs):
        n = self.nargs = len(args)
        positions = ()
        if jitted._static_argnums:
            # (an index past the arguments given, or before them, is no argument of this call, as in jax.jit)
            positions = tuple(sorted({i % n for i in jitted._static_argnums if -n <= i < n}))
        self.static = tuple((i, StaticArg(args[i], jitted._name, f"argument {i}")) for i in positions)
        self.dyn_args = tuple(a for i, a in enumerate(args) if i not in positions) if positions else tuple(args)
        self.static_kw, self.dyn_kw = (), kwargs
        if kwargs and jitted._static_names:
            self.static_kw = tuple(sorted(((k, StaticArg(v, jitted._name, f"argument {k!r}")) for k, v in kwargs.items()
                                           if k in jitted._static_names), key=lambda kv: kv[0]))
            self.dyn_kw = {k: v for k, v in kwargs.items() if k not in jitted._static_names}
        self.tree = self.dyn_args + (self.dyn_kw,) if self.dyn_kw else self.dyn_args

    def key(self):
        return self.static, self.static_kw, bool(self.dyn_kw)

    def bind(self, fun):
        """fun as a function of the dynamic pytree's parts, the static arguments put back in their places."""
        if not self.static and not self.static_kw and not self.dyn_kw:
            return fun
        return bind_static(fun, self.nargs, {i: s.value for i, s in self.static},
                           {k: s.value for k, s in self.static_kw}, bool(self.dyn_kw))

    def donated(self, jitted):
        """Per leaf of the dynamic pytree, whether its argument is donated (by position or by name)."""
        out = []
        static = {i for i, _ in self.static}
        dyn = iter(self.dyn_args)
        for i in range(self.nargs):
            if i not in static:
                out += [i in jitted._donate_positions] * len(_tree.flatten(next(dyn))[0])
        for k in sorted(self.dyn_kw):  # (a dict's children, by sorted key)
            out += [k in jitted._donate_argnames] * len(_tree.flatten(self.dyn_kw[k])[0])
        return out

    def leaf_names(self, jitted):
        """A name per leaf of the dynamic pytree for messages: the parameter's name for an argument that is a
        leaf (JAX's), else the argument's place (args[1], kwargs['b'])."""
        sig = fun_signature(jitted._fun)
        params = list(sig.parameters) if sig is not None else []
        names, static = [], {i for i, _ in self.static}
        dyn = iter(self.dyn_args)
        for i in range(self.nargs):
            if i in static:
                continue
            leaves, treedef = _tree.flatten(next(dyn))
            single = params[i] if i < len(params) and treedef == _tree.LEAF else None
            names += [single or f"args[{i}]"] * len(leaves)
        for k in sorted(self.dyn_kw):
            leaves, treedef = _tree.flatten(self.dyn_kw[k])
            names += [k if treedef == _tree.LEAF else f"kwargs[{k!r}]"] * len(leaves)
        return names


class _Jitted:
    def __init__(self, fun, static_argnums=None, static_argnames=None, donate_argnums=None, donate_argnames=None):
        if isinstance(fun, staticmethod):
            raise TypeError(f"staticmethod arguments are not supported, got {fun}")
        if not callable(fun):
            raise TypeError(f"Expected a callable value, got {fun}")
        self._fun = fun
        self._name = f"jit({getattr(fun, '__name__', 'fun')})"
        (self._static_argnums, self._static_argnames, self._donate_argnums,
         self._donate_argnames) = resolve_argnums(fun, self._name, static_argnums, static_argnames, donate_argnums,
                                                  donate_argnames)
        self._static_names = frozenset(self._static_argnames)
        self._donate_positions = frozenset(self._donate_argnums)
        self._cache = {}
        self._lock = threading.Lock()
        functools.update_wrapper(self, fun, updated=())

    def _program(self, args, kwargs, axis_env=()):
        """((program, result treedef), the dynamic leaves, their traced types, the call): the program of this
        call's signature, traced on first sight."""
        call = _Call(self, args, kwargs)
        leaves, treedef = _tree.flatten(call.tree)
        try:
            types = tuple(leaf_type(leaf, self._name) + (leaf_weak(leaf),) for leaf in leaves)
        except _weft.InvalidArgument:
            self._refuse_non_arrays(call, leaves)
            raise
        # (the x64 switch decides the dtypes of the Python numbers and arrays the function makes)
        key = (call.key(), treedef, types, tuple(axis_env), _dtypes.x64_enabled())
        with self._lock:
            entry = self._cache.get(key)
        if entry is None:
            if any(_np.dtype(t[0]).kind in "OSU" for t in types):  # (strings: numpy has dtypes for them)
                self._refuse_non_arrays(call, leaves)
            entry = trace_function(call.bind(self._fun), [(d, s, (), w) for d, s, w in types], treedef, list(axis_env),
                                   self._name)
            if self._donate_positions or self._donate_argnames:
                _warn_unused_donations(types, call.donated(self), entry[0], self._name)
            with self._lock:
                self._cache[key] = entry
        return entry, leaves, types, call

    def __get__(self, instance, owner=None):
        """A jitted function defined in a class is a method, as jax.jit's is (self is then an argument like any
        other: @jit(static_argnums=0) makes it static)."""
        return self if instance is None else MethodType(self, instance)

    def _refuse_non_arrays(self, call, leaves):
        """A dynamic argument that is no array (a string, an object) named as jax.jit names it: it should have
        been static."""
        for name, leaf in zip(call.leaf_names(self), leaves):
            if isinstance(leaf, str) or _np.asarray(leaf).dtype.kind in "OSU":
                raise TypeError(
                    f"{self._name}: Error interpreting argument to {self._fun} as an abstract array. The problematic "
                    f"value is of type {type(leaf)} and was passed to the function at path {name}.\nThis typically "
                    "means that a jit-wrapped function was called with a non-array argument, and this argument was "
                    "not marked as static using the static_argnums or static_argnames parameters of jax.jit.")

    def __call__(self, *args, **kwargs):
        if current_trace() is not None or trace_of(_tree.flatten((args, kwargs))[0]) is not None:
            if self._static_argnums or self._static_names:
                _Call(self, args, kwargs)  # (static arguments hashable, as at the top)
            return self._fun(*args, **kwargs)  # inlined into the trace running
        (program, out_def), leaves, _, _ = self._program(args, kwargs)
        outs = _weft.run_program(program, [leaf_value(leaf) for leaf in leaves])
        return _tree.unflatten(out_def, outs)

    def lower(self, *args, **kwargs):
        """jax.jit(f).lower(*args, **kwargs): the program for these arguments' signature, as a Lowered (its
        as_text() prints it; compile() gives the callable)."""
        (program, out_def), leaves, types, call = self._program(args, kwargs)
        in_tree = _tree.flatten((call.dyn_args, call.dyn_kw))[1]
        return Lowered(program, out_def, self._name, in_tree, types, call.leaf_names(self))


class Lowered(Program):
    """jax.stages.Lowered: a jitted function's program for one signature of arguments. as_text() is the program
    as weft prints it (like a jaxpr; weft has no StableHLO); compile() gives the Compiled to call."""

    def __init__(self, program, out_tree, name, in_tree, in_types, leaf_names):
        super().__init__(program, out_tree)
        self._name, self.in_tree, self._in_types, self._leaf_names = name, in_tree, in_types, leaf_names

    def as_text(self, dialect=None, *, debug_info=False):
        del debug_info  # (weft's programs carry no source locations)
        if dialect not in (None, "weft"):
            raise _weft.InvalidArgument(f"{self._name}.lower(...).as_text: dialect {dialect!r} is not available: weft "
                                        "prints its own programs (dialect None), not StableHLO or HLO")
        return str(self._program)

    def compile(self, compiler_options=None):
        if compiler_options:
            raise _weft.InvalidArgument(f"{self._name}.lower(...).compile: compiler_options are not supported "
                                        f"(weft has no XLA compiler to pass them to), got {sorted(compiler_options)}")
        return Compiled(self)


class Compiled:
    """jax.stages.Compiled: a lowered program to call with arguments of the signature it was lowered for (the
    dynamic ones: static arguments are part of the program). Another pytree, or another dtype or shape of a leaf,
    is a TypeError, as in JAX; it runs with no tracing and no cache lookup."""

    def __init__(self, lowered):
        self._lowered = lowered
        self.in_tree, self.out_tree = lowered.in_tree, lowered.out_tree

    def as_text(self):
        return self._lowered.as_text()

    def __call__(self, *args, **kwargs):
        low = self._lowered
        leaves, treedef = _tree.flatten((args, kwargs))
        if treedef != low.in_tree:
            raise TypeError(f"{low._name}: Function compiled with input pytree does not match the input pytree it was "
                            f"called with: compiled for {_tree.describe(low.in_tree)}, called with "
                            f"{_tree.describe(treedef)}")
        if any(isinstance(leaf, Tracer) for leaf in leaves):
            raise TypeError(f"{low._name}: Cannot apply JAX transformations to a function lowered and compiled for a "
                            "particular signature (an argument is a tracer); transform the function, then jit it")
        mismatches = []
        for name, leaf, (dtype, shape, _) in zip(low._leaf_names, leaves, low._in_types):
            got = leaf_type(leaf, low._name)
            if (_np.dtype(got[0]), tuple(got[1])) != (_np.dtype(dtype), tuple(shape)):
                mismatches.append(f"Argument '{name}' compiled with {_type_text(dtype, shape)} and called with "
                                  f"{_type_text(*got)}")
        if mismatches:
            raise TypeError(f"{low._name}: Argument types differ from the types for which this computation was "
                            "compiled. The mismatches are:\n" + "\n".join(mismatches))
        outs = _weft.run_program(low._program, [leaf_value(leaf) for leaf in leaves])
        return _tree.unflatten(low.out_tree, outs)


class _Unspecified:
    def __repr__(self):
        return "UNSPECIFIED"


_UNSPECIFIED = _Unspecified()


def jit(fun=None, /, *, in_shardings=_UNSPECIFIED, out_shardings=_UNSPECIFIED, static_argnums=None,
        static_argnames=None, donate_argnums=None, donate_argnames=None, keep_unused=False, device=None,
        backend=None, inline=False, abstracted_axes=None, compiler_options=None):
    """jax.jit: `fun` traced once per signature (the dynamic arguments' pytree, each leaf's shape and dtype, the
    static arguments' values) into a program run in C++; @jit(static_argnums=...) as a decorator too.

    Keyword arguments are traced like positional ones. static_argnums / static_argnames: hashable arguments the
    program is specialised to (one trace per distinct value), each inferred from the other through the
    signature, as in JAX. donate_argnums / donate_argnames are accepted and checked as JAX's; weft.jit never
    writes into its arguments (they are the caller's host arrays), and warns as JAX on CPU for a donated input
    that no output has the shape and dtype of. keep_unused and inline are accepted (every argument is an input
    of the program; a jitted function called under another trace is always inlined). backend may be None or
    'cpu'. in_shardings / out_shardings (use weft.shard_map), device, abstracted_axes and compiler_options are
    refused."""
    name = f"weft.jit({getattr(fun, '__name__', 'fun')})" if fun is not None else "weft.jit"
    for setting, value, default in (("in_shardings", in_shardings, _UNSPECIFIED),
                                    ("out_shardings", out_shardings, _UNSPECIFIED)):
        if value is not default and value is not None:
            raise _weft.InvalidArgument(f"{name}: {setting} is not supported: a jitted function runs on one device; "
                                        "split the work over devices with weft.shard_map and its in_specs / out_specs")
    if device is not None:
        raise _weft.InvalidArgument(f"{name}: device= is not supported (and deprecated in JAX): a jitted function runs "
                                    "on the calling thread; use weft.pmap or weft.shard_map to run on devices")
    check_backend(backend, name)
    if abstracted_axes is not None:
        raise _weft.InvalidArgument(f"{name}: abstracted_axes (dynamic shapes) is not supported: weft traces one "
                                    "program per shape")
    if compiler_options:
        raise _weft.InvalidArgument(f"{name}: compiler_options are not supported (weft has no XLA compiler to pass "
                                    f"them to), got {sorted(compiler_options)}")
    del keep_unused, inline
    if fun is None:
        return functools.partial(jit, static_argnums=static_argnums, static_argnames=static_argnames,
                                 donate_argnums=donate_argnums, donate_argnames=donate_argnames, backend=backend)
    return _Jitted(fun, static_argnums, static_argnames, donate_argnums, donate_argnames)


def make_program(fun, static_argnums=(), axis_env=None, return_shape=False):
    """jax.make_jaxpr (also weft.make_jaxpr): make_program(f)(*args, **kwargs) is f's program for those
    arguments' signature. `axis_env` ([('i', 8)]) binds axis names for collectives, as make_jaxpr's axis_env
    does. return_shape=True is refused (weft has no ShapeDtypeStruct; the Program's out_avals say the same)."""
    if return_shape:
        raise _weft.InvalidArgument("weft.make_program: return_shape=True is not supported; the Program's out_avals "
                                    "and out_tree give the results' shapes and dtypes")
    if isinstance(fun, LowersItself):
        return fun.lower
    jitted = fun if isinstance(fun, _Jitted) else _Jitted(fun, static_argnums)

    def make(*args, **kwargs):
        (program, out_def), _, _, _ = jitted._program(args, kwargs, axis_env or ())
        return Program(program, out_def)
    return make


make_jaxpr = make_program
