"""weft.jvp, weft.linearize, weft.jacfwd, weft.jacrev, weft.hessian, weft.vmap: forward mode and batching,
with JAX's names, signatures, defaults and pytrees.

Each traces the function into a program (weft/_jit.py), transforms that program in C++ (weft._weft.jvp_program:
every primitive's JVP rule; weft._weft.batch_program: every primitive's batching rule; src/program/ops/) and
runs the result outside any trace, or inlines it into the trace around it, as weft.grad does
(weft/_autodiff.py). So they compose with each other and with jit, grad, pmap and shard_map, and a
transformation of a transformation is one program: jacfwd is the JVP program batched over the input basis,
jacrev the VJP program batched over the output basis, never a Python loop over basis vectors.
"""
import functools
import inspect

import numpy as _np

from . import _dtypes, _jnp, _tree, _weft
from ._autodiff import _argnums, _run, _trace
from ._jit import leaf_type, leaf_weak, trace_function
from ._pmap import _Pmapped
from ._trace import Tracer, current_trace, trace_of

float0 = _dtypes.FLOAT0  # JAX's jax.dtypes.float0: the tangent dtype of integer and boolean values


def _name(what, fun):
    return f"{what}({getattr(fun, '__name__', 'fun')})"


_is_float = _dtypes.is_differentiable


def _dtype_name(dtype):
    return "bfloat16" if _np.dtype(dtype) == _dtypes.BF16 else _np.dtype(dtype).name


def _zeros(typ):
    """Zeros of a program value's (dtype, shape, varying) type."""
    dtype, shape = typ[0], typ[1]
    return _np.zeros(shape, _np.float32 if _np.dtype(dtype) == _dtypes.BF16 else dtype)


def _tangent_leaves(primals, tangents, what, mismatch):
    """The tangent leaves to hand a JVP program for these primal leaves, checked as JAX checks them: a
    floating primal takes a tangent of its dtype and shape; an integer or boolean one a float0 tangent, read
    as zeros of the primal's dtype (float0 values never enter a program). `mismatch(kind,
    primal, expected, got)` builds the error for a tangent that does not fit, kind "dtype" or "shape", each
    of the others a (dtype, shape) pair: the primal's, the tangent it should have been, the one given."""
    out = []
    for p, t in zip(primals, tangents):
        pdtype, pshape = leaf_type(p, what)
        tshape = tuple(_np.shape(t)) if not isinstance(t, Tracer) else t.shape
        tdtype = getattr(t, "dtype", None)
        tdtype = _np.dtype(tdtype) if tdtype is not None else _np.asarray(t).dtype
        if tdtype != float0:
            tdtype = leaf_type(t, what)[0]
        expected = (pdtype if _is_float(pdtype) else float0, tuple(pshape))
        primal, got = (pdtype, tuple(pshape)), (tdtype, tuple(tshape))
        if _is_float(pdtype):
            if tdtype != pdtype:
                raise mismatch("dtype", primal, expected, got)
        elif tdtype != float0:
            raise mismatch("dtype", primal, expected, got)
        if tshape != tuple(pshape):
            raise mismatch("shape", primal, expected, got)
        out.append(t if _is_float(pdtype) else _np.zeros(pshape, pdtype))
    return out


def _float0_tangents(values, types):
    """Output tangents as JAX gives them: an integer or boolean output's is float0 zeros of its shape (the
    program computed integer zeros there)."""
    return [v if _is_float(typ[0]) else _np.zeros(typ[1], float0) for v, typ in zip(values, types)]


def _tangent_dtype_name(dtype):
    return "float0" if dtype == float0 else _dtype_name(dtype)


def _aval_text(aval):
    """A (dtype, shape) as JAX prints an abstract value: float32[3,2]."""
    dtype, shape = aval
    return f"{_tangent_dtype_name(dtype)}[{','.join(map(str, shape))}]"


def _jvp_mismatch(kind, primal, expected, got):
    """JAX's error for a tangent that does not fit its primal (jax.jvp's texts)."""
    if kind == "dtype":
        return TypeError("primal and tangent arguments to jax.jvp do not match; dtypes must be equal, or in case "
                         "of int/bool primal dtype the tangent dtype must be float0. Got primal dtype "
                         f"{_dtype_name(primal[0])} and so expected tangent dtype {_tangent_dtype_name(expected[0])}, "
                         f"but got tangent dtype {_tangent_dtype_name(got[0])} instead. (weft.jvp)")
    return ValueError(f"jvp called with different primal and tangent shapes;Got primal shape {tuple(primal[1])} and "
                      f"tangent shape as {tuple(got[1])} (weft.jvp)")


def _split_aux(out_def, name):
    """The treedef of the value part of a has_aux function's (value, aux) output."""
    pair = (_tree.Kind.TUPLE, _tree.Kind.LIST, _tree.Kind.NAMEDTUPLE)
    if not (_tree.kind(out_def) in pair and len(_tree.children(out_def)) == 2):
        raise _weft.InvalidArgument(f"{name}: with has_aux=True the function must return a pair (output, aux)")
    return _tree.children(out_def)[0]


def jvp(fun, primals, tangents, has_aux=False):
    """jax.jvp: (fun(*primals), the Jacobian of fun at primals times tangents), as pytrees like fun's output
    (with has_aux, fun returns (output, aux) and the result is (primals_out, tangents_out, aux)).

    `primals` and `tangents` are tuples or lists of the same pytree structure; each tangent has its primal's
    shape and dtype. An integer or boolean primal takes a float0 tangent (weft.float0, as jax.dtypes.float0);
    an integer or boolean output's tangent is float0 zeros, as JAX's. One program (weft._weft.jvp_program)
    computes the outputs and their tangents.
    """
    name = _name("jvp", fun)
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError("primal and tangent arguments to jax.jvp must be tuples or lists; found "
                        f"{type(primals).__name__} and {type(tangents).__name__}. (weft.jvp)")
    p_leaves, p_def = _tree.flatten(primals)
    t_leaves, t_def = _tree.flatten(tangents)
    if p_def != t_def:
        raise TypeError("primal and tangent arguments to jax.jvp must have the same tree structure; primals have "
                        f"tree structure {_tree.describe(p_def)} whereas tangents have tree structure "
                        f"{_tree.describe(t_def)}. (weft.jvp)")
    t_values = _tangent_leaves(p_leaves, t_leaves, name, _jvp_mismatch)
    program, leaves, _, out_def, outer, captured = _trace(fun, tuple(primals), name)
    return _run_jvp(program, leaves, captured, t_values, out_def, outer, has_aux, name)


def _run_jvp(program, leaves, captured, tangents, out_def, trace, has_aux, name):
    """(outputs, tangents[, aux]) of `program` (traced with `captured` after its input leaves)."""
    n_in = len(leaves)
    zeros = [_zeros(typ) for typ in program.input_types[n_in:]]  # the captured values vary with no tangent
    results = _run(_weft.jvp_program(program), list(leaves) + list(captured) + list(tangents) + zeros, trace)
    n_out = len(program.output_types)
    out = _tree.unflatten(out_def, results[:n_out])
    results = results[:n_out] + _float0_tangents(results[n_out:], program.output_types)
    if not has_aux:
        return out, _tree.unflatten(out_def, results[n_out:])
    value_def = _split_aux(out_def, name)
    n_value = _tree.count_leaves(value_def)
    return out[0], _tree.unflatten(value_def, results[n_out:n_out + n_value]), out[1]


def linearize(fun, *primals, has_aux=False):
    """jax.linearize: (fun(*primals), f_jvp), where f_jvp(*tangents) is the JVP of fun at primals (with
    has_aux, (fun's output, f_jvp, aux)).

    As JAX's, the primal computation runs once: fun's JVP program is split by partial evaluation
    (weft._weft.partial_eval, JAX's partial_eval_jaxpr_nounits) with the primals known and the tangents
    unknown. The known part runs now and gives fun's outputs and the residuals (the primal values the tangent
    rules read: tanh's output for tanh's derivative); f_jvp runs only the unknown part, the linear program from
    the residuals and the tangents to the output tangents. f_jvp's tangents have the primals' structure, shapes
    and dtypes (float0 for an integer or boolean primal).
    """
    name = _name("linearize", fun)
    program, leaves, p_def, out_def, outer, captured = _trace(fun, primals, name)
    n_in, n_all, n_out = len(leaves), len(program.input_types), len(program.output_types)
    # The JVP program's inputs: the primals (leaves, then captured values), then their tangents. Only the
    # leaves' tangents are unknown; the captured values' are zeros now (closed-over values have none).
    unknowns = [False] * n_all + [True] * n_in + [False] * (n_all - n_in)
    instantiate = [False] * n_out + [True] * n_out  # every tangent comes from the linear program, zeros too
    known, linear, out_unknowns, _ = _weft.partial_eval(_weft.jvp_program(program), unknowns, instantiate)
    assert not any(out_unknowns[:n_out])  # a primal output never depends on a tangent
    zeros = [_zeros(typ) for typ in program.input_types[n_in:]]
    results = _run(known, list(leaves) + list(captured) + zeros, outer)
    out, residuals = _tree.unflatten(out_def, results[:n_out]), results[n_out:]
    value_def = _split_aux(out_def, name) if has_aux else out_def
    n_value = _tree.count_leaves(value_def)

    def mismatch(kind, primal, expected, got):
        return ValueError("linearized function called on tangent values inconsistent with the original primal "
                          f"values: got tangent aval {_aval_text(got)} for primal aval {_aval_text(primal)} but "
                          f"expected {_aval_text(expected)} ({name})")

    def f_jvp(*tangents):
        t_leaves, t_def = _tree.flatten(tuple(tangents))
        if t_def != p_def:
            raise ValueError("linearized function called on tangent values inconsistent with the original primal "
                             f"values: the tangents have tree structure {_tree.describe(t_def)}, the primals "
                             f"{_tree.describe(p_def)} ({name})")
        t_values = _tangent_leaves(leaves, t_leaves, name, mismatch)
        # Called inside a trace begun after linearize (f_jvp inside a jit): inlined there, the residuals constants.
        trace = outer if outer is not None else (current_trace() or trace_of(t_leaves))
        out_tangents = _run(linear, list(residuals) + list(t_values), trace)
        return _tree.unflatten(value_def, _float0_tangents(out_tangents[:n_value], program.output_types))

    if has_aux:
        return out[0], f_jvp, out[1]
    return out, f_jvp


def _partial(fun, args, kwargs, nums):
    """fun of the arguments at `nums` only, the others (and the keyword arguments) fixed as they are given:
    JAX's argnums_partial, so the arguments not differentiated reach fun untouched (a Python flag usable in
    an `if`; an array a constant of the program)."""
    def partial(*dyn):
        full = list(args)
        for i, a in zip(nums, dyn):
            full[i] = a
        return fun(*full, **kwargs)
    return partial


def _size(shape):
    return int(_np.prod(shape, dtype=_np.int64))


def _basis(shapes, dtypes):
    """The standard basis of the space of these arrays, one array per shape with a leading axis over all the
    basis vectors (JAX's _std_basis): array k's rows for the other arrays' elements are zero."""
    total = sum(_size(s) for s in shapes)
    out, at = [], 0
    for shape, dtype in zip(shapes, dtypes):
        n = _size(shape)
        block = _np.zeros((total, n), _np.float32 if _np.dtype(dtype) == _dtypes.BF16 else dtype)
        block[at:at + n] = _np.eye(n, dtype=block.dtype)
        out.append(block.reshape((total,) + tuple(shape)))
        at += n
    return out, total


def _front(x, batched, size):
    """x with the batch axis in front: as it is when batched, else broadcast along a new leading axis."""
    if batched:
        return x
    return _jnp.broadcast_to(_jnp.expand_dims(x, 0), (size,) + tuple(_np.shape(x) if not isinstance(x, Tracer)
                                                                       else x.shape))


def _block(x, start, shape_first, shape_second, transpose):
    """Rows [start, start + size(shape_first)) of a batch-in-front x, as an array of shape shape_first +
    shape_second (transpose: as shape_second + shape_first, the rows' axes last)."""
    n = _size(shape_first)
    shape = tuple(x.shape) if isinstance(x, Tracer) else _np.shape(x)
    # (no equation where one would change nothing: a single block, a shape already right, a scalar side)
    part = x if start == 0 and n == shape[0] else x[start:start + n]
    want = tuple(shape_first) + tuple(shape_second)
    if tuple(part.shape) != want:
        part = _jnp.reshape(part, want)
    k, m = len(shape_first), len(shape_second)
    if not transpose or k == 0 or m == 0:
        return part
    return _jnp.transpose(part, tuple(range(k, k + m)) + tuple(range(k)))


def _check_jac_inputs(what, types, holomorphic, allow_int=False):
    for dtype, _ in types:
        if holomorphic:
            raise TypeError(f"{what} with holomorphic=True requires inputs with complex dtype, but got "
                            f"{_dtype_name(dtype)} (weft has no complex dtypes).")
        if not _is_float(dtype) and not allow_int:
            if what == "jacfwd":
                raise TypeError("jacfwd requires real-valued inputs (input dtype that is a sub-dtype of "
                                f"np.floating), but got {_dtype_name(dtype)}. For holomorphic differentiation, pass "
                                "holomorphic=True. For differentiation of non-holomorphic functions involving complex "
                                "inputs or integer inputs, use jax.jvp directly.")
            _dtypes.check_rev_input(what, dtype, allow_int)


def _jacobian(value_def, dyn_args, many, blocks):
    """JAX's jacobian layout: the output's pytree, each leaf the pytree of the differentiated arguments (a
    tuple of them when argnums is a tuple), each of whose leaves is blocks(output leaf, j) for the j-th leaf of
    the differentiated arguments."""
    spans = [len(_tree.flatten(a)[0]) for a in dyn_args]
    per_output = []
    for o in range(_tree.count_leaves(value_def)):
        at, trees = 0, []
        for arg, n in zip(dyn_args, spans):
            trees.append(_tree.unflatten(_tree.flatten(arg)[1], [blocks(o, at + k) for k in range(n)]))
            at += n
        per_output.append(tuple(trees) if many else trees[0])
    return _tree.unflatten(value_def, per_output)


def jacfwd(fun, argnums=0, has_aux=False, holomorphic=False):
    """jax.jacfwd: the Jacobian of fun with respect to args[argnums] by forward mode, JAX's layout (each
    output leaf's Jacobian has shape out_shape + in_shape, a pytree of the output of pytrees of the
    differentiated arguments; with has_aux, (jacobian, aux)).

    One program: fun's JVP program batched (vmap) over the standard basis of the differentiated inputs'
    tangents, the primals shared by every basis vector. Inputs must be floating (holomorphic=True needs complex
    inputs, which weft does not have). Keyword arguments are passed to fun and not differentiated.
    """
    name = _name("jacfwd", fun)

    @functools.wraps(fun)
    def jacfun(*args, **kwargs):
        nums, many = _argnums(argnums, len(args), name)
        dyn_args = [args[i] for i in nums]
        program, leaves, _, out_def, outer, captured = _trace(_partial(fun, args, kwargs, nums), dyn_args, name)
        wrt = list(range(len(leaves)))
        types = program.input_types
        _check_jac_inputs("jacfwd", [(types[k][0], types[k][1]) for k in wrt], holomorphic)
        basis, size = _basis([types[k][1] for k in wrt], [types[k][0] for k in wrt])
        n_in = len(types)
        tangents = [_zeros(typ) for typ in types]
        batched = [False] * (2 * n_in)
        for k, b in zip(wrt, basis):
            tangents[k], batched[n_in + k] = b, True
        jvp_prog, out_batched = _weft.batch_program(_weft.jvp_program(program), batched, size)
        results = _run(jvp_prog, list(leaves) + captured + tangents, outer)
        n_out = len(program.output_types)
        value_def = _split_aux(out_def, name) if has_aux else out_def
        outs = program.output_types

        starts = [sum(_size(types[k][1]) for k in wrt[:j]) for j in range(len(wrt))]

        fronts = {}  # output o's tangents, batch in front (broadcast once where unbatched: zeros)

        def block(o, j):
            if not _is_float(outs[o][0]):  # an integer output's tangents are float0, as JAX's
                return _np.zeros(tuple(outs[o][1]) + tuple(types[wrt[j]][1]), float0)
            if o not in fronts:
                fronts[o] = _front(results[n_out + o], out_batched[n_out + o], size)
            return _block(fronts[o], starts[j], types[wrt[j]][1], outs[o][1], transpose=True)

        jac = _jacobian(value_def, dyn_args, many, block)
        if has_aux:
            return jac, _tree.unflatten(out_def, results[:n_out])[1]
        return jac

    return jacfun


def jacrev(fun, argnums=0, has_aux=False, holomorphic=False, allow_int=False):
    """jax.jacrev: the Jacobian of fun with respect to args[argnums] by reverse mode, in jacfwd's layout.

    One program: fun's VJP program batched (vmap) over the standard basis of the outputs' cotangents.
    Outputs must be floating; inputs too unless allow_int (an integer input's blocks are then float0 zeros,
    as JAX's). Keyword arguments are passed to fun and not differentiated.
    """
    name = _name("jacrev", fun)

    @functools.wraps(fun)
    def jacfun(*args, **kwargs):
        nums, many = _argnums(argnums, len(args), name)
        dyn_args = [args[i] for i in nums]
        program, leaves, _, out_def, outer, captured = _trace(_partial(fun, args, kwargs, nums), dyn_args, name)
        wrt = list(range(len(leaves)))
        types = program.input_types
        _check_jac_inputs("jacrev", [(types[k][0], types[k][1]) for k in wrt], holomorphic, allow_int)
        value_def = _split_aux(out_def, name) if has_aux else out_def
        n_value = _tree.count_leaves(value_def)
        outs = program.output_types
        for dtype, _, _ in outs[:n_value]:
            if not _is_float(dtype):
                raise TypeError("jacrev requires real-valued outputs (output dtype that is a sub-dtype of "
                                f"np.floating), but got {_dtype_name(dtype)}. For holomorphic differentiation, pass "
                                "holomorphic=True. For differentiation of non-holomorphic functions involving complex "
                                "outputs, or function with integer outputs, use jax.vjp directly.")
        basis, size = _basis([t[1] for t in outs[:n_value]], [t[0] for t in outs[:n_value]])
        n_in, n_out = len(types), len(outs)
        cotangents = basis + [_zeros(typ) for typ in outs[n_value:]]  # the aux outputs get none
        batched = [False] * n_in + [True] * n_value + [False] * (n_out - n_value)
        vjp_prog, out_batched = _weft.batch_program(_weft.vjp_program(program, wrt), batched, size)
        results = _run(vjp_prog, list(leaves) + captured + cotangents, outer)
        starts = [sum(_size(t[1]) for t in outs[:o]) for o in range(n_value)]

        fronts = {}  # input j's cotangents, batch in front (broadcast once where unbatched: zeros)

        def block(o, j):
            if not _is_float(types[wrt[j]][0]):  # allow_int: an integer argument's cotangents are float0
                return _np.zeros(tuple(outs[o][1]) + tuple(types[wrt[j]][1]), float0)
            if j not in fronts:
                fronts[j] = _front(results[n_out + j], out_batched[n_out + j], size)
            return _block(fronts[j], starts[o], outs[o][1], types[wrt[j]][1], transpose=False)

        jac = _jacobian(value_def, dyn_args, many, block)
        if has_aux:
            return jac, _tree.unflatten(out_def, results[:n_out])[1]
        return jac

    return jacfun


def hessian(fun, argnums=0, has_aux=False, holomorphic=False):
    """jax.hessian: jacfwd(jacrev(fun)): forward over reverse, one program (out_shape + in_shape + in_shape
    per output leaf, a pytree of pytrees of pytrees as JAX's)."""
    return jacfwd(jacrev(fun, argnums, has_aux, holomorphic), argnums, has_aux, holomorphic)


def _axis_spec_leaves(spec):
    """The leaves of an in_axes / out_axes spec (None counts as a leaf, "not mapped")."""
    return _tree.flatten(spec, is_leaf=lambda x: x is None)[0]


def _check_axes_spec(spec, what):
    if what == "in_axes" and not (spec is None or type(spec) in (int, tuple)):
        raise TypeError("vmap in_axes must be an int, None, or a tuple of entries corresponding to the positional "
                        f"arguments passed to the function, but got {spec!r}.")
    if not all(leaf is None or type(leaf) is int for leaf in _axis_spec_leaves(spec)):
        raise TypeError(f"vmap {what} must be an int, None, or (nested) container with those types as leaves, "
                        f"but got {spec!r}.")


def _key_paths(treedef, prefix=""):
    """Per leaf of `treedef`, its path as JAX's keystr writes it: [0], ['key'], .field."""
    kind = _tree.kind(treedef)
    if kind is _tree.Kind.LEAF:
        return [prefix]
    if kind is _tree.Kind.DICT:
        keys = [f"[{k!r}]" for k in treedef[1]]
    elif kind is _tree.Kind.NAMEDTUPLE:
        keys = [f".{f}" for f in treedef[1]._fields]
    else:
        keys = [f"[{i}]" for i in range(len(_tree.children(treedef)))]
    return [path for key, child in zip(keys, _tree.children(treedef)) for path in _key_paths(child, prefix + key)]


def _inconsistent_sizes(fun, args, kwargs, shapes, dtypes, axes, axis_size):
    """JAX's error for mapped axes of different sizes: each size, how many axes have it, and one of them."""
    try:
        names = list(inspect.signature(fun).bind(*args, **kwargs).arguments)
    except (TypeError, ValueError):
        names = None
    paths = []
    for i, arg in enumerate(args):
        label = f"argument {names[i]}" if names is not None and i < len(names) else f"args[{i}]"
        paths += [label + p for p in _key_paths(_tree.flatten(arg)[1])]
    paths += [f"kwargs{p}" for p in _key_paths(_tree.flatten(kwargs)[1])]
    sizes = [s[a] if a is not None else None for s, a in zip(shapes, axes)]
    counts = {}
    for s in sizes:
        if s is not None:
            counts[s] = counts.get(s, 0) + 1
    lines = ["vmap got inconsistent sizes for array axes to be mapped:"]
    if axis_size is not None:
        lines.append(f"  * the `axis_size` argument was {axis_size};")
    for rank, (size, count) in enumerate(sorted(counts.items(), key=lambda sc: -sc[1])):
        k = sizes.index(size)
        where = f"axis {axes[k]} of {paths[k]} of type {_dtype_name(dtypes[k])}[{','.join(map(str, shapes[k]))}]"
        if count == 1:
            lines.append(f"  * one axis had size {size}: {where};")
        elif rank == 0:
            lines.append(f"  * most axes ({count} of them) had size {size}, e.g. {where};")
        else:
            lines.append(f"  * some axes ({count} of them) had size {size}, e.g. {where};")
    return ValueError("\n".join(lines)[:-1])


def vmap(fun, in_axes=0, out_axes=0, axis_name=None, axis_size=None, spmd_axis_name=None):
    """jax.vmap: fun mapped over an axis of its arguments, as one batched program (weft._weft.batch_program:
    every primitive's batching rule), never a loop over examples.

    in_axes: an int (negative counts from the end), None (not mapped), or a tuple with one entry per
    positional argument, each a pytree prefix of that argument with int / None leaves (a list is taken as a
    tuple, as JAX does). Keyword arguments are mapped along axis 0. out_axes: the same for the output; None
    requires an output that does not depend on the mapped axis; an unmapped output with an int out_axes is
    broadcast. axis_size: the size when no argument is mapped (required then). axis_name: a name for the
    mapped axis, so collectives over it work inside fun (weft.lax.psum(x, name) sums over the examples, as
    under a pmap of that name): fun is traced on the enclosing mesh plus (axis_name, size), and the batching
    removes that axis. Unmapped arguments reach fun as they are (a function, a Python flag; arrays become
    constants where used), as in JAX. spmd_axis_name (JAX: shard the batch axis over that mesh axis inside
    pjit) is refused: weft's jit does not partition, so it has nothing to act on. fun a pmapped function
    (weft.pmap(f), nested or not): pmap of vmap, the batch axis moved inside the device axes (_vmap_of_pmap).
    """
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)  # JAX's reading: a list of entries for the positional arguments
    _check_axes_spec(in_axes, "in_axes")
    _check_axes_spec(out_axes, "out_axes")
    if spmd_axis_name is not None:
        raise _weft.InvalidArgument(
            f"vmap: spmd_axis_name={spmd_axis_name!r} is not supported: it asks a partitioning jit (JAX's pjit) to "
            "shard the batch axis over a mesh axis, and weft's jit runs unpartitioned (the values would be the "
            "same without it; for a mapped axis over devices use weft.pmap or weft.shard_map)")
    if axis_size is not None and (type(axis_size) is not int or axis_size < 0):
        raise ValueError(f"vmap: axis_size must be a non-negative int, got {axis_size!r}")
    name = _name("vmap", fun)

    @functools.wraps(fun)
    def vmapped(*args, **kwargs):
        if isinstance(in_axes, tuple) and len(in_axes) != len(args):
            raise ValueError("vmap in_axes must be an int, None, or a tuple of entries corresponding to the "
                             f"positional arguments passed to the function, but got len(in_axes)={len(in_axes)}, "
                             f"len(args)={len(args)}")
        leaves, treedef = _tree.flatten((args, kwargs))
        axes = _tree.broadcast_prefix(in_axes, args, "vmap in_axes") + [0] * len(_tree.flatten(kwargs)[0])
        if not leaves:
            if axis_size is None:
                raise ValueError("vmap wrapped function must be passed at least one argument containing an array, "
                                 f"got empty *args={args} and **kwargs={kwargs}")
        # Only the mapped leaves become inputs of the per-example program. The unmapped ones reach fun as they
        # are, as in JAX (a Python flag stays usable in an `if`, a function callable): a numpy array or number
        # becomes a constant where an op uses it, a tracer of an enclosing trace an input shared by every example.
        mapped = [k for k, ax in enumerate(axes) if ax is not None]
        types = {k: leaf_type(leaves[k], name) for k in mapped}
        for k in mapped:
            ax, shape = axes[k], types[k][1]
            if not -len(shape) <= ax < len(shape):
                raise ValueError(f"vmap was requested to map its argument along axis {ax}, which implies that its "
                                 f"rank should be at least {ax + 1 if ax >= 0 else -ax}, but is only {len(shape)} "
                                 f"(its shape is {tuple(shape)})")
            axes[k] = ax % len(shape)
        sizes = {types[k][1][axes[k]] for k in mapped}
        if not sizes and axis_size is None:
            raise ValueError("vmap must have at least one non-None value in in_axes")
        if len(sizes) > 1 or (axis_size is not None and sizes and sizes != {axis_size}):
            every = range(len(leaves))
            raise _inconsistent_sizes(fun, args, kwargs, [types[k][1] if k in types else () for k in every],
                                      [types[k][0] if k in types else None for k in every], axes, axis_size)
        size = axis_size if axis_size is not None else sizes.pop()
        if isinstance(fun, _Pmapped):
            return _vmap_of_pmap(fun, name, args, kwargs, axes, size, out_axes, axis_name)

        outer = current_trace() or trace_of(leaves)
        mesh = list(outer.mesh) if outer is not None else []
        if axis_name is not None:
            if axis_name in dict(mesh):
                raise _weft.InvalidArgument(f"{name}: axis_name {axis_name!r} is already an axis of the enclosing "
                                            f"mesh {mesh}; give the vmapped axis another name")
            mesh.append((axis_name, size))
        in_types = []
        for k in mapped:
            leaf, ax = leaves[k], axes[k]
            dtype, shape = types[k]
            varying = set(leaf._varying) if isinstance(leaf, Tracer) else set()
            if axis_name is not None:
                varying.add(axis_name)  # each example is its own value along the named axis
            in_types.append((dtype, tuple(shape[:ax]) + tuple(shape[ax + 1:]), tuple(sorted(varying)), leaf_weak(leaf)))

        def per_example(*examples):
            given = dict(zip(mapped, examples))
            a, kw = _tree.unflatten(treedef, [given.get(k, leaf) for k, leaf in enumerate(leaves)])
            return fun(*a, **kw)

        captured = []
        program, out_def = trace_function(per_example, in_types, _tree.flat_tuple(len(mapped)), mesh, name, captured)
        batched = [True] * len(mapped) + [False] * len(captured)
        inputs = [leaves[k] if axes[k] == 0 else _jnp.moveaxis(leaves[k], axes[k], 0) for k in mapped]
        batched_prog, out_batched = _weft.batch_program(program, batched, size, axis_name or "")
        results = _run(batched_prog, inputs + captured, outer)
        out = _tree.unflatten(out_def, results)
        leaf_axes = _tree.broadcast_prefix(out_axes, out, "vmap out_axes")
        return _tree.unflatten(out_def, [_place(x, b, oa, size, axis_name)
                                         for x, b, oa in zip(results, out_batched, leaf_axes)])

    return vmapped


def _place(x, batched, out_axis, size, axis_name):
    """A batch-in-front (or unbatched) output with its batch axis where out_axes puts it."""
    if out_axis is None:
        if batched:
            named = f" (axis_name={axis_name})" if axis_name is not None else ""
            raise ValueError(f"vmap has mapped output{named} but out_axes is None")
        return x
    shape = tuple(x.shape) if isinstance(x, Tracer) else _np.shape(x)
    rank = len(shape) + (0 if batched else 1)
    if not -rank <= out_axis < rank:
        raise ValueError(f"vmap out_axes: axis {out_axis} is out of bounds for an output of rank {rank}")
    out_axis %= rank
    if batched:
        return x if out_axis == 0 else _jnp.moveaxis(x, 0, out_axis)
    full = shape[:out_axis] + (size,) + shape[out_axis:]
    y = _jnp.broadcast_to(_jnp.expand_dims(x, out_axis), full)
    return y if isinstance(y, Tracer) else _np.array(y)


# ---- vmap of a pmapped function ---------------------------------------------------------------------------
# vmap(pmap(f)) is pmap(vmap(f)) with the batch axis moved inside the device axes: each device runs the
# batched program of its slice of every example, so every example sees the collectives over pmap's axis it
# would see alone, and the results are the per-example pmaps stacked, bit for bit (a batched program equals
# its per-example runs). vmap of a function that calls a pmap somewhere inside stays refused by the pmap.

def _shifted_out_axes(spec):
    """A pmap out_axes spec for outputs that gained a leading batch axis: each non-negative axis one further
    (a negative one counts from the end, which the batch axis does not move)."""
    if spec is None:
        return None
    if isinstance(spec, int):
        return spec + 1 if spec >= 0 else spec
    if isinstance(spec, (tuple, list)):
        return type(spec)(_shifted_out_axes(s) for s in spec)
    if isinstance(spec, dict):
        return {k: _shifted_out_axes(v) for k, v in spec.items()}
    return spec  # the pmap names what it cannot read


def _vmap_of_pmap(pm, name, args, kwargs, axes, size, out_axes, axis_name):
    """vmap (batch axes `axes` per leaf of (args, kwargs), `size` examples) of the pmapped function `pm`."""
    levels, inner = pm._levels()
    if levels[0]._eager:
        raise _weft.InvalidArgument(
            f"{name}: vmap of an eager pmap ({levels[0]._name}, eager=True) is not supported: its replicas run "
            "Python one by one, with no program to batch; use a traced pmap, or vmap inside the pmap")
    if kwargs:
        raise TypeError(f"{levels[0]._name}: pmapped functions take positional arguments only, got {sorted(kwargs)}")
    depth = len(levels)
    if depth > 1 and any(lv._out_axes != 0 for lv in levels):
        raise _weft.InvalidArgument(f"{name}: vmap of nested pmaps needs out_axes=0 at every level (got "
                                    f"{[lv._out_axes for lv in levels]})")
    p_in = levels[0]._in_axes
    if isinstance(p_in, list):
        p_in = tuple(p_in)
    if isinstance(p_in, tuple) and len(p_in) != len(args):
        raise ValueError(f"{levels[0]._name}: pmap in_axes specification must be a tree prefix of the corresponding "
                         f"value, got specification {levels[0]._in_axes!r} for {len(args)} arguments")
    new_args, pmap_axes, vmap_axes = [], [], []
    start = 0
    for k, arg in enumerate(args):
        arg_leaves, arg_def = _tree.flatten(arg)
        p_leaves = _tree.broadcast_prefix(p_in[k] if isinstance(p_in, tuple) else p_in, arg, "pmap in_axes")
        moved, p_new, v_new = [], [], []
        for j, (leaf, p) in enumerate(zip(arg_leaves, p_leaves)):
            v = axes[start + j]
            if v is None:  # shared by the examples: the pmap maps it as it would
                moved.append(leaf)
                p_new.append(p)
                v_new.append(None)
                continue
            x = leaf if v == 0 else _jnp.moveaxis(leaf, v, 0)  # [B, the example's axes]
            if p is not None and depth > 1:
                x = _jnp.moveaxis(x, 0, depth)  # nested pmaps map the leading axes: [D1 .. Dk, B, ...]
            elif p is not None and type(p) is int:
                rank = len(leaf_type(leaf, name)[1]) - 1
                if not -rank <= p < rank:
                    raise ValueError(f"{levels[0]._name}: pmap in_axes {p} is out of range for an example of rank "
                                     f"{rank} (vmap's axis left out)")
                p = p % rank + 1  # the device axis, past the batch axis
            moved.append(x)
            p_new.append(p)
            v_new.append(0)
        start += len(arg_leaves)
        new_args.append(_tree.unflatten(arg_def, moved))
        pmap_axes.append(_tree.unflatten(arg_def, p_new))
        vmap_axes.append(_tree.unflatten(arg_def, v_new))
    # One vmap, innermost, of the function the nest maps; each level rebuilt around it as it was.
    g = vmap(inner, in_axes=tuple(vmap_axes), out_axes=0, axis_name=axis_name, axis_size=size)
    for level, lv in reversed(list(enumerate(levels))):
        level_in = tuple(pmap_axes) if level == 0 else lv._in_axes
        level_out = _shifted_out_axes(lv._out_axes) if depth == 1 else lv._out_axes
        g = _Pmapped(g, lv._axis_name, level_in, level_out, lv._devices, lv._name)
    out = g(*new_args)
    out_leaves, out_def = _tree.flatten(out)
    if depth > 1:  # [D1 .. Dk, B, ...] -> [B, D1 .. Dk, ...]
        out_leaves = [_jnp.moveaxis(x, depth, 0) for x in out_leaves]
    leaf_axes = _tree.broadcast_prefix(out_axes, _tree.unflatten(out_def, out_leaves), "vmap out_axes")
    return _tree.unflatten(out_def, [_place(x, True, oa, size, axis_name) for x, oa in zip(out_leaves, leaf_axes)])
