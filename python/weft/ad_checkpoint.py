"""jax.ad_checkpoint's names: checkpoint (remat) with JAX's policies, checkpoint_name, saved_residuals and
print_saved_residuals; weft.checkpoint_policies is this module's `checkpoint_policies`.

A policy decides, equation by equation while a checkpointed function is traced, which values the backward pass
keeps from the forward pass (saveable) and which it computes again: JAX's signature, policy(prim, *avals,
**params) -> bool, where prim is the op's name (a str with a .name, so `prim.name == "matmul"` and
`prim == "matmul"` both read it; weft's product is "matmul", JAX's dot_general), avals have .shape and .dtype,
and params are the equation's. A saveable equation is recorded without the region marker, so the VJP keeps its
value (docs/autodiff.md, "checkpoint"); the others are recomputed. JAX's offloading policies move residuals to
host memory, which weft's CPU devices do not have: they are refused, naming themselves.
"""
import inspect
import types

import numpy as _np

from . import _dtypes, _tree, _weft
from ._autodiff import checkpoint, remat
from ._jit import leaf_type, leaf_value, leaf_weak, trace_function
from ._trace import Primitive, current_trace

__all__ = ["checkpoint", "remat", "checkpoint_name", "checkpoint_policies", "saved_residuals",
           "print_saved_residuals"]


# ---- the policies --------------------------------------------------------------------------------------------

def everything_saveable(*_, **__):
    """Every value saved: the region behaves as if it were not checkpointed."""
    return True


def nothing_saveable(*_, **__):
    """Nothing saved: every value of the region recomputed (checkpoint's default)."""
    return False


def dots_saveable(prim, *_, **__):
    """The products' results saved (JAX's dot_general; weft's matmul), everything else recomputed."""
    return prim == "matmul"


def dots_with_no_batch_dims_saveable(prim, *avals, **_):
    """Products without batch dimensions saved: a matmul whose second operand is a matrix (x @ w: JAX's
    dot_general contracting only), not one of stacks of matrices (batched attention scores)."""
    return prim == "matmul" and len(avals) > 1 and len(avals[1].shape) <= 2


def save_only_these_names(*names):
    """Values named with checkpoint_name(x, name) for one of `names` saved, everything else recomputed."""
    wanted = frozenset(names)

    def policy(prim, *_, **params):
        return prim == "name" and params.get("name") in wanted
    return policy


def save_any_names_but_these(*names):
    """Every value named with checkpoint_name saved, except those named one of `names`."""
    unwanted = frozenset(names)

    def policy(prim, *_, **params):
        return prim == "name" and params.get("name") not in unwanted
    return policy


def save_from_both_policies(policy_1, policy_2):
    """Saved where either policy saves."""
    def policy(prim, *avals, **params):
        return bool(policy_1(prim, *avals, **params)) or bool(policy_2(prim, *avals, **params))
    return policy


def _offload(name):
    def refuse(*_, **__):
        raise _weft.InvalidArgument(
            f"checkpoint_policies.{name}: offloading residuals to host memory is not supported: weft's devices "
            "are CPU memory already (use save_only_these_names, or a policy that recomputes)")
    return refuse


checkpoint_policies = types.SimpleNamespace(
    everything_saveable=everything_saveable,
    nothing_saveable=nothing_saveable,
    dots_saveable=dots_saveable,
    checkpoint_dots=dots_saveable,
    dots_with_no_batch_dims_saveable=dots_with_no_batch_dims_saveable,
    checkpoint_dots_with_no_batch_dims=dots_with_no_batch_dims_saveable,
    save_only_these_names=save_only_these_names,
    save_any_names_but_these=save_any_names_but_these,
    save_from_both_policies=save_from_both_policies,
    save_and_offload_only_these_names=_offload("save_and_offload_only_these_names"),
    offload_dot_with_no_batch_dims=_offload("offload_dot_with_no_batch_dims"),
)


def checkpoint_name(x, name):
    """jax.ad_checkpoint.checkpoint_name: x itself, named for the policies (save_only_these_names). Inside a
    checkpointed function whose policy saves the name, the value is kept from the forward pass (recorded as
    an unmarked copy the backward reads); everywhere else it is just x."""
    trace = current_trace()
    if trace is None or trace.region is None or trace.policy is None:
        return x
    if not trace.policy(Primitive("name"), x, name=name):
        return x
    region, trace.region = trace.region, None  # the copy is recorded outside the region: saved
    try:
        return trace.emit("copy", [x], [])[0]
    finally:
        trace.region = region


# ---- residuals ---------------------------------------------------------------------------------------------

_SHORT = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16", "int8": "i8", "int32": "i32",
          "int64": "i64", "uint8": "u8", "bool": "bool"}


def _type_text(dtype, shape):
    name = "bfloat16" if _np.dtype(dtype) == _dtypes.BF16 else _np.dtype(dtype).name
    return f"{_SHORT.get(name, name)}[{','.join(map(str, shape))}]"


def _leaf_names(fun, args, kwargs):
    """Each argument leaf's name as JAX prints it: the parameter's name, with the leaf's index for a pytree."""
    try:
        bound = inspect.signature(fun).bind(*args, **kwargs)
        named = list(bound.arguments.items())
    except (TypeError, ValueError):
        named = [(f"args[{k}]", a) for k, a in enumerate(args)]
    names = []
    for name, value in named:
        leaves = _tree.flatten(value)[0]
        names += [name] if len(leaves) == 1 else [f"{name}[{k}]" for k in range(len(leaves))]
    return names


def saved_residuals(fun, *args, **kwargs):
    """jax.ad_checkpoint.saved_residuals: what weft.grad / vjp of fun at these arguments keeps from the
    forward pass for the backward, as (ShapeDtypeStruct-like (shape, dtype), description) pairs, in the
    order the backward pass first reads them."""
    leaves, treedef = _tree.flatten((args, kwargs))
    values = [leaf_value(leaf) for leaf in leaves]
    in_types = [leaf_type(v, "saved_residuals") + ((), leaf_weak(leaf)) for v, leaf in zip(values, leaves)]
    program, _ = trace_function(lambda a, k: fun(*a, **k), in_types, treedef, [], "saved_residuals")
    wrt = [k for k, (dtype, *_) in enumerate(in_types) if _dtypes.is_differentiable(dtype)]
    names = _leaf_names(fun, args, kwargs)
    out = []
    for (dtype, shape, _), index, op, source in _weft.saved_residuals(program, wrt):
        if index >= 0:
            what = f"from the argument {names[index] if index < len(names) else index}"
        else:
            what = f"output of {op}" + (f" from {source}" if source else "")
        out.append(((tuple(shape), _np.dtype(dtype)), what))
    return out


def print_saved_residuals(fun, *args, **kwargs):
    """jax.ad_checkpoint.print_saved_residuals: one line per residual, e.g. "f32[3] from the argument x",
    "f32[3] output of tanh from train.py:12"."""
    for (shape, dtype), what in saved_residuals(fun, *args, **kwargs):
        print(f"{_type_text(dtype, shape)} {what}")
