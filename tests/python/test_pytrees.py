"""Pytrees wherever JAX takes them (issue 25, item 3): weft.tree_util as jax.tree_util, device_put_sharded and
device_put_replicated of dicts, and lax's element-wise reductions of a pytree in one collective per dtype
(counted by the runtime's collective counter, weft.runtime().stats()["collectives"]). Expected values are
computed here with numpy and by hand, not by weft.
"""
import numpy as np
import pytest

import weft
from weft import lax, tree_util


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
