"""weft.Policy and weft.get_policy (jmp's mixed-precision policy, issue 24 item 1): parsing, the casts of
pytrees (floating leaves only), bfloat16 rounding outside a trace against the bit-level definition, and under
weft.grad the gradients coming back in the parameters' dtype while the products run in bfloat16."""
import numpy as np
import pytest

import weft
import weft.numpy as jnp


@pytest.mark.parametrize("spec, want", [
    ("params=float32,compute=bfloat16,output=float32", ("float32", "bfloat16", "float32")),
    ("p=f32,c=bf16,o=f32", ("float32", "bfloat16", "float32")),
    ("compute=bf16", ("float32", "bfloat16", "float32")),          # a role left out is float32
    ("float64", ("float64", "float64", "float64")),                 # one name: all three
    (" params = f16 , output = f64 ", ("float16", "float32", "float64")),
])
def test_get_policy_parses_jmps_forms(spec, want):
    assert str(weft.get_policy(spec)) == "params={},compute={},output={}".format(*want)


@pytest.mark.parametrize("spec, message", [
    ("params=float32,compute=int8", "unknown dtype 'int8'"),
    ("weights=float32", "unknown role 'weights'"),
])
def test_get_policy_names_what_it_does_not_know(spec, message):
    with pytest.raises(ValueError, match=message):
        weft.get_policy(spec)


def bf16_bits_rounded(x):
    """Round to nearest even at bit 16, from the definition (independent of weft)."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    keep = (bits >> 16) & 1
    return ((bits + 0x7FFF + keep) >> 16 << 16).astype(np.uint32).view(np.float32)


def test_casts_touch_floating_leaves_only_and_round_to_bfloat16():
    policy = weft.Policy(np.float32, weft.bfloat16, np.float32)
    x = np.array([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, -3.0e38, 1e-3, np.nan], np.float32)
    tree = {"x": x, "labels": np.arange(3, dtype=np.int32), "nested": [np.float64(0.1)]}
    out = policy.cast_to_compute(tree)
    assert out["labels"] is tree["labels"]
    np.testing.assert_array_equal(out["x"][:-1], bf16_bits_rounded(x[:-1]))
    assert np.isnan(out["x"][-1])
    assert out["x"][1] == 1.0 and out["x"][2] == 1 + 2 ** -6   # ties to even: down, then up
    back = policy.cast_to_param({"y": np.ones(2, np.float64)})
    assert back["y"].dtype == np.float32


def test_under_grad_the_products_are_bfloat16_and_the_gradients_float32():
    policy = weft.get_policy("params=float32,compute=bfloat16,output=float32")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    x = rng.standard_normal((4, 16)).astype(np.float32)

    def loss(w, x):
        wc, xc = policy.cast_to_compute((w, x))
        return jnp.sum(policy.cast_to_output(xc @ wc) ** 2)

    value, g = weft.jit(weft.value_and_grad(loss))(w, x)
    assert g.dtype == np.float32 and g.shape == w.shape
    # The reference: the same products on bfloat16-rounded inputs, in float64 (float32 accumulation rounds
    # the product once more, to bfloat16, before the output cast).
    wr, xr = bf16_bits_rounded(w).astype(np.float64), bf16_bits_rounded(x).astype(np.float64)
    y = xr @ wr
    np.testing.assert_allclose(value, np.sum(y ** 2), rtol=2e-2)
    np.testing.assert_allclose(g, xr.T @ (2 * y), rtol=5e-2, atol=5e-2 * np.abs(xr.T @ (2 * y)).max())
    text = str(weft.make_program(weft.value_and_grad(loss))(w, x))
    products = [line for line in text.splitlines() if "= matmul" in line]
    assert len(products) == 2 and all("bf16[" in line.split("=")[0] for line in products), text
