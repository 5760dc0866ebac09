"""weft.shard_map, weft.Mesh, weft.P (issue 23, item 2): blocks in and out by PartitionSpec against numpy's own
slicing, and shard_map's rule set under weft.grad (check_vma=True): the gradient of a pmean'ed (or psum'ed)
loss with respect to parameters given as P() is the true global gradient (central differences of the whole
loss in numpy), with one all-reduce per parameter in the differentiated program; FSDP's all_gather of
sharded parameters transposes to one psum_scatter each; an output varying over an axis its spec leaves out is
an error, as in JAX. Beside it, the same loss under pmap keeps JAX's pmap rules (n-scaled, issue 3970).
"""
import os
import subprocess

import numpy as np
import pytest

import weft
import weft.numpy as jnp
from weft import P, lax

from conftest import PYTHON, assert_close, build_dir, numeric_grad, python_env

# 64-bit types on (JAX's jax_enable_x64; conftest.py): float64 blocks compared bit for bit with numpy's float64.
pytestmark = pytest.mark.usefixtures("jax_enable_x64")


@pytest.fixture(scope="module", autouse=True)
def runtime():
    return weft.init(device_count=8)


def mesh_4x2():
    return weft.Mesh(np.array(weft.devices()).reshape(4, 2), ("data", "model"))


def mesh_8():
    return weft.Mesh(np.array(weft.devices()), ("data",))


RNG = np.random.default_rng(2323)


# ---- blocks in and out ---------------------------------------------------------------------------------------
def numpy_block(x, spec, coords, mesh):
    """The block of x the device at mesh coordinates `coords` ({axis: index}) sees, by numpy slicing."""
    index = []
    for d in range(x.ndim):
        part = spec[d] if d < len(spec) else ()
        n, k = 1, 0
        for a in part:  # major first
            k = k * mesh.shape[a] + coords[a]
            n *= mesh.shape[a]
        size = x.shape[d] // n
        index.append(slice(k * size, (k + 1) * size))
    return x[tuple(index)]


SPECS = [P("data"), P(None, "model"), P("data", "model"), P("model", "data"), P(("data", "model")),
         P(("model", "data")), P()]


@pytest.mark.parametrize("spec", SPECS, ids=repr)
def test_each_device_sees_its_block_and_the_blocks_come_back_whole(spec):
    mesh = mesh_4x2()
    x = RNG.standard_normal((8, 8))
    # Each device returns its block plus its device coordinates encoded, so a block in the wrong place shows.
    def tag(block):
        return block + 100.0 * lax.axis_index("data") + 1000.0 * lax.axis_index("model")

    out_spec = spec if set(spec.axes()) == {"data", "model"} else P(*spec, *([None] * (2 - len(spec))))
    got = weft.shard_map(lambda b: b * 1.0, mesh, in_specs=spec, out_specs=spec)(x)
    np.testing.assert_array_equal(got, x)
    if set(spec.axes()) == {"data", "model"}:
        tagged = weft.shard_map(tag, mesh, in_specs=spec, out_specs=out_spec)(x)
        for i in range(4):
            for j in range(2):
                want = numpy_block(x, spec, {"data": i, "model": j}, mesh) + 100.0 * i + 1000.0 * j
                np.testing.assert_array_equal(numpy_block(tagged, spec, {"data": i, "model": j}, mesh), want)


def test_a_block_sum_psummed_over_one_axis_stays_split_over_the_other():
    mesh = mesh_4x2()
    x = RNG.standard_normal((8, 6))
    f = weft.shard_map(lambda b: lax.psum(b.sum(0, keepdims=True), "data"), mesh, in_specs=P("data", "model"),
                       out_specs=P(None, "model"))
    np.testing.assert_allclose(f(x), x.sum(0, keepdims=True), rtol=1e-12)


def test_pytrees_of_arguments_with_a_spec_prefix():
    mesh = mesh_8()
    params = {"a": RNG.standard_normal((3,)), "b": RNG.standard_normal((2, 3))}
    x = RNG.standard_normal((16, 3))
    f = weft.shard_map(lambda p, x: {"y": x * p["a"] + p["b"].sum(0)}, mesh, in_specs=(P(), P("data")),
                       out_specs={"y": P("data")})
    np.testing.assert_allclose(f(params, x)["y"], x * params["a"] + params["b"].sum(0), rtol=1e-12)


# ---- shard_map's rules under weft.grad ---------------------------------------------------------------------
W1 = RNG.standard_normal((5, 4))
B1 = RNG.standard_normal((4,))
W2 = RNG.standard_normal((4, 3))
XS = RNG.standard_normal((16, 5))
YS = np.eye(3)[RNG.integers(0, 3, 16)]


def local_loss(p, x, y):
    h = jnp.tanh(x @ p["w1"] + p["b1"])
    return jnp.mean((h @ p["w2"] - y) ** 2)


def np_loss(p, x, y):
    return np.mean((np.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] - y) ** 2)


PARAMS = {"w1": W1, "b1": B1, "w2": W2}


@pytest.mark.parametrize("reduce", ["pmean", "psum"])
def test_the_gradient_of_a_reduced_loss_is_the_true_global_gradient(reduce):
    """pmean of the 8 local means is the global mean; psum of them 8 times it. Either way weft.grad under
    shard_map gives the gradient of that global function (no n-scaling, unlike pmap)."""
    mesh = mesh_8()

    def step(p, x, y):
        return weft.value_and_grad(lambda p: getattr(lax, reduce)(local_loss(p, x, y), "data"))(p)

    loss, grads = weft.shard_map(step, mesh, in_specs=(P(), P("data"), P("data")), out_specs=(P(), P()))(
        PARAMS, XS, YS)
    factor = 8.0 if reduce == "psum" else 1.0
    assert_close(loss, factor * np_loss(PARAMS, XS, YS), rtol=1e-12)
    want = numeric_grad(lambda p: factor * np_loss(p, XS, YS), PARAMS)
    for name in PARAMS:
        assert_close(grads[name], want[name], rtol=1e-7)


def test_the_same_psummed_loss_under_pmap_is_n_scaled_as_in_jax():
    """JAX's issue 3970: inside pmap, psum's transpose is psum, so each replica's gradient of psum(loss) with
    respect to a broadcast parameter is 8 times its own local gradient; shard_map gives the true one."""
    def step(p, x, y):
        return weft.grad(lambda p: lax.psum(local_loss(p, x, y), "data"))(p)

    xs, ys = XS.reshape(8, 2, 5), YS.reshape(8, 2, 3)
    per_replica = weft.pmap(step, axis_name="data", in_axes=(None, 0, 0))(PARAMS, xs, ys)
    for r in (0, 5):
        want = numeric_grad(lambda p: np_loss(p, xs[r], ys[r]), PARAMS)
        for name in PARAMS:
            assert_close(np.asarray(per_replica[name])[r], 8.0 * want[name], rtol=1e-6)


def test_data_parallel_gradients_have_one_all_reduce_per_parameter():
    mesh = mesh_8()
    grad_step = weft.shard_map(lambda p, x, y: weft.grad(lambda p: lax.pmean(local_loss(p, x, y), "data"))(p),
                               mesh, in_specs=(P(), P("data"), P("data")), out_specs=P())
    program = weft.make_program(grad_step)(PARAMS, XS, YS)
    assert program.count("psum") == len(PARAMS), program
    assert program.count("pmean") == 0  # the loss itself is not an output: dead
    assert "pvary" in program.equations  # the parameters, typed as varying where they meet the data


def test_fsdp_all_gather_transposes_to_one_psum_scatter_per_parameter():
    """Parameters sharded over 'data' (P('data')), gathered whole at use: their gradients come back as the
    shards of the true gradient, each by one psum_scatter."""
    mesh = mesh_8()
    p = {"w1": RNG.standard_normal((8, 4)), "w2": RNG.standard_normal((8, 3))}
    x = RNG.standard_normal((16, 8))
    y = RNG.standard_normal((16, 3))

    def loss(shards, x, y):
        w1 = lax.all_gather(shards["w1"], "data", tiled=True)
        w2 = lax.all_gather(shards["w2"], "data", tiled=True)
        h = jnp.tanh(x @ w1)
        return lax.pmean(jnp.mean((h @ w2[:4] - y) ** 2), "data")

    grad_step = weft.shard_map(lambda s, x, y: weft.grad(loss)(s, x, y), mesh, in_specs=(P("data"), P("data"),
                               P("data")), out_specs=P("data"))
    grads = grad_step(p, x, y)

    def np_whole(q):
        return np.mean((np.tanh(x @ q["w1"]) @ q["w2"][:4] - y) ** 2)

    want = numeric_grad(np_whole, p)
    for name in p:
        assert_close(grads[name], want[name], rtol=1e-7)
    program = weft.make_program(grad_step)(p, x, y)
    assert program.count("psum_scatter") == 2 and program.count("psum") == 0, program


def test_megatron_block_on_a_2d_mesh_gives_the_true_gradient():
    """Tensor parallel over 'model' (w1 by columns, w2 by rows), data parallel over 'data': the gradients of
    the global mean loss, with the f/g pair coming from pvary / psum's transposes."""
    mesh = mesh_4x2()
    p = {"w1": RNG.standard_normal((5, 6)), "w2": RNG.standard_normal((6, 3))}
    x = RNG.standard_normal((8, 5))
    y = RNG.standard_normal((8, 3))

    def loss(q, x, y):
        h = jnp.tanh(x @ q["w1"])                      # [rows, 3]: this device's columns
        out = lax.psum(h @ q["w2"], "model")           # the row-parallel product, summed over 'model'
        return lax.pmean(jnp.mean((out - y) ** 2), "data")

    specs = ({"w1": P(None, "model"), "w2": P("model")}, P("data"), P("data"))
    grads = weft.shard_map(lambda q, x, y: weft.grad(loss)(q, x, y), mesh, in_specs=specs,
                           out_specs={"w1": P(None, "model"), "w2": P("model")})(p, x, y)
    want = numeric_grad(lambda q: np.mean((np.tanh(x @ q["w1"]) @ q["w2"] - y) ** 2), p)
    for name in p:
        assert_close(grads[name], want[name], rtol=1e-7)


# ---- errors ----------------------------------------------------------------------------------------------------
def test_an_output_varying_over_an_axis_its_spec_omits_is_refused():
    f = weft.shard_map(lambda x: x * 2, mesh_8(), in_specs=P("data"), out_specs=P())
    with pytest.raises(weft.InvalidArgument,
                       match=r"output 0 \(float64\[2\]\) varies over mesh axes \('data',\) but its out_spec P\(\) "
                             r"does not name them"):
        f(np.ones(16))


def test_check_vma_false_keeps_pmap_rules_and_allows_unchecked_outputs():
    f = weft.shard_map(lambda x: x * 2, mesh_8(), in_specs=P("data"), out_specs=P(), check_vma=False)
    np.testing.assert_array_equal(f(np.arange(16.0)), np.arange(2.0) * 2)  # device 0's block


@pytest.mark.parametrize("make,call,message", [
    (lambda: weft.shard_map(lambda x: x, mesh_8(), in_specs=P("rows"), out_specs=P("rows")),
     lambda f: f(np.ones(8)), r"P\('rows'\) of argument 0 names axis 'rows', which the mesh Mesh\('data': 8\) "
                              r"does not have"),
    (lambda: weft.shard_map(lambda x: x, mesh_8(), in_specs=P("data"), out_specs=P("data")),
     lambda f: f(np.ones(12)), r"argument 0 of shape \(12,\) cannot be split by P\('data'\): dimension 0 \(12\) "
                               r"is not a multiple of 8"),
    (lambda: weft.shard_map(lambda x: lax.psum(x, "data", axis_index_groups=[[0, 1, 2, 3], [4, 5, 6, 7]]),
                            mesh_8(), in_specs=P("data"), out_specs=P("data")),
     lambda f: f(np.ones(8)), r"psum with axis_index_groups under shard_map: shard_map has no groups"),
    (lambda: weft.shard_map(lambda x: x, mesh_8(), in_specs=(P("data"), P()), out_specs=P("data")),
     lambda f: f(np.ones(8)), r"in_specs has 2 entries for 1 arguments"),
])
def test_misuse_is_named(make, call, message):
    with pytest.raises(weft.InvalidArgument, match=message):
        call(make())


def test_mesh_checks_its_names():
    with pytest.raises(weft.InvalidArgument, match=r"a 2-d array of devices needs 2 axis names"):
        weft.Mesh(np.array(weft.devices()).reshape(4, 2), ("data",))
    mesh = mesh_4x2()
    assert mesh.shape == {"data": 4, "model": 2} and mesh.size == 8


# ---- results stay on the devices (weft.MeshArray) -------------------------------------------------------
def moved():
    stats = weft.runtime().stats()
    return stats["bytes_host_to_device"], stats["bytes_device_to_host"]


@pytest.mark.parametrize("spec", SPECS, ids=repr)
def test_a_result_given_back_with_its_spec_crosses_no_host_copy(spec):
    """The runtime's transfer counters: the first call copies x to the devices; its result, given back with
    the same spec, goes in where it is (0 bytes either way); read on the host it is 4 x (numpy)."""
    mesh = mesh_4x2()
    x = RNG.standard_normal((8, 8))
    double = weft.shard_map(lambda a: a * 2, mesh, in_specs=spec, out_specs=spec)
    before = moved()
    y = double(x)
    assert isinstance(y, weft.MeshArray) and y.is_fully_addressable
    assert moved()[0] > before[0]
    before = moved()
    z = double(y)
    assert moved() == before, (before, moved())
    np.testing.assert_array_equal(np.asarray(z), 4 * x)
    assert z.shape == (8, 8) and z.dtype == np.float64 and z.ndim == 2 and z.size == 64


def test_a_result_given_with_another_spec_goes_through_the_host():
    """P('data') in, P() expected: the blocks are not where the call needs them, so the global array is put
    together and split again; the values are numpy's."""
    mesh = mesh_4x2()
    x = RNG.standard_normal((8, 6))
    rows = weft.shard_map(lambda a: a + 1, mesh, in_specs=P("data"), out_specs=P("data"))(x)
    total = weft.shard_map(lambda a: jnp.sum(a, axis=0), mesh, in_specs=P(), out_specs=P())
    before = moved()
    assert_close(total(rows), (x + 1).sum(axis=0), rtol=1e-12)
    assert moved()[0] > before[0]
    # A mixed call: one argument from the devices, one from the host.
    scale = weft.shard_map(lambda a, s: a * s, mesh, in_specs=(P("data"), P()), out_specs=P("data"))
    np.testing.assert_array_equal(np.asarray(scale(rows, np.float64(3.0))), (x + 1) * 3.0)


# What a host reads of a result, against numpy on the same values: (name, f(MeshArray), f(numpy array)).
HOST_READS = [
    ("asarray", np.asarray, np.asarray),
    ("add", lambda a: a + 1, lambda a: a + 1),
    ("radd", lambda a: 1 + a, lambda a: 1 + a),
    ("ufunc", np.exp, np.exp),
    ("matmul", lambda a: a @ np.ones((6, 2)), lambda a: a @ np.ones((6, 2))),
    ("index", lambda a: a[1], lambda a: a[1]),
    ("slice", lambda a: a[1:3, ::2], lambda a: a[1:3, ::2]),
    ("reshape", lambda a: a.reshape(-1), lambda a: a.reshape(-1)),
    ("sum", lambda a: a.sum(axis=1), lambda a: a.sum(axis=1)),
    ("T", lambda a: a.T, lambda a: a.T),
    ("astype", lambda a: a.astype(np.float32), lambda a: a.astype(np.float32)),
    ("tolist", lambda a: a.tolist(), lambda a: a.tolist()),
    ("iter", lambda a: [list(r) for r in a], lambda a: [list(r) for r in a]),
    ("len", len, len),
    ("stack", lambda a: np.stack([a, a]), lambda a: np.stack([a, a])),
]


@pytest.mark.parametrize("name,read,want", HOST_READS, ids=[r[0] for r in HOST_READS])
def test_a_result_reads_on_the_host_as_numpy(name, read, want):
    mesh = mesh_4x2()
    x = RNG.standard_normal((8, 6))
    for spec in (P("data"), P()):
        y = weft.shard_map(lambda a: a - 0.5, mesh, in_specs=spec, out_specs=spec)(x)
        got, expected = read(y), want(x - 0.5)
        if isinstance(expected, list):
            assert got == expected
        else:
            np.testing.assert_array_equal(np.asarray(got), expected)


def test_a_result_is_read_only_and_scalars_convert():
    """As a JAX Array: its host value cannot be written (numpy's read-only error); np.array copies; a scalar
    result converts with float() and int()."""
    mesh = mesh_4x2()
    x = np.arange(16.0).reshape(8, 2)
    y = weft.shard_map(lambda a: a * 1.0, mesh, in_specs=P("data"), out_specs=P("data"))(x)
    with pytest.raises(ValueError, match="read-only"):
        np.asarray(y)[0, 0] = 7
    copy = np.array(y)
    copy[0, 0] = 7
    assert np.asarray(y)[0, 0] == 0.0
    total = weft.shard_map(lambda a: lax.psum(jnp.sum(a), "data"), mesh, in_specs=P("data"), out_specs=P())(x)
    assert float(total) == x.sum() and int(total) == int(x.sum())
    assert "MeshArray(" in repr(total) and str(float(x.sum())) in str(total)


def test_a_result_goes_into_jit_pmap_and_numpy_as_an_array():
    mesh = mesh_8()
    x = RNG.standard_normal((8, 3))
    y = weft.shard_map(lambda a: a * 2, mesh, in_specs=P("data"), out_specs=P("data"))(x)
    np.testing.assert_array_equal(np.asarray(weft.jit(lambda a: a + 1)(y)), 2 * x + 1)
    np.testing.assert_array_equal(np.asarray(weft.pmap(lambda a: a * 3)(y)), 6 * x)
    np.testing.assert_array_equal(np.concatenate([y, y]), np.concatenate([2 * x, 2 * x]))
    assert [(d.id, b.shape) for d, b in y.addressable_shards] == [(d.id, (1, 3)) for d in mesh.devices.flat]
    for k, (_, block) in enumerate(y.addressable_shards):
        np.testing.assert_array_equal(block, 2 * x[k:k + 1])


def test_a_bfloat16_result_reads_as_float32_everywhere_and_stays_bfloat16_on_the_devices():
    """numpy has no bfloat16: the host reads such a result as float32 (its dtype says so), and jit, pmap and a
    shard_map with another spec take that float32 array; given back with its spec it goes in as its bfloat16
    blocks, with no host copy. The values: float32 ones rounded to bfloat16 (1/3's 8 bits)."""
    mesh = mesh_8()
    x = np.full((8, 2), 1.0 / 3, np.float32)
    rounded = np.float32(0.333984375)  # 1/3 in bfloat16
    y = weft.shard_map(lambda a: a.astype(weft.bfloat16), mesh, in_specs=P("data"), out_specs=P("data"))(x)
    assert y.dtype == np.float32 and np.asarray(y).dtype == np.float32
    np.testing.assert_array_equal(np.asarray(y), np.full((8, 2), rounded))
    np.testing.assert_array_equal(np.asarray(weft.jit(lambda a: a * 2)(y)), np.full((8, 2), 2 * rounded))
    np.testing.assert_array_equal(np.asarray(weft.pmap(lambda a: a + 1)(y)), np.full((8, 2), rounded + 1))
    whole = weft.shard_map(lambda a: jnp.sum(a, axis=0), mesh, in_specs=P(), out_specs=P())
    np.testing.assert_allclose(np.asarray(whole(y)), np.full(2, 8 * rounded), rtol=1e-6)
    widen = weft.shard_map(lambda a: a.astype(np.float32) * 3, mesh, in_specs=P("data"), out_specs=P("data"))
    before = moved()
    z = widen(y)
    assert moved()[0] == before[0]
    np.testing.assert_array_equal(np.asarray(z), np.full((8, 2), 3 * rounded))


def test_a_result_is_an_immutable_value_as_numpy_and_python_expect():
    """Pickled and deep-copied as its numpy value; x += 1 rebinds x (JAX's immutable arrays) and leaves the
    earlier result as it was; a scalar formats, rounds and converts; probing an attribute numpy arrays do not
    have reads nothing from the devices; a float64 result captured by a traced function stays float64."""
    import copy
    import pickle
    mesh = mesh_8()
    x = RNG.standard_normal((8, 3))
    y = weft.shard_map(lambda a: a * 2, mesh, in_specs=P("data"), out_specs=P("data"))(x)
    for back in (pickle.loads(pickle.dumps(y)), copy.deepcopy(y)):
        assert isinstance(back, np.ndarray)
        np.testing.assert_array_equal(back, 2 * x)
    before = moved()
    assert not hasattr(y, "sharding") and y.nbytes == x.nbytes and y.itemsize == 8
    assert moved() == before
    z = y
    z += 1
    np.testing.assert_array_equal(np.asarray(z), 2 * x + 1)
    np.testing.assert_array_equal(np.asarray(y), 2 * x)
    total = weft.shard_map(lambda a: lax.psum(jnp.sum(a), "data"), mesh, in_specs=P("data"), out_specs=P())(x)
    assert f"{total:.4f}" == f"{x.sum():.4f}" and round(total, 2) == round(float(x.sum()), 2)
    assert complex(total) == complex(float(total)) and abs(float(total) - x.sum()) < 1e-12
    w = np.ones(3)
    assert weft.jit(lambda v: v + y[0] * 0 + w)(np.zeros(3, np.float32)).dtype == np.float64
    assert weft.jit(lambda v: v + y)(np.zeros((8, 3))).dtype == np.float64


def test_a_blocked_result_prints_and_probes_without_reading_its_blocks():
    """A BlockedArray (built here as a weftrun job would give it) cannot be read whole; printing it and
    hasattr say what it is instead of raising."""
    reason = "its blocks are on other processes"
    b = weft.BlockedArray(None, mesh_8(), P("data"), (8, 2), np.float32, reason)
    assert str(b) == repr(b) == "BlockedArray(float32[8, 2], P('data'), not fully addressable)"
    assert not hasattr(b, "sum")
    with pytest.raises(weft.InvalidArgument, match=reason):
        np.asarray(b)
    with pytest.raises(TypeError, match=reason):
        __import__("pickle").dumps(b)


# ---- across processes: results that stay blocks (weft.BlockedArray) -------------------------------------------
def blocked_round_trip():
    """Under weftrun (2 instances x 4 devices, test_blocked_results_across_instances): a result split over
    'data', which crosses the instances, stays blocks on the devices and goes back into a shard_map as it is;
    reading it whole, or passing it with another spec, is refused by name."""
    mesh = mesh_8()
    x = np.arange(16 * 3, dtype=np.float64).reshape(16, 3)
    double = weft.shard_map(lambda a: a * 2, mesh, in_specs=P("data"), out_specs=P("data"))
    y = double(x)
    assert isinstance(y, weft.BlockedArray) and not y.is_fully_addressable, y
    assert y.shape == (16, 3) and y.dtype == np.float64 and y.ndim == 2
    z = double(y)
    ids = [d.id for d in mesh.devices.flat]
    shards = z.addressable_shards
    assert len(shards) == 4
    for device, block in shards:
        assert device.process_index == weft.process_index()
        k = ids.index(device.id)
        np.testing.assert_array_equal(block, 4 * x[2 * k:2 * k + 2])
    total = weft.shard_map(lambda a: lax.psum(jnp.sum(a), "data"), mesh, in_specs=P("data"), out_specs=P())(z)
    assert float(np.asarray(total)) == 4 * x.sum()
    with pytest.raises(weft.InvalidArgument, match=r"output 0's out_spec P\('data',?\) splits it over mesh axes "
                       r"\('data',\).*holds 4 of its 8 blocks \(JAX: not fully addressable\).*weft.BlockedArray"):
        np.asarray(z)
    with pytest.raises(weft.InvalidArgument, match=r"argument 0 is a BlockedArray .* same spec, not P\(\)"):
        weft.shard_map(lambda a: a, mesh, in_specs=P(), out_specs=P())(z)
    # The same split spelled with a trailing None is the same spec.
    again = weft.shard_map(lambda a: a + 1, mesh, in_specs=P("data", None), out_specs=P("data", None))(z)
    assert isinstance(again, weft.BlockedArray)
    with pytest.raises(weft.InvalidArgument, match=r"not fully addressable .* only back into a shard_map"):
        weft.pmap(lambda a: a * 2)(z)
    print(f"blocked round trip ok on process {weft.process_index()}", flush=True)


def test_blocked_results_across_instances():
    if "WEFT_BUILD_DIR" not in os.environ:
        pytest.skip("run by ctest (python_shard_map): needs the build's weftrun")
    done = subprocess.run([str(build_dir() / "bin" / "weftrun"), "--num-instances", "2", "--num-replicas", "8",
                           PYTHON, __file__], capture_output=True, text=True, timeout=120,
                          env=python_env(WEFT_ENABLE_X64=1))  # (this module's float64 blocks, as pytestmark's)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for process in (0, 1):
        assert f"blocked round trip ok on process {process}" in done.stdout, done.stdout[-3000:]


if __name__ == "__main__":
    blocked_round_trip()
