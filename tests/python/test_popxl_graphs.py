"""weft.popxl beyond the reference test (issue 22, item 5): what `with ir.main_graph:` records (the
equations and their op names, printed), a session running it on every replica with inputs, in-place updates
of on-chip and sharded variables, the collectives, num_host_transfers set after the graph (the Ir's state
replayed), and the errors for misuse and for PopXL names weft does not provide. The expected values are
computed here by hand from the replicas' data, and docs/python.md's example prints what its comment says.
"""
import re
import subprocess

import numpy as np
import pytest

from conftest import ROOT, PYTHON, python_env

import weft
import weft.popxl as popxl
import weft.popxl.ops as ops
import weft.popxl.dtypes as dtypes


def ops_of(ir):
    return [eq.op for eq in ir.main_graph.equations]


def test_the_graph_records_equations_with_the_program_layers_op_names():
    ir = popxl.Ir(replication=2)
    with ir.main_graph, popxl.in_sequence():
        buffer = popxl.remote_buffer((4,), dtypes.float32, 2)
        popxl.remote_variable(np.zeros(4, np.float32), buffer, 1, name="rv")
        x_in = popxl.h2d_stream((4,), dtypes.float32, name="x")
        x = ops.host_load(x_in)
        w = ops.remote_load(buffer, 1)
        ops.add_(w, x)
        ops.remote_store(buffer, 1, w)
        v = popxl.variable(np.ones(4, np.float32), name="v")
        ops.mul_(v, 3.0)
        out = popxl.d2h_stream((4,), dtypes.float32, name="out")
        ops.host_store(out, ops.collectives.replicated_all_reduce(v + w))
    assert ops_of(ir) == ["host_load", "remote_load", "add", "remote_store", "variable_read", "multiply",
                          "variable_update", "add", "psum", "host_store"]
    text = str(ir.main_graph)
    assert "remote_load[buffer=buffer 'buffer0', dtype=f32, shape=(4,)]" in text
    assert "variable_update[variable=variable 'v']" in text
    assert "psum[axes=('replica',), groups=((0, 1),)]" in text


def test_a_session_runs_the_graph_on_every_replica():
    ir = popxl.Ir(replication=4)
    rg = ir.replica_grouping(stride=1, group_size=2)
    with ir.main_graph, popxl.in_sequence():
        w = popxl.variable(np.array([[1, 2], [10, 20]], np.int32), replica_grouping=rg, name="w",
                           retrieval_mode="all_replicas")
        x_in = popxl.h2d_stream((2,), dtypes.int32)
        x = ops.host_load(x_in)
        ops.add_(w, x)                                          # w += this replica's x
        total = ops.collectives.replicated_all_reduce(w, "add", group=rg)
        out = popxl.d2h_stream((2,), dtypes.int32)
        ops.host_store(out, total)
    x = np.array([[0, 1], [2, 3], [4, 5], [6, 7]], np.int32)  # one row per replica
    with popxl.Session(ir, "ipu_model") as session:
        outs = session.run({x_in: x})
    w_after = np.array([[1, 2], [1, 2], [10, 20], [10, 20]], np.int32) + x
    np.testing.assert_array_equal(session.get_tensor_data(w), w_after)
    pair_sums = np.array([w_after[0] + w_after[1]] * 2 + [w_after[2] + w_after[3]] * 2)
    np.testing.assert_array_equal(outs[out], pair_sums)


def test_num_host_transfers_set_after_the_graph_replays_the_state():
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        v = popxl.variable(np.zeros(3, np.float32), name="v", retrieval_mode="all_replicas")
        x_in = popxl.h2d_stream((3,), dtypes.float32)
        ops.add_(v, ops.host_load(x_in))
        out = popxl.d2h_stream((3,), dtypes.float32)
        ops.host_store(out, v)
        ops.add_(v, ops.host_load(x_in))                       # a second transfer in the same run
        ops.host_store(out, v)
    ir.num_host_transfers = 2
    x = np.arange(12, dtype=np.float32).reshape(2, 2, 3)       # (transfers, replicas, 3)
    with popxl.Session(ir, "cpu") as session:
        outs = session.run({x_in: x})
    np.testing.assert_array_equal(outs[out], np.cumsum(x, axis=0))
    np.testing.assert_array_equal(session.get_tensor_data(v), x.sum(0))


def test_replica_sharded_variable_gives_a_shard_to_compute_with():
    ir = popxl.Ir(replication=4)
    data = np.arange(1, 9, dtype=np.float32)
    with ir.main_graph, popxl.in_sequence():
        full, shard = popxl.replica_sharded_variable(data, name="s")
        assert shard.shape == (2,) and shard.meta_shape == (8,) and full.shape == (8,)
        ops.add_(shard, 1.0)
        gathered = ops.collectives.replicated_all_gather(shard)  # auto: the meta shape
        out = popxl.d2h_stream(gathered.shape, gathered.dtype)
        ops.host_store(out, gathered)
    with popxl.Session(ir, "ipu_hw") as session:
        outs = session.run()
    np.testing.assert_array_equal(outs[out], np.tile(data + 1, (4, 1)))
    np.testing.assert_array_equal(session.get_tensor_data(full), data + 1)
    session.write_variable_data(full, np.zeros(8, np.float32))
    np.testing.assert_array_equal(session.get_tensor_data(full), np.zeros(8, np.float32))


def test_all_gather_concat_and_new_axis_and_reduce_scatter():
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        x_in = popxl.h2d_stream((3,), dtypes.float32, name="x")
        x = ops.host_load(x_in)
        concat = ops.collectives.replicated_all_gather(x, output_shape="concat")
        new_axis = ops.collectives.replicated_all_gather(x, output_shape="new_axis")
        scattered = ops.collectives.replicated_reduce_scatter(concat, "add")
        outs = {n: popxl.d2h_stream(t.shape, t.dtype, name=n)
                for n, t in (("concat", concat), ("new_axis", new_axis), ("scattered", scattered))}
        for n, t in (("concat", concat), ("new_axis", new_axis), ("scattered", scattered)):
            ops.host_store(outs[n], t)
    assert (concat.shape, new_axis.shape, scattered.shape) == ((6,), (2, 3), (3,))
    data = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    with popxl.Session(ir) as session:
        assert session.expected_inputs() == [x_in]
        got = session.run({x_in: data})
    np.testing.assert_array_equal(got[outs["concat"]], np.tile(data.ravel(), (2, 1)))
    np.testing.assert_array_equal(got[outs["new_axis"]], np.stack([data, data]))
    np.testing.assert_array_equal(got[outs["scattered"]], 2 * data)  # replica k: chunk k of the sum


# ---- errors --------------------------------------------------------------------------------------------
def test_recording_outside_a_graph_says_where_to_record():
    ir = popxl.Ir(replication=1)
    with pytest.raises(RuntimeError, match=r"popxl.variable: no current graph: record inside `with ir.main_graph:`"):
        popxl.variable(np.zeros(2, np.float32))
    assert ir.replication_factor == 1


def test_host_store_of_the_wrong_shape_names_the_op_and_both_shapes():
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        v = popxl.variable(np.zeros(4, np.float32), name="v")
        out = popxl.d2h_stream((2,), dtypes.float32, name="out")
        with pytest.raises(ValueError, match=r"popxl.ops.host_store: tensor 'v' is float32\[4\] but the stream "
                                             r"'out' is float32\[2\]"):
            ops.host_store(out, v)


def test_a_remote_variable_used_on_the_replica_says_to_remote_load_it():
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        buffer = popxl.remote_buffer((4,), dtypes.float32)
        rv = popxl.remote_variable(np.zeros(4, np.float32), buffer, name="rv")
        with pytest.raises(ValueError, match=r"popxl.ops.add_: 'rv' is a remote variable.*ops.remote_load"):
            ops.add_(rv, 1.0)


def test_mixed_dtypes_and_run_without_attaching_are_refused():
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        a = popxl.constant(np.zeros(2, np.float32))
        b = popxl.constant(np.zeros(2, np.int32))
        with pytest.raises(TypeError, match=r"popxl.ops.add: the inputs are float32 and int32"):
            ops.add(a, b)
    session = popxl.Session(ir)
    with pytest.raises(ValueError, match=r"popxl.Session.run: the session is not attached.*`with session:`"):
        session.run()
    with pytest.raises(ValueError, match=r"device_desc='gpu' is none of ipu_hw, ipu_model, cpu"):
        popxl.Session(popxl.Ir(replication=1), "gpu")


def test_a_nested_with_session_leaves_it_attached_until_the_outer_context_ends():
    """PopXL's rule for nested contexts (its session-contexts example, Session.__exit__): a `with session:`
    entered while attached neither sends nor fetches the weights and leaves the session attached; only the
    context that attached it detaches it. Before, the inner context's exit detached the session, so the outer
    context's next run() was refused."""
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        v = popxl.variable(np.zeros(2, np.float32), name="v")
        ops.add_(v, 1.0)
    session = popxl.Session(ir)
    assert not session.is_attached
    with session:
        with session:
            session.run()
        assert session.is_attached
        session.run()
        with session:
            with session:
                session.run()
            assert session.is_attached
        assert session.is_attached
    assert not session.is_attached
    # Three runs, each adding 1 on the replicas; the weights were fetched when the outer context ended.
    np.testing.assert_array_equal(session.get_tensor_data(v), np.full(2, 3.0, np.float32))
    with session:  # attaching again sends the weights the host holds
        session.run()
    np.testing.assert_array_equal(session.get_tensor_data(v), np.full(2, 4.0, np.float32))


def test_a_replica_error_names_the_equation_and_the_users_line():
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        buffer = popxl.remote_buffer((2,), dtypes.float32, entries=1)
        entry_in = popxl.h2d_stream((), dtypes.int32, name="entry")
        w = ops.remote_load(buffer, ops.host_load(entry_in))  # the entry comes from the host: 1 is not one
        ops.host_store(popxl.d2h_stream((2,), dtypes.float32), w)
    with popxl.Session(ir) as session:
        # The graph runs as a C++ program: the error names the program's equation (as it prints) and the line.
        with pytest.raises(weft.InvalidArgument, match=r"replica \d .* failed: equation 1 "
                                                      r"`b:f32\[2\] = remote_load\[buffer='buffer0'.*\] a` \("
                                                      r".*test_popxl_graphs.py:\d+\): .*entry 1 is out of range"):
            session.run({entry_in: np.array([1, 1], np.int32)})


def test_popxl_names_weft_does_not_provide_are_named_in_the_error():
    with pytest.raises(AttributeError, match=r"popxl.ops.relu is not supported by weft.popxl; weft.popxl.ops "
                                             r"provides host_load"):
        ops.relu
    with pytest.raises(AttributeError, match=r"popxl.ops.collectives.replicated_slice is not supported"):
        ops.collectives.replicated_slice
    with pytest.raises(AttributeError, match=r"popxl.transforms.merge_exchange is not supported by weft.popxl; "
                                             r"popxl.transforms provides autodiff"):
        popxl.transforms.merge_exchange
    with pytest.raises(TypeError, match=r"popxl.dtypes.uint16 is not supported by weft"):
        dtypes.uint16.as_numpy()
    with pytest.raises(AttributeError, match=r"popxl.name_scope is not supported by weft.popxl; it has .*graph_input"):
        popxl.name_scope


def test_the_docs_example_prints_what_it_says():
    section = (ROOT / "docs" / "python.md").read_text().split("## PopXL programs as written", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    done = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=60, env=python_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [code.strip().splitlines()[-1].split("# ", 1)[1]] == ["[2 3 4 5]"]
