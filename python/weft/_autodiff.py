"""weft.grad, weft.value_and_grad, weft.vjp, weft.checkpoint: reverse mode on traced programs, with JAX's signatures.

The function is traced (weft/_jit.py) into a program; weft._weft.vjp_program transposes it in C++ (one rule
per op, JAX's pmap rules for the collectives: docs/autodiff.md); the result runs in C++ outside any trace,
or is inlined into the trace around it (inside a traced weft.pmap or weft.jit), so a pmapped training step
with weft.grad is one program. Arguments and results are pytrees. As in JAX, grad refuses integer and
boolean arguments unless allow_int=True, and their gradients, like vjp's cotangents of such primals, are
float0 zeros (weft.float0, jax.dtypes.float0); vjp_fn takes float0 cotangents for integer outputs.
"""
import functools

import numpy as _np

from . import _dtypes, _tree, _weft
from ._jit import leaf_type, leaf_value, leaf_weak, trace_function
from ._trace import Tracer, current_trace, escaped, trace_of


def _argnums(argnums, n, name):
    many = isinstance(argnums, (tuple, list))
    nums = tuple(argnums) if many else (argnums,)
    for a in nums:
        if not isinstance(a, int) or not -n <= a < n:
            raise _weft.InvalidArgument(f"{name}: argnums {argnums!r} is out of range for {n} positional arguments")
    return tuple(a % n for a in nums), many


def _run(program, inputs, trace):
    """The program's outputs for these input leaves: inlined into `trace`, or run now."""
    if trace is None:
        # As traced: Python numbers of JAX's default types, 64-bit arrays narrowed with x64 off.
        values = [_np.asarray(leaf_value(x), dtype=leaf_type(x, "grad")[0]) for x in inputs]
        return list(_weft.run_program(program, values))
    ids, varyings = [], []
    for x in inputs:
        if not isinstance(x, Tracer):
            x = trace.constant(x)
        elif x._trace is not trace:
            # A value of another trace (a jit's argument handed, unmapped, through a vmap to a grad): its id is
            # another builder's, so it must become this trace's input first, as an op's operand does.
            if x._trace.finished:
                raise escaped(trace.name, x._trace, x)
            if not trace.encloses(x._trace):
                raise _weft.InvalidArgument(f"{trace.name}: a tracer of another trace ({x._trace.name}) reached it: "
                                            "a value from one traced function was kept and used in another")
            x = trace.capture(x)
        ids.append(x._id)
        varyings.append(x._varying)
    # An input the program types as varying over more mesh axes than the value inlined into it (a seed
    # cotangent, a constant, for an output that varies): typed as the program took it, so the equations inlined
    # keep the types they were built with (a loop's carry must keep its type: src/program/ops/control.cc).
    for k, (_, _, varying) in enumerate(program.input_types):
        missing = tuple(a for a in varying if a not in varyings[k])
        if missing:
            ids[k] = trace.builder.emit("pvary", [ids[k]], [("axes", missing)], _weft.caller_source())[0][0]
    return [Tracer(trace, ident, typ) for ident, typ in trace.builder.inline(program, ids)]


def _trace(fun, args, name):
    """(program, input leaves, input treedef, output treedef, outer trace) of fun(*args)."""
    leaves, treedef = _tree.flatten(tuple(args))
    outer = current_trace() or trace_of(leaves)
    mesh = outer.mesh if outer is not None else []
    types = []
    for leaf in leaves:
        dtype, shape = leaf_type(leaf, name)
        types.append((dtype, shape, leaf._varying if isinstance(leaf, Tracer) else (), leaf_weak(leaf)))
    captured = []
    program, out_def = trace_function(lambda *a: fun(*a), types, treedef, mesh, name, captured)
    return program, leaves, treedef, out_def, outer, captured


def _float0_cotangents(values, types):
    """Cotangents as JAX gives them: an integer or boolean input's is float0 zeros of its shape."""
    return [v if _dtypes.is_differentiable(t[0]) else _np.zeros(t[1], _dtypes.FLOAT0) for v, t in zip(values, types)]


def _ones_like_output(program, index):
    dtype, shape, _ = program.output_types[index]
    return _np.ones(shape, dtype)


def value_and_grad(fun, argnums=0, has_aux=False, allow_int=False):
    """jax.value_and_grad: (fun(*args, **kwargs), d fun / d args[argnums]) for a scalar float output (with
    has_aux, fun returns (scalar, aux) and the result is ((value, aux), grads)). Keyword arguments are passed
    to fun and not differentiated, as in JAX. Integer and boolean arguments are refused with JAX's TypeError
    unless allow_int, and then get float0 zeros."""
    name = f"value_and_grad({getattr(fun, '__name__', 'fun')})"

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        nums, many = _argnums(argnums, len(args), name)
        # Keyword arguments go to fun as they are and are not differentiated (JAX's rule: argnums count
        # positional arguments only); arrays among them are constants of the trace.
        f = functools.partial(fun, **kwargs) if kwargs else fun
        program, leaves, treedef, out_def, outer, captured = _trace(f, args, name)
        outs = program.output_types
        in_types = program.input_types
        # The differentiated leaves, by position in the flat list of each argument's leaves.
        spans, at = [], 0
        for i, arg in enumerate(args):
            n = len(_tree.flatten(arg)[0])
            spans.append(range(at, at + n))
            at += n
        wrt = [k for i in nums for k in spans[i]]
        for k in wrt:  # (JAX checks the arguments first)
            _dtypes.check_rev_input("grad", in_types[k][0], allow_int)
        if has_aux:
            # JAX takes any two-element tuple or list (a namedtuple too) as the pair.
            pair = (_tree.Kind.TUPLE, _tree.Kind.LIST, _tree.Kind.NAMEDTUPLE)
            if not (_tree.kind(out_def) in pair and len(_tree.children(out_def)) == 2):
                raise _weft.InvalidArgument(f"{name}: with has_aux=True the function must return a pair (output, aux)")
            value_def = _tree.children(out_def)[0]
        else:
            value_def = out_def
        if value_def != _tree.LEAF or outs[0][1] != () or _np.dtype(outs[0][0]).kind != "f":
            dtype, shape, _ = outs[0]
            raise _weft.InvalidArgument(f"{name}: grad requires a real scalar output, got {_np.dtype(dtype).name}"
                                        f"{list(shape)} (use weft.vjp for other outputs)")
        vjp_prog = _weft.vjp_program(program, wrt)
        seeds = [_np.ones((), outs[0][0])] + [_np.zeros(shape, dtype) for dtype, shape, _ in outs[1:]]
        results = _run(vjp_prog, list(leaves) + captured + seeds, outer)
        n_out = len(outs)
        out = _tree.unflatten(out_def, results[:n_out])
        grads_flat = _float0_cotangents(results[n_out:], [in_types[k] for k in wrt])
        grads, at = [], 0
        for i in nums:
            n = len(spans[i])
            grads.append(_tree.unflatten(_tree.flatten(args[i])[1], grads_flat[at:at + n]))
            at += n
        grads = tuple(grads) if many else grads[0]
        return out, grads

    return wrapped


def grad(fun, argnums=0, has_aux=False, allow_int=False):
    """jax.grad: d fun / d args[argnums] (with has_aux, (grads, aux)); allow_int as value_and_grad's."""
    vg = value_and_grad(fun, argnums, has_aux, allow_int)

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        out, grads = vg(*args, **kwargs)
        return (grads, out[1]) if has_aux else grads

    return wrapped


def vjp(fun, *primals, has_aux=False):
    """jax.vjp: (fun(*primals), vjp_fn) with vjp_fn(cotangents) -> a tuple of one cotangent per primal."""
    name = f"vjp({getattr(fun, '__name__', 'fun')})"
    program, leaves, treedef, out_def, outer, captured = _trace(fun, primals, name)
    out_leaves = _run(program, list(leaves) + captured, outer)
    out = _tree.unflatten(out_def, out_leaves)
    aux = None
    if has_aux:
        out, aux = out
    vjp_prog = _weft.vjp_program(program, list(range(len(leaves))))  # the primals, not the captured values

    def vjp_fn(cotangents):
        ct_leaves, ct_def = _tree.flatten(cotangents)
        ct_leaves = [_cotangent_in(ct, t) for ct, t in zip(ct_leaves, program.output_types)]
        if has_aux:
            aux_leaves = _tree.flatten(aux)[0]
            ct_leaves = ct_leaves + [_np.zeros(_np.shape(a), getattr(a, "dtype", _np.float32)) for a in aux_leaves]
        if len(ct_leaves) != len(program.output_types):
            raise _weft.InvalidArgument(f"{name}: the cotangent has {len(ct_leaves)} leaves, the output "
                                        f"{len(program.output_types)}")
        results = _run(vjp_prog, list(leaves) + captured + list(ct_leaves), outer)
        cts = _float0_cotangents(results[len(program.output_types):], program.input_types[:len(leaves)])
        return tuple(_tree.unflatten(treedef, cts))

    return (out, vjp_fn, aux) if has_aux else (out, vjp_fn)


def _cotangent_in(ct, out_type):
    """The cotangent to hand the VJP program for an output of `out_type`: an integer or boolean output takes
    a float0 cotangent (JAX's check), read as zeros of its dtype."""
    dtype, shape = out_type[0], out_type[1]
    if _dtypes.is_differentiable(dtype):
        return ct
    ct_dtype = _np.dtype(ct.dtype) if hasattr(ct, "dtype") else _np.asarray(ct).dtype
    if ct_dtype != _dtypes.FLOAT0:
        raise TypeError(f"Type of cotangent input to vjp pullback function ({ct_dtype.name}) is not the expected "
                        f"tangent type (float0) of corresponding primal output with dtype {_np.dtype(dtype).name}.")
    return _np.zeros(shape, dtype)


def checkpoint(fun, *, prevent_cse=True, policy=None, static_argnums=()):
    """jax.checkpoint (jax.remat): fun, whose values the backward pass of a weft.grad / value_and_grad / vjp
    around it recomputes from fun's inputs instead of keeping them from the forward pass.

    Called while a function is traced, fun's equations are recorded with the parameter `checkpoint=<region>`;
    the VJP emits the region again right before its backward rules, so between the passes only fun's inputs
    and its outputs stay live (docs/autodiff.md, "checkpoint"). Outside any trace, and under no
    differentiation, it just computes fun. `prevent_cse` is accepted for JAX's signature (weft eliminates no
    common subexpressions); fun is called directly, so `static_argnums` needs nothing either; policies (JAX's
    checkpoint_policies, weft/ad_checkpoint.py) decide equation by equation which values are kept instead.
    """
    del prevent_cse, static_argnums
    if policy is not None and not callable(policy):
        raise TypeError(f"checkpoint: policy must be callable (weft.checkpoint_policies), got {policy!r}")

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        trace = current_trace() or trace_of(_tree.flatten(tuple(args))[0])
        if trace is None:
            return fun(*args, **kwargs)
        outer, outer_policy = trace.region, trace.policy
        # Numbered once per process (C++'s weft::checkpoint too), so two regions never share a number, even
        # when one program is inlined into another's trace.
        trace.region, trace.policy = _weft.checkpoint_region(), policy
        try:
            return fun(*args, **kwargs)
        finally:
            # a checkpoint inside another one: its own region, then the outer one again
            trace.region, trace.policy = outer, outer_policy

    return wrapped


remat = checkpoint
