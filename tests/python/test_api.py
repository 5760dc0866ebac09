"""The Python API itself (docs/python.md): devices, arrays across the boundary (read-only views, no copies),
pytrees and in_axes, axis_index_groups, device_put*, ShardedArray, errors, and the PopXL side (groupings,
variables, streams, collectives with groups). Expected values are computed here with numpy, from the
definitions, not by weft.
"""
import builtins

import numpy as np
import pytest

import weft
from weft import lax


@pytest.fixture(scope="module", autouse=True)
def runtime():
    return weft.init(device_count=8)


def test_devices():
    devices = weft.devices()
    assert weft.device_count() == 8 and len(devices) == 8
    assert [d.id for d in devices] == list(range(8))
    assert repr(devices[3]) == "CpuDevice(id=3, process=0)"
    assert weft.local_devices() == devices and weft.process_index() == 0 and weft.process_count() == 1
    assert weft.default_backend() == "cpu"
    with pytest.raises(weft.InvalidArgument, match="unknown backend 'gpu'"):
        weft.devices("gpu")


def test_values_are_read_only_views():
    seen = {}

    def f(x):
        seen["input_writeable"] = x.flags.writeable
        s = lax.psum(x, "i")
        seen["result_writeable"] = s.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            s[0] = 1
        return s

    y = weft.pmap(f, axis_name="i", eager=True)(np.ones((8, 3), np.float32))  # the replicas see numpy views
    assert seen == {"input_writeable": False, "result_writeable": False}
    # A shard read twice is the same memory (a view of the device buffer, not a copy).
    assert np.shares_memory(y.shards[2], y[2])
    with pytest.raises(ValueError, match="read-only"):
        y.shards[0][0] = 5
    np.testing.assert_array_equal(np.asarray(y), np.full((8, 3), 8, np.float32))


def test_pytrees_and_in_axes():
    def f(tree, scale):
        a, b = tree["a"], tree["b"]
        return {"sum": lax.psum(a, "i") * scale, "pair": (b, lax.pmax(b, "i"))}

    a = np.arange(16, dtype=np.float32).reshape(8, 2)
    b = np.arange(8, dtype=np.int32)
    out = weft.pmap(f, axis_name="i", in_axes=({"a": 0, "b": 0}, None))({"a": a, "b": b}, np.float32(2))
    assert set(out) == {"sum", "pair"}
    np.testing.assert_array_equal(np.asarray(out["sum"]), np.tile(a.sum(0) * 2, (8, 1)))
    np.testing.assert_array_equal(np.asarray(out["pair"][0]), b)
    np.testing.assert_array_equal(np.asarray(out["pair"][1]), np.full(8, 7, np.int32))
    # lax on a pytree: one collective per leaf.
    t = weft.pmap(lambda x: lax.psum((x, [x * 2]), "i"), axis_name="i")(b)
    np.testing.assert_array_equal(np.asarray(t[1][0]), np.full(8, 56, np.int32))


def test_in_axes_along_axis_1_and_out_axes_none():
    x = np.arange(24, dtype=np.float32).reshape(3, 8)
    y = weft.pmap(lambda c: c * 2, in_axes=1)(x)
    np.testing.assert_array_equal(np.asarray(y), (x * 2).T)
    total = weft.pmap(lambda c: lax.psum(c, "i"), axis_name="i", out_axes=None)(x.T)
    np.testing.assert_array_equal(np.asarray(total), x.sum(1))


def test_axis_index_groups_and_axis_index():
    x = np.arange(8, dtype=np.int32)
    groups = [[0, 2, 4, 6], [1, 3, 5, 7]]
    y = weft.pmap(lambda v: lax.psum(v, "i", axis_index_groups=groups), axis_name="i")(x)
    want = np.array([sum(x[g]) for r in range(8) for g in groups if r in g], np.int32)
    np.testing.assert_array_equal(np.asarray(y), want)
    idx = weft.pmap(lambda v: v * 0 + lax.axis_index("i"), axis_name="i")(x)
    np.testing.assert_array_equal(np.asarray(idx), np.arange(8))


def test_nested_pmap_mesh():
    x = np.arange(8, dtype=np.float32).reshape(2, 4)

    @weft.pmap
    def g(v):
        return v

    f = weft.pmap(weft.pmap(lambda v: (lax.psum(v, "c"), lax.axis_index(("r", "c")) + v * 0), axis_name="c"),
                  axis_name="r")
    rows, flat = f(x)
    np.testing.assert_array_equal(np.asarray(rows), np.repeat(x.sum(1, keepdims=True), 4, axis=1))
    np.testing.assert_array_equal(np.asarray(flat), np.arange(8).reshape(2, 4))
    assert rows.shape == (2, 4)


def test_device_put_family():
    d = weft.devices()
    b = weft.device_put(np.arange(3, dtype=np.float32), d[5])
    assert b.device() == d[5] and repr(b) == "DeviceArray([0., 1., 2.], dtype=float32)"
    s = weft.device_put_sharded([np.full(2, i, np.int32) for i in range(4)], d[4:])
    assert s.devices == d[4:] and s.shape == (4, 2)
    assert [shard.device() for shard in s.shards] == d[4:]
    r = weft.device_put_replicated(np.arange(2, dtype=np.float32), d[:3])
    np.testing.assert_array_equal(np.asarray(r), np.tile(np.arange(2, dtype=np.float32), (3, 1)))
    # A sharded argument already on the right devices is used in place.
    out = weft.pmap(lambda v: lax.psum(v, "i"), axis_name="i", devices=d[4:])(s)
    np.testing.assert_array_equal(np.asarray(out), np.full((4, 2), 6, np.int32))
    with pytest.raises(ValueError, match="2 .*3|3 .*2"):
        weft.device_put_sharded([np.zeros(2)] * 2, d[:3])


def test_sharded_array_behaves_like_jax():
    y = weft.pmap(lambda v: v + 1)(np.zeros((4, 2), np.float32))
    assert isinstance(y, weft.ShardedArray) and len(y) == 4 and y.ndim == 2 and y.dtype == np.float32
    assert repr(y).startswith("ShardedDeviceArray([[1., 1.],")
    assert str(y) == str(np.ones((4, 2), np.float32))
    np.testing.assert_array_equal(y + y, np.full((4, 2), 2, np.float32))
    np.testing.assert_array_equal(np.asarray(y[1:3]), np.ones((2, 2)))
    assert [a.shape for a in y] == [(2,)] * 4
    assert y[:, 0].shape == (4,)


def test_errors_are_python_classes():
    assert issubclass(weft.InvalidArgument, weft.Error) and issubclass(weft.InvalidArgument, ValueError)
    assert issubclass(weft.TimeoutError, builtins.TimeoutError) and issubclass(weft.TimeoutError, weft.Error)
    assert issubclass(weft.MismatchError, weft.Error) and issubclass(weft.AbortedError, weft.Error)
    assert issubclass(weft.OutOfMemoryError, MemoryError)
    with pytest.raises(weft.InvalidArgument, match="outside a replica"):
        lax.psum(np.ones(2), "i")
    with pytest.raises(weft.InvalidArgument, match="inconsistent sizes"):
        weft.pmap(lambda a, b: a)(np.ones(4), np.ones(3))
    with pytest.raises(weft.InvalidArgument, match="unbound axis name: j"):
        weft.pmap(lambda v: lax.psum(v, "j"), axis_name="i")(np.ones(2))
    with pytest.raises(weft.InvalidArgument, match="requires 9 logical devices"):
        weft.pmap(lambda v: v)(np.ones(9))
    with pytest.raises(weft.InvalidArgument, match="complex128 has no weft equivalent"):
        weft.pmap(lambda v: v)(np.ones(2, np.complex128))
    with pytest.raises(weft.InvalidArgument, match="inside a replica"):
        weft.pmap(lambda v: weft.pmap(lambda w: w)(v[None]))(np.ones((2, 1)))


# ---- PopXL side ---------------------------------------------------------------------------------------------

def popxl_assignment(n, stride, size):
    """PopXL's ReplicaGrouping.assignment from its definition: groups of `size` replicas `stride` apart."""
    span = stride * size
    return [(r // span) * stride + r % stride for r in range(n)]


@pytest.mark.parametrize("n,stride,size", [(8, 1, 4), (8, 2, 4), (8, 4, 2), (16, 2, 2), (8, 1, 8), (8, 1, 1)])
def test_replica_grouping(n, stride, size):
    g = weft.ReplicaGrouping(n, stride=stride, group_size=size)
    assert g.assignment == popxl_assignment(n, stride, size)
    assert g.num_groups == n // size and g.group_size == size
    if stride != 1 and stride * size != n:
        # Its transpose would not be a strided grouping: refused, as PopXL refuses it.
        with pytest.raises(weft.InvalidArgument, match="not a strided replica grouping"):
            g.transpose()
        return
    t = g.transpose()
    # The transpose takes one member of each group into each of its groups.
    assert t.group_size == g.num_groups and t.num_groups == g.group_size
    for members in t.groups:
        assert sorted(g.assignment[m] for m in members) == list(range(g.num_groups))


def test_session_variables_streams_and_grouped_collectives():
    s = weft.Session(replication_factor=8)
    assert (s.replication_factor, s.instance_replication_factor, s.global_replica_offset) == (8, 8, 0)
    g = s.replica_grouping(stride=2, group_size=4)          # {0,2,4,6} {1,3,5,7}
    w_h = np.arange(32, dtype=np.float32).reshape(2, 16)
    w = s.variable(w_h, replica_grouping=g, retrieval_mode="all_replicas", name="w")
    x_in = s.h2d_stream((16,), np.float32, name="x")
    reduced = s.d2h_stream((16,), np.float32, name="reduced")

    @s.program
    def step():
        x = weft.ops.host_load(x_in)
        weft.ops.host_store(reduced, weft.collectives.replicated_all_reduce(x, op="add", group=g))
        weft.ops.add_(w, x)

    data = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)
    outs = s.run({x_in: data})
    groups = [[0, 2, 4, 6], [1, 3, 5, 7]]
    want = np.stack([data[grp].sum(0) for r in range(8) for grp in groups if r in grp])
    np.testing.assert_array_equal(outs[reduced], want)
    got = s.get_tensor_data(w)
    np.testing.assert_array_equal(got, np.stack([w_h[r % 2] + data[r] for r in range(8)]))
    s.write_variable_data(w, np.zeros((2, 16), np.float32))
    s.weights_to_host()
    np.testing.assert_array_equal(s.get_tensor_data(w), np.zeros((8, 16)))


def test_replica_sharded_variable_and_reduce_scatter():
    s = weft.Session(replication_factor=4)
    full = np.arange(10, dtype=np.int32)
    v = s.replica_sharded_variable(full, name="v")
    out = s.d2h_stream((10,), np.int32)
    rs = s.d2h_stream((3,), np.int32)

    @s.program
    def step():
        shard = weft.ops.read(v)                              # ceil(10 / 4) = 3 elements, zero padded
        weft.ops.host_store(out, weft.collectives.replicated_all_gather(shard, output_shape=(10,)))
        weft.ops.host_store(rs, weft.collectives.replicated_reduce_scatter(full + 0, op="add"))

    outs = s.run()
    np.testing.assert_array_equal(outs[out], np.tile(full, (4, 1)))
    padded = np.concatenate([full, np.zeros(2, np.int32)]) * 4
    np.testing.assert_array_equal(outs[rs], padded.reshape(4, 3))
    np.testing.assert_array_equal(s.get_tensor_data(v), full)


def test_session_program_error_names_replica():
    s = weft.Session(replication_factor=2)

    @s.program
    def step():
        raise RuntimeError("in-step")

    with pytest.raises(RuntimeError, match="in-step") as info:
        s.run()
    assert any("replica" in note for note in info.value.__notes__)
    with pytest.raises(weft.InvalidArgument, match="invalid retrieval_mode|retrieval"):
        s.variable(np.ones(2, np.float32), retrieval_mode="sometimes")


def test_session_outlives_a_new_current_runtime():
    s = weft.Session(replication_factor=2)
    out = s.d2h_stream((1,), np.int32)
    s.program(lambda: weft.ops.host_store(out, weft.collectives.replicated_all_reduce(np.ones(1, np.int32))))
    weft.init(device_count=8)  # another runtime becomes the current one; the session keeps its own
    np.testing.assert_array_equal(s.run()[out], [[2], [2]])


def test_nested_pmap_refuses_inner_in_axes():
    inner = weft.pmap(lambda v: v, axis_name="c", in_axes=None)
    with pytest.raises(ValueError, match="inner pmap"):
        weft.pmap(inner, axis_name="r")(np.ones((2, 2)))


def test_views_go_back_without_copies_and_keep_their_dtype():
    def f(x):
        s = lax.psum(x, "i")
        return s, lax.psum(s.view(np.int32), "i")   # a reinterpreting view is a new value, not s again
    s, a = weft.pmap(f, axis_name="i", eager=True)(np.ones((2, 2), np.float32))  # numpy views inside
    assert np.asarray(a).dtype == np.int32
    np.testing.assert_array_equal(np.asarray(a), np.full((2, 2), np.float32(2).view(np.int32) * 2, np.int32))
    # A shard (a DeviceArray viewing a weft buffer) put on its own device: nothing moves.
    shard = weft.pmap(lambda v: v, axis_name="i")(s)[0]
    before = weft.runtime().stats()["bytes_host_to_device"]
    weft.device_put(shard, shard.device())
    assert weft.runtime().stats()["bytes_host_to_device"] == before


def test_pmaps_from_several_python_threads():
    import threading
    f = weft.pmap(lambda v: lax.psum(v, "i"), axis_name="i")
    g = weft.pmap(lambda v: lax.pmax(v, "i"), axis_name="i")
    errors = []

    def work(k):
        try:
            for i in range(20):
                x = np.full((8, 3), k + i, np.float32)
                np.testing.assert_array_equal(np.asarray(f(x)), np.full((8, 3), 8 * (k + i)))
                np.testing.assert_array_equal(np.asarray(g(x)), x)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads) and errors == []


def test_replaced_runtimes_leave_no_python_thread_states():
    # Worker threads keep a Python thread state between calls and free it when their runtime ends.
    import ctypes
    api = ctypes.pythonapi
    api.PyInterpreterState_Get.restype = ctypes.c_void_p
    api.PyInterpreterState_ThreadHead.restype = ctypes.c_void_p
    api.PyInterpreterState_ThreadHead.argtypes = [ctypes.c_void_p]
    api.PyThreadState_Next.restype = ctypes.c_void_p
    api.PyThreadState_Next.argtypes = [ctypes.c_void_p]

    def thread_states():
        n, t = 0, api.PyInterpreterState_ThreadHead(api.PyInterpreterState_Get())
        while t:
            n, t = n + 1, api.PyThreadState_Next(t)
        return n

    counts = []
    for _ in range(5):
        weft.init(device_count=8)
        weft.pmap(lambda v: lax.psum(v, "i"), axis_name="i")(np.ones(8, np.float32))
        counts.append(thread_states())
    assert counts[-1] == counts[0], f"thread states grew: {counts}"
