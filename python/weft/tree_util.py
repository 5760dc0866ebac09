"""weft.tree_util: jax.tree_util's functions over weft's pytrees (nested tuples, lists, dicts, None,
namedtuples, OrderedDicts, defaultdicts and registered classes, each rebuilt with its own type).

    leaves, treedef = weft.tree_util.tree_flatten({"w": w, "b": b})   # dict keys in sorted order, as JAX
    weft.tree_util.tree_unflatten(treedef, leaves)
    weft.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)
    weft.tree_util.tree_leaves(params)

    @weft.tree_util.register_pytree_node_class           # a class of one's own as a node
    class Pair:
        def __init__(self, a, b): self.a, self.b = a, b
        def tree_flatten(self): return (self.a, self.b), None
        @classmethod
        def tree_unflatten(cls, aux, children): return cls(*children)

Trees are what pmap, jit, grad, shard_map, weft.lax, device_put, device_put_sharded and device_put_replicated
take; a leaf is anything else (an array, a number). `is_leaf` stops the walk at the nodes it accepts, as JAX's
does.
"""
from . import _tree

__all__ = ["PyTreeDef", "tree_flatten", "tree_unflatten", "tree_leaves", "tree_structure", "tree_map",
           "register_pytree_node", "register_pytree_node_class"]


class PyTreeDef:
    """The structure of a pytree without its leaves (jax.tree_util.PyTreeDef): comparable, hashable, printed
    as JAX prints it, e.g. PyTreeDef({'b': *, 'w': *})."""

    __slots__ = ("_node",)

    def __init__(self, node):
        self._node = node

    @property
    def num_leaves(self):
        return _tree.count_leaves(self._node)

    def unflatten(self, leaves):
        return tree_unflatten(self, leaves)

    def __eq__(self, other):
        return isinstance(other, PyTreeDef) and self._node == other._node

    def __hash__(self):
        return hash(self._node)

    def __repr__(self):
        return _tree.describe(self._node)


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


def register_pytree_node(nodetype, flatten_func, unflatten_func):
    """Makes `nodetype`'s values pytree nodes (jax.tree_util.register_pytree_node): flatten_func(value) ->
    (children, aux_data), aux_data hashable (it is part of the treedef, which keys jit's and pmap's caches);
    unflatten_func(aux_data, children) -> a value. Registering a type twice is a ValueError, as in JAX."""
    _tree.register(nodetype, flatten_func, unflatten_func)


def register_pytree_node_class(cls):
    """Class decorator (jax.tree_util.register_pytree_node_class): `cls` flattens with its tree_flatten method
    and is rebuilt with its classmethod tree_unflatten(aux_data, children)."""
    register_pytree_node(cls, lambda value: value.tree_flatten(), cls.tree_unflatten)
    return cls
