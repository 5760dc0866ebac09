"""The error messages a newcomer from JAX or PopXL reads first (issue 25, item 4): each names the pmap or op,
the replica where one is involved (once), and the fix in Python's terms (weft.pmap(f, axis_name=...),
weft.init(device_count=...)), never an internal name (_pmap_axis) or a C++ setting (RuntimeOptions).
"""
import re
import sys

import numpy as np
import pytest

import weft
from weft import lax, ops


@pytest.fixture(autouse=True)
def four_devices():
    return weft.init(device_count=4)


def message_of(call):
    with pytest.raises(weft.Error) as error:
        call()
    return str(error.value)


def test_a_collective_in_a_pmap_without_axis_name_says_how_to_name_it():
    text = message_of(lambda: weft.pmap(lambda x: lax.psum(x, "i"))(np.ones((4, 3), np.float32)))
    assert "_pmap_axis" not in text
    assert "weft.lax.psum: axis name 'i' is not bound: this pmap was made without axis_name" in text
    assert "weft.pmap(f, axis_name='i')" in text
    text = message_of(lambda: weft.pmap(lambda x: x + lax.axis_index("i"))(np.ones((4, 3), np.float32)))
    assert "weft.lax.axis_index: axis name 'i' is not bound" in text and "_pmap_axis" not in text


def test_a_named_axis_that_is_not_the_pmaps_names_the_mesh():
    # (axis_name given, another name asked for: the existing message names the axes there are.)
    text = message_of(lambda: weft.pmap(lambda x: lax.psum(x, "j"), axis_name="i")(np.ones((4, 3), np.float32)))
    assert "unbound axis name: j" in text and "i" in text


def test_the_replica_is_named_once_and_the_others_in_one_line():
    # Eager: every replica runs the collective and fails (traced, the trace fails once, before any replica).
    text = message_of(lambda: weft.pmap(lambda x: lax.all_gather(x, "i", axis=5), axis_name="i", eager=True)(
        np.ones((4, 3), np.float32)))
    first, *others = text.split("\n")
    who = re.match(r"pmap\(<lambda>\): (replica (\d) \(CpuDevice\(id=\d, process=0\)\)) failed: ", first)
    assert who, text
    assert first.count(who.group(1)) == 1, text
    rest = sorted({"0", "1", "2", "3"} - {who.group(2)})
    assert others == [f"  replicas {', '.join(rest)}: the same error"], text


def test_all_gather_axis_out_of_range_names_the_operands_rank():
    text = message_of(lambda: weft.pmap(lambda x: lax.all_gather(x, "i", axis=5), axis_name="i", eager=True)(
        np.ones((4, 3), np.float32)))
    assert ("all_gather over axes (i): axis 5 is out of range for an operand of rank 1 (shape (3,)): an untiled "
            "all_gather inserts a new axis, so axis must be in [-2, 1]") in text
    assert "rank 2" not in text
    # Traced (the default), the trace names the equation, the user's line and the same rule.
    line = None

    def f(x):
        nonlocal line
        line = sys._getframe().f_lineno + 1
        return lax.all_gather(x, "i", axis=5)
    text = message_of(lambda: weft.pmap(f, axis_name="i")(np.ones((4, 3), np.float32)))
    assert text.startswith("equation 0 `all_gather[axes=('i',) axis=5 tiled=False] a` ("), text
    assert f"test_messages.py:{line}): axis 5 is out of range for f32[3] (rank 1): it must be in [-2, 1] (an untiled " \
           "all_gather inserts a new axis)" in text, text


def test_a_pmap_called_again_after_weft_init_prepares_for_the_new_runtime():
    double = weft.pmap(lambda x: x * 2)
    weft.init(device_count=8)
    np.testing.assert_array_equal(np.asarray(double(np.ones((8, 2), np.float32))), np.full((8, 2), 2, np.float32))
    weft.init(device_count=4)
    # Prepared for 8 devices on the earlier runtime: on this one it is prepared again, and works on 4.
    np.testing.assert_array_equal(np.asarray(double(np.ones((4, 2), np.float32))), np.full((4, 2), 2, np.float32))
    text = message_of(lambda: double(np.ones((8, 2), np.float32)))
    assert text.startswith("pmap(<lambda>): compiling computation that requires 8 logical devices, but only 4 "
                           "devices are available"), text
    assert "weft.init(device_count=...)" in text
    assert "RuntimeOptions" not in text and "_pmap_axis" not in text and "no device with id" not in text  # (the old
    # message, from the preparation of the earlier runtime)


def test_devices_from_an_earlier_runtime_are_named_with_the_pmap():
    devices = weft.devices()
    ident = weft.pmap(lambda x: x, devices=devices)
    weft.init(device_count=2)
    text = message_of(lambda: ident(np.ones((4, 2), np.float32)))
    assert text.startswith("pmap(<lambda>): no device with id 2 (CpuDevice(id=2, process=0)) in this runtime, which "
                           "has 2 devices (ids 0..1); was it taken from an earlier runtime"), text
    assert "weft.init(device_count=...)" in text and "RuntimeOptions" not in text


def test_runtime_option_errors_name_weft_init():
    with pytest.raises(weft.InvalidArgument) as error:
        weft.init(device_count=-3)
    assert "weft.init(device_count=-3)" in str(error.value) and "RuntimeOptions" not in str(error.value)


def test_weft_ops_outside_a_program_say_where_they_belong():
    s = weft.Session(replication_factor=2)
    w = s.variable(np.ones(2, np.float32))
    text = message_of(lambda: ops.read(w))
    assert text.startswith("weft.ops.read was called outside a replica: weft.ops run inside a Session's program "
                           "(the function decorated with @session.program)"), text
    assert "session.get_tensor_data(variable)" in text and "collectives run inside" not in text
    # JAX's collectives keep theirs.
    text = message_of(lambda: lax.psum(np.ones(2), "i"))
    assert "collectives run inside a function mapped by weft.pmap" in text
