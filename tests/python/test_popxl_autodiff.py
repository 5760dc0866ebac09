"""weft.popxl's subgraphs and popxl.transforms.autodiff (PopXL's per-graph autodiff, built on the program VJP):
a subgraph called from the main graph and its gradient graph called with the output's cotangent as PopXL's
tutorials do it (ops.call(grad_info.graph, dy, inputs_dict=grad_info.inputs_dict(fwd_info))), the results
streamed to the host. The expectations are closed-form gradients computed here with numpy from the replicas'
data: a linear layer (replication 1 and 4), Megatron's f/g pair over a grouping (one all-reduce each way, the
unsplit model's gradients), replicated_all_gather's gradient as the replica's own slice (PopXL's rule, not a
sum over the group), replicated_reduce_scatter's as a gather; then GradGraphInfo's connections, the errors,
and docs/popxl.md's example (it prints x.T @ dy for its ones: 2.0 everywhere).
"""
import re

import numpy as np
import pytest

from conftest import ROOT, run_python

import weft.popxl as popxl
import weft.popxl.ops as ops
from weft.popxl.transforms import ExpectedConnectionType

RNG = np.random.default_rng(23)


def normal(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def run(ir, feeds, fetches, programs=None):
    """Runs ir's main graph once with feeds {h2d stream: array}; {name: array} for fetches {name: d2h stream}
    (store's). `programs` (a list) receives the session's lowered program."""
    with popxl.Session(ir, "cpu") as session:
        outs = session.run(feeds)
    if programs is not None:
        programs.append(session.program)
    return {name: outs[stream] for name, stream in fetches.items()}


def store(**tensors):
    """host_stores each tensor to a new d2h stream of its name (inside the main graph); {name: stream}."""
    streams = {}
    for name, t in tensors.items():
        streams[name] = popxl.d2h_stream(t.shape, t.dtype, name)
        ops.host_store(streams[name], t)
    return streams


def loaded(name, shape):
    stream = popxl.h2d_stream(shape, popxl.float32, name)
    return stream, ops.host_load(stream)


# ---- (a) a linear layer ------------------------------------------------------------------------------------
@pytest.mark.parametrize("replicas", [1, 4])
def test_the_gradient_graph_of_a_linear_layer_gives_its_closed_form_gradients(replicas):
    ir = popxl.Ir(replication=replicas)
    w_host, b_host = normal(3, 4), normal(4)
    with ir.main_graph:
        x_in, x = loaded("x", (2, 3))
        dy_in, dy = loaded("dy", (2, 4))
        w, b = popxl.variable(w_host, name="w"), popxl.variable(b_host, name="b")
        graph = ir.create_graph(lambda x, w, b: x @ w + b, x, w, b)
        grad_info = popxl.transforms.autodiff(graph)
        fwd_info = ops.call_with_info(graph, x, w, b)
        dx, dw, db = ops.call(grad_info.graph, dy, inputs_dict=grad_info.inputs_dict(fwd_info))
        fetches = store(y=fwd_info.outputs[0], dx=dx, dw=dw, db=db)
    lead = (replicas,) if replicas > 1 else ()
    x_host, dy_host = normal(*lead, 2, 3), normal(*lead, 2, 4)
    got = run(ir, {x_in: x_host, dy_in: dy_host}, fetches)
    np.testing.assert_allclose(got["y"], x_host @ w_host + b_host, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["dx"], dy_host @ w_host.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["dw"], np.swapaxes(x_host, -1, -2) @ dy_host, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["db"], dy_host.sum(axis=-2), rtol=1e-5, atol=1e-6)


def test_a_subgraph_calling_a_subgraph_is_differentiated_through_the_call():
    ir = popxl.Ir(replication=1)
    with ir.main_graph:
        x_in, x = loaded("x", (3,))
        dy_in, dy = loaded("dy", (3,))
        square = ir.create_graph(lambda t: t * t, x)
        cube = ir.create_graph(lambda t: ops.call(square, t)[0] * t, x)  # x**3
        grad_info = popxl.transforms.autodiff(cube)
        fwd_info = ops.call_with_info(cube, x)
        (dx,) = ops.call(grad_info.graph, dy, inputs_dict=grad_info.inputs_dict(fwd_info))
        fetches = store(y=fwd_info.outputs[0], dx=dx)
    x_host, dy_host = normal(3), normal(3)
    got = run(ir, {x_in: x_host, dy_in: dy_host}, fetches)
    np.testing.assert_allclose(got["y"], x_host ** 3, rtol=1e-5)
    np.testing.assert_allclose(got["dx"], 3 * x_host ** 2 * dy_host, rtol=1e-5)


# ---- (b) Megatron's f/g over a grouping ---------------------------------------------------------------------
def test_megatron_f_and_g_all_reduce_once_each_way_and_give_the_unsplit_models_gradients():
    """Replicas {0, 1} and {2, 3} are two tensor-parallel groups of 2: member k holds columns k of W1 and rows
    k of W2; the block is f -> @W1 -> @W2 -> g. x and dy are equal within a group (f's and g's premise)."""
    replicas, size = 4, 2
    ir = popxl.Ir(replication=replicas)
    tp = ir.replica_grouping(stride=1, group_size=size)

    def block(x, w1, w2):
        h = ops.collectives.all_reduce_identical_inputs(x, group=tp)
        return ops.collectives.all_reduce_identical_grad_inputs((h @ w1) @ w2, group=tp)

    with ir.main_graph:
        x_in, x = loaded("x", (2, 3))
        w1_in, w1 = loaded("w1", (3, 4 // size))
        w2_in, w2 = loaded("w2", (4 // size, 5))
        dy_in, dy = loaded("dy", (2, 5))
        graph = ir.create_graph(block, x, w1, w2)
        grad_info = popxl.transforms.autodiff(graph)
        fwd_info = ops.call_with_info(graph, x, w1, w2)
        dx, dw1, dw2 = ops.call(grad_info.graph, dy, inputs_dict=grad_info.inputs_dict(fwd_info))
        fetches = store(y=fwd_info.outputs[0], dx=dx, dw1=dw1, dw2=dw2)

    grad_program = grad_info.graph.equations[0].params["program"]
    all_reducing = {op: grad_program.count(op) for op in ("all_reduce_identical_grad_inputs", "psum", "pmean")}
    assert all_reducing == {"all_reduce_identical_grad_inputs": 1, "psum": 0, "pmean": 0}, str(grad_program)
    assert "groups=((0, 1), (2, 3))" in str(grad_program)  # the grouping carried into the transpose
    groups = [[0, 1], [2, 3]]
    big_w1, big_w2 = {g: normal(3, 4) for g in (0, 1)}, {g: normal(4, 5) for g in (0, 1)}
    big_x, big_dy = {g: normal(2, 3) for g in (0, 1)}, {g: normal(2, 5) for g in (0, 1)}
    group_of = {r: g for g, members in enumerate(groups) for r in members}
    k = {r: members.index(r) for members in groups for r in members}
    cols = {r: slice(2 * k[r], 2 * k[r] + 2) for r in range(replicas)}
    feeds = {x_in: np.stack([big_x[group_of[r]] for r in range(replicas)]),
             w1_in: np.stack([big_w1[group_of[r]][:, cols[r]] for r in range(replicas)]),
             w2_in: np.stack([big_w2[group_of[r]][cols[r], :] for r in range(replicas)]),
             dy_in: np.stack([big_dy[group_of[r]] for r in range(replicas)])}
    programs = []
    got = run(ir, feeds, fetches, programs)
    assert programs[0].count("all_reduce_identical_grad_inputs") == 2  # forward g, backward f's transpose
    for r in range(replicas):
        g = group_of[r]
        x_, w1_, w2_, dy_ = big_x[g], big_w1[g], big_w2[g], big_dy[g]
        np.testing.assert_allclose(got["y"][r], x_ @ w1_ @ w2_, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got["dx"][r], dy_ @ w2_.T @ w1_.T, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got["dw1"][r], (x_.T @ dy_ @ w2_.T)[:, cols[r]], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got["dw2"][r], ((x_ @ w1_).T @ dy_)[cols[r], :], rtol=1e-4, atol=1e-5)


# ---- (c) replicated_all_gather's gradient is the local slice; reduce-scatter's a gather ---------------------
def _gradient_per_replica(ir, fn, x_shape, y_shape, meta_shape=()):
    """Runs fn's subgraph and its gradient graph; (x, dy, dx) per replica."""
    replicas = ir.replication_factor
    with ir.main_graph:
        x_in, x = loaded("x", x_shape)
        dy_in, dy = loaded("dy", y_shape)
        graph = ir.create_graph(fn, popxl.TensorSpec(x_shape, popxl.float32, meta_shape))
        grad_info = popxl.transforms.autodiff(graph)
        fwd_info = ops.call_with_info(graph, x)
        (dx,) = ops.call(grad_info.graph, dy, inputs_dict=grad_info.inputs_dict(fwd_info))
        fetches = store(dx=dx)
    x_host, dy_host = normal(replicas, *x_shape), normal(replicas, *y_shape)
    return x_host, dy_host, run(ir, {x_in: x_host, dy_in: dy_host}, fetches)["dx"]


def test_replicated_all_gather_concat_in_groups_has_the_replicas_own_slice_as_its_gradient():
    ir = popxl.Ir(replication=4)
    pairs = ir.replica_grouping(stride=2, group_size=2)  # groups {0, 2} and {1, 3}
    _, dy, dx = _gradient_per_replica(
        ir, lambda t: ops.collectives.replicated_all_gather(t, axis=1, group=pairs, output_shape="concat"),
        (2, 3), (2, 6))
    rank = {0: 0, 2: 1, 1: 0, 3: 1}
    for r in range(4):
        np.testing.assert_array_equal(dx[r], dy[r][:, 3 * rank[r]:3 * rank[r] + 3])  # no sum over the group


def test_replicated_all_gather_of_a_shard_has_the_replicas_own_padded_chunk_as_its_gradient():
    ir = popxl.Ir(replication=4)
    # 6 elements over 4 replicas: shards of 2, the last one padding.
    _, dy, dx = _gradient_per_replica(ir, lambda t: ops.collectives.replicated_all_gather(t), (2,), (2, 3),
                                      meta_shape=(2, 3))
    for r in range(4):
        flat = np.concatenate([dy[r].ravel(), np.zeros(2, np.float32)])
        np.testing.assert_array_equal(dx[r], flat[2 * r:2 * r + 2])


def test_replicated_reduce_scatter_has_the_gathered_shards_as_its_gradient():
    ir = popxl.Ir(replication=4)
    _, dy, dx = _gradient_per_replica(ir, lambda t: ops.collectives.replicated_reduce_scatter(t), (2, 4), (2,))
    for r in range(4):
        np.testing.assert_array_equal(dx[r], dy.reshape(2, 4))  # every replica: the shards, in member order


# ---- (d) GradGraphInfo -------------------------------------------------------------------------------------
def test_grad_graph_info_names_its_connections_and_maps_the_calls_tensors():
    ir = popxl.Ir(replication=1)
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((2, 3), popxl.float32, "x"))
        w = popxl.variable(normal(3, 3), name="w")

        def two_outputs(x, w):
            y = x @ w
            popxl.graph_output(y)
            return y * y

        graph = ir.create_graph(two_outputs, x, w)
        assert [t.name for t in graph.inputs] == ["x", "w"]
        y, z = graph.outputs
        info = popxl.transforms.autodiff(graph, grads_provided=[z], grads_required=[graph.inputs[1]])
        assert [(c.fwd_tensor, c.connection_type) for c in info.expected_inputs] == [
            (z, ExpectedConnectionType.FwdGrad), (graph.inputs[0], ExpectedConnectionType.Fwd),
            (graph.inputs[1], ExpectedConnectionType.Fwd)]
        assert [(c.fwd_tensor, c.connection_type) for c in info.expected_outputs] == [
            (graph.inputs[1], ExpectedConnectionType.FwdGrad)]
        assert [t.shape for t in info.graph.inputs] == [(2, 3), (2, 3), (3, 3)]
        assert [t.shape for t in info.graph.outputs] == [(3, 3)]

        fwd_info = ops.call_with_info(graph, x, w)
        mapping = info.inputs_dict(fwd_info)
        assert list(mapping) == list(info.graph.inputs[1:])
        assert mapping[info.graph.inputs[1]] is fwd_info.inputs[0] is fwd_info.graph_to_parent(graph.inputs[0])
        assert fwd_info.graph_to_parent(z) is fwd_info.outputs[1]
        assert fwd_info.parent_to_graph(fwd_info.inputs[1]) is graph.inputs[1]
        grad_call = ops.call_with_info(info.graph, fwd_info.outputs[1], inputs_dict=mapping)
        assert info.fwd_graph_ins_to_grad_parent_outs(grad_call) == {graph.inputs[1]: grad_call.outputs[0]}
        assert info.fwd_parent_ins_to_grad_parent_outs(fwd_info, grad_call) == {fwd_info.inputs[1]:
                                                                                grad_call.outputs[0]}
        assert popxl.transforms.autodiff(graph, return_all_grad_graphs=True)[0].forward_graph is graph


# ---- (e) errors --------------------------------------------------------------------------------------------
def test_autodiff_errors_name_the_transform_and_the_rule():
    ir = popxl.Ir(replication=1)
    inner = []
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((3,), popxl.float32, "x"))

        def fn(t):
            inner.append(t * 2.0)
            return inner[-1] + t

        graph = ir.create_graph(fn, x)
        loads = ir.create_graph(lambda: ops.host_load(popxl.h2d_stream((3,), popxl.float32, "in_graph")))
    autodiff = popxl.transforms.autodiff
    with pytest.raises(ValueError, match=r"popxl.transforms.autodiff: graph 'main_graph' is the main graph; autodiff "
                                         r"differentiates a subgraph \(ir.create_graph\)"):
        autodiff(ir.main_graph)
    with pytest.raises(TypeError, match=r"popxl.transforms.autodiff: .* is not a popxl.Graph"):
        autodiff(lambda t: t)
    with pytest.raises(ValueError, match=r"grads_required names tensor 't\d+', which is not a tensor of graph "
                                         r"'fn_subgraph\(1\)' \(it belongs to 'main_graph'\)"):
        autodiff(graph, grads_required=[x])
    with pytest.raises(ValueError, match=r"grads_required names tensor 't\d+', which is not an input of graph "
                                         r"'fn_subgraph\(1\)'"):
        autodiff(graph, grads_required=[inner[0]])
    with pytest.raises(ValueError, match=r"grads_provided names tensor 't', which is not an output of graph "
                                         r"'fn_subgraph\(1\)'"):
        autodiff(graph, grads_provided=[graph.inputs[0]])
    with pytest.raises(ValueError, match=r"graph '<lambda>_subgraph\(2\)' has host_load \(recorded at .*"
                                         r"test_popxl_autodiff.py:\d+\); an effect has no gradient"):
        autodiff(loads)


def test_subgraph_and_call_errors_name_the_op_and_the_rule():
    ir = popxl.Ir(replication=1)
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((3,), popxl.float32, "x"))
        w = popxl.variable(np.ones(3, np.float32), name="w")
        with pytest.raises(ValueError, match=r"popxl.graph_input: the current graph is 'main_graph', the main graph"):
            popxl.graph_input((3,), popxl.float32)
        with pytest.raises(ValueError, match=r"variable 'w' is used inside subgraph .*: make it a popxl.graph_input "
                                             r"and pass the variable in the call"):
            ir.create_graph(lambda t: t + w, x)
        with pytest.raises(ValueError, match=r"tensor 't\d+' belongs to graph 'main_graph', not to the graph being "
                                             r"built"):
            ir.create_graph(lambda t: t + x, x)
        graph = ir.create_graph(lambda t, u: t * u, x, x)
        with pytest.raises(ValueError, match=r"popxl.ops.call: graph .* needs inputs \['u'\] too"):
            ops.call(graph, x)
        with pytest.raises(ValueError, match=r"popxl.ops.call: input 'u' of graph .* is float32\[3\] but the tensor "
                                             r"given, .*, is float32\[2\]; they must be the same"):
            ops.call(graph, x, popxl.constant(np.ones(2, np.float32)))
        with pytest.raises(ValueError, match=r"popxl.ops.call: graph 'main_graph' is the main graph"):
            ops.call(ir.main_graph)


def test_the_docs_example_prints_the_gradient_its_comment_says():
    section = (ROOT / "docs" / "popxl.md").read_text().split("## Subgraphs and autodiff", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    done, _ = run_python(code, timeout=60)
    assert done.returncode == 0, done.stderr
    x, dy = np.ones((2, 3), np.float32), np.ones((2, 4), np.float32)  # one replica's rows, as the example feeds
    assert done.stdout.strip() == str(x.T @ dy)
