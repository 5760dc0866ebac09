"""PopXL's defaults for Python data (issue 25, item 5): session.variable of Python floats or 64-bit arrays
makes 32-bit variables (popxl.variable's downcast=True), and session.run converts its inputs to each stream's
dtype as PopXL does, warning when an array's or list's values are cast and refusing a cast to another kind
(float to int). The expected dtypes and values are written here by hand.
"""
import warnings

import numpy as np
import pytest

import weft


@pytest.fixture(scope="module", autouse=True)
def runtime():
    return weft.init(device_count=2)


def session_with_stream(dtype):
    s = weft.Session(replication_factor=2)
    x_in = s.h2d_stream((3,), dtype, name="x")
    out = s.d2h_stream((3,), dtype, name="out")

    @s.program
    def step():
        weft.ops.host_store(out, weft.ops.host_load(x_in))

    return s, x_in, out


@pytest.mark.parametrize("data, want", [([0.5, 1.5], np.float32), (2.0, np.float32), ([1, 2], np.int32),
                                        (np.arange(2, dtype=np.float64), np.float32),
                                        (np.arange(2, dtype=np.int64), np.int32),
                                        (np.arange(2, dtype=np.float16), np.float16)])
def test_variable_downcasts_64_bit_data_as_popxl(data, want):
    s = weft.Session(replication_factor=2)
    v = s.variable(data, retrieval_mode="all_replicas")
    got = s.get_tensor_data(v)
    assert got.dtype == want
    np.testing.assert_array_equal(got[0], np.asarray(data).astype(want))


def test_variable_keeps_64_bit_data_with_downcast_false_or_a_dtype():
    s = weft.Session(replication_factor=2)
    assert s.get_tensor_data(s.variable([0.5, 1.5], downcast=False)).dtype == np.float64
    assert s.get_tensor_data(s.variable([0.5, 1.5], dtype=np.float64)).dtype == np.float64
    assert s.get_tensor_data(s.replica_sharded_variable([1.0, 2.0, 3.0, 4.0])).dtype == np.float32


def test_run_takes_a_list_of_floats_for_a_float32_stream_without_a_warning():
    s, x_in, out = session_with_stream(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # PopXL's own conversion: nothing to say
        outs = s.run({x_in: [[0.5, 1.5, 2.5], [3.0, 4.0, 5.0]]})
    assert outs[out].dtype == np.float32
    np.testing.assert_array_equal(outs[out], [[0.5, 1.5, 2.5], [3.0, 4.0, 5.0]])


def test_run_casts_a_float64_array_and_says_so():
    s, x_in, out = session_with_stream(np.float32)
    data = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    with pytest.warns(UserWarning, match=r"Session.run: the data for h2d_stream\(name=x, shape=\(3,\), "
                                         r"dtype=float32\) is an array float64; cast to the stream's float32"):
        outs = s.run({x_in: data})
    np.testing.assert_array_equal(outs[out], data.astype(np.float32))


def test_run_casts_a_list_of_ints_into_a_float_stream_and_says_so():
    s, x_in, out = session_with_stream(np.float32)
    with pytest.warns(UserWarning, match=r"is a list, converted by numpy to int32; cast to the stream's float32"):
        outs = s.run({x_in: [[1, 2, 3], [4, 5, 6]]})
    np.testing.assert_array_equal(outs[out], np.arange(1, 7, dtype=np.float32).reshape(2, 3))


def test_run_refuses_floats_for_an_int_stream_with_the_fix():
    s, x_in, _ = session_with_stream(np.int32)
    with pytest.raises(weft.InvalidArgument, match=r"Session.run: the data for h2d_stream\(name=x, shape=\(3,\), "
                                                   r"dtype=int32\) is float32, which does not cast safely to the "
                                                   r"stream's int32; pass int32 data \(e.g. np.asarray\(data, "
                                                   r"np.int32\)\)"):
        s.run({x_in: [[0.5, 1.0, 2.0], [3.0, 4.0, 5.0]]})
