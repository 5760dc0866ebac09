"""weft.lax: jax.lax's collectives, called inside a function mapped by weft.pmap.

Each finds the replica of the calling thread (as jax.lax finds the axis environment of its trace) and runs
the collective of the C++ runtime with the GIL released while it waits for the other replicas. `x` may be a
numpy array, a Python scalar or a pytree of them; results are read-only numpy views of weft's buffers. The
element-wise reductions of a pytree (psum, pmean, pmax, pmin) run one collective per dtype, not per leaf.
"""
import numpy as _np

from . import _weft
from ._tree import flatten as _flatten, tree_map as _tree_map, unflatten as _unflatten

# The array functions the reference notebook takes from jax.lax (numpy's, on numpy arrays).
bitwise_and = _np.bitwise_and
bitwise_or = _np.bitwise_or
bitwise_xor = _np.bitwise_xor
bitwise_not = _np.bitwise_not


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
    return _fused(_weft.psum, x, axis_name, _groups(axis_index_groups))


def pmean(x, axis_name, *, axis_index_groups=None):
    return _fused(_weft.pmean, x, axis_name, _groups(axis_index_groups))


def pmax(x, axis_name, *, axis_index_groups=None):
    return _fused(_weft.pmax, x, axis_name, _groups(axis_index_groups))


def pmin(x, axis_name, *, axis_index_groups=None):
    return _fused(_weft.pmin, x, axis_name, _groups(axis_index_groups))


def all_gather(x, axis_name, *, axis_index_groups=None, axis=0, tiled=False):
    return _each(_weft.all_gather, x, axis_name, _groups(axis_index_groups), int(axis), bool(tiled))


def psum_scatter(x, axis_name, *, scatter_dimension=0, axis_index_groups=None, tiled=False):
    return _each(_weft.psum_scatter, x, axis_name, _groups(axis_index_groups), int(scatter_dimension), bool(tiled))


def all_to_all(x, axis_name, split_axis, concat_axis, *, axis_index_groups=None, tiled=False):
    return _each(_weft.all_to_all, x, axis_name, _groups(axis_index_groups), int(split_axis), int(concat_axis),
                 bool(tiled))


def ppermute(x, axis_name, perm):
    return _each(_weft.ppermute, x, axis_name, [(int(s), int(d)) for s, d in perm])


def pshuffle(x, axis_name, perm):
    """jax.lax.pshuffle: replica i receives from perm[i]."""
    return ppermute(x, axis_name, [(int(src), dst) for dst, src in enumerate(perm)])


def axis_index(axis_name):
    """This replica's index along `axis_name` (a name or a tuple of names), as an int32 scalar."""
    return _np.int32(_weft.axis_index(axis_name))


def axis_size(axis_name):
    return _weft.axis_size(axis_name)
