"""The reference PopXL test (test_multi_instance_vs_rts.py, Graphcore) ported to weft's Python API.

The model, the assertions and the parametrisation are the original's: a variable w (on-chip, remote, or
remote replica-sharded; ungrouped or replica-grouped; retrieval_mode one_per_group or all_replicas) is
host-stored right after it is loaded (all-gathered first when sharded), then w += 2 on the device, and the
host-stored values and session.get_tensor_data(w) are checked against w_h and w_h + 2.

What replaces poprun: `run_multi_instance_test` runs `run_model_and_test` either
  - in this process, every replica in one runtime (WEFT_RTS_MODE=single, the default), or
  - as `weftrun --num-instances N --num-replicas R /usr/bin/python3 this_file run_model_and_test ...`
    (WEFT_RTS_MODE=weftrun; WEFT_BUILD_DIR names the build holding bin/weftrun),
and besides the original's own assertions, compares what each instance saw (its replication factors, the
grouping's assignment, the host-stored and final values) with tests/data/rts-cases.json: the expectations
the C++ port (tools/rts_check) is held to, in one process (expected_single_process) and per instance
(expected_instances).
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
from typing import Optional

import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # conftest's helpers, also when run under weftrun
from conftest import PYTHON, load_json  # noqa: E402

import weft  # noqa: E402
import weft.ops as ops  # noqa: E402

CASES = {c["name"]: c for c in load_json("rts-cases.json")["cases"]}


def run_model_and_test(argv=None):
    """The original's run_model_and_test on a weft.Session. argv: the flags (default sys.argv[2:]). Extra
    flags: --replicas R (one process holding every replica; under weftrun the job gives them) and --dump-dir
    D (writes instance-<i>.json, what rts-cases.json describes)."""
    parser = argparse.ArgumentParser(description="Parse launch parameters.")
    parser.add_argument("--remote", action="store_true")  # else, on-chip
    parser.add_argument("--with-replica-grouping", action="store_true")
    parser.add_argument("--replica-grouping-stride", type=int, nargs="?", default=1)
    parser.add_argument("--replica-grouping-size", type=int, nargs="?", default=1)
    parser.add_argument("--with-sharding", action="store_true")
    parser.add_argument("--n-shard-over", type=int, nargs="?", default=None)
    parser.add_argument("--retrieval-mode", type=str, nargs="?")
    parser.add_argument("--replicas", type=int, default=0)
    parser.add_argument("--dump-dir", type=str, default=None)
    args = parser.parse_args(sys.argv[2:] if argv is None else argv)

    # popxl.Ir(replication="popdist"): the job's replicas (all of them, in one process).
    runtime = weft.init(device_count=args.replicas) if args.replicas else weft.runtime()
    ir = weft.Session(replication_factor=args.replicas)

    tensor_nelms = 16

    if args.with_replica_grouping:
        num_groups = ir.replication_factor // args.replica_grouping_size
        w_h = np.ones((num_groups, tensor_nelms), dtype=np.int32)
        # If num_groups is 1, PopXL expects the singleton group dimension to be squeezed out.
        if num_groups > 1:
            w_ir_shape = w_h.shape[1:]
        else:
            # The original discards np.squeeze's result and PopXL squeezes the (1, 16) itself; weft's Session
            # takes the squeezed (16,) (it also accepts (1, 16): rts_check --keep-group-dim), the shape
            # rts-cases.json describes.
            w_h = np.squeeze(w_h, axis=0)
            w_ir_shape = w_h.shape
        replica_grouping = ir.replica_grouping(
            stride=args.replica_grouping_stride, group_size=args.replica_grouping_size
        )
    else:
        w_h = np.ones((tensor_nelms,), dtype=np.int32)
        w_ir_shape = w_h.shape
        replica_grouping = None

    w_h = w_h + np.arange(0, w_h.size, dtype=w_h.dtype).reshape(w_h.shape)

    # Init v. Will be broadcast in w += v
    v_h = np.ones((1,), dtype=np.int32) * 2

    # `with mg, popxl.in_sequence():` -- the graph is the program every replica runs.
    if args.remote:
        if args.with_sharding:
            buffer = ir.replica_sharded_buffer(w_h.shape, np.int32, replica_grouping, args.n_shard_over, entries=1)
            remote_w = ir.remote_replica_sharded_variable(
                w_h, buffer, 0, replica_grouping=replica_grouping, name="remote_w",
                retrieval_mode=args.retrieval_mode)
        else:
            buffer = ir.remote_buffer(w_ir_shape, np.int32, 1)
            remote_w = ir.remote_variable(
                w_h, buffer, 0, replica_grouping=replica_grouping, name="remote_w",
                retrieval_mode=args.retrieval_mode)
    else:
        w = ir.variable(w_h, replica_grouping=replica_grouping, name="w", retrieval_mode=args.retrieval_mode)

    # The all-gather of the shards before host-storing (the original's comments explain why).
    if args.with_sharding:
        if args.n_shard_over is None:
            gather_shards_grouping = replica_grouping
        else:
            gather_shards_grouping = ir.replica_grouping(
                stride=1 if replica_grouping is None else replica_grouping.stride,
                group_size=args.n_shard_over,
            )
        stored_shape = buffer.meta_shape
    else:
        stored_shape = buffer.shape if args.remote else w.shape
    w_d2h = ir.d2h_stream(stored_shape, np.int32, name="w_d2h")

    @ir.program
    def main_graph():
        if args.remote:
            w = ops.remote_load(buffer, 0, name="w")
        else:
            w = ops.read(w_var)
        if args.with_sharding:
            to_store = weft.collectives.replicated_all_gather(w, group=gather_shards_grouping,
                                                              output_shape=buffer.meta_shape)
        else:
            to_store = w
        ops.host_store(w_d2h, to_store)
        # ops.add_(w, v): in place, v = [2] broadcast
        if args.remote:
            w = w + v_h
            ops.remote_store(buffer, 0, w)
        else:
            ops.add_(w_var, v_h)

    if not args.remote:
        w_var = w

    with ir:
        outs = ir.run()

    # ---- weights_from_host: the host-stored w against w_h (the original's loop and messages) ----
    global_replica_offset = ir.global_replica_offset

    if args.with_replica_grouping:
        assignment = replica_grouping.assignment

    for local_replica in range(ir.instance_replication_factor):
        global_replica = local_replica + global_replica_offset
        if args.with_replica_grouping:
            group = assignment[global_replica]
        if args.with_replica_grouping and replica_grouping.num_groups > 1:
            expected = w_h[group]
        else:
            expected = w_h
        if ir.instance_replication_factor > 1:
            actual = outs[w_d2h][local_replica]
        else:
            actual = outs[w_d2h]

        msg = "comparison of host-stored"
        if args.with_sharding:
            if args.n_shard_over is not None:
                num_shards = args.n_shard_over
            elif replica_grouping is not None:
                num_shards = replica_grouping.group_size
            else:
                num_shards = ir.replication_factor
            msg += f", all-gathered (sharded over every {num_shards} replicas of each group)"
        msg += (f" initial w for replica {global_replica}, "
                f"which should be equivalent to the expected initial w")
        if args.with_replica_grouping:
            msg += (f" for group {group} (num_groups={replica_grouping.num_groups}), "
                    f"(group_size={replica_grouping.group_size}, group_stride={replica_grouping.stride})")
        assert_equiv(msg, actual, expected)

    # ---- weights_to_host: the updated w against w_h + v_h ----
    expected = w_h + v_h
    actual = ir.get_tensor_data(remote_w if args.remote else w)

    retrieval_mode = args.retrieval_mode if args.retrieval_mode is not None else "one_per_group"

    if retrieval_mode == "one_per_group" or ir.replication_factor == 1:
        assert_equiv("updated w", actual, expected)
    elif args.with_replica_grouping and num_groups > 1:
        assert_equiv("updated w", actual, expected[assignment])
    else:
        for replica in range(ir.replication_factor):
            assert_equiv("updated w", actual[replica], expected)

    if args.dump_dir:
        dump = {
            "instance": runtime.process_index,
            "replication_factor": ir.replication_factor,
            "instance_replication_factor": ir.instance_replication_factor,
            "global_replica_offset": ir.global_replica_offset,
            "assignment": list(replica_grouping.assignment) if replica_grouping is not None
            else [0] * ir.replication_factor,
            "host_stored": array_json(outs[w_d2h]),
            "final": array_json(actual),
        }
        path = pathlib.Path(args.dump_dir) / f"instance-{runtime.process_index}.json"
        path.write_text(json.dumps(dump) + "\n")


def array_json(a):
    a = np.asarray(a)
    return {"dtype": str(a.dtype), "shape": list(a.shape), "data": a.ravel().tolist()}


def assert_equiv(desc: str, actual: np.ndarray, expected: np.ndarray):
    assert np.array_equiv(
        actual, expected
    ), f"Equivalence check failed for {desc}:\n  actual =\n{actual}\n  expected =\n{expected}"


def run_multi_instance_test(
    num_instances: int,
    num_global_replicas: int,
    remote: bool = True,
    grouped: bool = False,
    group_size: Optional[int] = None,
    stride: Optional[int] = None,
    sharded: bool = False,
    shard_over: Optional[int] = None,
    retrieval_mode: Optional[str] = "one_per_group",
):
    """The original's run_multi_instance_test: the same flags, then weftrun (or one process) for poprun, and
    the dumps compared with the case of rts-cases.json named like the calling test."""
    if group_size is not None:
        grouped = True
    if shard_over is not None:
        sharded = True
    if sharded:
        remote = True

    flags = []
    if remote:
        flags.append("--remote")
    if grouped:
        flags += ["--with-replica-grouping", "--replica-grouping-stride", str(1) if stride is None else str(stride),
                  "--replica-grouping-size", str(group_size)]
    if sharded:
        flags.append("--with-sharding")
        if shard_over:
            flags += ["--n-shard-over", str(shard_over)]
    if retrieval_mode:
        flags += ["--retrieval-mode", retrieval_mode]

    name = os.environ["PYTEST_CURRENT_TEST"].split("::")[-1].split(" ")[0]
    case = CASES[name]
    assert flags == case["rts_check_flags"], f"{name}: the port's flags {flags} are not the case file's"
    assert (num_instances, num_global_replicas) == (case["instances"], case["replicas"])

    with tempfile.TemporaryDirectory(prefix="weft-rts-") as dump_dir:
        if os.environ.get("WEFT_RTS_MODE", "single") == "weftrun":
            weftrun = pathlib.Path(os.environ["WEFT_BUILD_DIR"]) / "bin" / "weftrun"
            command = [str(weftrun), "--num-instances", str(num_instances), "--num-replicas",
                       str(num_global_replicas), PYTHON, str(pathlib.Path(__file__).resolve()),
                       "run_model_and_test", *flags, "--dump-dir", dump_dir]
            print("Executing command:", command)
            done = subprocess.run(command, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, f"{' '.join(command)} exited with {done.returncode}:\n{done.stdout}\n{done.stderr}"
            expectations = case["expected_instances"]
        else:
            run_model_and_test(flags + ["--replicas", str(num_global_replicas), "--dump-dir", dump_dir])
            expectations = [case["expected_single_process"]]
        for expected in expectations:
            path = pathlib.Path(dump_dir) / f"instance-{expected['instance']}.json"
            assert path.exists(), f"{name}: instance {expected['instance']} wrote no {path.name}"
            got = json.loads(path.read_text())
            for key, value in expected.items():
                assert got[key] == value, (f"{name}, instance {expected['instance']}: {key}: got {got[key]}, "
                                           f"rts-cases.json expects {value}")


@pytest.fixture(params=["one_per_group", "all_replicas"])
def retrieval_mode(request):
    return request.param


def test_no_replica_grouping(retrieval_mode):
    run_multi_instance_test(num_instances=2, num_global_replicas=2, retrieval_mode=retrieval_mode)


def test_one_group_per_replica():
    run_multi_instance_test(num_instances=2, num_global_replicas=4, group_size=1)


def test_one_group_of_one_replica_per_instance():
    run_multi_instance_test(num_instances=2, num_global_replicas=2, group_size=1)


def test_one_group_of_two_replicas_per_instance(retrieval_mode):
    run_multi_instance_test(num_instances=2, num_global_replicas=4, group_size=2, retrieval_mode=retrieval_mode)


def test_orthogonal_groups():
    run_multi_instance_test(num_instances=1, num_global_replicas=4, group_size=2, stride=2)


def test_orthogonal_groups_within_instances(retrieval_mode):
    run_multi_instance_test(num_instances=2, num_global_replicas=8, group_size=4, stride=2,
                            retrieval_mode=retrieval_mode)


def test_orthogonal_groups_across_instances():
    run_multi_instance_test(num_instances=2, num_global_replicas=8, group_size=2, stride=4)


@pytest.mark.parametrize("stride", [2, 4])
def test_multiple_strided_groups_per_instance(stride):
    run_multi_instance_test(num_instances=2, num_global_replicas=16, group_size=2, stride=stride)


def test_one_group_spanning_all_instances(retrieval_mode):
    run_multi_instance_test(num_instances=2, num_global_replicas=4, group_size=4, retrieval_mode=retrieval_mode)


def test_groups_spanning_subset_of_instances():
    run_multi_instance_test(num_instances=4, num_global_replicas=8, group_size=4)


def test_default_sharding():
    run_multi_instance_test(num_instances=1, num_global_replicas=2, sharded=True)


def test_sharding_across_instances_no_local_replication():
    run_multi_instance_test(num_instances=2, num_global_replicas=2, group_size=2, sharded=True)


def test_sharding_whole_single_instance_groups():
    run_multi_instance_test(num_instances=2, num_global_replicas=8, group_size=2, sharded=True)


def test_sharding_within_single_instance_groups():
    run_multi_instance_test(num_instances=2, num_global_replicas=8, group_size=4, shard_over=2)


def test_sharding_whole_cross_instance_groups():
    run_multi_instance_test(num_instances=4, num_global_replicas=8, group_size=4, shard_over=4)


def test_sharding_within_cross_instance_groups():
    run_multi_instance_test(num_instances=4, num_global_replicas=8, group_size=4, shard_over=2)


def test_sharding_whole_orthogonal0_cross_instance_groups(retrieval_mode):
    run_multi_instance_test(num_instances=4, num_global_replicas=8, group_size=2, stride=4, shard_over=2,
                            retrieval_mode=retrieval_mode)


@pytest.mark.parametrize("num_instances", [1, 2, 4, 8])
def test_sharding_whole_orthogonal1_cross_instance_groups(num_instances):
    run_multi_instance_test(num_instances=num_instances, num_global_replicas=8, group_size=4, stride=2, sharded=True)


def test_sharding_within_orthogonal_cross_instance_groups():
    # The replica grouping is not strided, but the intra-group sharding results in a strided collective.
    run_multi_instance_test(num_instances=4, num_global_replicas=8, group_size=4, stride=2, shard_over=2)


@pytest.mark.parametrize("sharded", [False, True])
def test_sharding_whole_groups_with_stride_that_skips_whole_instances(sharded):
    run_multi_instance_test(num_instances=4, num_global_replicas=8, group_size=2, stride=4, sharded=sharded)


def test_sharding_within_groups_with_stride_that_skips_whole_instances(retrieval_mode):
    run_multi_instance_test(num_instances=16, num_global_replicas=16, group_size=4, stride=4, sharded=True,
                            shard_over=2, retrieval_mode=retrieval_mode)


# On-chip + VariableSettings + multi-instance not supported (skipped in the original too)
@pytest.mark.skip
def test_onchip_group_per_instance():
    run_multi_instance_test(num_instances=2, remote=False, num_global_replicas=4, group_size=2)


# The first arg passed is the name of the function to execute
if __name__ == "__main__":
    globals()[sys.argv[1]]()
