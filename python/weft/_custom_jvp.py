"""weft.custom_jvp: a function with a user-defined forward-mode rule, JAX's jax.custom_jvp API.

    @weft.custom_jvp
    def log1pexp(x):
        return jnp.log1p(jnp.exp(x))

    @log1pexp.defjvp
    def log1pexp_jvp(primals, tangents):                # (primals, tangents) -> (primal_out, tangent_out)
        x, = primals
        t, = tangents
        return log1pexp(x), t * (1 - 1 / (1 + jnp.exp(x)))

Outside any trace f(*args) is fun(*args). While a trace runs (weft.grad / value_and_grad / vjp, weft.jit, a
traced weft.pmap) a call records fun's own equations into the trace, then one equation

    outs = custom_jvp_call[name=... outputs=n primals=k rule=R] primals... f_outs...

the identity on fun's outputs whose operands name, by value, the primal inputs and fun's outputs; and the jvp
rule is traced at once into a program of its own from (primals..., tangents...) to (primal outputs...,
tangent outputs...) and registered in C++ under the number R, once per signature (as custom_vjp's bwd:
weft/_custom_vjp.py). Forward mode inlines that program for the call's tangents; reverse mode (weft.grad)
transposes it, as JAX differentiates a custom_jvp function in reverse by transposing its JVP (the rule must be
linear in the tangents, as JAX requires); vmap batches it (src/program/custom_calls.hpp). fun's own equations
are never differentiated. Tracing the rule when the call is traced checks its results (a pair, structures,
shapes and dtypes against fun's output) at the user's call, with JAX's TypeError.

Differences from JAX: tangents are never symbolic zeros (a tangent nothing flows into is zeros, and
defjvp(symbolic_zeros=True) is refused); an integer or boolean input's tangent is zeros of its dtype (JAX's
float0), an integer or boolean output's tangent is zeros whatever the rule returns; calling the function
itself inside its own jvp rule (`return f(x), ...`) runs fun there, so a second derivative differentiates
that primal output through fun's equations; the rule may not close over traced values (pass them as
arguments).
"""
import functools

import numpy as _np

from . import _tree, _weft
from ._custom_vjp import bind_call, in_trace, running_rules, split_nondiff, zeros_of
from ._jit import leaf_type, trace_function
from ._trace import Tracer, UnexpectedTracerError, current_trace, trace_of


class custom_jvp:
    """jax.custom_jvp: `f = custom_jvp(fun, nondiff_argnums=())`, then `f.defjvp(jvp)` or `f.defjvps(*jvps)`.

    jvp(*nondiff_args, primals, tangents) -> (primal_out, tangent_out), where primals and tangents are tuples
    with one entry per argument not in nondiff_argnums; tangent_out has primal_out's structure, shapes and
    dtypes, and primal_out fun's. Arguments at nondiff_argnums (functions, Python values: JAX's advice) are
    passed to fun as they are and to jvp first; they must not be traced arrays.
    """

    def __init__(self, fun, nondiff_argnums=()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.jvp = None
        self._name = getattr(fun, "__name__", "fun")
        # the registered jvp rule per signature (as custom_vjp's: one program per signature, not per call)
        self._rules = {}

    def defjvp(self, jvp, symbolic_zeros=False):
        """Sets the rule jvp(*nondiff, primals, tangents) -> (primal_out, tangent_out); returns jvp (so it
        decorates)."""
        if symbolic_zeros:
            raise NotImplementedError(f"custom_jvp({self._name}).defjvp: symbolic_zeros=True is not supported: "
                                      "weft passes every tangent as an array (zeros where nothing flows)")
        self.jvp = jvp
        self._rules = {}  # traced from the old rule
        return jvp

    def defjvps(self, *jvps):
        """One rule per argument, jvps[i](tangent_i, primal_out, *primals) -> that argument's contribution to
        the tangent output (None: it contributes nothing); the contributions add up."""
        if self.nondiff_argnums:
            raise TypeError(f"custom_jvp({self._name}).defjvps can't be used with nondiff_argnums (use defjvp)")

        def jvp(primals, tangents):
            primal_out = self(*primals)
            out_leaves, out_def = _tree.flatten(primal_out)
            total = None
            for tangent, rule in zip(tangents, jvps):
                if rule is None:
                    continue
                leaves, treedef = _tree.flatten(rule(tangent, primal_out, *primals))
                if treedef != out_def:
                    raise TypeError(f"custom_jvp({self._name}).defjvps: a rule returned structure "
                                    f"{_tree.describe(treedef)}, the output is {_tree.describe(out_def)}")
                total = leaves if total is None else [a + b for a, b in zip(total, leaves)]
            if total is None:
                total = [_zeros_like(leaf) for leaf in out_leaves]
            return primal_out, _tree.unflatten(out_def, total)

        self.defjvp(jvp)

    def __call__(self, *args, **kwargs):
        if self.jvp is None:
            raise AttributeError(f"No JVP defined for custom_jvp function {self._name} using defjvp "
                                 f"(custom_jvp({self._name}): call {self._name}.defjvp(jvp) before calling it)")
        args, nondiff = bind_call(self.fun, args, kwargs, self.nondiff_argnums, f"custom_jvp({self._name})")
        trace = current_trace() or trace_of(_tree.flatten(tuple(args))[0])
        # The rule usually calls f itself for its primal output (JAX's examples: `return f(x), ...`): there f
        # is fun, as in JAX, where the rule sees values no differentiation traces.
        if trace is None or self in running_rules():
            return self.fun(*args)
        return _TracedCall(self, trace, args, nondiff).record()


class _TracedCall:
    """One call of a custom_jvp function while `trace` runs: fun recorded, the jvp rule traced and
    registered, the custom_jvp_call equation emitted."""

    def __init__(self, f, trace, args, nondiff):
        self.f, self.trace, self.args = f, trace, args
        self.what = f"custom_jvp({f._name})"
        self.nondiff, self.diff, traced = split_nondiff(args, nondiff)
        for i in traced:
            raise UnexpectedTracerError(
                f"{self.what}: argument {i} is in nondiff_argnums but is a traced array; nondiff_argnums are for "
                "arguments that can't be traced (functions, Python values): pass arrays as ordinary arguments")

    def record(self):
        out_leaves, out_def = _tree.flatten(self.f.fun(*self.args))
        outs = [in_trace(self.trace, leaf, f"{self.what}: its output") for leaf in out_leaves]
        primals, primal_defs = [], []
        for i in self.diff:
            leaves, treedef = _tree.flatten(self.args[i])
            primals.append([in_trace(self.trace, leaf, f"{self.what}: argument {i}") for leaf in leaves])
            primal_defs.append(treedef)
        flat_primals = [p for leaves in primals for p in leaves]
        if not outs:
            return _tree.unflatten(out_def, [])
        rule = self._register_rule(flat_primals, primal_defs, outs, out_def)
        params = [("rule", rule), ("primals", len(flat_primals)), ("outputs", len(outs)), ("name", self.f._name)]
        return _tree.unflatten(out_def, self.trace.emit("custom_jvp_call", flat_primals + outs, params))

    def _register_rule(self, primals, primal_defs, outs, out_def):
        """The jvp rule traced over (primals, tangents) into a program, registered; its rule number. One per
        signature: the primals' and outputs' types and structures, the nondiff_argnums values, the mesh and
        the rule set the trace runs under."""
        outer = current_trace()
        key = (tuple((t.dtype, t.shape, t._varying) for t in primals + outs), tuple(primal_defs), out_def,
               tuple(self.nondiff), tuple(self.trace.mesh), outer is not None and outer.shard_map_rules)
        try:
            rule = self.f._rules.get(key)
        except TypeError:  # an unhashable nondiff argument: traced for this call only
            key, rule = None, None
        if rule is None:
            rule = self._trace_rule(primals, primal_defs, outs, out_def)
            if key is not None:
                self.f._rules[key] = rule
        return rule

    def _trace_rule(self, primals, primal_defs, outs, out_def):
        sizes = [_tree.count_leaves(treedef) for treedef in primal_defs]
        n = len(primals)

        def per_argument(flat):
            args, at = [], 0
            for treedef, size in zip(primal_defs, sizes):
                args.append(_tree.unflatten(treedef, list(flat[at:at + size])))
                at += size
            return tuple(args)

        def flat_rule(*flat):
            running = running_rules()
            running.append(self.f)
            try:
                pair = self.f.jvp(*self.nondiff, per_argument(flat[:n]), per_argument(flat[n:]))
            finally:
                running.pop()
            return self._checked_outputs(pair, outs, out_def)

        types = [(t.dtype, t.shape, t._varying) for t in primals]
        captured = []
        program, _ = trace_function(flat_rule, types + types, _tree.flat_tuple(2 * n), self.trace.mesh,
                                    f"{self.what} jvp rule", captured)
        if captured:
            raise _weft.InvalidArgument(f"{self.what}: the jvp rule uses a traced value from outside it; pass what it "
                                        f"needs as an argument of {self.f._name}")
        return _weft.register_custom_jvp(program, self.f._name)

    def _checked_outputs(self, pair, outs, out_def):
        """The rule's (primal_out, tangent_out) checked against fun's output (JAX's checks, its TypeError):
        the flat primal outputs, then the flat tangent outputs."""
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise TypeError(f"{self.what}: the jvp rule must return a pair (primal_out, tangent_out), a tuple or list "
                            f"of two, got {type(pair).__name__}")
        primal_leaves, primal_def = _tree.flatten(pair[0])
        tangent_leaves, tangent_def = _tree.flatten(pair[1])
        if primal_def != out_def:
            raise TypeError(f"{self.what}: the jvp rule's primal output has structure {_tree.describe(primal_def)}, "
                            f"{self.f._name}'s output {_tree.describe(out_def)} (they must be the same)")
        if tangent_def != primal_def:
            raise TypeError(f"{self.what}: the jvp rule's primal and tangent outputs have structures "
                            f"{_tree.describe(primal_def)} and {_tree.describe(tangent_def)} (a tangent has its "
                            "primal's structure)")
        tangents = []
        for k, (primal, tangent, out) in enumerate(zip(primal_leaves, tangent_leaves, outs)):
            p_dtype, p_shape = leaf_type(primal, f"{self.what}: the jvp rule's primal output {k}")
            if (p_dtype, tuple(p_shape)) != (out.dtype, out.shape):
                raise TypeError(f"{self.what}: the jvp rule's primal output {k} is {_text(p_dtype, p_shape)}, "
                                f"{self.f._name}'s output {k} is {_text(out.dtype, out.shape)} (they must be the same)")
            if _np.dtype(out.dtype).kind not in "fc":
                tangents.append(zeros_of(out))  # an integer or boolean output has no tangent (JAX's float0)
                continue
            if not isinstance(tangent, Tracer) and type(tangent) in (int, float):
                tangent = _np.asarray(tangent, dtype=out.dtype)  # a Python number is weakly typed, as in JAX
            t_dtype, t_shape = leaf_type(tangent, f"{self.what}: the jvp rule's tangent output {k}")
            if (t_dtype, tuple(t_shape)) != (out.dtype, out.shape):
                raise TypeError(f"{self.what}: the jvp rule's tangent output {k} is {_text(t_dtype, t_shape)} for a "
                                f"{_text(out.dtype, out.shape)} primal output (a tangent has its primal's shape and "
                                "dtype)")
            tangents.append(tangent)
        return list(primal_leaves) + tangents


def _text(dtype, shape):
    return f"{_np.dtype(dtype).name}{list(shape)}"


def _zeros_like(leaf):
    if isinstance(leaf, Tracer):
        return zeros_of(leaf)
    return _np.zeros_like(_np.asarray(leaf))
