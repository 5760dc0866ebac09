"""weft.lax: jax.lax's collectives, called inside a function mapped by weft.pmap.

Each finds the replica of the calling thread (as jax.lax finds the axis environment of its trace) and runs
the collective of the C++ runtime with the GIL released while it waits for the other replicas. `x` may be a
numpy array, a Python scalar or a pytree of them; results are read-only numpy views of weft's buffers.
"""
import numpy as _np

from . import _weft
from ._tree import tree_map as _tree_map

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


def psum(x, axis_name, *, axis_index_groups=None):
    return _each(_weft.psum, x, axis_name, _groups(axis_index_groups))


def pmean(x, axis_name, *, axis_index_groups=None):
    return _each(_weft.pmean, x, axis_name, _groups(axis_index_groups))


def pmax(x, axis_name, *, axis_index_groups=None):
    return _each(_weft.pmax, x, axis_name, _groups(axis_index_groups))


def pmin(x, axis_name, *, axis_index_groups=None):
    return _each(_weft.pmin, x, axis_name, _groups(axis_index_groups))


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
