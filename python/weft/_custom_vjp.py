"""weft.custom_vjp: a function with a user-defined reverse-mode rule, JAX's jax.custom_vjp API.

    @weft.custom_vjp
    def log1pexp(x):
        return jnp.log1p(jnp.exp(x))

    def fwd(x):
        return log1pexp(x), x                          # (output, residuals)

    def bwd(x, g):                                     # (residuals, output cotangent) -> one per argument
        return (g * (1 - 1 / (1 + jnp.exp(x))),)

    log1pexp.defvjp(fwd, bwd)

Outside any trace f(*args) is fun(*args). While a trace runs (weft.grad / value_and_grad / vjp, a traced
weft.pmap, weft.jit) a call records fwd's equations into the trace, then one equation

    outs = custom_vjp_call[name=... outputs=n primals=k rule=R] primals... fwd_outs... residuals...

the identity on fwd's outputs whose operands name, by value, the primal inputs, fwd's outputs and the
residuals; and bwd is traced at once into a program of its own over (residual types, output cotangent types)
and registered in C++ under the number R, once per signature (a later call with the same types, structures
and nondiff arguments reuses R, as weft.jit reuses a trace: weft.grad outside weft.jit traces its function on
every call, and a registration per call would grow the process by a program per call). The VJP transposes
the call by inlining that program in place of fwd's equations' rules (src/program/custom_calls.hpp has the why:
operands survive dead-code elimination, inlining into outer traces and re-emission, which renumber values). Tracing bwd when the call is traced, not
when it is differentiated, checks its results (their count, structure, shapes and dtypes) at the user's call.

Differences from JAX: under a trace the program computes the output with fwd even when nothing
differentiates it (JAX runs fun then), so fwd's output must equal fun's, as JAX requires anyway; values fun /
fwd close over (rather than take as arguments) get no cotangent through the call (JAX raises); bwd may not
close over traced values (pass them through the residuals); None is accepted for a whole argument's
cotangent, not for parts of one.
"""
import functools
import inspect
import threading

import numpy as _np

from . import _tree, _weft
from ._jit import leaf_type, trace_function
from ._trace import Tracer, bind, current_trace, trace_of


class custom_vjp:
    """jax.custom_vjp: `f = custom_vjp(fun, nondiff_argnums=())`, then `f.defvjp(fwd, bwd)`.

    fwd(*args) -> (output, residuals); bwd(*nondiff_args, residuals, output_cotangent) -> a tuple with one
    cotangent per argument not in nondiff_argnums (each of its argument's structure, shapes and dtypes, or
    None for zeros). Arguments at nondiff_argnums are passed to fun and fwd as they are and to bwd first; they
    must not be traced arrays (JAX's advice too: pass those as arguments, their cotangent may be None).
    """

    def __init__(self, fun, nondiff_argnums=()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.fwd = None
        self.bwd = None
        self._name = getattr(fun, "__name__", "fun")
        # bwd's registered rule per signature (see _TracedCall._register_bwd): C++ keeps a registered program
        # for the life of the process, so registering one per traced call grew memory with every call of
        # weft.grad (which traces its function on each call outside weft.jit).
        self._rules = {}

    def defvjp(self, fwd, bwd):
        """Sets the rule: fwd(*args) -> (output, residuals), bwd(*nondiff, residuals, g) -> cotangents."""
        self.fwd = fwd
        self.bwd = bwd
        self._rules = {}  # traced from the old bwd

    def __call__(self, *args, **kwargs):
        what = f"custom_vjp({self._name})"
        if self.fwd is None:
            raise AttributeError(f"No VJP defined for custom_vjp function {self._name} using defvjp "
                                 f"({what}: call {self._name}.defvjp(fwd, bwd) before calling it)")
        args, nondiff = bind_call(self.fun, args, kwargs, self.nondiff_argnums, what)
        trace = current_trace() or trace_of(_tree.flatten(tuple(args))[0])
        # fwd usually calls f itself for the output (JAX's examples: `return f(x), res`); there, as in JAX
        # (where fwd sees values no differentiation traces), f is fun.
        if trace is None or self in running_rules():
            return self.fun(*args)
        return _TracedCall(self, trace, args, nondiff).record()


class _TracedCall:
    """One call of a custom_vjp function while `trace` runs: fwd recorded, bwd traced and registered, the
    custom_vjp_call equation emitted."""

    def __init__(self, f, trace, args, nondiff):
        self.f, self.trace, self.args = f, trace, args
        self.what = f"custom_vjp({f._name})"
        self.nondiff, self.diff, traced = split_nondiff(args, nondiff)
        for i in traced:
            raise _weft.InvalidArgument(
                f"{self.what}: argument {i} is in nondiff_argnums but is a traced array; pass it as a "
                "differentiable argument instead (bwd may return None for its cotangent)")

    def record(self):
        running = running_rules()
        running.append(self.f)
        try:
            pair = self.f.fwd(*self.args)
        finally:
            running.pop()
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise _weft.InvalidArgument(f"{self.what}: fwd must return a pair (output, residuals), got "
                                        f"{type(pair).__name__}")
        out, res = pair
        out_leaves, out_def = _tree.flatten(out)
        res_leaves, res_def = _tree.flatten(res)
        outs = [self._in_trace(leaf, "fwd's output") for leaf in out_leaves]
        residuals = [self._in_trace(leaf, "fwd's residuals") for leaf in res_leaves]
        primals, primal_defs = [], []
        for i in self.diff:
            leaves, treedef = _tree.flatten(self.args[i])
            primals.append([self._in_trace(leaf, f"argument {i}") for leaf in leaves])
            primal_defs.append(treedef)
        rule = self._register_bwd(residuals, res_def, outs, out_def, primals, primal_defs)
        flat_primals = [p for leaves in primals for p in leaves]
        params = [("rule", rule), ("primals", len(flat_primals)), ("outputs", len(outs)),
                  ("name", self.f._name)]
        results = self.trace.emit("custom_vjp_call", flat_primals + outs + residuals, params) if outs else []
        return _tree.unflatten(out_def, results)

    def _in_trace(self, leaf, where):
        return in_trace(self.trace, leaf, f"{self.what}: {where}")

    def _register_bwd(self, residuals, res_def, outs, out_def, primals, primal_defs):
        """bwd traced over (residuals, output cotangents) into a program, registered; its rule number. One
        program per signature, as weft.jit traces once per signature: the residuals' and outputs' types and
        structures, the differentiable arguments' (which bwd's results are checked against), the values of the
        nondiff_argnums arguments, the mesh and rule set the trace runs under. (So bwd, like a jitted
        function, is traced again only when one of those changes, not when a value it closes over does.)"""
        types = [(t.dtype, t.shape, t._varying) for t in residuals + outs]
        outer = current_trace()
        key = (tuple(types), res_def, out_def, tuple(primal_defs),
               tuple((t.dtype, t.shape, t._varying) for leaves in primals for t in leaves),
               tuple(self.nondiff), tuple(self.trace.mesh), outer is not None and outer.shard_map_rules)
        try:
            rule = self.f._rules.get(key)
        except TypeError:  # an unhashable nondiff argument: traced for this call only
            key, rule = None, None
        if rule is None:
            rule = self._trace_bwd(types, residuals, res_def, out_def, primals, primal_defs)
            if key is not None:
                self.f._rules[key] = rule
        return rule

    def _trace_bwd(self, types, residuals, res_def, out_def, primals, primal_defs):
        n_res = len(residuals)

        def flat_bwd(*flat):
            res = _tree.unflatten(res_def, list(flat[:n_res]))
            g = _tree.unflatten(out_def, list(flat[n_res:]))
            return self._cotangent_leaves(self.f.bwd(*self.nondiff, res, g), primals, primal_defs)

        captured = []
        name = f"{self.what} bwd"
        program, _ = trace_function(flat_bwd, types, _tree.flat_tuple(len(types)), self.trace.mesh,
                                    name, captured)
        if captured:
            raise _weft.InvalidArgument(f"{self.what}: bwd uses a traced value from outside it; pass what bwd needs "
                                        "through fwd's residuals")
        return _weft.register_custom_vjp(program, self.f._name)

    def _cotangent_leaves(self, cts, primals, primal_defs):
        """bwd's result checked against the differentiable arguments: one leaf per primal leaf (zeros for a
        None), of its primal's shape and dtype."""
        n = len(self.diff)
        without = ", not counting nondiff_argnums" if self.nondiff else ""
        if not isinstance(cts, (tuple, list)):
            raise _weft.InvalidArgument(f"{self.what}: bwd must return a tuple of cotangents, one per argument of "
                                        f"{self.f._name}{without} ({n}), got {type(cts).__name__}")
        if len(cts) != n:
            raise _weft.InvalidArgument(f"{self.what}: bwd returned {len(cts)} cotangents for {n} differentiable "
                                        f"argument(s) of {self.f._name} (one per argument, in order{without})")
        leaves = []
        for k, (ct, tracers, treedef) in enumerate(zip(cts, primals, primal_defs)):
            arg = self.diff[k]
            if ct is None:
                leaves.extend(zeros_of(t) for t in tracers)
                continue
            ct_leaves, ct_def = _tree.flatten(ct)
            if ct_def != treedef:
                raise _weft.InvalidArgument(
                    f"{self.what}: bwd's cotangent for argument {arg} has structure {_tree.describe(ct_def)}, the argument "
                    f"{_tree.describe(treedef)} (a cotangent has its argument's structure)")
            for leaf, primal in zip(ct_leaves, tracers):
                leaves.append(self._checked_leaf(leaf, primal, arg))
        return leaves

    def _checked_leaf(self, leaf, primal, arg):
        if _np.dtype(primal.dtype).kind not in "fc":
            return zeros_of(primal)  # integer and boolean arguments carry no cotangent (JAX's float0)
        if not isinstance(leaf, Tracer):
            leaf = _np.asarray(leaf, dtype=primal.dtype if isinstance(leaf, (int, float)) else None)
        dtype, shape = _np.dtype(leaf.dtype), tuple(leaf.shape)
        if shape != primal.shape or dtype != primal.dtype:
            raise _weft.InvalidArgument(
                f"{self.what}: bwd's cotangent for argument {arg} is {dtype.name}{list(shape)}, the argument is "
                f"{primal.dtype.name}{list(primal.shape)} (a cotangent has its primal's shape and dtype)")
        return leaf


# ---- shared with custom_jvp (weft/_custom_jvp.py) -----------------------------------------------------------
_local = threading.local()


def bind_call(fun, args, kwargs, nondiff_argnums, what):
    """(positional arguments, sorted non-negative nondiff_argnums) of a call of a custom_vjp / custom_jvp
    function: JAX binds keywords to positions, so the rules see the same argument list as fun."""
    if kwargs:
        args = inspect.signature(fun).bind(*args, **kwargs).args
    nondiff = set()
    for a in nondiff_argnums:
        if not isinstance(a, int) or not -len(args) <= a < len(args):
            raise _weft.InvalidArgument(f"{what}: nondiff_argnums {nondiff_argnums!r} is out of range for "
                                        f"{len(args)} arguments")
        nondiff.add(a % len(args))
    return args, sorted(nondiff)


def split_nondiff(args, nondiff):
    """(the nondiff arguments' values, the differentiated arguments' positions, the nondiff positions holding a
    traced array: each an error, which the caller words) of a custom rule's call."""
    traced = [i for i in nondiff if any(isinstance(leaf, Tracer) for leaf in _tree.flatten(args[i])[0])]
    return [args[i] for i in nondiff], [i for i in range(len(args)) if i not in nondiff], traced


def running_rules():
    """The custom_vjp / custom_jvp functions whose rule (fwd, the jvp rule) is being traced on this thread now,
    innermost last: calling one of them there runs its function (as JAX's rules see values no
    differentiation traces), rather than recording a call whose rule would be traced again."""
    stack = getattr(_local, "rules", None)
    if stack is None:
        stack = _local.rules = []
    return stack


def in_trace(trace, leaf, what):
    """`leaf` as a tracer of `trace`: a constant for a concrete value, a capture for a tracer of a trace around
    it; `what` names the value in errors."""
    if isinstance(leaf, Tracer):
        if leaf._trace is trace:
            return leaf
        if trace.encloses(leaf._trace):
            return trace.capture(leaf)
        raise _weft.InvalidArgument(f"{what} is a tracer of another trace ({leaf._trace.name})")
    dtype, _ = leaf_type(leaf, what)
    return trace.constant(_np.asarray(leaf, dtype=dtype))


def zeros_of(like):
    """Zeros of `like`'s type (dtype, shape), recorded in the trace running (a rule's)."""
    return bind("broadcast_to", [_np.zeros((), like.dtype)], [("shape", list(like.shape))])
