"""pipeline.py: the GPipe schedule over the mesh's 'pipe' axis, in SPMD form (every stage runs the same
program). Stage s holds layers [s L/pp, (s+1) L/pp). The device's rows of the batch are cut into M
microbatches; at tick t (M + S - 1 of them) every stage runs its layers on what it holds (stage 0: the
embedding of microbatch t), then passes its output to the next stage with one ppermute. The last stage's
outputs of ticks S-1 .. M+S-2 are the microbatches' final activations, whose loss the last stage computes;
a psum over 'pipe' gives every stage that loss. weft.grad runs the schedule backwards: the ppermutes
transpose to ppermutes the other way, the stages' weights (varying over 'pipe') get their own gradients and
the shared embedding and head (replicated over 'pipe') theirs summed over the stages (the pvary's psum).

Ticks where a stage holds no microbatch yet (the bubble) compute on zeros or on a repeated microbatch and
are masked out of the loss, as any SPMD pipeline does: the bubble costs time, not correctness.

1F1B (`--schedule 1f1b`, one_f_one_b): the same stages, but each microbatch's backward pass runs as soon as
its forward pass has left the last stage, so a stage keeps at most 2S - 1 microbatches' inputs instead of
all M of them: the activation memory a pipeline needs no longer grows with the microbatches. In SPMD form
every stage does one forward and one backward a tick: at tick t stage s runs the forward of microbatch
t - s and the backward of microbatch t - (2S - 2 - s) (M + 2S - 2 ticks); activations go forward and
cotangents backward by one ppermute each a tick. weft.grad of the GPipe loss cannot give this order (the
transpose of a forward schedule runs every backward after every forward), so the backward is spelled out:
each tick differentiates its stage once with weft.grad, recomputing the stage's forward from the input it
kept (activation recomputation, as 1F1B implementations on small memories do: a third more compute for
memory bounded by the stages). The microbatch a stage differentiates was run at a different tick on each
stage, so each picks its own stored input by a mask on its stage index.
"""
import weft
import weft.numpy as jnp
from weft import lax
from weft.tree_util import tree_map

SHARED = ("embed", "pos", "lnf_g", "lnf_b", "head")   # replicated over 'pipe'
HEAD = ("lnf_g", "lnf_b", "head")                      # the last stage's


def stage_blocks(p):
    """This stage's layers: each block's arrays without their (local, size 1) stage dimension."""
    return [{k: jnp.reshape(v, v.shape[1:]) for k, v in b.items()} for b in p["blocks"]]


def pipeline_loss(model, p, tokens, targets):
    lay = model.lay
    stages, micro = lay.pp, lay.microbatches
    rows = tokens.shape[0]
    mb = rows // micro
    stage = lax.axis_index("pipe")
    dtype = p["embed"].dtype
    is_first = (stage == 0).astype(dtype)
    is_last = (stage == stages - 1).astype(dtype)
    blocks = stage_blocks(p)
    # The embedding (replicated over 'pipe') typed as varying once, before the ticks: its cotangents from
    # every tick add up locally and its gradient takes one psum over 'pipe'. Left to shard_map's rules, each
    # tick's `fresh * is_first` would pvary its own embedding output: one activation-sized psum per tick.
    p = dict(p, embed=lax.pvary(p["embed"], "pipe"), pos=lax.pvary(p["pos"], "pipe"))
    forward = [(s, s + 1) for s in range(stages - 1)]
    state, outputs = None, []
    for tick in range(micro + stages - 1):
        j = min(tick, micro - 1)
        fresh = model.embed(p, tokens[j * mb:(j + 1) * mb])
        x = fresh if state is None else fresh * is_first + state * (1.0 - is_first)
        for b in blocks:
            x = model.block(x, b, mb)
        if tick >= stages - 1:
            outputs.append(x)
        if tick < micro + stages - 2:
            state = lax.ppermute(x, "pipe", forward)
    final = jnp.concatenate(outputs, axis=0)
    local = model.token_nll(model.logits(p, final), targets) * is_last
    return lax.psum(local, "pipe")


def one_f_one_b(model, p, tokens, targets):
    """(loss, gradients) of the global batch by the 1F1B schedule; see the module's docstring."""
    lay = model.lay
    stages, micro = lay.pp, lay.microbatches
    mb = tokens.shape[0] // micro
    stage = lax.axis_index("pipe")
    dtype = p["embed"].dtype
    is_first = (stage == 0).astype(dtype)
    is_last = (stage == stages - 1).astype(dtype)
    seed = is_last * (1.0 / micro)          # d loss / d (microbatch loss), on the last stage only
    # Typed varying once, before the ticks: the shared parameters over 'pipe' (each stage's gradient is its
    # own, summed at the end) and every parameter replicated over 'data' (one psum at the end instead of
    # one per tick and parameter inside each tick's differentiation).
    summed = {}

    def vary(name, x):
        axes = tuple(a for a in (("pipe",) if name in SHARED else ()) + (("data",) if lay.dp > 1 else ())
                     if a not in x._varying)
        summed[name] = axes
        return lax.pvary(x, axes) if axes else x

    q = {k: vary(k, v) for k, v in p.items() if k != "blocks"}
    q["blocks"] = [{k: vary("blocks/" + k, v) for k, v in b.items()} for b in p["blocks"]]
    lower = {"embed": q["embed"], "pos": q["pos"], "blocks": q["blocks"]}
    upper = {k: q[k] for k in HEAD}

    def run_stage(w, x_in, tok):
        fresh = model.embed(w, tok)
        x = fresh * is_first + x_in * (1.0 - is_first)
        for b in stage_blocks(w):
            x = model.block(x, b, mb)
        return x

    def head_loss(w, y, tgt):
        local = model.token_nll(model.logits(w, y), tgt)
        axes = lay.token_axes()
        return lax.pmean(local, axes) if axes else local

    def rows(a, m):
        m = min(max(m, 0), micro - 1)
        return a[m * mb:(m + 1) * mb]

    forward = [(s, s + 1) for s in range(stages - 1)]
    backward = [(s + 1, s) for s in range(stages - 1)]
    zeros = jnp.zeros((mb * tokens.shape[1], model.c.d_model), dtype)
    inputs = []                              # inputs[t]: what each stage ran its layers on at tick t
    recv_f = recv_b = None
    loss = None
    grads_lower = grads_upper = None
    last_forward = micro + stages - 2
    for tick in range(micro + 2 * stages - 2):
        dy_own = None
        if tick <= last_forward:
            # Forward: stage s runs microbatch tick - s (stage 0 embeds microbatch `tick` itself).
            tok = rows(tokens, tick)
            x_in = zeros if recv_f is None else recv_f
            inputs.append(x_in)
            y = run_stage(lower, x_in, tok)
            if tick >= stages - 1:
                # The last stage's microbatch tick - S + 1 is complete: its loss and the loss's cotangent.
                value, (d_upper, dy) = weft.value_and_grad(head_loss, argnums=(0, 1))(
                    upper, y, rows(targets, tick - stages + 1))
                part = value * seed
                loss = part if loss is None else loss + part
                d_upper = tree_map(lambda g: g * seed, d_upper)
                grads_upper = d_upper if grads_upper is None else tree_map(jnp.add, grads_upper, d_upper)
                dy_own = dy * seed
            if tick < last_forward:
                recv_f = lax.ppermute(y, "pipe", forward)
        if tick >= stages - 1:
            # Backward: stage s differentiates microbatch tick - (2S - 2 - s), whose input it stored at tick
            # tick - (2S - 2 - 2s): a different tick on each stage, so each stage picks its own by a mask.
            ct = dy_own if dy_own is not None else zeros
            if recv_b is not None:
                ct = ct * is_last + recv_b * (1.0 - is_last)
            x_sel = None
            for s in range(stages):
                at = tick - (2 * stages - 2 - 2 * s)
                if 0 <= at < len(inputs):
                    pick = inputs[at] * (stage == s).astype(dtype)
                    x_sel = pick if x_sel is None else x_sel + pick
            x_sel = zeros if x_sel is None else x_sel
            tok = rows(tokens, tick - (2 * stages - 2))
            d_lower, dx = weft.grad(lambda w, x: jnp.sum(run_stage(w, x, tok) * ct), argnums=(0, 1))(lower, x_sel)
            grads_lower = d_lower if grads_lower is None else tree_map(jnp.add, grads_lower, d_lower)
            if tick < micro + 2 * stages - 3:
                recv_b = lax.ppermute(dx, "pipe", backward)
    grads = dict(grads_lower, **grads_upper)
    out = {k: lax.psum(g, summed[k]) if summed[k] else g for k, g in grads.items() if k != "blocks"}
    out["blocks"] = [{k: lax.psum(g, summed["blocks/" + k]) if summed["blocks/" + k] else g for k, g in b.items()}
                     for b in grads["blocks"]]
    return lax.psum(loss, "pipe"), out
