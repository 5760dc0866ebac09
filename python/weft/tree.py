"""weft.tree: jax.tree's short names for weft.tree_util's functions (map, leaves, flatten, unflatten,
structure), over the same pytrees.

    weft.tree.map(lambda p, g: p - 0.1 * g, params, grads)
"""
from .tree_util import (tree_flatten as flatten, tree_leaves as leaves, tree_map as map,
                        tree_structure as structure, tree_unflatten as unflatten)

__all__ = ["flatten", "leaves", "map", "structure", "unflatten"]
