"""weft.lax: jax.lax's collectives, called inside a function mapped by weft.pmap.

Under a trace (the traced weft.pmap, weft.jit inside it) each collective is an equation of the program,
which every replica runs in C++. In an eager replica (weft.pmap(f, eager=True), sessions):

Each finds the replica of the calling thread (as jax.lax finds the axis environment of its trace) and runs
the collective of the C++ runtime with the GIL released while it waits for the other replicas. `x` may be a
numpy array, a Python scalar or a pytree of them; results are read-only numpy views of weft's buffers. The
element-wise reductions of a pytree (psum, pmean, pmax, pmin) run one collective per dtype, not per leaf.
"""
import numpy as _np

from . import _jnp, _weft
from ._trace import Tracer as _Tracer, bind as _bind, current_trace as _current_trace
from ._tree import flatten as _flatten, tree_map as _tree_map, unflatten as _unflatten

# The array functions the reference notebook takes from jax.lax (numpy's on numpy arrays, equations on
# tracers).
bitwise_and = _jnp.bitwise_and
bitwise_or = _jnp.bitwise_or
bitwise_xor = _jnp.bitwise_xor
bitwise_not = _jnp.bitwise_not
stop_gradient = _jnp.stop_gradient


def _axes(axis_name):
    names = list(axis_name) if isinstance(axis_name, (tuple, list)) else [axis_name]
    return [str(n) for n in names]


def _check_named(op, trace, params):
    """A pmap made without axis_name has an axis nobody can name: say how to name it (as the eager path)."""
    axes = next(value for name, _, value in params if name == "axes")
    unnamed = any(name.startswith("_pmap_axis") for name in trace.axis_sizes)
    for name in axes:
        if unnamed and name not in trace.axis_sizes:
            raise _weft.InvalidArgument(
                f"weft.lax.{op}: axis name '{name}' is not bound: this pmap was made without axis_name, so its axis "
                f"has no name; name it where the pmap is made, e.g. weft.pmap(f, axis_name='{name}') or "
                f"@functools.partial(weft.pmap, axis_name='{name}')")


def _traced(op, x, params):
    """The collective `op` on each leaf of x as a program equation (a Python number becomes a constant)."""
    trace = _current_trace()
    _check_named(op, trace, params)
    return _tree_map(lambda leaf: _bind(op, [leaf], params, trace=trace), x)


def _traced_fused(op, x, params):
    """An element-wise reduction of a pytree under trace as one collective per dtype, as _fused does eagerly:
    the leaves of a dtype flattened and concatenated, reduced once, sliced back."""
    trace = _current_trace()
    _check_named(op, trace, params)
    leaves, treedef = _flatten(x)
    if len(leaves) < 2:
        return _unflatten(treedef, [_bind(op, [leaf], params, trace=trace) for leaf in leaves])
    leaves = [leaf if isinstance(leaf, _Tracer) else trace.constant(leaf) for leaf in leaves]
    out = [None] * len(leaves)
    by_dtype = {}
    for index, leaf in enumerate(leaves):
        by_dtype.setdefault(leaf.dtype, []).append(index)
    for indices in by_dtype.values():
        if len(indices) == 1:
            out[indices[0]] = _bind(op, [leaves[indices[0]]], params, trace=trace)
            continue
        flat = _jnp.concatenate([_jnp.reshape(leaves[i], (-1,)) for i in indices])
        reduced = _bind(op, [flat], params, trace=trace)
        at = 0
        for i in indices:
            n = leaves[i].size
            out[i] = _jnp.reshape(reduced[at:at + n], leaves[i].shape)
            at += n
    return _unflatten(treedef, out)


def _group_params(axis_index_groups):
    if axis_index_groups is None:
        return []
    return [("groups", "groups", [list(map(int, g)) for g in axis_index_groups])]


_NO_GROUPS = ()


def _groups(axis_index_groups):
    return _NO_GROUPS if axis_index_groups is None else [list(map(int, g)) for g in axis_index_groups]


def _each(op, x, *args):
    """op(leaf, *args) for each leaf of x; an array (the common case) without the pytree walk. Axis names go
    to C++ as given (a name, or a tuple / list of names)."""
    if isinstance(x, _np.ndarray):
        return op(x, *args)
    return _tree_map(lambda leaf: op(leaf, *args), x)


def _fused(op, x, *args):
    """An element-wise reduction (psum, pmean, pmax, pmin) of a pytree as few collectives as its dtypes allow:
    the array leaves of each dtype are packed into one flat buffer, reduced in one collective, and split back
    (a dict of float32 gradients is one pmean, as XLA fuses JAX's). Other leaves (Python numbers) go alone."""
    if isinstance(x, _np.ndarray):
        return op(x, *args)
    leaves, treedef = _flatten(x)
    if len(leaves) < 2:
        return _unflatten(treedef, [op(leaf, *args) for leaf in leaves])
    out = [None] * len(leaves)
    by_dtype = {}
    for index, leaf in enumerate(leaves):
        if isinstance(leaf, (_np.ndarray, _np.generic)):
            by_dtype.setdefault(_np.asarray(leaf).dtype, []).append(index)
        else:
            out[index] = op(leaf, *args)
    for indices in by_dtype.values():
        if len(indices) == 1:
            out[indices[0]] = op(leaves[indices[0]], *args)
            continue
        parts = [_np.asarray(leaves[i]) for i in indices]
        reduced = op(_np.concatenate([p.ravel() for p in parts]), *args)
        at = 0
        for i, p in zip(indices, parts):
            out[i] = reduced[at:at + p.size].reshape(p.shape)
            at += p.size
    return _unflatten(treedef, out)


def psum(x, axis_name, *, axis_index_groups=None):
    if _current_trace() is not None:
        return _traced_fused("psum", x, [("axes", "strs", _axes(axis_name))] + _group_params(axis_index_groups))
    return _fused(_weft.psum, x, axis_name, _groups(axis_index_groups))


def pmean(x, axis_name, *, axis_index_groups=None):
    if _current_trace() is not None:
        return _traced_fused("pmean", x, [("axes", "strs", _axes(axis_name))] + _group_params(axis_index_groups))
    return _fused(_weft.pmean, x, axis_name, _groups(axis_index_groups))


def pmax(x, axis_name, *, axis_index_groups=None):
    if _current_trace() is not None:
        return _traced_fused("pmax", x, [("axes", "strs", _axes(axis_name))] + _group_params(axis_index_groups))
    return _fused(_weft.pmax, x, axis_name, _groups(axis_index_groups))


def pmin(x, axis_name, *, axis_index_groups=None):
    if _current_trace() is not None:
        return _traced_fused("pmin", x, [("axes", "strs", _axes(axis_name))] + _group_params(axis_index_groups))
    return _fused(_weft.pmin, x, axis_name, _groups(axis_index_groups))


def all_gather(x, axis_name, *, axis_index_groups=None, axis=0, tiled=False):
    if _current_trace() is not None:
        return _traced("all_gather", x, [("axes", "strs", _axes(axis_name)), ("axis", "int", int(axis)),
                                         ("tiled", "bool", bool(tiled))] + _group_params(axis_index_groups))
    return _each(_weft.all_gather, x, axis_name, _groups(axis_index_groups), int(axis), bool(tiled))


def psum_scatter(x, axis_name, *, scatter_dimension=0, axis_index_groups=None, tiled=False):
    if _current_trace() is not None:
        return _traced("psum_scatter", x, [("axes", "strs", _axes(axis_name)), ("axis", "int", int(scatter_dimension)),
                                           ("tiled", "bool", bool(tiled))] + _group_params(axis_index_groups))
    return _each(_weft.psum_scatter, x, axis_name, _groups(axis_index_groups), int(scatter_dimension), bool(tiled))


def all_to_all(x, axis_name, split_axis, concat_axis, *, axis_index_groups=None, tiled=False):
    if _current_trace() is not None:
        return _traced("all_to_all", x, [("axes", "strs", _axes(axis_name)), ("split_axis", "int", int(split_axis)),
                                         ("concat_axis", "int", int(concat_axis)), ("tiled", "bool", bool(tiled))]
                       + _group_params(axis_index_groups))
    return _each(_weft.all_to_all, x, axis_name, _groups(axis_index_groups), int(split_axis), int(concat_axis),
                 bool(tiled))


def ppermute(x, axis_name, perm):
    if _current_trace() is not None:
        return _traced("ppermute", x, [("axes", "strs", _axes(axis_name)),
                                       ("perm", "perm", [(int(a), int(b)) for a, b in perm])])
    return _each(_weft.ppermute, x, axis_name, [(int(s), int(d)) for s, d in perm])


def pbroadcast(x, axis_name, source):
    """jax.lax.pbroadcast: every replica along `axis_name` gets the value of the one at index `source` (JAX's
    definition: psum(where(axis_index == source, x, 0))). Its transpose sums the cotangents to the source."""
    if _current_trace() is not None:
        return _traced("pbroadcast", x, [("axes", "strs", _axes(axis_name)), ("source", "int", int(source))])
    # Eagerly, as the runtime runs the traced one: the group's values gathered, the source's taken.
    return _tree_map(lambda leaf: all_gather(leaf, axis_name)[int(source)], x)


def pvary(x, axis_name):
    """jax.lax.pvary (shard_map's): x, now typed as varying over `axis_name` too; no data moves. Its transpose
    is psum. Outside a trace (no types to change) it returns x."""
    if _current_trace() is not None:
        return _traced("pvary", x, [("axes", "strs", _axes(axis_name))])
    return x


def pshuffle(x, axis_name, perm):
    """jax.lax.pshuffle: replica i receives from perm[i]."""
    return ppermute(x, axis_name, [(int(src), dst) for dst, src in enumerate(perm)])


def axis_index(axis_name):
    """This replica's index along `axis_name` (a name or a tuple of names), as an int32 scalar."""
    trace = _current_trace()
    if trace is not None:
        params = [("axes", "strs", _axes(axis_name))]
        _check_named("axis_index", trace, params)
        return _bind("axis_index", [], params, trace=trace)
    return _np.int32(_weft.axis_index(axis_name))


def axis_size(axis_name):
    trace = _current_trace()
    if trace is not None:
        size = 1
        for name in _axes(axis_name):
            if name not in trace.axis_sizes:
                raise _weft.InvalidArgument(f"weft.lax.axis_size: unbound axis name: {name} (the trace has axes "
                                            f"{sorted(trace.axis_sizes)})")
            size *= trace.axis_sizes[name]
        return size
    return _weft.axis_size(axis_name)
