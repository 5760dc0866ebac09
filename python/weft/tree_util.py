"""weft.tree_util: jax.tree_util's functions over weft's pytrees (nested tuples, lists, dicts and None).

    leaves, treedef = weft.tree_util.tree_flatten({"w": w, "b": b})   # dict keys in sorted order, as JAX
    weft.tree_util.tree_unflatten(treedef, leaves)
    weft.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)
    weft.tree_util.tree_leaves(params)

Trees are what pmap, weft.lax, device_put, device_put_sharded and device_put_replicated take; a leaf is
anything else (an array, a number). `is_leaf` stops the walk at the nodes it accepts, as JAX's does.
"""
from . import _tree

__all__ = ["PyTreeDef", "tree_flatten", "tree_unflatten", "tree_leaves", "tree_structure", "tree_map"]


class PyTreeDef:
    """The structure of a pytree without its leaves (jax.tree_util.PyTreeDef): comparable, hashable, printed
    as JAX prints it, e.g. PyTreeDef({'b': *, 'w': *})."""

    __slots__ = ("_node",)

    def __init__(self, node):
        self._node = node

    @property
    def num_leaves(self):
        return _count_leaves(self._node)

    def unflatten(self, leaves):
        return tree_unflatten(self, leaves)

    def __eq__(self, other):
        return isinstance(other, PyTreeDef) and self._node == other._node

    def __hash__(self):
        return hash(self._node)

    def __repr__(self):
        return _tree.describe(self._node)


def _count_leaves(node):
    if node == _tree.LEAF:
        return 1
    if node[0] == "None":
        return 0
    children = node[2] if node[0] == "dict" else node[1]
    return sum(_count_leaves(child) for child in children)


def tree_flatten(tree, is_leaf=None):
    """(leaves, treedef) of `tree`, leaves in JAX's order (dict children by sorted key)."""
    leaves, node = _tree.flatten(tree, is_leaf)
    return leaves, PyTreeDef(node)


def tree_unflatten(treedef, leaves):
    """The tree of `treedef` with `leaves` in tree_flatten's order."""
    if not isinstance(treedef, PyTreeDef):
        raise TypeError(f"tree_unflatten: treedef must be a PyTreeDef from tree_flatten, got {type(treedef).__name__}")
    leaves = list(leaves)
    if len(leaves) != treedef.num_leaves:
        raise ValueError(f"tree_unflatten: {treedef} has {treedef.num_leaves} leaves, got {len(leaves)}")
    return _tree.unflatten(treedef._node, leaves)


def tree_leaves(tree, is_leaf=None):
    return _tree.flatten(tree, is_leaf)[0]


def tree_structure(tree, is_leaf=None):
    return PyTreeDef(_tree.flatten(tree, is_leaf)[1])


def tree_map(f, tree, *rest, is_leaf=None):
    """f applied leaf by leaf; with several trees, f(leaf, *corresponding leaves of rest), which must have
    `tree`'s structure (as in JAX)."""
    leaves, node = _tree.flatten(tree, is_leaf)
    others = []
    for index, other in enumerate(rest):
        other_leaves, other_node = _tree.flatten(other, is_leaf)
        if other_node != node:
            raise ValueError(f"tree_map: tree {index + 1} has structure {_tree.describe(other_node)} but the first "
                             f"tree has {_tree.describe(node)}; every tree must have the same structure")
        others.append(other_leaves)
    return _tree.unflatten(node, [f(*args) for args in zip(leaves, *others)])
