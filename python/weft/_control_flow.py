"""weft.lax's control flow, with jax.lax's signatures and rules: cond, switch, scan, fori_loop, while_loop, map.

Each traces its branches or body once into a program of its own (on the mesh of the trace around it, so
collectives inside meet the other replicas' as those outside do) and records one equation of the program
primitives cond / while_loop / scan (src/program/ops/control.cc, docs/programs.md "Control flow"), which the
executor runs in C++: a loop never comes back to Python. Values a body closes over (tracers of the traces
around it) become the equation's trailing operands, where a trace captures them; a cond's branches close
over different values, so each branch is re-wrapped to take them all.

Carries keep their types as JAX's do: a weakly typed init (a Python number) whose body output has another
dtype takes the joined dtype (JAX's _promote_weak_typed_input) and the body is traced again; any other change
of type is JAX's TypeError naming the carry leaf by its path. Under pmap (JAX's pmap keeps no varying types)
a carry or branch output that varies over a mesh axis on one side only is made to vary on both (pvary: no
data moves); under shard_map's rules that is JAX's error, which suggests the pvary.

Outside any trace each call is traced and run at once, as JAX runs these primitives compiled even outside
jit; in an eager replica (weft.pmap(f, eager=True), a session's program) the call is traced on the replica's
mesh and runs as the replica, so collectives inside work there too.
"""
import builtins
import inspect
import types as _types

import numpy as _np

from . import _dtypes, _jnp, _tree, _weft
from ._jit import leaf_type, leaf_weak, leaf_value, trace_function
from ._trace import Tracer, TracerConversionError, bind, current_trace, escaped


class _NoOperand:
    def __repr__(self):
        return "<no operand>"


_NO_OPERAND = _NoOperand()  # cond's and switch's deprecated `operand=` keyword, when not given


# ---- types as JAX's messages print them ---------------------------------------------------------------------

def _typeof(x):
    """A tracer's full type: (dtype, shape, varying axes, weak)."""
    return (x.dtype, tuple(x.shape), tuple(x._varying), x._weak)


def _type_text(typ, mesh):
    """float32[3], or float32[3]{V:i} / {V:(i,j)} for a value varying over mesh axes (JAX's str_short)."""
    dtype, shape, varying = typ[0], typ[1], typ[2]
    name = "bfloat16" if _np.dtype(dtype) == _dtypes.BF16 else _np.dtype(dtype).name
    text = f"{name}[{','.join(str(n) for n in shape)}]"
    if varying:
        axes = [axis for axis, _ in mesh if axis in varying]
        text += "{V:" + (axes[0] if len(axes) == 1 else f"({','.join(axes)})") + "}"
    return text


def _mismatch(a, b):
    """JAX's core.aval_mismatch_extra: ', so the dtypes do not match', ..."""
    what = [text for differs, text in ((a[0] != b[0], "the dtypes do not match"),
                                       (tuple(a[1]) != tuple(b[1]), "the shapes do not match"),
                                       (tuple(a[2]) != tuple(b[2]), "the manual axis types do not match")) if differs]
    if not what:
        return ""
    return ", so " + (what[0] if len(what) == 1 else ", ".join(what[:-1]) + ", and " + what[-1])


def _same_type(a, b):
    """JAX's core.typematch: dtype, shape and varying axes (not the weak flag)."""
    return a[0] == b[0] and tuple(a[1]) == tuple(b[1]) and tuple(a[2]) == tuple(b[2])


def _listing(diffs, end="."):
    """One difference as a sentence, several as JAX's bulleted list."""
    if len(diffs) == 1:
        return diffs[0][0].upper() + diffs[0][1:] + f"{end}\n"
    return "\n".join(f"  * {d};" for d in diffs[:-1]) + f"\n  * {diffs[-1]}{end}\n"


def _source(fun):
    """JAX's api_util.fun_sourceinfo: 'name at file:line'."""
    while hasattr(fun, "func"):  # functools.partial
        fun = fun.func
    fun = inspect.unwrap(fun)
    try:
        return f"{fun.__name__} at {fun.__code__.co_filename}:{fun.__code__.co_firstlineno}"
    except AttributeError:
        return "<unknown>"


def _pvary_hint(missing, what):
    return f"applying `weft.lax.pvary(..., {tuple(missing)})` to {what}"


def _hints_text(hints):
    if not hints:
        return ""
    text = (f"This might be fixed by {hints[0]}.\n" if len(hints) == 1 else
            "This might be fixed by:\n" + "\n".join(f"  * {h};" for h in hints[:-1]) + f"\n  * {hints[-1]}.\n")
    return text + "See https://docs.jax.dev/en/latest/notebooks/shard_map.html#scan-vma for more information.\n\n"


# ---- values, bodies and the pmap reconciliation --------------------------------------------------------------

def _as_value(trace, leaf):
    """An operand or carry leaf as a tracer: a tracer as it is (of this trace or one around it), anything else a
    constant of `trace` (a Python number weakly typed)."""
    return leaf if isinstance(leaf, Tracer) else trace.constant(leaf)


def _vary(x, varying):
    """x made to vary over the axes of `varying` it does not (pvary: the same data, another type)."""
    missing = [axis for axis in varying if axis not in x._varying]
    if not missing:
        return x
    return bind("pvary", [x], [("axes", missing)]).weakly(x._weak)


def _coerce(x, typ):
    """A carry's init as the carry type `typ` (its joined dtype, strongly typed, after a weak promotion; the
    axes it varies over under pmap)."""
    if x.dtype != typ[0]:
        x = bind("astype", [x], [("dtype", typ[0])])
    return _vary(x, typ[2]).weakly(typ[3])


def _varying_as(tree, types):
    """Under pmap, each leaf of `tree` (a body's carry or a branch's output) made to vary over the axes of its
    entry of `types`, when the counts match (a mismatch is reported by the caller)."""
    leaves, treedef = _tree.flatten(tree)
    if len(leaves) != len(types):
        return tree
    trace = current_trace()
    return _tree.unflatten(treedef, [_vary(_as_value(trace, leaf), typ[2]) for leaf, typ in zip(leaves, types)])


class _Body:
    """A function traced into a program on the mesh and rules of `trace`: its program, its output treedef, its
    outputs' types (dtype, shape, varying, weak) and the tracers of the traces around it that it closes over
    (its trailing inputs)."""

    def __init__(self, fun, in_types, treedef, trace, name):
        self.captured, weak = [], []
        self.program, self.out_def = trace_function(fun, in_types, treedef, trace.mesh, name, self.captured,
                                                    trace.shard_map_rules, weak)
        self.out_types = [(_np.dtype(d), tuple(s), tuple(v), w)
                          for (d, s, v), w in builtins.zip(self.program.output_types, weak)]


def _carry_name(fun):
    """The name of fun's first parameter (JAX names carry leaves by it), or None."""
    try:
        params = list(inspect.signature(fun).parameters)
    except (TypeError, ValueError):
        return None
    return params[0] if params else None


def _check_carry(name, fun, in_tree, in_types, out_tree, out_types, mesh):
    """JAX's _check_carry_type: the body's carry output has the carry input's structure and types, else a
    TypeError naming each leaf that differs by its path."""
    carry = _carry_name(fun)
    if carry:
        component = lambda p: f"the input carry component {carry}{p}" if p else f"the input carry {carry}"  # noqa: E731
    else:
        component = lambda p: f"the input carry at path {p}" if p else "the input carry"  # noqa: E731
    if in_tree != out_tree:
        diffs = [f"{component(p)} is a {a} but the corresponding component of the carry output is a {b}, so {why}"
                 for p, a, b, why in _tree.structure_differences(in_tree, out_tree)]
        differences = (_listing(diffs) if diffs else f"the input tree structure is:\n{_tree.describe(in_tree)}\n"
                       f"the output tree structure is:\n{_tree.describe(out_tree)}\n")
        raise TypeError(f"{name} function carry input and carry output must have the same pytree structure, but they "
                        f"differ:\n\n{differences}\nRevise the function so that the carry output has the same pytree "
                        "structure as the carry input.")
    paths = _tree.leaf_paths(in_tree)
    wrong = [(p, a, b) for p, a, b in builtins.zip(paths, in_types, out_types) if not _same_type(a, b)]
    if not wrong:
        return
    diffs = [f"{component(p)} has type {_type_text(a, mesh)} but the corresponding output carry component has type "
             f"{_type_text(b, mesh)}{_mismatch(a, b)}" for p, a, b in wrong]
    hints = [_pvary_hint([axis for axis, _ in mesh if axis in set(b[2]) - set(a[2])],
                         f"the initial carry value corresponding to {component(p)}")
             for p, a, b in wrong if set(b[2]) - set(a[2])]
    raise TypeError(f"{name} function carry input and carry output must have equal types, but they differ:\n\n"
                    f"{_listing(diffs)}\n{_hints_text(hints)}Revise the function so that all output types match the "
                    "corresponding input types.")


def _next_carry_types(carry_vals, carry_types, out_types, pmap_rules):
    """The carry types to trace the body with again, or None when they stay: a weak init leaf whose output has
    another dtype takes their join, strongly (JAX's _promote_weak_typed_input); under pmap a carry varies over
    the axes its init or its output vary over."""
    new = []
    for x, (dtype, shape, varying, weak), (out_dtype, _, out_varying, out_weak) in builtins.zip(
            carry_vals, carry_types, out_types):
        if weak and out_dtype != dtype:
            dtype, weak = _dtypes.result_type(x, _types.SimpleNamespace(dtype=out_dtype, weak_type=out_weak))[0], False
        if pmap_rules:
            varying = tuple(sorted(set(varying) | set(out_varying)))
        new.append((dtype, shape, varying, weak))
    return None if new == list(carry_types) else new


def _trace_loop(name, fun, init_tree, carry_vals, trace, make):
    """The carry types and the traced bodies of a loop: `make(carry_types)` traces them (returning the treedef
    of the body's carry output, the body, then any others) until the carry types stay put (a weak promotion,
    pmap's varying axes), then the carry is checked as JAX checks it."""
    carry_types = [_typeof(x) for x in carry_vals]
    pmap_rules = not trace.shard_map_rules
    for _ in range(4):  # (a promotion and pmap's axes settle in two passes; the last pass only checks)
        out_carry_tree, *traced = make(carry_types)
        body = traced[0]
        n = len(carry_types)
        if out_carry_tree != init_tree:
            break  # (reported by the check below)
        new = _next_carry_types(carry_vals, carry_types, body.out_types[:n], pmap_rules)
        if new is None:
            break
        carry_types = new
    _check_carry(name, fun, init_tree, carry_types, out_carry_tree, body.out_types[:n], trace.mesh)
    return carry_types, traced


# ---- eager calls ---------------------------------------------------------------------------------------------

def _eager(api, call, args):
    """call(*args) outside any trace: traced into a program and run (JAX runs these primitives compiled even
    outside jit); in an eager replica on the replica's mesh (its values varying over every axis) and as that
    replica, so collectives inside meet the other replicas'."""
    leaves, treedef = _tree.flatten(args)
    for leaf in leaves:
        if isinstance(leaf, Tracer):  # (no trace runs, so its trace ended: a value escaped it)
            raise escaped(api, leaf._trace, leaf)
    in_replica = _weft.in_replica()
    mesh = _weft.replica_mesh(api) if in_replica else []
    varying = tuple(sorted(axis for axis, _ in mesh))
    in_types = [leaf_type(leaf, api) + (varying, leaf_weak(leaf)) for leaf in leaves]
    program, out_def = trace_function(call, in_types, treedef, mesh, api)
    values = [leaf_value(leaf) for leaf in leaves]
    outs = _weft.run_program_in_replica(program, values, api) if in_replica else _weft.run_program(program, values)
    return _tree.unflatten(out_def, outs)


# ---- cond and switch -----------------------------------------------------------------------------------------

def _shape(x):
    """x's shape: a tracer's, else numpy's."""
    return tuple(x.shape) if isinstance(x, Tracer) else _np.shape(x)


def _operands(operands, operand):
    if operand is _NO_OPERAND:
        return operands
    if operands:
        raise TypeError(f"if 'operand' keyword is passed then no positional operands can be passed, got "
                        f"operand={operand!r} and positional operands {operands}")
    return (operand,)


def cond(pred, true_fun, false_fun, *operands, operand=_NO_OPERAND):
    """jax.lax.cond: true_fun(*operands) if pred else false_fun(*operands), with both branches traced (into
    programs of their own) and one run. pred: a boolean or number scalar (a number is compared with 0).
    Both branches must return the same pytree structure and types (JAX's TypeError names both and the
    output that differs). The deprecated cond(pred, x_true, f_true, x_false, f_false) form is taken too."""
    if not (callable(true_fun) and callable(false_fun)):
        if callable(false_fun) and len(operands) == 2 and callable(operands[1]):  # the old five-argument form
            x_true, f_true, x_false, f_false = true_fun, false_fun, *operands
            return cond(pred, lambda x, _: f_true(x), lambda _, x: f_false(x), x_true, x_false)
        raise TypeError("lax.cond: true_fun and false_fun arguments should be callable.")
    operands = _operands(operands, operand)
    if pred is None:
        raise TypeError("cond predicate is None")
    if isinstance(pred, (list, tuple)) or _shape(pred) != ():
        raise TypeError(f"Pred must be a scalar, got {pred} of " +
                        (f"type {type(pred)}" if isinstance(pred, (list, tuple)) else f"shape {_shape(pred)}."))
    try:
        pred_dtype = _dtypes.dtype_and_weak(pred)[0]
    except (TypeError, _weft.InvalidArgument):
        raise TypeError(f"Pred type must be either boolean or number, got {pred}.") from None
    if pred_dtype.kind != "b":
        if pred_dtype.kind not in "iuf" and pred_dtype != _dtypes.BF16:
            raise TypeError(f"Pred type must be either boolean or number, got {pred_dtype}.")
        pred = _jnp.not_equal(pred, 0)
    trace = current_trace()
    if trace is None:
        return _eager("weft.lax.cond", lambda p, ops: cond(p, true_fun, false_fun, *ops), (pred, operands))
    index = bind("astype", [_as_value(trace, pred)], [("dtype", _np.dtype(_np.int32))])
    # (branch 0 runs for False, as JAX's cond_p holds them; messages compare true_fun with false_fun)
    return _branches("cond", ("false_fun", "true_fun"), (false_fun, true_fun), index, operands, trace,
                     order=(1, 0))


def switch(index, branches, *operands, operand=_NO_OPERAND):
    """jax.lax.switch: branches[clamp(index, 0, len(branches) - 1)](*operands), every branch traced, one run.
    index: an integer scalar. Every branch must return the same pytree structure and types."""
    branches = tuple(branches)
    if not all(callable(branch) for branch in branches):
        raise TypeError("lax.switch: branches argument should be a sequence of callables.")
    operands = _operands(operands, operand)
    if _shape(index) != ():
        raise TypeError(f"Branch index must be scalar, got {index} of shape {_shape(index)}.")
    try:
        index_dtype = _dtypes.dtype_and_weak(index)[0]
    except (TypeError, _weft.InvalidArgument):
        raise TypeError(f"Index type must be an integer, got {index}.") from None
    if index_dtype.kind not in "iu":
        raise TypeError(f"Index type must be an integer, got {index} as {index_dtype}")
    if not branches:
        raise ValueError("Empty branch sequence")
    if len(branches) == 1:
        return branches[0](*operands)
    trace = current_trace()
    if trace is None:
        return _eager("weft.lax.switch", lambda i, ops: switch(i, branches, *ops), (index, operands))
    index = _as_value(trace, index)
    if index.dtype != _np.int32:  # (JAX converts it to int32, then clamps: the equation clamps)
        index = bind("astype", [index], [("dtype", _np.dtype(_np.int32))])
    names = ["branch 0"] + [f"branch{k}" for k in range(1, len(branches))]  # (JAX's spelling)
    return _branches("switch", names, branches, index, operands, trace, order=range(len(branches)))


def _check_branch_outputs(api, names, funs, bodies, order, mesh):
    """JAX's _check_branch_outputs, each branch against the first in `order`: the same pytree structure, then
    the same types (dtype, shape; varying axes under shard_map's rules), naming both branches."""
    first = order[0]
    paths = _tree.leaf_paths(bodies[first].out_def)
    component = lambda p: f" at path {p}" if p else ""  # noqa: E731
    for k in order[1:]:
        name1, name2 = names[first], names[k]
        sources = f"{name1} is {_source(funs[first])}\n{name2} is {_source(funs[k])}\n\n"
        if bodies[k].out_def != bodies[first].out_def:
            diffs = [f"{name1} output{component(p)} is a {a} but {name2} output{component(p)} is a {b}, so {why}"
                     for p, a, b, why in _tree.structure_differences(bodies[first].out_def, bodies[k].out_def)]
            raise TypeError(f"{api} branch outputs must have the same pytree structure, but they differ:\n\n{sources}"
                            f"{diffs[0] + '.' if len(diffs) == 1 else _listing(diffs).rstrip()}\n\n"
                            f"Revise {name1} and/or {name2} so that they have the same pytree structure.")
        pairs = list(builtins.zip(paths, bodies[first].out_types, bodies[k].out_types))
        diffs = [f"the output of {name1}{component(p)} has type {_type_text(a, mesh)} but the corresponding output of "
                 f"{name2} has type {_type_text(b, mesh)}{_mismatch(a, b)}"
                 for p, a, b in pairs if not _same_type(a, b)]
        if diffs:
            hints = [_pvary_hint([axis for axis, _ in mesh if axis in set(theirs[2]) - set(mine[2])],
                                 f"the output of {n}{component(p)}")
                     for p, a, b in pairs if not _same_type(a, b)
                     for n, mine, theirs in ((name1, a, b), (name2, b, a)) if set(theirs[2]) - set(mine[2])]
            raise TypeError(f"{api} branches must have equal output types but they differ.\n\n{sources}"
                            f"{_listing(diffs)}\n{_hints_text(hints)}Revise {name1} and/or {name2} so that all "
                            "output types match.")


def _branches(api, names, funs, index, operands, trace, order):
    """The cond equation of `funs` (branch k runs for index k) over `operands`: each branch traced, checked
    against the others, and re-wrapped to take the operands and every value any branch closes over."""
    leaves, treedef = _tree.flatten(operands)
    values = [_as_value(trace, leaf) for leaf in leaves]
    in_types = [_typeof(v) for v in values]
    bodies = [_Body(fun, in_types, treedef, trace, f"{api} {name}") for fun, name in builtins.zip(funs, names)]
    pmap_rules = not trace.shard_map_rules
    out_types = [list(t) for t in bodies[0].out_types]
    if pmap_rules and all(b.out_def == bodies[0].out_def for b in bodies):
        # (pmap: an output varying over an axis in one branch varies over it in every branch)
        for body in bodies[1:]:
            for k, t in enumerate(body.out_types):
                out_types[k][2] = tuple(sorted(set(out_types[k][2]) | set(t[2])))
        for body in bodies:
            body.out_types = [(d, s, tuple(out_types[k][2]), w) for k, (d, s, _, w) in enumerate(body.out_types)]
    _check_branch_outputs(api, names, funs, bodies, list(order), trace.mesh)
    # Every branch takes the operands, then the union of the values the branches close over (by identity).
    captured, position = [], {}
    for body in bodies:
        for outer in body.captured:
            if id(outer) not in position:
                position[id(outer)] = len(captured)
                captured.append(outer)
    all_types = in_types + [_typeof(x) for x in captured]
    programs = [_rewrap(body, all_types, len(values), position, out_types, trace) for body in bodies]
    outs = trace.emit("cond", [index] + values + captured, [("branches", programs)])
    weak = [all(body.out_types[k][3] for body in bodies) for k in range(len(outs))]
    return _tree.unflatten(bodies[0].out_def, [x.weakly(w) for x, w in builtins.zip(outs, weak)])


def _rewrap(body, all_types, num_operands, position, out_types, trace):
    """`body`'s program as one taking the operands and every captured value (`all_types`), its outputs made to
    vary as `out_types` say (pmap); the program itself when it already does."""
    takes = list(range(num_operands)) + [num_operands + position[id(x)] for x in body.captured]
    varies = any(tuple(t[2]) != tuple(o[2]) for t, o in builtins.zip(body.program.output_types, out_types))
    if len(takes) == len(all_types) and takes == list(range(len(all_types))) and not varies:
        return body.program
    builder = _weft.ProgramBuilder(trace.mesh, trace.shard_map_rules)
    ids = [builder.input(_np.dtype(t[0]), list(t[1]), list(t[2])) for t in all_types]
    outs = builder.inline(body.program, [ids[k] for k in takes])
    result = []
    for (ident, (_, _, varying)), want in builtins.zip(outs, out_types):
        missing = [axis for axis in want[2] if axis not in varying]
        if missing:
            (ident, _), = builder.emit("pvary", [ident], [("axes", missing)], "")
        result.append(ident)
    builder.set_outputs(result)
    return builder.build()


# ---- scan ----------------------------------------------------------------------------------------------------

def _scan_length(xs_leaves, length):
    """JAX's _infer_scan_length: the xs' common leading axis, checked against `length` when given."""
    lengths = []
    for x in xs_leaves:
        shape = getattr(x, "shape", None)
        if not shape:
            raise ValueError(f"scan got value with no leading axis to scan over: {x}.")
        lengths.append(shape[0])
    if length is not None:
        if isinstance(length, Tracer):
            raise TracerConversionError(
                "The `length` argument to `scan` expects a concrete `int` value. For scan-like iteration with a "
                "dynamic length, use `while_loop` or `fori_loop`.")
        length = int(length)
        if not all(length == n for n in lengths):
            raise ValueError(f"scan got `length` argument of {length} which disagrees with leading axis sizes "
                             f"{lengths}.")
        return length
    if len(set(lengths)) > 1:
        raise ValueError(f"scan got values with different leading axis sizes: {', '.join(str(n) for n in lengths)}.")
    if not lengths:
        raise ValueError("scan got no values to scan over and `length` not provided.")
    return lengths[0]


def scan(f, init, xs=None, length=None, reverse=False, unroll=1, _split_transpose=False):
    """jax.lax.scan: for each slice x of xs along its leading axis (from the end when reverse), carry, y =
    f(carry, x); returns (the last carry, the ys stacked along a new leading axis). init, xs and the ys are
    pytrees; xs=None scans `length` times with x None; `length`, when given, must agree with the xs. The carry
    keeps its pytree structure and types (a Python-number init takes the body's dtype, as JAX promotes weak
    types). unroll (an int >= 0 or a bool) is checked and recorded; the executor runs iterations one by one."""
    del _split_transpose
    if not callable(f):
        raise TypeError("lax.scan: f argument should be a callable.")
    init_leaves, init_tree = _tree.flatten(init)
    xs_leaves, xs_tree = _tree.flatten(xs)
    length = _scan_length(xs_leaves, length)
    if isinstance(unroll, Tracer):
        raise TracerConversionError("The `unroll` argument to `scan` expects a concrete `int` or `bool` value.")
    unroll = (max(length, 1) if unroll else 1) if isinstance(unroll, bool) else int(unroll)
    if unroll < 0:
        raise ValueError("`unroll` must be a `bool` or a non-negative `int`.")
    trace = current_trace()
    if trace is None:
        return _eager("weft.lax.scan", lambda c, x: scan(f, c, x, length, reverse, unroll), (init, xs))
    carry_vals = [_as_value(trace, leaf) for leaf in init_leaves]
    xs_vals = [_as_value(trace, leaf) for leaf in xs_leaves]
    x_types = [(x.dtype, x.shape[1:], x._varying, x._weak) for x in xs_vals]
    in_tree = (_tree.Kind.TUPLE, None, (init_tree, xs_tree))
    pmap_rules = not trace.shard_map_rules

    def make(carry_types):
        def step(carry, x):
            out = f(carry, x)
            if not isinstance(out, tuple) or len(out) != 2:
                raise TypeError(f"scan body output must be a pair, got {out}.")
            return (_varying_as(out[0], carry_types) if pmap_rules else out[0]), out[1]
        body = _Body(step, list(carry_types) + x_types, in_tree, trace, "scan body")
        return _tree.children(body.out_def)[0], body

    carry_types, (body,) = _trace_loop("scan body", f, init_tree, carry_vals, trace, make)
    carry_vals = [_coerce(x, t) for x, t in builtins.zip(carry_vals, carry_types)]
    n = len(carry_vals)
    outs = trace.emit("scan", carry_vals + xs_vals + body.captured,
                      [("body", [body.program]), ("length", length), ("reverse", bool(reverse)), ("num_carry", n),
                       ("num_consts", len(body.captured)), ("unroll", unroll)])
    outs = [x.weakly(t[3]) for x, t in builtins.zip(outs, body.out_types)]
    return _tree.unflatten(body.out_def, outs)


# ---- while_loop and fori_loop --------------------------------------------------------------------------------

def while_loop(cond_fun, body_fun, init_val):
    """jax.lax.while_loop: val = init_val; while cond_fun(val): val = body_fun(val); return val, as one
    equation (both functions traced once). cond_fun returns a boolean scalar; the carry keeps its pytree
    structure and types (JAX's TypeError names the leaf that changes)."""
    if not (callable(body_fun) and callable(cond_fun)):
        raise TypeError("lax.while_loop: body_fun and cond_fun arguments should be callable.")
    trace = current_trace()
    if trace is None:
        return _eager("weft.lax.while_loop", lambda v: while_loop(cond_fun, body_fun, v), (init_val,))
    init_leaves, init_tree = _tree.flatten(init_val)
    carry_vals = [_as_value(trace, leaf) for leaf in init_leaves]
    in_tree = (_tree.Kind.TUPLE, None, (init_tree,))
    pmap_rules = not trace.shard_map_rules

    def make(carry_types):
        test = _Body(cond_fun, carry_types, in_tree, trace, "while_loop cond_fun")
        if test.out_def != _tree.LEAF or len(test.out_types) != 1:
            raise TypeError(f"cond_fun must return a boolean scalar, but got pytree {_tree.describe(test.out_def)}.")
        dtype, shape = test.out_types[0][:2]
        if dtype != _np.bool_ or shape != ():
            raise TypeError("cond_fun must return a boolean scalar, but got output type(s) "
                            f"[ShapedArray({_type_text(test.out_types[0], [])})].")
        step = (lambda v: _varying_as(body_fun(v), carry_types)) if pmap_rules else body_fun
        body = _Body(step, carry_types, in_tree, trace, "while_loop body_fun")
        return body.out_def, body, test

    carry_types, (body, test) = _trace_loop("while_loop body", body_fun, init_tree, carry_vals, trace, make)
    carry_vals = [_coerce(x, t) for x, t in builtins.zip(carry_vals, carry_types)]
    outs = trace.emit("while_loop", carry_vals + test.captured + body.captured,
                      [("cond", [test.program]), ("body", [body.program]), ("cond_nconsts", len(test.captured)),
                       ("body_nconsts", len(body.captured))])
    outs = [x.weakly(t[3]) for x, t in builtins.zip(outs, body.out_types)]
    return _tree.unflatten(init_tree, outs)


def fori_loop(lower, upper, body_fun, init_val, *, unroll=None):
    """jax.lax.fori_loop: val = init_val; for i in range(lower, upper): val = body_fun(i, val). With concrete
    bounds (Python or numpy integers) it is a scan of max(upper - lower, 0) steps (reverse-differentiable, as
    JAX's), i counting from lower in the default int; with a traced bound, a while_loop. lower and upper must
    have one dtype (a weak Python int takes the other's)."""
    if not callable(body_fun):
        raise TypeError("lax.fori_loop: body_fun argument should be callable.")
    (lower_dtype, lower_weak), (upper_dtype, upper_weak) = _dtypes.dtype_and_weak(lower), _dtypes.dtype_and_weak(upper)
    dtype = lower_dtype if lower_dtype == upper_dtype else None
    if dtype is None and lower_dtype.kind == "i" and upper_dtype.kind == "i":
        if lower_weak and not upper_weak:
            dtype = upper_dtype
        elif upper_weak and not lower_weak:
            dtype = lower_dtype
    if dtype is None:
        raise TypeError(f"lower and upper arguments to fori_loop must have equal types, got {lower_dtype.name} and "
                        f"{upper_dtype.name}")
    if not isinstance(lower, Tracer) and not isinstance(upper, Tracer):
        lower_, upper_ = int(lower), int(upper)

        def scanned_fun(loop_carry, _):
            i, x = loop_carry
            return (i + 1, body_fun(i, x)), None
        (_, result), _ = scan(scanned_fun, (lower_, init_val), None, length=max(upper_ - lower_, 0),
                              unroll=False if unroll is None else unroll)
        return result
    if unroll is not None and unroll is not False and unroll != 1:
        raise ValueError("Can only use `unroll` in `fori_loop` if the loop bounds are statically known.")
    trace = current_trace()
    lower, upper = (_jnp.asarray(_as_value(trace, b), dtype) if _dtypes.dtype_and_weak(b)[0] != dtype else b
                    for b in (lower, upper))

    def while_body_fun(loop_carry):
        i, upper, x = loop_carry
        return i + 1, upper, body_fun(i, x)
    _, _, result = while_loop(lambda loop_carry: loop_carry[0] < loop_carry[1], while_body_fun,
                              (lower, upper, init_val))
    return result


# ---- map -----------------------------------------------------------------------------------------------------

def map(f, xs, *, batch_size=None):  # noqa: A001  (jax.lax.map's name)
    """jax.lax.map: f applied to each slice of xs along its leading axis, the results stacked: a scan with no
    carry. With batch_size, slices go through f in vmapped batches of that size (the remainder in one more
    vmap; batch_size=0 is one vmap of everything), as JAX's."""
    if current_trace() is None:
        return _eager("weft.lax.map", lambda x: map(f, x, batch_size=batch_size), (xs,))
    if batch_size is None:
        return scan(lambda _, x: ((), f(x)), (), xs)[1]
    from ._transforms import vmap  # (weft._transforms imports this module's users)
    leaves, treedef = _tree.flatten(xs)
    if not leaves:
        return scan(lambda _, x: ((), vmap(f)(x)), (), xs)[1]
    total = leaves[0].shape[0]
    num_batches, remainder = (0, total) if batch_size == 0 else divmod(total, batch_size)
    done = num_batches * batch_size
    ys = None
    if num_batches:
        batched = _tree.unflatten(treedef, [leaf[:done].reshape((num_batches, batch_size) + tuple(leaf.shape[1:]))
                                            for leaf in leaves])
        ys = _tree.tree_map(lambda y: y.reshape((-1,) + tuple(y.shape[2:])),
                            scan(lambda _, x: ((), vmap(f)(x)), (), batched)[1])
    if remainder:
        rest = vmap(f)(_tree.unflatten(treedef, [leaf[done:] for leaf in leaves]))
        if ys is None:
            return rest
        y_leaves, y_tree = _tree.flatten(ys)
        return _tree.unflatten(y_tree, [_jnp.concatenate([a, b]) for a, b in
                                        builtins.zip(y_leaves, _tree.flatten(rest)[0])])
    return ys
