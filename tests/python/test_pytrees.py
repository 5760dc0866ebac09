"""Pytrees wherever JAX takes them (issue 25, item 3; issue 45, item 7: every node type comes back as it went
in): weft.tree_util as jax.tree_util, device_put_sharded and
device_put_replicated of dicts, and lax's element-wise reductions of a pytree in one collective per dtype
(counted by the runtime's collective counter, weft.runtime().stats()["collectives"]). Expected values are
computed here with numpy and by hand, not by weft.
"""
import collections

import numpy as np
import pytest

import weft
from weft import P, lax, tree_util


@pytest.fixture(scope="module", autouse=True)
def runtime():
    return weft.init(device_count=4)


def test_tree_flatten_unflatten_as_jax():
    tree = {"w": np.ones(2), "b": (np.zeros(1), [3.0, None])}
    leaves, treedef = tree_util.tree_flatten(tree)
    # JAX orders dict children by sorted key and treats None as an empty node.
    assert [np.asarray(l).tolist() for l in leaves] == [[0.0], 3.0, [1.0, 1.0]]
    assert repr(treedef) == "PyTreeDef({'b': (*, [*, None]), 'w': *})"
    assert treedef.num_leaves == 3
    assert treedef == tree_util.tree_structure(tree) and hash(treedef) == hash(tree_util.tree_structure(tree))
    rebuilt = tree_util.tree_unflatten(treedef, ["x", "y", "z"])
    assert rebuilt == {"b": ("x", ["y", None]), "w": "z"}
    with pytest.raises(ValueError, match=r"has 3 leaves, got 2"):
        tree_util.tree_unflatten(treedef, [1, 2])


def test_tree_map_and_leaves():
    params = {"w": np.array([1.0, 2.0]), "b": np.array([0.5])}
    grads = {"w": np.array([10.0, 20.0]), "b": np.array([5.0])}
    new = tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)
    assert set(new) == {"w", "b"}
    np.testing.assert_allclose(new["w"], [0.0, 0.0])
    np.testing.assert_allclose(new["b"], [0.0])
    assert tree_util.tree_leaves([1, (2, {"z": 3, "a": 4})]) == [1, 2, 4, 3]
    assert tree_util.tree_leaves([1, [2, 3]], is_leaf=lambda n: n == [2, 3]) == [1, [2, 3]]
    with pytest.raises(ValueError, match=r"tree 1 has structure PyTreeDef\(\{'w': \*\}\) but the first tree has"):
        tree_util.tree_map(lambda a, b: a, params, {"w": 1})


def test_device_put_replicated_of_a_dict():
    params = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.zeros(3, np.float32)}
    devices = weft.devices()
    put = weft.device_put_replicated(params, devices)
    assert set(put) == {"w", "b"}
    assert isinstance(put["w"], weft.ShardedArray) and put["w"].shape == (4, 2, 3)
    np.testing.assert_array_equal(np.asarray(put["w"]), np.stack([params["w"]] * 4))
    assert [s.device() for s in put["b"].shards] == devices


def test_device_put_sharded_of_dicts():
    devices = weft.devices()
    shards = [{"x": np.full(2, i, np.float32), "n": np.int32(i)} for i in range(4)]
    put = weft.device_put_sharded(shards, devices)
    np.testing.assert_array_equal(np.asarray(put["x"]), [[0, 0], [1, 1], [2, 2], [3, 3]])
    np.testing.assert_array_equal(np.asarray(put["n"]), [0, 1, 2, 3])
    assert put["x"].shards[2].device() == devices[2]
    bad = shards[:3] + [{"x": np.zeros(2, np.float32)}]
    with pytest.raises(weft.InvalidArgument, match=r"shard 3 has structure PyTreeDef\(\{'x': \*\}\) but shard 0 has "
                                                   r"PyTreeDef\(\{'n': \*, 'x': \*\}\)"):
        weft.device_put_sharded(bad, devices)


def collectives():
    return weft.runtime().stats()["collectives"]


def test_pmean_of_a_dict_is_one_collective():
    grads = {"w": np.arange(24, dtype=np.float32).reshape(4, 2, 3), "b": np.arange(8, dtype=np.float32).reshape(4, 2),
             "s": np.arange(4, dtype=np.float32)}
    step = weft.pmap(lambda g: lax.pmean(g, "i"), axis_name="i")
    step(grads)  # prepared once; the counted call below runs the program only
    before = collectives()
    out = step(grads)
    assert collectives() - before == 1
    for key, value in grads.items():
        want = np.broadcast_to(value.mean(axis=0), value.shape)
        np.testing.assert_allclose(np.asarray(out[key]), want, rtol=1e-6)
        assert out[key].dtype == np.float32 and out[key].shape == value.shape


def test_psum_of_mixed_dtypes_is_one_collective_per_dtype():
    tree = (np.ones((4, 3), np.float32), np.arange(4, dtype=np.int32), np.full((4, 2), 2, np.float32))
    step = weft.pmap(lambda t: lax.psum(t, "i"), axis_name="i")
    step(tree)
    before = collectives()
    a, n, b = step(tree)
    assert collectives() - before == 2
    np.testing.assert_array_equal(np.asarray(a), np.full((4, 3), 4, np.float32))
    np.testing.assert_array_equal(np.asarray(n), np.full(4, 6, np.int32))
    np.testing.assert_array_equal(np.asarray(b), np.full((4, 2), 8, np.float32))
    assert n.dtype == np.int32


def test_pmax_pmin_of_a_list_keep_each_leaf():
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    hi, lo = weft.pmap(lambda v: [lax.pmax(v, "i"), lax.pmin([v, -v], "i")], axis_name="i")(x)
    np.testing.assert_array_equal(np.asarray(hi), np.tile([6, 7], (4, 1)))
    np.testing.assert_array_equal(np.asarray(lo[0]), np.tile([0, 1], (4, 1)))
    np.testing.assert_array_equal(np.asarray(lo[1]), np.tile([-6, -7], (4, 1)))


# ---- every node type JAX keeps comes back as it went in (issue 45, item 7) ---------------------------------
# JAX's containers: tuple, list, dict, None, namedtuples, OrderedDict (insertion order), defaultdict (its
# default_factory kept) and registered classes. Before, a namedtuple came back a plain tuple, an OrderedDict
# a dict sorted by key, a defaultdict a dict, and a registered class could not be declared at all.
Point = collections.namedtuple("Point", ["x", "y"])


@tree_util.register_pytree_node_class
class Pair:
    """A class of the user's, registered as JAX's docs show (tree_flatten / classmethod tree_unflatten)."""

    def __init__(self, a, b):
        self.a, self.b = a, b

    def tree_flatten(self):
        return (self.a, self.b), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)


class Scaled:
    """Registered with register_pytree_node and auxiliary data (a static scale, part of the structure)."""

    def __init__(self, value, scale):
        self.value, self.scale = value, scale


tree_util.register_pytree_node(Scaled, lambda s: ((s.value,), s.scale), lambda scale, ch: Scaled(ch[0], scale))


def example_tree(a, b, c, d):
    """One tree holding every node type, leaves a..d (arrays of any leading shape)."""
    return {"point": Point(a, [b, None]),
            "ordered": collections.OrderedDict([("z", c), ("a", (d,))]),
            "default": collections.defaultdict(list, {"k": Pair(a, b)}),
            "scaled": Scaled(c, 3)}


def assert_same_tree(got, want, leaf):
    """got has want's node types all the way down (namedtuple class, OrderedDict order, defaultdict factory,
    registered class and aux data), and each leaf of got is leaf(the corresponding leaf of want)."""
    if not isinstance(want, (np.ndarray, np.generic, int, float)):  # a node: of the same type
        assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, (Pair, Scaled)):
        kids = ("a", "b") if isinstance(want, Pair) else ("value",)
        if isinstance(want, Scaled):
            assert got.scale == want.scale
        for k in kids:
            assert_same_tree(getattr(got, k), getattr(want, k), leaf)
    elif isinstance(want, dict):
        assert list(got) == list(want) if isinstance(want, collections.OrderedDict) else set(got) == set(want)
        if isinstance(want, collections.defaultdict):
            assert got.default_factory is want.default_factory
        for k in want:
            assert_same_tree(got[k], want[k], leaf)
    elif isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same_tree(g, w, leaf)
    elif want is None:
        assert got is None
    else:
        np.testing.assert_allclose(np.asarray(got), leaf(np.asarray(want, np.float64)), rtol=1e-6)


def leaves4(shape=(), offset=0.0):
    return [np.arange(np.prod(shape, dtype=int), dtype=np.float32).reshape(shape) + k + offset for k in range(4)]


@pytest.mark.parametrize("tree, text", [
    # JAX's PyTreeDef.__repr__ prints these nodes as CustomNode(name[node data], [children]) (jaxlib's
    # pytree.cc ToString; OrderedDict's data is its keys in order, defaultdict's (factory, sorted keys)).
    (Point(1, 2), "PyTreeDef(CustomNode(namedtuple[Point], [*, *]))"),
    (collections.OrderedDict([("b", 1), ("a", 2)]), "PyTreeDef(CustomNode(OrderedDict[('b', 'a')], [*, *]))"),
    (collections.defaultdict(list, {"b": 1, "a": 2}),
     "PyTreeDef(CustomNode(defaultdict[(<class 'list'>, ('a', 'b'))], [*, *]))"),
    (Pair(1, (2, None)), "PyTreeDef(CustomNode(Pair[None], [*, (*, None)]))"),
    (Scaled(1, 3), "PyTreeDef(CustomNode(Scaled[3], [*]))"),
])
def test_every_node_type_flattens_and_prints_as_jax(tree, text):
    leaves, treedef = tree_util.tree_flatten(tree)
    assert repr(treedef) == text
    assert_same_tree(tree_util.tree_unflatten(treedef, leaves), tree, lambda x: x)


def test_node_types_keep_their_identity_in_the_structure():
    # An OrderedDict's leaves come in its own order (JAX: the keys as inserted), a dict's by sorted key.
    assert tree_util.tree_leaves(collections.OrderedDict([("b", 1), ("a", 2)])) == [1, 2]
    assert tree_util.tree_leaves({"b": 1, "a": 2}) == [2, 1]
    # Different node types with the same leaves are different structures; so are two aux data.
    structure = tree_util.tree_structure
    assert structure(Point(1, 2)) != structure((1, 2))
    assert structure(collections.OrderedDict(a=1)) != structure({"a": 1})
    assert structure(Scaled(1, 3)) != structure(Scaled(1, 4))
    assert structure(Scaled(1, 3)) == structure(Scaled(5, 3))
    # An unregistered subclass of dict is a leaf, as in JAX.
    class Sub(dict):
        pass
    sub = Sub(a=1)
    assert tree_util.tree_leaves([sub]) == [sub]
    with pytest.raises(ValueError, match=r"Duplicate custom PyTreeDef type registration for .*Pair"):
        tree_util.register_pytree_node(Pair, Pair.tree_flatten, Pair.tree_unflatten)


def test_tree_map_keeps_node_types():
    tree = example_tree(*leaves4((2,)))
    assert_same_tree(tree_util.tree_map(lambda x: x * 2, tree), tree, lambda x: x * 2)
    assert_same_tree(weft.tree.map(lambda x, y: x + y, tree, tree), tree, lambda x: x * 2)
    leaves, treedef = weft.tree.flatten(tree)
    assert weft.tree.structure(tree) == treedef and weft.tree.leaves(tree) == leaves
    assert_same_tree(weft.tree.unflatten(treedef, leaves), tree, lambda x: x)


def test_jit_keeps_node_types():
    tree = example_tree(*leaves4((3,)))
    out = weft.jit(lambda t: tree_util.tree_map(lambda x: x * 3.0 + 1.0, t))(tree)
    assert_same_tree(out, tree, lambda x: x * 3 + 1)


def test_pmap_keeps_node_types():
    tree = example_tree(*leaves4((4, 2)))
    out = weft.pmap(lambda t: tree_util.tree_map(lambda x: x - 1.0, t))(tree)
    assert_same_tree(out, tree, lambda x: x - 1)
    # A prefix of the same node types maps some leaves and broadcasts others (in_axes as a namedtuple).
    p = Point(np.arange(4, dtype=np.float32), np.float32(10.0))
    out = weft.pmap(lambda q: Point(q.x + q.y, q.y), in_axes=(Point(0, None),))(p)
    assert type(out) is Point
    np.testing.assert_allclose(np.asarray(out.x), np.arange(4) + 10.0)


def test_shard_map_keeps_node_types():
    tree = example_tree(*leaves4((4, 2)))
    mesh = weft.Mesh(np.array(weft.devices()[:4], dtype=object), ("i",))
    f = weft.shard_map(lambda t: tree_util.tree_map(lambda x: x * 2.0, t), mesh, in_specs=(P("i"),),
                       out_specs=P("i"))
    assert_same_tree(f(tree), tree, lambda x: x * 2)


def sum_of_squares(t):
    return sum(weft.numpy.sum(x * x) for x in tree_util.tree_leaves(t))


def test_grad_and_value_and_grad_keep_node_types():
    tree = example_tree(*leaves4((2,), offset=0.5))
    # d/dx sum x^2 = 2x at every leaf; a leaf appearing twice (a, b in 'default' too) is two leaves here.
    assert_same_tree(weft.grad(sum_of_squares)(tree), tree, lambda x: 2 * x)
    value, grads = weft.value_and_grad(sum_of_squares)(tree)
    want = sum(float((np.asarray(x, np.float64) ** 2).sum()) for x in tree_util.tree_leaves(tree))
    np.testing.assert_allclose(float(value), want, rtol=1e-6)
    assert_same_tree(grads, tree, lambda x: 2 * x)
    # has_aux with a namedtuple pair (JAX takes any two-element tuple).
    (value, aux), grads = weft.value_and_grad(lambda t: Point(sum_of_squares(t), t["point"]), has_aux=True)(tree)
    assert type(aux) is Point and type(grads["ordered"]) is collections.OrderedDict


def test_vjp_keeps_node_types():
    tree = example_tree(*leaves4((2,), offset=1.0))
    out, vjp_fn = weft.vjp(lambda t: tree_util.tree_map(lambda x: x * x, t), tree)
    assert_same_tree(out, tree, lambda x: x * x)
    (ct,) = vjp_fn(tree_util.tree_map(np.ones_like, out))
    assert_same_tree(ct, tree, lambda x: 2 * x)


def test_custom_vjp_keeps_node_types():
    seen = []

    @weft.custom_vjp
    def f(p):
        return Point(p.x * 2.0, collections.OrderedDict(b=p.y, a=p.x))

    def fwd(p):
        return f(p), Pair(p.x, p.y)

    def bwd(res, g):
        seen.append((type(res), type(g), type(g.y)))
        # Cotangents chosen to differ from the true derivative, so the rule is seen to be used.
        return (Point(g.x * 10.0 + g.y["a"], g.y["b"] * 100.0),)

    f.defvjp(fwd, bwd)
    p = Point(np.float32(1.5), np.float32(2.5))
    out = weft.jit(f)(p)
    assert type(out) is Point and type(out.y) is collections.OrderedDict and list(out.y) == ["b", "a"]
    def loss(q):
        out = f(q)
        return out.x + 2.0 * out.y["a"] + 3.0 * out.y["b"]

    grads = weft.grad(loss)(p)
    assert type(grads) is Point
    # bwd sees g = Point(1, {b: 3, a: 2}) and returns Point(10 * 1 + 2, 100 * 3).
    np.testing.assert_allclose([float(grads.x), float(grads.y)], [12.0, 300.0])
    assert set(seen) == {(Pair, Point, collections.OrderedDict)}
