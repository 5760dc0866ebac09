"""weft.checkpoint(policy=...) with JAX's checkpoint_policies, checkpoint_name, saved_residuals and
print_saved_residuals (weft/ad_checkpoint.py, issue 47). A policy never changes a gradient (each is compared bit
for bit with the gradient without checkpoint); it changes what the backward pass keeps from the forward pass,
which saved_residuals reads from the VJP program: each policy's list is checked against what the policy's
definition says must (and must not) be kept for this function."""
import re

import numpy as np
import pytest

import weft
import weft.numpy as jnp
from weft.ad_checkpoint import checkpoint_name, print_saved_residuals, saved_residuals

policies = weft.checkpoint_policies


def mlp(x, w1, w2):
    h = jnp.tanh(x @ w1)
    h = checkpoint_name(h, "hidden")
    return jnp.sum(jnp.tanh(h @ w2) ** 2)


def args():
    r = np.random.default_rng(0)
    return (r.standard_normal((4, 3)).astype(np.float32), r.standard_normal((3, 5)).astype(np.float32),
            r.standard_normal((5, 2)).astype(np.float32))


POLICIES = [
    ("none (recompute everything)", None),
    ("nothing_saveable", policies.nothing_saveable),
    ("everything_saveable", policies.everything_saveable),
    ("dots_saveable", policies.dots_saveable),
    ("checkpoint_dots", policies.checkpoint_dots),
    ("dots_with_no_batch_dims_saveable", policies.dots_with_no_batch_dims_saveable),
    ("save_only_these_names", policies.save_only_these_names("hidden")),
    ("save_any_names_but_these", policies.save_any_names_but_these("other")),
    ("save_from_both_policies", policies.save_from_both_policies(policies.dots_saveable,
                                                                 policies.save_only_these_names("hidden"))),
]


@pytest.mark.parametrize("name, policy", POLICIES, ids=[p[0] for p in POLICIES])
def test_a_policy_never_changes_the_gradient(name, policy):
    want = weft.grad(mlp, argnums=(0, 1, 2))(*args())
    got = weft.grad(weft.checkpoint(mlp, policy=policy), argnums=(0, 1, 2))(*args())
    for w, g in zip(want, got):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def kept(fun):
    """The saved residuals' descriptions without their source lines: 'from the argument x', 'output of tanh'."""
    return [re.sub(r" from .*\.py:\d+$", "", what) for _, what in saved_residuals(fun, *args())]


def ops_kept(fun):
    return sorted(w.removeprefix("output of ") for w in kept(fun) if w.startswith("output of "))


def test_nothing_saveable_keeps_only_the_arguments():
    got = kept(weft.checkpoint(mlp, policy=policies.nothing_saveable))
    assert got and all(w.startswith("from the argument") for w in got), got
    assert kept(weft.checkpoint(mlp)) == got  # the default policy


def test_everything_saveable_keeps_what_no_checkpoint_keeps():
    plain = ops_kept(mlp)
    assert "tanh" in plain, plain
    # (plus the copy checkpoint_name records where a policy saves names: everything_saveable saves every name)
    assert [o for o in ops_kept(weft.checkpoint(mlp, policy=policies.everything_saveable)) if o != "copy"] == plain


def test_dots_saveable_keeps_the_products_and_recomputes_the_rest():
    got = ops_kept(weft.checkpoint(mlp, policy=policies.dots_saveable))
    assert got == ["matmul", "matmul"], got


def test_dots_with_no_batch_dims_keeps_matrix_products_but_not_batched_ones():
    def attention(q, k):
        s = jnp.tanh(q @ jnp.swapaxes(k, -1, -2))  # a batched product: stacks of matrices
        return jnp.sum(jnp.tanh(s @ np.ones((4, 4), np.float32)))  # a product by a matrix
    r = np.random.default_rng(1)
    q, k = r.standard_normal((2, 4, 3)).astype(np.float32), r.standard_normal((2, 4, 3)).astype(np.float32)
    ops = sorted(w for _, w in saved_residuals(weft.checkpoint(attention,
                                                               policy=policies.dots_with_no_batch_dims_saveable), q, k)
                 if w.startswith("output of"))
    assert [re.sub(r" from .*$", "", o) for o in ops] == ["output of matmul"], ops


def test_save_only_these_names_keeps_the_named_value():
    got = kept(weft.checkpoint(mlp, policy=policies.save_only_these_names("hidden")))
    assert [w for w in got if w.startswith("output of")] == ["output of copy"], got
    assert all(w.startswith("from the argument") for w in kept(
        weft.checkpoint(mlp, policy=policies.save_only_these_names("something else"))))


def test_checkpoint_name_outside_a_policy_is_the_value_itself():
    x = np.ones(3, np.float32)
    assert checkpoint_name(x, "a") is x
    text = str(weft.make_jaxpr(lambda x: checkpoint_name(x * 2.0, "a"))(x))
    assert "copy" not in text, text


def test_print_saved_residuals_names_arguments_and_ops():
    def f(x, w):
        return jnp.sum(jnp.tanh(x @ w))
    r = np.random.default_rng(2)
    lines = []
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_saved_residuals(f, r.standard_normal((2, 3)).astype(np.float32), r.standard_normal((3, 4)).astype(np.float32))
    lines = out.getvalue().splitlines()
    # tanh' needs tanh's output (f32[2,4]); the product's cotangents need x and w
    assert "f32[2,3] from the argument x" in lines and "f32[3,4] from the argument w" in lines, lines
    assert any(re.fullmatch(r"f32\[2,4\] output of tanh from .*test_checkpoint_policies\.py:\d+", l) for l in lines), lines


@pytest.mark.parametrize("name", ["save_and_offload_only_these_names", "offload_dot_with_no_batch_dims"])
def test_offload_policies_are_refused_naming_themselves(name):
    policy = getattr(policies, name)
    with pytest.raises(weft.InvalidArgument, match=rf"checkpoint_policies.{name}: offloading residuals to host memory "
                                                   r"is not supported"):
        weft.grad(weft.checkpoint(mlp, policy=policy))(*args())


def test_a_policy_that_is_not_callable_is_a_type_error():
    with pytest.raises(TypeError, match=r"checkpoint: policy must be callable"):
        weft.checkpoint(mlp, policy="dots")
