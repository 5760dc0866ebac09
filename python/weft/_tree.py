"""Pytrees, as JAX has them: nested tuples, lists and dicts (and None) whose leaves are arrays.

pmap and weft.lax take and return pytrees; the C++ runtime sees only the flat list of leaves. A treedef is a
hashable description of the nesting, so it can key a cache of prepared programs.
"""

LEAF = _LEAF = ("*",)  # the treedef of one array
_NONE = ("None",)


# The walks below are module-level functions, not nested closures: a closure that calls itself is a reference
# cycle (function -> cell -> function) holding the leaves it collected, so every pmap call's arguments and
# results would wait for Python's cycle collector instead of being freed when dropped (measured: a training
# loop's old parameters, 41 MB a step, piling up until the next collection).
def _flatten_into(node, is_leaf, leaves):
    if is_leaf is not None and is_leaf(node):
        leaves.append(node)
        return _LEAF
    if node is None:
        return _NONE
    if isinstance(node, (tuple, list)):
        kind = "tuple" if isinstance(node, tuple) else "list"
        return (kind, tuple(_flatten_into(child, is_leaf, leaves) for child in node))
    if isinstance(node, dict):
        keys = tuple(sorted(node))
        return ("dict", keys, tuple(_flatten_into(node[k], is_leaf, leaves) for k in keys))
    leaves.append(node)
    return _LEAF


def flatten(tree, is_leaf=None):
    """(leaves, treedef) of `tree`; dict children are ordered by sorted key, as in JAX. `is_leaf(node)` true
    makes that node a leaf (jax.tree_util's is_leaf)."""
    leaves = []
    treedef = _flatten_into(tree, is_leaf, leaves)
    return leaves, treedef


def _build(node, it):
    if node == _LEAF:
        return next(it)
    if node == _NONE:
        return None
    if node[0] == "dict":
        return {k: _build(child, it) for k, child in zip(node[1], node[2])}
    children = [_build(child, it) for child in node[1]]
    return tuple(children) if node[0] == "tuple" else children


def unflatten(treedef, leaves):
    """The tree of `treedef` with `leaves` in flatten's order."""
    return _build(treedef, iter(leaves))


def _text(node):
    if node == _LEAF:
        return "*"
    if node == _NONE:
        return "None"
    if node[0] == "dict":
        return "{" + ", ".join(f"{k!r}: {_text(child)}" for k, child in zip(node[1], node[2])) + "}"
    children = [_text(child) for child in node[1]]
    if node[0] == "list":
        return "[" + ", ".join(children) + "]"
    return "(" + ", ".join(children) + ("," if len(children) == 1 else "") + ")"


def describe(treedef):
    """`treedef` as JAX prints a PyTreeDef: PyTreeDef({'a': *, 'b': (*, [*])}), for error messages."""
    return f"PyTreeDef({_text(treedef)})"


def tree_map(fn, tree):
    leaves, treedef = flatten(tree)
    return unflatten(treedef, [fn(leaf) for leaf in leaves])


def _broadcast_into(p, node, prefix, tree, what, out):
    if isinstance(p, (tuple, list, dict)) and not (p == () and node == ()):
        if isinstance(p, dict) != isinstance(node, dict) or (
                isinstance(p, (tuple, list)) and (not isinstance(node, (tuple, list)) or len(p) != len(node))):
            raise ValueError(f"{what} specification must be a tree prefix of the corresponding value, "
                             f"got specification {prefix!r} for value tree {flatten(tree)[1]!r}")
        if isinstance(p, dict):
            if sorted(p) != sorted(node):
                raise ValueError(f"{what}: dict keys {sorted(p)} do not match the value's {sorted(node)}")
            for k in sorted(p):
                _broadcast_into(p[k], node[k], prefix, tree, what, out)
        else:
            for pc, nc in zip(p, node):
                _broadcast_into(pc, nc, prefix, tree, what, out)
        return
    out.extend([p] * len(flatten(node)[0]))


def broadcast_prefix(prefix, tree, what):
    """One entry of `prefix` (JAX's in_axes / out_axes: a value, or a tree prefix of `tree`) per leaf of `tree`."""
    out = []
    _broadcast_into(prefix, tree, prefix, tree, what, out)
    return out
