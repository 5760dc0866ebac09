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


def _names(axis_name):
    if isinstance(axis_name, (tuple, list)):
        return [str(a) for a in axis_name]
    return [str(axis_name)]


def _groups(axis_index_groups):
    return [] if axis_index_groups is None else [list(map(int, g)) for g in axis_index_groups]


def psum(x, axis_name, *, axis_index_groups=None):
    names, groups = _names(axis_name), _groups(axis_index_groups)
    return _tree_map(lambda leaf: _weft.psum(leaf, names, groups), x)


def pmean(x, axis_name, *, axis_index_groups=None):
    names, groups = _names(axis_name), _groups(axis_index_groups)
    return _tree_map(lambda leaf: _weft.pmean(leaf, names, groups), x)


def pmax(x, axis_name, *, axis_index_groups=None):
    names, groups = _names(axis_name), _groups(axis_index_groups)
    return _tree_map(lambda leaf: _weft.pmax(leaf, names, groups), x)


def pmin(x, axis_name, *, axis_index_groups=None):
    names, groups = _names(axis_name), _groups(axis_index_groups)
    return _tree_map(lambda leaf: _weft.pmin(leaf, names, groups), x)


def all_gather(x, axis_name, *, axis_index_groups=None, axis=0, tiled=False):
    names, groups = _names(axis_name), _groups(axis_index_groups)
    return _tree_map(lambda leaf: _weft.all_gather(leaf, names, groups, int(axis), bool(tiled)), x)


def psum_scatter(x, axis_name, *, scatter_dimension=0, axis_index_groups=None, tiled=False):
    names, groups = _names(axis_name), _groups(axis_index_groups)
    return _tree_map(lambda leaf: _weft.psum_scatter(leaf, names, groups, int(scatter_dimension), bool(tiled)), x)


def all_to_all(x, axis_name, split_axis, concat_axis, *, axis_index_groups=None, tiled=False):
    names, groups = _names(axis_name), _groups(axis_index_groups)
    return _tree_map(
        lambda leaf: _weft.all_to_all(leaf, names, groups, int(split_axis), int(concat_axis), bool(tiled)), x)


def ppermute(x, axis_name, perm):
    names = _names(axis_name)
    pairs = [(int(s), int(d)) for s, d in perm]
    return _tree_map(lambda leaf: _weft.ppermute(leaf, names, pairs), x)


def pshuffle(x, axis_name, perm):
    """jax.lax.pshuffle: replica i receives from perm[i]."""
    return ppermute(x, axis_name, [(int(src), dst) for dst, src in enumerate(perm)])


def axis_index(axis_name):
    """This replica's index along `axis_name` (a name or a tuple of names), as an int32 scalar."""
    return _np.int32(_weft.axis_index(_names(axis_name)))


def axis_size(axis_name):
    return _weft.axis_size(_names(axis_name))
