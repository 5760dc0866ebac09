"""weft.lax: jax.lax's collectives, called inside a function mapped by weft.pmap, and its control flow (cond,
switch, scan, fori_loop, while_loop, map: weft/_control_flow.py).

Under a trace (the traced weft.pmap, weft.jit inside it) each collective is an equation of the program,
which every replica runs in C++. In an eager replica (weft.pmap(f, eager=True), sessions):

Each finds the replica of the calling thread (as jax.lax finds the axis environment of its trace) and runs
the collective of the C++ runtime with the GIL released while it waits for the other replicas. `x` may be a
numpy array, a Python scalar or a pytree of them; results are read-only numpy views of weft's buffers. The
element-wise reductions of a pytree (psum, pmean, pmax, pmin) run one collective per dtype, not per leaf.

Each collective is one row of a table (_Collective: its primitive, its parameters, how an eager replica runs
it) and one dispatch (_apply) serves both paths: the arguments are converted once, into the equation's
parameters under a trace, or handed in the same order to the eager collective of weft._weft
(python/src/lax.cc). Both paths check the axes' names with the one check there.
"""
import dataclasses
from typing import Callable

import numpy as _np

from . import _jnp, _weft
from ._control_flow import cond, fori_loop, map, scan, switch, while_loop  # noqa: F401,A004  (jax.lax's names)
from ._trace import Tracer as _Tracer, bind as _bind, current_trace as _current_trace
from ._tree import flatten as _flatten, tree_map as _tree_map, unflatten as _unflatten

# The array functions the reference notebook takes from jax.lax (numpy's on numpy arrays, equations on
# tracers).
bitwise_and = _jnp.bitwise_and
bitwise_or = _jnp.bitwise_or
bitwise_xor = _jnp.bitwise_xor
bitwise_not = _jnp.bitwise_not
stop_gradient = _jnp.stop_gradient


def _perm(perm):
    return [(int(source), int(destination)) for source, destination in perm]


@dataclasses.dataclass(frozen=True)
class _Collective:
    """A collective of weft.lax: the primitive `name` (the equation's op; weft.lax.<name> in messages), the
    parameters its JAX arguments give after `axes`, in the equation's order, as (param, conversion): how the
    JAX argument becomes the parameter's value (its kind is the op's schema in C++);
    `eager`, what an eager replica runs: eager(x, axis_name, *those values[, groups]); `fused`: element-wise, so
    a pytree goes as one collective per dtype; `operand`: whether it takes an x (axis_index does not)."""
    name: str
    eager: Callable
    params: tuple = ()
    fused: bool = False
    operand: bool = True
    api: str = dataclasses.field(init=False)  # weft.lax.<name>, as messages name it
    converts: tuple = dataclasses.field(init=False)  # the parameters' conversions, in order

    def __post_init__(self):
        object.__setattr__(self, "api", f"weft.lax.{self.name}")
        object.__setattr__(self, "converts", tuple(convert for _, convert in self.params))


# weft._weft's eager collectives (python/src/lax.cc) take their arguments in the parameters' order,
# axis_index_groups last, and check the axes' names themselves.
_PSUM = _Collective("psum", _weft.psum, fused=True)
_PMEAN = _Collective("pmean", _weft.pmean, fused=True)
_PMAX = _Collective("pmax", _weft.pmax, fused=True)
_PMIN = _Collective("pmin", _weft.pmin, fused=True)
_ALL_GATHER = _Collective("all_gather", _weft.all_gather, (("axis", int), ("tiled", bool)))
_PSUM_SCATTER = _Collective("psum_scatter", _weft.psum_scatter, (("axis", int), ("tiled", bool)))
_ALL_TO_ALL = _Collective("all_to_all", _weft.all_to_all, (("split_axis", int), ("concat_axis", int),
                                                           ("tiled", bool)))
_PPERMUTE = _Collective("ppermute", _weft.ppermute, (("perm", _perm),))
_PBROADCAST = _Collective("pbroadcast", _weft.pbroadcast, (("source", int),))
_PVARY = _Collective("pvary", _weft.pvary)
_AXIS_INDEX = _Collective("axis_index", lambda axis_name: _np.int32(_weft.axis_index(axis_name)), operand=False)


def _axes(axis_name):
    names = list(axis_name) if isinstance(axis_name, (tuple, list)) else [axis_name]
    return [str(n) for n in names]


def _params(collective, axis_name, values, groups):
    """The equation's parameters of `collective`, from its converted values (the one place they are built)."""
    params = [("axes", _axes(axis_name))]
    params += [(name, value) for (name, _), value in zip(collective.params, values)]
    if groups is not None:
        params.append(("groups", groups))
    return params


def _apply(collective, x, axis_name, *values, axis_index_groups=None):
    """`collective` of x's leaves: equations under a trace, else the eager replica's collectives. The values
    are converted once, here, for both."""
    if values:
        values = [convert(value) for convert, value in zip(collective.converts, values)]
    groups = None if axis_index_groups is None else [[int(i) for i in group] for group in axis_index_groups]
    trace = _current_trace()
    if trace is None:
        args = (axis_name, *values) if groups is None else (axis_name, *values, groups)
        if isinstance(x, _np.ndarray):  # the common case, straight to C++: an eager replica's Python time is
            return collective.eager(x, *args)  # the GIL's, which every replica waits for
        run = lambda *leaf: collective.eager(*leaf, *args)  # noqa: E731
    else:
        params = _params(collective, axis_name, values, groups)
        # The one check of the axes' names (python/src/lax.cc), against the trace's mesh.
        _weft.check_axes_named(collective.api, trace.mesh, params[0][1])
        run = lambda *leaf: _bind(collective.name, list(leaf), params, trace=trace)  # noqa: E731
    if not collective.operand:
        return run()
    if isinstance(x, _Tracer):
        return run(x)
    return _fused(run, x, trace) if collective.fused else _tree_map(run, x)


def _fused(run, x, trace):
    """An element-wise reduction (psum, pmean, pmax, pmin) of a pytree as few collectives as its dtypes allow:
    the array leaves of each dtype are flattened into one buffer, reduced in one collective, and split back (a
    dict of float32 gradients is one pmean, as XLA fuses JAX's). Under a trace the buffer is an equation's and
    every leaf that is not a tracer first becomes a constant of the program; eagerly, Python numbers go alone."""
    leaves, treedef = _flatten(x)
    out = [None] * len(leaves)
    by_dtype = {}
    for index, leaf in enumerate(leaves):
        if trace is not None and not isinstance(leaf, _Tracer):
            leaf = leaves[index] = trace.constant(leaf)  # (in the dtype the program takes it in)
        if isinstance(leaf, (_np.ndarray, _np.generic, _Tracer)):
            by_dtype.setdefault(leaf.dtype, []).append(index)
        else:
            out[index] = run(leaf)
    concatenate = _np.concatenate if trace is None else _jnp.concatenate
    for indices in by_dtype.values():
        if len(indices) == 1:
            out[indices[0]] = run(leaves[indices[0]])
            continue
        reduced = run(concatenate([leaves[i].reshape(-1) for i in indices]))
        at = 0
        for i in indices:
            n = leaves[i].size
            out[i] = reduced[at:at + n].reshape(leaves[i].shape)
            at += n
    return _unflatten(treedef, out)


def psum(x, axis_name, *, axis_index_groups=None):
    """jax.lax.psum. Under a trace, a value that is no tracer (a Python number, a numpy array: the same on every
    replica) sums to the axis size times itself, a concrete value of its own type, as JAX gives it (psum(1, 'i')
    is the axis size, a Python int usable as a shape); with axis_index_groups, the groups' size."""
    if _current_trace() is not None:
        leaves, treedef = _flatten(x)
        if not any(isinstance(leaf, _Tracer) or _np.asarray(leaf).dtype == _np.bool_ for leaf in leaves):
            size = (len(axis_index_groups[0]) if axis_index_groups is not None else
                    _axis_size(_PSUM.api, axis_name))
            return _unflatten(treedef, [_times(leaf, size) for leaf in leaves])
    return _apply(_PSUM, x, axis_name, axis_index_groups=axis_index_groups)


def _times(value, n):
    """n * value in value's own type (JAX's lax._const(value, n) * value): a Python number stays one."""
    if type(value) in (int, float, complex):
        return type(value)(n) * value
    return _np.asarray(n, _np.asarray(value).dtype) * value


def pmean(x, axis_name, *, axis_index_groups=None):
    return _apply(_PMEAN, x, axis_name, axis_index_groups=axis_index_groups)


def pmax(x, axis_name, *, axis_index_groups=None):
    return _apply(_PMAX, x, axis_name, axis_index_groups=axis_index_groups)


def pmin(x, axis_name, *, axis_index_groups=None):
    return _apply(_PMIN, x, axis_name, axis_index_groups=axis_index_groups)


def all_gather(x, axis_name, *, axis_index_groups=None, axis=0, tiled=False):
    return _apply(_ALL_GATHER, x, axis_name, axis, tiled, axis_index_groups=axis_index_groups)


def psum_scatter(x, axis_name, *, scatter_dimension=0, axis_index_groups=None, tiled=False):
    return _apply(_PSUM_SCATTER, x, axis_name, scatter_dimension, tiled, axis_index_groups=axis_index_groups)


def all_to_all(x, axis_name, split_axis, concat_axis, *, axis_index_groups=None, tiled=False):
    return _apply(_ALL_TO_ALL, x, axis_name, split_axis, concat_axis, tiled, axis_index_groups=axis_index_groups)


def ppermute(x, axis_name, perm):
    return _apply(_PPERMUTE, x, axis_name, perm)


def pbroadcast(x, axis_name, source):
    """jax.lax.pbroadcast: every replica along `axis_name` gets the value of the one at index `source` (JAX's
    definition: psum(where(axis_index == source, x, 0))). Its transpose sums the cotangents to the source."""
    return _apply(_PBROADCAST, x, axis_name, source)


def pvary(x, axis_name):
    """jax.lax.pvary (shard_map's): x, now typed as varying over `axis_name` too; no data moves. Its transpose
    is psum. Outside a trace (no types to change) it returns x."""
    return _apply(_PVARY, x, axis_name)


def pshuffle(x, axis_name, perm):
    """jax.lax.pshuffle: replica i receives from perm[i]."""
    return ppermute(x, axis_name, [(int(src), dst) for dst, src in enumerate(perm)])


def axis_index(axis_name):
    """This replica's index along `axis_name` (a name or a tuple of names), as an int32 scalar."""
    return _apply(_AXIS_INDEX, None, axis_name)


def axis_size(axis_name):
    """The size of `axis_name` (a name or a tuple of names: their product), a Python int: the trace's mesh says
    it, or the eager replica's."""
    return _axis_size("weft.lax.axis_size", axis_name)


def _axis_size(api, axis_name):
    """axis_size for `api` (weft.lax.axis_size, or psum of a constant), which errors name."""
    trace = _current_trace()
    if trace is None:
        return _weft.axis_size(axis_name)
    axes = _axes(axis_name)
    _weft.check_axes_named(api, trace.mesh, axes)
    size = 1
    for name in axes:
        if name not in trace.axis_sizes:
            raise _weft.InvalidArgument(f"{api}: unbound axis name: {name} (the trace has axes "
                                        f"{sorted(trace.axis_sizes)})")
        size *= trace.axis_sizes[name]
    return size
