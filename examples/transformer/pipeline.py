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
"""
import weft.numpy as jnp
from weft import lax


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
