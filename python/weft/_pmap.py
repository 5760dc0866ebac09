"""weft.pmap: jax.pmap's signature over weft's C++ pmap engine.

By default the mapped function is traced once per signature (as jax.pmap does: weft/_trace.py) into a
program every replica runs in C++, without Python or the GIL. With eager=True it runs once per replica
instead, each on its device's worker thread (docs/python.md, "Threads and the GIL"), for code that needs
concrete values; weft.lax inside it finds the replica of its thread. Arguments and results are pytrees
of arrays: the engine sees their flat leaves. Nesting pmap(pmap(f, axis_name='cols'), axis_name='rows')
builds one program over a ('rows', 'cols') mesh, as the reference notebook does: a replica of the outer pmap
never starts a second program.
"""
import functools
import threading

import numpy as np

from . import _dtypes, _tree, _weft
from ._arrays import DeviceArray, ShardedArray, _Deleted
from ._jit import (StaticArg, bind_static, check_backend, index_tuple, leaf_type, leaf_value, leaf_weak,
                   rebase_donate_argnums, trace_function)
from ._trace import current_trace


class _Pmapped:
    """What weft.pmap returns: call it with arrays (or pytrees of them) mapped along in_axes."""

    def __init__(self, fun, axis_name, in_axes, out_axes, devices, name, eager=False, donate_argnums=(),
                 static_argnums=(), axis_size=None):
        self._fun = fun
        # static_broadcasted_argnums, and the pmaps of `fun` with those arguments bound and the keyword arguments
        # as one more mapped argument: one per number of arguments, static values and use of keywords (_bind).
        self._static = static_argnums
        self._bound_pmaps = {}
        self._axis_size = axis_size
        self._eager = eager
        self._donate_argnums = donate_argnums
        self._traced = {}  # signature -> (ProgramPmap, result treedef)
        self._last = None  # (argument signature, engine, single leaf result?, result treedef) of the last call
        # The same for pytree arguments: (treedef, leaf types, engine, result treedef, donated positions).
        self._last_tree = None
        self._x64 = _dtypes.x64_enabled()  # the x64 switch the two above were made under
        self._axis_name = axis_name
        self._in_axes = in_axes
        self._out_axes = out_axes
        self._devices = None if devices is None else list(devices)
        self._name = name
        self._programs = {}
        self._lock = threading.Lock()
        # Calls take turns (the engine runs one execution at a time anyway): the replicas report the output
        # structure of the call in flight through _record.
        self._call_lock = threading.Lock()
        self._record = _CallRecord()
        functools.update_wrapper(self, fun, updated=())

    # The levels of a nest of pmaps, outermost first: (axis_name, in_axes, out_axes) each, and the innermost
    # Python function.
    def _levels(self):
        levels, f = [], self
        while isinstance(f, _Pmapped):
            levels.append(f)
            f = f._fun
        return levels, f

    def __call__(self, *args, **kwargs):
        if self._static or kwargs:
            return self._call_bound(args, kwargs)
        # The steady state of a traced pmap: plain numpy arguments with the signature of the last call go
        # straight to its engine (the checks below ran when that signature was first seen).
        if self._x64 != _dtypes.x64_enabled():  # another switch: other dtypes inside the function
            self._last = self._last_tree = None
            self._x64 = _dtypes.x64_enabled()
        last = self._last
        if last is not None and not kwargs and len(args) == len(last[0]):
            signature = last[0]
            for a, (shape, dtype) in zip(args, signature):
                if type(a) is not np.ndarray or a.shape != shape or a.dtype != dtype:
                    break
            else:
                if current_trace() is None and not _weft.in_replica():
                    outs = [ShardedArray(r) for r in last[1](args, _weft.ShardedArray)]
                    return outs[0] if last[2] else self._finish(outs, last[3], self._out_axes)
        last_tree = self._last_tree
        if last_tree is not None and not kwargs and current_trace() is None and not _weft.in_replica():
            outs = self._call_like_last_tree(args, last_tree)
            if outs is not None:
                return outs
        trace = current_trace()
        if _weft.in_replica() or (trace is not None and trace.mesh):
            raise _weft.InvalidArgument(
                f"{self._name}: a pmapped function was called inside a replica; nest pmap(pmap(f)) instead "
                "(one program over a multi-axis mesh)")
        if trace is not None:
            # A trace with no mesh is a transformation at the top (weft.jit, grad, vjp, jvp, vmap) of a function
            # that calls this pmap: the pmap becomes one equation of its program (JAX's xla_pmap).
            return self._call_in_trace(trace, args)
        levels, fun = self._levels()
        in_axes = self._in_axes
        if isinstance(in_axes, list):
            in_axes = tuple(in_axes)
        if isinstance(in_axes, tuple):
            self._check_in_axes_count(len(args))
        if all(isinstance(a, (np.ndarray, ShardedArray)) for a in args) and (
                in_axes is None or isinstance(in_axes, int)
                or (isinstance(in_axes, tuple) and all(a is None or isinstance(a, int) for a in in_axes))):
            # Every argument an array (the common case): no pytree walk.
            leaves, treedef = list(args), _tree.flat_tuple(len(args))
            leaf_axes = list(in_axes) if isinstance(in_axes, tuple) else [in_axes] * len(args)
        else:
            leaves, treedef = _tree.flatten(tuple(args))
            leaf_axes = _tree.broadcast_prefix(in_axes, tuple(args), "pmap in_axes")
        # 64-bit numpy arguments narrowed with x64 off, Python numbers of JAX's default types, and weakly typed
        # (weft/_dtypes.py)
        weak = tuple(leaf_weak(leaf) for leaf in leaves)
        given = leaves
        leaves = [leaf_value(leaf) for leaf in leaves]
        impl_leaves = [leaf._impl if isinstance(leaf, ShardedArray) else leaf for leaf in leaves]

        if len(levels) == 1:
            axis = "" if self._axis_name is None else str(self._axis_name)
            mesh = []
        else:
            for lv in levels[1:]:
                if lv._static:
                    raise ValueError(f"{self._name}: static_broadcasted_argnums is not supported on an inner pmap of a "
                                     "nest (pass it to the outermost pmap's function instead)")
                if lv._devices is not None:
                    raise ValueError(f"{self._name}: devices= is only supported on the outermost of nested pmaps")
                if lv._in_axes != 0 or lv._out_axes != 0:
                    raise ValueError(f"{self._name}: an inner pmap of a nest maps its arguments and results along "
                                     f"axis 0 only (got in_axes={lv._in_axes!r}, out_axes={lv._out_axes!r})")
            mapped = [leaf for leaf, ax in zip(leaves, leaf_axes) if ax is not None]
            if not mapped:
                raise ValueError(f"{self._name}: pmap must have at least one non-None value in in_axes")
            shape = np.shape(mapped[0]) if not isinstance(mapped[0], ShardedArray) else mapped[0].shape
            if len(shape) < len(levels):
                raise ValueError(f"{self._name}: {len(levels)} nested pmaps need arguments of rank >= {len(levels)}, "
                                 f"got shape {tuple(shape)}")
            axis = ""
            mesh = [(lv._axis_name if lv._axis_name is not None else f"_pmap_axis{k}", int(shape[k]))
                    for k, lv in enumerate(levels)]
        if self._axis_size is not None:
            self._check_axis_size(leaves, leaf_axes)
        out_axes = self._out_axes
        key = (treedef, tuple(leaf_axes), tuple(mesh), _dtypes.x64_enabled())
        if not levels[0]._eager:
            positions = self._donated_positions(args)
            donate = _donated(positions, leaves)
            types = _types(leaves, weak, self._name)  # before donation deletes leaves
            results, out_def = self._call_traced(fun, levels, key, types, leaves, impl_leaves, treedef, leaf_axes,
                                                 axis, mesh, donate)
            outs = [ShardedArray(r) for r in results]
            if results:
                self._last_tree = (treedef, types, self._traced[(key, types)][0], out_def, positions)
            if results and treedef == _tree.flat_tuple(len(args)) and all(type(a) is np.ndarray for a in args):
                single = out_def == _tree.LEAF and self._out_axes == 0
                # (a 64-bit argument with x64 off never matches: the full path narrows it)
                self._last = (tuple((a.shape, _dtypes.canonical(a.dtype)) for a in args), self._traced[(key, types)][0],
                              single, out_def)
            if not results and out_def != _tree.LEAF:
                return outs  # this process holds none of the program's devices
            return self._finish(outs, out_def, out_axes)
        with self._lock:
            program = self._programs.get(key)
            if program is None:
                _check_in_axes(leaf_axes, self._name)
                program = _weft.PmapProgram(_replica_function(fun, treedef, self._record), axis, mesh,
                                            list(leaf_axes), [], self._devices or [], self._name)
                self._programs[key] = program
        with self._call_lock:
            record = self._record
            record.out_defs = {}
            record.python_numbers = {i: leaf for i, (leaf, ax) in enumerate(zip(given, leaf_axes))
                                     if ax is None and _dtypes.is_python_scalar(leaf)}
            try:
                results = program(impl_leaves, _weft.ShardedArray)
            except _weft.InvalidArgument as error:
                # Replicas that returned different numbers of leaves: the engine names the counts, but the
                # cause is the structures (when they differ, say so).
                _common_structure(record.out_defs, self._name, error)
                raise
            out_def = _common_structure(record.out_defs, self._name)
            record.out_defs = {}
        outs = [ShardedArray(r) for r in results]
        if out_def is None:  # this process holds none of the program's devices
            return outs
        return self._finish(outs, out_def, out_axes)

    def _call_bound(self, args, kwargs):
        """A call with static_broadcasted_argnums or keyword arguments, as jax.pmap makes it: the static arguments
        (hashable, compared by type and value) are bound into the function, and the keyword arguments go as one
        more argument mapped along axis 0 (JAX maps every keyword argument over its leading axis, whatever
        in_axes says, and never donates one). Each binding is a pmap of its own, with its own programs."""
        if isinstance(self._fun, _Pmapped):
            raise ValueError(f"{self._name}: static_broadcasted_argnums and keyword arguments are not supported for "
                             "nested pmaps (pass every argument positionally, mapped)")
        n = len(args)
        if self._static and max(self._static) >= n:
            raise ValueError(
                f"{self._name}: pmapped function has static_broadcasted_argnums={self._static} but was called with "
                f"only {n} positional argument{'s' if n > 1 else ''}. All static broadcasted arguments must be passed "
                "positionally.")
        static = tuple(StaticArg(args[i], self._name, f"argument {i}") for i in self._static)
        key = (n, static, bool(kwargs))
        bound = self._bound_pmaps.get(key)
        if bound is None:
            bound = self._bind(n, dict(zip(self._static, (s.value for s in static))), bool(kwargs))
            self._bound_pmaps[key] = bound
        dynamic = tuple(a for i, a in enumerate(args) if i not in self._static)
        return bound(*dynamic, kwargs) if kwargs else bound(*dynamic)

    def _bind(self, n, fixed, with_kwargs):
        """The pmap of this one's function with the static arguments `fixed` ({position: value}) bound, for
        calls of n positional arguments, taking the keyword arguments' dict last when `with_kwargs`."""
        fun = self._fun
        bound = bind_static(fun, n, fixed, kwargs_last=with_kwargs)
        in_axes = self._in_axes
        if isinstance(in_axes, (tuple, list)):
            self._check_in_axes_count(n)
            in_axes = tuple(ax for i, ax in enumerate(in_axes) if i not in fixed)
        elif with_kwargs:
            in_axes = (in_axes,) * (n - len(fixed))
        if with_kwargs:
            in_axes = in_axes + (0,)
        donate = rebase_donate_argnums([d for d in self._donate_argnums if d < n], self._static, self._name)
        functools.update_wrapper(bound, fun)
        return _Pmapped(bound, self._axis_name, in_axes, self._out_axes, self._devices, self._name, self._eager,
                        donate, (), self._axis_size)

    def _check_in_axes_count(self, n):
        """in_axes given per argument has one entry per positional argument (the static ones included)."""
        if len(self._in_axes) != n:
            raise ValueError(f"{self._name}: pmap in_axes specification must be a tree prefix of the corresponding "
                             f"value, got specification {self._in_axes!r} for {n} arguments")

    def _check_axis_size(self, leaves, leaf_axes):
        """jax.pmap's axis_size: in a single process, the mapped axis' size must be it."""
        if _weft.current_runtime().process_count > 1:
            return  # (the global size: the engine counts the job's devices)
        for leaf, ax in zip(leaves, leaf_axes):
            if ax is not None and _is_axis(ax):
                shape = leaf.shape if isinstance(leaf, ShardedArray) else np.shape(leaf)
                if -len(shape) <= ax < len(shape) and shape[ax] != self._axis_size:
                    raise ValueError(f"{self._name}: Specified axis_size {self._axis_size} doesn't match received "
                                     f"axis_size {shape[ax]}.")
                return

    def _finish(self, outs, out_def, out_axes):
        if out_def == _tree.LEAF and out_axes == 0:
            return outs[0] if outs else []
        out_leaves = outs
        if out_axes != 0:
            axes = _tree.broadcast_prefix(out_axes, _tree.unflatten(out_def, outs), "pmap out_axes")
            out_leaves = [_apply_out_axis(o, ax, self._name, i) for i, (o, ax) in enumerate(zip(outs, axes))]
        return _tree.unflatten(out_def, out_leaves)


    def _call_like_last_tree(self, args, last):
        """The steady state of a traced pmap over pytrees (a training step's dicts of parameters and their
        ShardedArray results fed back): arguments with the last call's structure and leaf types go straight
        to its engine, without the walks and checks that ran when that signature was first seen (3 % of a
        Fashion-MNIST step). None when the signature differs (the full path then decides)."""
        treedef, types, engine, out_def, positions = last
        leaves, tdef = _tree.flatten(tuple(args))
        if tdef != treedef:
            return None
        for leaf, want in zip(leaves, types):
            if isinstance(leaf, ShardedArray) and leaf.is_deleted():
                return None  # the full path raises JAX's error for it
            if leaf_type(leaf, self._name) + (leaf_weak(leaf),) != want:
                return None
        impl_leaves = [leaf._impl if isinstance(leaf, ShardedArray) else leaf_value(leaf) for leaf in leaves]
        results = _run_engine(engine, leaves, impl_leaves, _donated(positions, leaves))
        return self._finish([ShardedArray(r) for r in results], out_def, self._out_axes)

    def _donated_positions(self, args):
        """Per leaf of `args`, whether its argument is one of donate_argnums (the same for every call with
        the same structure)."""
        if not self._donate_argnums:
            return []
        donated_args = set(self._donate_argnums)
        positions = []
        for k, a in enumerate(args):
            n = 1 if isinstance(a, (np.ndarray, ShardedArray)) else len(_tree.flatten(a)[0])
            positions.extend([k in donated_args] * n)
        return positions

    def _call_in_trace(self, trace, args):
        """This pmap called while a transformation at the top traces its caller (jit(pmap(f)), grad of a function
        calling it): the per-replica program is traced as for a call, and recorded in `trace` as one pmap
        equation whose body it is (ops/pmap.cc); its results are tracers, their replica axis placed by out_axes
        as a call places it. Values of the enclosing trace the function closes over reach every replica whole."""
        levels, fun = self._levels()
        if len(levels) > 1:
            raise _weft.InvalidArgument(
                f"{self._name}: nested pmaps inside {trace.name} are not supported yet (one level of pmap is)")
        if self._eager:
            raise _weft.InvalidArgument(
                f"{self._name}: an eager pmap (eager=True) runs Python per replica and cannot be traced by "
                f"{trace.name}; drop eager=True to trace it")
        in_axes = tuple(self._in_axes) if isinstance(self._in_axes, list) else self._in_axes
        if isinstance(in_axes, tuple):
            self._check_in_axes_count(len(args))
        leaves, treedef = _tree.flatten(tuple(args))
        leaf_axes = _tree.broadcast_prefix(in_axes, tuple(args), "pmap in_axes")
        _check_in_axes(leaf_axes, self._name)
        weak = tuple(leaf_weak(leaf) for leaf in leaves)
        leaves = [leaf_value(leaf) for leaf in leaves]
        types = _types(leaves, weak, self._name)
        mapped = [(t, ax) for t, ax in zip(types, leaf_axes) if ax is not None]
        if not mapped:
            raise ValueError(f"{self._name}: pmap must have at least one non-None value in in_axes")
        axis = "" if self._axis_name is None else str(self._axis_name)
        names = (axis if axis else "_pmap_axis",)
        size = None
        in_types, axes = [], []
        for index, ((dtype, shape, w), ax) in enumerate(zip(types, leaf_axes)):
            if ax is None:
                in_types.append((dtype, shape, (), w))
                axes.append(-1)
                continue
            _check_in_axis(self._name, index, ax, shape)
            ax %= len(shape)
            if size is None:
                size = int(shape[ax])
            elif shape[ax] != size:
                raise ValueError(f"{self._name}: the mapped axes of the arguments differ in size ({size} and "
                                 f"{shape[ax]} at argument leaf {index})")
            in_types.append((dtype, shape[:ax] + shape[ax + 1:], names))
            axes.append(ax)
        if self._axis_size is not None and self._axis_size != size:
            raise ValueError(f"Specified axis_size {self._axis_size} doesn't match received axis_size {size}.")
        captured = []
        program, out_def = trace_function(fun, in_types, treedef, [(names[0], size)], self._name, captured)
        inputs = list(leaves) + captured
        axes += [-1] * len(captured)
        # Captured values entered the body as further inputs: the program takes them after the arguments.
        outs = trace.emit("pmap", inputs, [("body", [program]), ("in_axes", axes),
                                           ("out_axes", [0] * len(program.output_types))],
                          len(program.output_types))
        if self._out_axes == 0:
            return _tree.unflatten(out_def, outs)
        from . import numpy as _jnp
        out_axes = _tree.broadcast_prefix(self._out_axes, _tree.unflatten(out_def, outs), "pmap out_axes")
        placed = []
        for i, (o, ax) in enumerate(zip(outs, out_axes)):
            if ax is None:
                placed.append(o[0])  # JAX: the value is the same on every replica; one copy
            elif not _is_axis(ax):
                raise _weft.InvalidArgument(f"{self._name}: out_axes {ax!r} of output {i} is not an axis (an int, "
                                            "negative from the end) or None (replicated)")
            else:
                placed.append(o if ax == 0 else _jnp.moveaxis(o, 0, ax))
        return _tree.unflatten(out_def, placed)

    def _call_traced(self, fun, levels, key, types, leaves, impl_leaves, treedef, leaf_axes, axis, mesh, donate=()):
        """Runs the program traced from `fun` for this signature (tracing it on the first call); the donated
        leaves' buffers go to the call (the arrays are deleted). `types`: each leaf's (dtype, shape, weak)."""
        full_key = (key, types)
        entry = self._traced.get(full_key)
        if entry is None:
            with self._lock:
                entry = self._traced.get(full_key)
                if entry is None:
                    _check_in_axes(leaf_axes, self._name)
                    entry = self._trace(fun, levels, types, treedef, leaf_axes, axis, mesh)
                    self._traced[full_key] = entry
        program, out_def = entry
        return _run_engine(program, leaves, impl_leaves, donate), out_def

    def _trace(self, fun, levels, types, treedef, leaf_axes, axis, mesh):
        """The per-replica program: each mapped leaf without its mapped axes (varying over the mesh), each
        broadcast one whole (invariant)."""
        if mesh:
            trace_mesh = [(name, size) for name, size in mesh]
            depth = len(mesh)
        else:
            mapped = [(t, ax) for t, ax in zip(types, leaf_axes) if ax is not None]
            if not mapped:
                raise ValueError(f"{self._name}: pmap must have at least one non-None value in in_axes")
            for index, ((_, shape, _), ax) in enumerate(zip(types, leaf_axes)):
                if ax is not None:
                    _check_in_axis(self._name, index, ax, shape)
            (dtype, shape, _), ax = mapped[0]
            size = shape[ax]
            if self._devices is not None:
                size = len(self._devices)
            elif _weft.current_runtime().process_count > 1 and size == len(_weft.current_runtime().local_devices()):
                size = len(_weft.current_runtime().devices())  # this process's part of the global replicas
            trace_mesh = [(axis if axis else "_pmap_axis", int(size))]
            depth = 1
        names = sorted(name for name, _ in trace_mesh)
        in_types = []
        for index, ((dtype, shape, weak), ax) in enumerate(zip(types, leaf_axes)):
            if ax is None:
                in_types.append((dtype, shape, (), weak))
                continue
            if depth > 1:
                if len(shape) < depth:
                    raise ValueError(f"{self._name}: {depth} nested pmaps need arguments of rank >= {depth}, got shape "
                                     f"{tuple(shape)}")
                in_types.append((dtype, shape[depth:], names))
                continue
            _check_in_axis(self._name, index, ax, shape)
            ax %= len(shape)
            in_types.append((dtype, shape[:ax] + shape[ax + 1:], names))
        program, out_def = trace_function(fun, in_types, treedef, trace_mesh, self._name)
        engine = _weft.ProgramPmap(program, axis, mesh, list(leaf_axes), [], self._devices or [], self._name)
        return engine, out_def


def _types(leaves, weak, name):
    """Each leaf's (dtype, shape, weak) as traced (weak: the leaf was a Python int or float)."""
    return tuple(leaf_type(leaf, name) + (w,) for leaf, w in zip(leaves, weak))


def _donated(positions, leaves):
    """Per leaf, whether it is donated: at a donated position (positions empty: none), a ShardedArray not yet
    deleted, appearing only once among the leaves (a buffer read twice cannot be written). Numpy arguments
    are copied onto the devices anyway."""
    if not positions:
        return []
    counts = {}
    for leaf in leaves:
        counts[id(leaf)] = counts.get(id(leaf), 0) + 1
    return [d and isinstance(leaf, ShardedArray) and not leaf.is_deleted() and counts[id(leaf)] == 1
            for d, leaf in zip(positions, leaves)]


def _run_engine(engine, leaves, impl_leaves, donate):
    """The traced program's engine on the flat leaves; the donated ones' arrays are deleted after the call
    (their buffers went to its results), whatever it raised."""
    if not any(donate):
        return engine(impl_leaves, _weft.ShardedArray)
    donated = [leaf for leaf, d in zip(leaves, donate) if d]
    deleted = [_Deleted(leaf.shape, leaf.dtype) for leaf in donated]
    try:
        return engine(impl_leaves, _weft.ShardedArray, list(donate))
    finally:
        for leaf, gone in zip(donated, deleted):
            leaf._impl = gone


class _CallRecord:
    """What the replicas of the call in flight report: each one's result structure, by replica index.

    The pmap and its replica functions share it; a replica function never holds the pmap itself. It would
    make a reference cycle through the C++ program, which the garbage collector cannot see into: every called
    pmap would leak with everything its function holds (issue 21, item 10)."""

    __slots__ = ("out_defs", "python_numbers")

    def __init__(self):
        self.out_defs = {}
        self.python_numbers = {}  # leaf index -> the call's Python number (in_axes None), handed to replicas as is


def _replica_function(fun, treedef, record):
    """The function each replica runs: the user's, on the unflattened arguments, returning the flat leaves of
    its result and recording the result's structure in `record`."""
    flat = _tree.kind(treedef) is _tree.Kind.TUPLE and treedef == _tree.flat_tuple(len(_tree.children(treedef)))

    def replica(*leaves):
        if record.python_numbers:  # broadcast Python numbers reach the replicas as numbers: weakly typed, as in JAX
            leaves = list(leaves)
            for i, number in record.python_numbers.items():
                leaves[i] = number
        out = fun(*leaves) if flat else fun(*_tree.unflatten(treedef, list(leaves)))
        if isinstance(out, np.ndarray):  # one array: no pytree walk
            record.out_defs[_weft.replica_index()] = _tree.LEAF
            return [_as_jax_holds(out)]
        out_leaves, out_def = _tree.flatten(out)
        record.out_defs[_weft.replica_index()] = out_def
        return [_as_jax_holds(leaf) for leaf in out_leaves]

    return replica


def _as_jax_holds(leaf):
    """A replica's numpy result as JAX holds it: 64-bit narrowed with x64 off, and a numpy scalar strongly
    typed (np.float64 is a Python float too: read as one, it became float32 even with x64 on)."""
    if isinstance(leaf, (np.ndarray, np.generic)) or _dtypes.is_python_scalar(leaf):
        return _dtypes.canonical_array(leaf)
    return leaf


def _common_structure(out_defs, name, cause=None):
    """The result structure every replica of this process returned (None when it runs none), or an
    InvalidArgument naming the first replica whose structure differs from the lowest one's, and both
    structures (as jax.pmap, which traces the function once, every replica must return the same pytree)."""
    if not out_defs:
        return None
    first = min(out_defs)
    for index in sorted(out_defs):
        if out_defs[index] != out_defs[first]:
            raise _weft.InvalidArgument(
                f"{name}: replica {index} returned a result of structure {_tree.describe(out_defs[index])} but "
                f"replica {first} returned {_tree.describe(out_defs[first])}; every replica must return the same "
                "pytree (the same containers, dict keys and nesting)") from cause
    return out_defs[first]


def _is_axis(axis):
    """An int the engine can take (C++ int), bool excepted; ranks are checked against the arrays."""
    return isinstance(axis, int) and not isinstance(axis, bool) and -2**31 <= axis < 2**31


def _check_in_axes(leaf_axes, name):
    for index, axis in enumerate(leaf_axes):
        if axis is not None and not _is_axis(axis):
            raise _weft.InvalidArgument(f"{name}: in_axes {axis!r} of argument {index} is not an axis (an int, "
                                        "negative from the end) or None (broadcast)")


def _check_in_axis(name, index, axis, shape):
    """The engine's rule (and words) for a mapped argument's axis, checked before tracing."""
    needed = -axis if axis < 0 else axis + 1
    if len(shape) < needed:
        raise _weft.InvalidArgument(
            f"{name}: pmap was requested to map its argument {index} along axis {axis}, which implies that its rank "
            f"should be at least {needed}, but is only {len(shape)} (its shape is {tuple(shape)})")


def _apply_out_axis(sharded, axis, name, index):
    if axis is None:  # JAX: the value is the same on every replica; return one copy
        return DeviceArray(sharded.shards[0], sharded.shards[0].device())
    if not _is_axis(axis):
        raise _weft.InvalidArgument(f"{name}: out_axes {axis!r} of output {index} is not an axis (an int, negative "
                                    "from the end) or None (replicated)")
    if axis == 0:
        return sharded
    # The result has the output's axes and the mapped one; a negative axis counts from its end (JAX).
    rank = sharded.ndim - 1
    if not -rank - 1 <= axis <= rank:
        raise _weft.InvalidArgument(
            f"{name}: out_axes {axis} is out of range for output {index} of rank {rank} (its result has rank "
            f"{rank + 1}: an axis in [{-rank - 1}, {rank}])")
    return DeviceArray(np.moveaxis(np.asarray(sharded), 0, axis))


def pmap(fun=None, axis_name=None, *, in_axes=0, out_axes=0, static_broadcasted_argnums=(), devices=None, backend=None,
         axis_size=None, donate_argnums=(), name=None, eager=False, **unsupported):
    """jax.pmap: map `fun` over the leading axis (in_axes) of its arguments, one replica per device.

    Usable as @pmap, @partial(pmap, axis_name='i') or pmap(f, 'i'). `fun` is traced once per signature and
    its program runs on every replica in C++; eager=True runs `fun` itself once per replica (on the devices'
    threads) for code that needs concrete values. In a nest, the outermost pmap's `eager` decides.
    `donate_argnums` (traced pmaps): those arguments' ShardedArray buffers go to the call, which may write
    its results into them (an optimizer's update in place); the arrays are deleted, as in JAX. Eager pmaps
    ignore it (donation is a hint, as on JAX backends without it); keyword arguments are never donated.
    `static_broadcasted_argnums`: hashable arguments bound into the function (one program per value), counted
    among the positional arguments as in_axes and donate_argnums count them. Keyword arguments to the pmapped
    function are mapped along axis 0, as in JAX. `backend` may be None or 'cpu'; `axis_size`, when given, must
    be the mapped axis' size. `global_arg_shapes` (gone from JAX) is not supported (docs/python.md).
    """
    if unsupported:
        raise TypeError(f"weft.pmap does not support {sorted(unsupported)} (docs/python.md, 'What is missing')")
    if devices is not None:
        devices = list(devices)
        if not devices:
            raise ValueError("weft.pmap: 'devices' argument to pmap must be non-empty, or None.")
    check_backend(backend, "weft.pmap")
    if axis_size is not None and (not isinstance(axis_size, int) or isinstance(axis_size, bool) or axis_size < 1):
        raise _weft.InvalidArgument(f"weft.pmap: axis_size must be a positive int (the mapped axis' size), got "
                                    f"{axis_size!r}")
    if fun is None:
        return functools.partial(pmap, axis_name=axis_name, in_axes=in_axes, out_axes=out_axes,
                                 static_broadcasted_argnums=static_broadcasted_argnums, devices=devices,
                                 backend=backend, axis_size=axis_size, donate_argnums=donate_argnums, name=name,
                                 eager=eager)
    label = name or getattr(fun, "__name__", None) or "pmap"
    static = tuple(sorted(set(index_tuple(static_broadcasted_argnums, "static_broadcasted_argnums", "weft.pmap"))))
    if static and static[0] < 0:
        raise _weft.InvalidArgument(f"weft.pmap: static_broadcasted_argnums {static} has a negative position; count "
                                    "positional arguments from 0 (jax.pmap ignores a negative one)")
    donate = index_tuple(donate_argnums, "donate_argnums", "weft.pmap")
    if static:
        rebase_donate_argnums(donate, static, f"pmap({label})")  # (refuses a position both static and donated)
    return _Pmapped(fun, axis_name, in_axes, out_axes, devices, f"pmap({label})", eager, donate, static, axis_size)
