"""Pytrees, as JAX has them: nested containers whose leaves are arrays.

The containers are JAX's: tuple, list, dict (children by sorted key) and None (no children), each matched by
its exact type; namedtuples (tuple subclasses with `_fields`); and the registered types, among them
collections.OrderedDict (children in insertion order) and collections.defaultdict (sorted keys, its
default_factory kept), which JAX registers the same way. A subclass of tuple, list or dict that is neither a
namedtuple nor registered is a leaf, as in JAX. Unflattening builds each node with its own type again.

pmap, jit, grad and weft.lax take and return pytrees; the C++ runtime sees only the flat list of leaves. A
treedef is a hashable description of the nesting, so it can key a cache of prepared programs: a node is the
triple (kind, data, children), the data telling the nodes of one kind apart (dict keys, a namedtuple's type,
a registered type and its flatten function's auxiliary data, which must be hashable, as JAX requires).
"""
import collections
import enum
import functools


class Kind(enum.Enum):
    LEAF = "leaf"
    NONE = "None"
    TUPLE = "tuple"
    LIST = "list"
    DICT = "dict"
    NAMEDTUPLE = "namedtuple"
    CUSTOM = "custom"  # a registered type: data = (the type, its flatten function's auxiliary data)


LEAF = (Kind.LEAF, None, ())  # the treedef of one array
_NONE = (Kind.NONE, None, ())
# The kinds as module globals: the walks below run once per node of every pmap / jit call's arguments and
# results, and a global is read faster than an Enum class's attribute.
_K_LEAF, _K_NONE, _K_TUPLE, _K_LIST, _K_DICT, _K_NAMEDTUPLE = (
    Kind.LEAF, Kind.NONE, Kind.TUPLE, Kind.LIST, Kind.DICT, Kind.NAMEDTUPLE)


class _Registration:
    __slots__ = ("flatten", "unflatten")

    def __init__(self, flatten, unflatten):
        self.flatten, self.unflatten = flatten, unflatten


_registry = {}  # type -> _Registration (exact types, as JAX looks them up)


def register(nodetype, flatten_func, unflatten_func):
    """jax.tree_util.register_pytree_node: `nodetype`'s values become nodes, flatten_func(value) ->
    (children, aux_data), unflatten_func(aux_data, children) -> value. A type registers once, as in JAX."""
    if not isinstance(nodetype, type):
        raise TypeError(f"register_pytree_node: nodetype must be a type, got {nodetype!r}")
    if nodetype in _registry or nodetype in (tuple, list, dict, type(None)):
        raise ValueError(f"Duplicate custom PyTreeDef type registration for {nodetype!r}.")
    _registry[nodetype] = _Registration(flatten_func, unflatten_func)


def _flatten_custom(registration, node):
    out = registration.flatten(node)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise ValueError(f"The to_iterable function for a custom PyTree node ({type(node).__name__}) should "
                         f"return a (children, aux_data) tuple, got {out!r}")
    return out


# The walks below are module-level functions, not nested closures: a closure that calls itself is a reference
# cycle (function -> cell -> function) holding the leaves it collected, so every pmap call's arguments and
# results would wait for Python's cycle collector instead of being freed when dropped (measured: a training
# loop's old parameters, 41 MB a step, piling up until the next collection).
def _flatten_into(node, is_leaf, leaves):
    if is_leaf is not None and is_leaf(node):
        leaves.append(node)
        return LEAF
    t = type(node)
    if t is tuple:
        return (_K_TUPLE, None, tuple([_flatten_into(child, is_leaf, leaves) for child in node]))
    if t is list:
        return (_K_LIST, None, tuple([_flatten_into(child, is_leaf, leaves) for child in node]))
    if t is dict:
        keys = tuple(sorted(node))
        return (_K_DICT, keys, tuple([_flatten_into(node[k], is_leaf, leaves) for k in keys]))
    if node is None:
        return _NONE
    registration = _registry.get(t)
    if registration is not None:
        children, aux = _flatten_custom(registration, node)
        return (Kind.CUSTOM, (t, aux), tuple([_flatten_into(child, is_leaf, leaves) for child in children]))
    if isinstance(node, tuple) and hasattr(node, "_fields"):  # JAX's test for a namedtuple too
        return (Kind.NAMEDTUPLE, t, tuple([_flatten_into(child, is_leaf, leaves) for child in node]))
    leaves.append(node)
    return LEAF


def flatten(tree, is_leaf=None):
    """(leaves, treedef) of `tree`; dict children are ordered by sorted key, as in JAX. `is_leaf(node)` true
    makes that node a leaf (jax.tree_util's is_leaf)."""
    leaves = []
    treedef = _flatten_into(tree, is_leaf, leaves)
    return leaves, treedef


def _build(node, it):
    kind = node[0]
    if kind is _K_LEAF:
        return next(it)
    if kind is _K_DICT:
        return {k: _build(child, it) for k, child in zip(node[1], node[2])}
    if kind is _K_LIST:
        return [_build(child, it) for child in node[2]]
    if kind is _K_TUPLE:
        return tuple([_build(child, it) for child in node[2]])
    if kind is _K_NONE:
        return None
    built = [_build(child, it) for child in node[2]]
    if kind is _K_NAMEDTUPLE:
        return node[1](*built)
    nodetype, aux = node[1]
    return _registry[nodetype].unflatten(aux, tuple(built))


def unflatten(treedef, leaves):
    """The tree of `treedef` with `leaves` in flatten's order, each node of its own type."""
    return _build(treedef, iter(leaves))


@functools.lru_cache(maxsize=None)
def flat_tuple(n):
    """The treedef of a tuple of n leaves (a function's flat arguments)."""
    return (Kind.TUPLE, None, (LEAF,) * n)


def kind(treedef):
    return treedef[0]


def children(treedef):
    """The treedefs of a node's children, in flatten's order."""
    return treedef[2]


def count_leaves(treedef):
    if treedef[0] is Kind.LEAF:
        return 1
    return sum(count_leaves(child) for child in treedef[2])


def _text(node):
    kind, data, children = node
    if kind is Kind.LEAF:
        return "*"
    if kind is Kind.NONE:
        return "None"
    texts = [_text(child) for child in children]
    if kind is Kind.DICT:
        return "{" + ", ".join(f"{k!r}: {t}" for k, t in zip(data, texts)) + "}"
    if kind is Kind.LIST:
        return "[" + ", ".join(texts) + "]"
    if kind is Kind.TUPLE:
        return "(" + ", ".join(texts) + ("," if len(texts) == 1 else "") + ")"
    # JAX prints namedtuples and registered types as CustomNode(name[data], [children]).
    name = f"namedtuple[{data.__name__}]" if kind is Kind.NAMEDTUPLE else f"{data[0].__name__}[{data[1]}]"
    return f"CustomNode({name}, [{', '.join(texts)}])"


def describe(treedef):
    """`treedef` as JAX prints a PyTreeDef: PyTreeDef({'a': *, 'b': (*, [*])}), for error messages."""
    return f"PyTreeDef({_text(treedef)})"


def tree_map(fn, tree):
    leaves, treedef = flatten(tree)
    return unflatten(treedef, [fn(leaf) for leaf in leaves])


def _prefix_node(p):
    """`p` as a node of a prefix (in_axes, out_axes, specs): (kind, data, children), or None for a leaf; None
    is a leaf there (it says "not mapped")."""
    if p is None:
        return None
    leaves = []
    node = _flatten_into(p, lambda child: child is not p, leaves)  # one level only
    return None if node is LEAF else (node[0], node[1], leaves)


_SEQUENCES = (Kind.TUPLE, Kind.LIST)  # a tuple prefix of a list and a list prefix of a tuple both match


def _broadcast_into(p, node, prefix, tree, what, out):
    pn = _prefix_node(p)
    if pn is not None:
        pkind, pdata, pchildren = pn
        nn = _prefix_node(node) if node is not None else (Kind.NONE, None, [])
        same = nn is not None and (pkind == nn[0] or (pkind in _SEQUENCES and nn[0] in _SEQUENCES))
        if same and pkind is Kind.DICT:
            if pdata != nn[1]:
                raise ValueError(f"{what}: dict keys {list(pdata)} do not match the value's {list(nn[1])}")
        elif not same or len(pchildren) != len(nn[2]) or (pkind not in _SEQUENCES and pdata != nn[1]):
            raise ValueError(f"{what} specification must be a tree prefix of the corresponding value, "
                             f"got specification {prefix!r} for value tree {describe(flatten(tree)[1])}")
        for pc, nc in zip(pchildren, nn[2]):
            _broadcast_into(pc, nc, prefix, tree, what, out)
        return
    out.extend([p] * len(flatten(node)[0]))


def broadcast_prefix(prefix, tree, what):
    """One entry of `prefix` (JAX's in_axes / out_axes: a value, or a tree prefix of `tree`) per leaf of `tree`."""
    out = []
    _broadcast_into(prefix, tree, prefix, tree, what, out)
    return out


# JAX registers these two the same way (jax/_src/tree_util.py): an OrderedDict keeps its keys' order, a
# defaultdict its default_factory.
register(collections.OrderedDict, lambda d: (tuple(d.values()), tuple(d.keys())),
         lambda keys, values: collections.OrderedDict(zip(keys, values)))


def _flatten_defaultdict(d):
    keys = tuple(sorted(d))
    return tuple(d[k] for k in keys), (d.default_factory, keys)


register(collections.defaultdict, _flatten_defaultdict,
         lambda data, values: collections.defaultdict(data[0], zip(data[1], values)))


# ---- key paths and structural differences, as JAX's messages name a leaf (jax.tree_util.keystr) -----------------

def _child_keys(node):
    """The keys of a node's children as jax.tree_util.keystr prints them: [0] (sequences), ['a'] (dicts, and
    the dict-like registered types), .name (a namedtuple's fields), [<flat index>] (other registered types)."""
    kind, data, children = node
    if kind is Kind.DICT:
        return [f"[{k!r}]" for k in data]
    if kind is Kind.NAMEDTUPLE:
        return [f".{name}" for name in data._fields]
    if kind is Kind.CUSTOM and data[0] is collections.OrderedDict:
        return [f"[{k!r}]" for k in data[1]]
    if kind is Kind.CUSTOM and data[0] is collections.defaultdict:
        return [f"[{k!r}]" for k in data[1][1]]
    if kind is Kind.CUSTOM:
        return [f"[<flat index {i}>]" for i in range(len(children))]
    return [f"[{i}]" for i in range(len(children))]


def _paths_into(node, path, out):
    if node[0] is Kind.LEAF:
        out.append(path)
        return
    for key, child in zip(_child_keys(node), node[2]):
        _paths_into(child, path + key, out)


def leaf_paths(treedef):
    """Each leaf's key path in flatten's order, as jax.tree_util.keystr writes it ("" for a lone leaf, "[0]['w']")."""
    out = []
    _paths_into(treedef, "", out)
    return out


def _node_type(node):
    kind, data, _ = node
    if kind is Kind.LEAF:
        return "pytree leaf"
    nodetype = {Kind.NONE: type(None), Kind.TUPLE: tuple, Kind.LIST: list, Kind.DICT: dict}.get(kind)
    if nodetype is None:
        nodetype = data if kind is Kind.NAMEDTUPLE else data[0]
    return str(nodetype)


def _differences_into(a, b, path, out):
    if a[0] is Kind.LEAF and b[0] is Kind.LEAF:
        return
    type_a, type_b = _node_type(a), _node_type(b)
    if type_a != type_b:
        out.append((path, type_a, type_b, "their Python types differ"))
        return
    if a[0] in (Kind.TUPLE, Kind.LIST) and len(a[2]) != len(b[2]):
        name = "tuple" if a[0] is Kind.TUPLE else "list"
        out.append((path, f"{name} of length {len(a[2])}", f"{name} of length {len(b[2])}",
                    "the lengths do not match"))
        return
    keys_a, keys_b = _child_keys(a), _child_keys(b)
    if len(a[2]) != len(b[2]):
        diff = " ".join(k.strip("[].") for k in sorted(set(keys_a) ^ set(keys_b)))
        out.append((path, f"{type_a} with {len(a[2])} child{'ren' if len(a[2]) > 1 else ''}",
                    f"{type_b} with {len(b[2])} child{'ren' if len(b[2]) > 1 else ''}",
                    "the numbers of children do not match" +
                    (f", with the symmetric difference of key sets: {{{diff}}}" if diff else "")))
        return
    if a[1] != b[1]:
        meta = lambda node: node[1] if node[0] is not Kind.CUSTOM else node[1][1]  # noqa: E731
        out.append((path, f"{type_a} with pytree metadata {meta(a)}", f"{type_b} with pytree metadata {meta(b)}",
                    "the pytree node metadata does not match"))
        return
    for key, child_a, child_b in zip(keys_a, a[2], b[2]):
        _differences_into(child_a, child_b, path + key, out)


def structure_differences(a, b):
    """How treedefs `a` and `b` differ, as JAX's equality_errors says it: (key path, what a has there, what b
    has, why they differ) per difference."""
    out = []
    _differences_into(a, b, "", out)
    return out
