"""Denormals from Python (WEFT_FLUSH_DENORMALS; weft.init(flush_denormals=...)): with the setting on, a pmap's
replicas compute as JAX does on a CPU (XLA:CPU flushes denormal results to zero and reads denormal inputs as
zero); off (the default), they keep IEEE's gradual underflow, as numpy does. The expectations are numpy's own
denormals (the smallest normal float halved), or zero. Bad values are refused by name.
"""
import numpy as np
import pytest

import weft
from weft import lax

# 64-bit types on (JAX's jax_enable_x64; conftest.py): float64 denormals are part of the matrix.
pytestmark = pytest.mark.usefixtures("jax_enable_x64")

TINY = {np.float32: np.finfo(np.float32).tiny, np.float64: np.finfo(np.float64).tiny}


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("flush", [0, 1], ids=["ieee", "flushed"])
def test_pmap_follows_the_setting(dtype, flush):
    weft.init(device_count=4, flush_denormals=flush)
    tiny = TINY[dtype]
    halves, quarters = weft.pmap(lambda x, q: (x * dtype(0.5), lax.psum(q, "i")), axis_name="i")(
        np.full(4, tiny, dtype), np.full(4, tiny / 4, dtype))
    expected_half = dtype(0) if flush else dtype(tiny) * dtype(0.5)  # numpy's denormal
    expected_sum = dtype(0) if flush else dtype(tiny)  # four denormal quarters, unless each reads as 0
    np.testing.assert_array_equal(np.asarray(halves), np.full(4, expected_half, dtype))
    np.testing.assert_array_equal(np.asarray(quarters), np.full(4, expected_sum, dtype))
    assert expected_half == 0 or expected_half < tiny  # the IEEE case really is a denormal


@pytest.mark.parametrize("value", [2, -2])
def test_bad_values_are_refused_by_name(value):
    with pytest.raises(weft.InvalidArgument, match=f"flush_denormals = {value} is not 0 \\(off\\) or 1 \\(on\\)"):
        weft.init(device_count=2, flush_denormals=value)
