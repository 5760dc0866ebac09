"""model.py: the character-level transformer written as a JAX user writes one (weft.numpy, weft.nn,
weft.lax collectives), for one device's block of a (data, model, pipe) mesh under weft.shard_map.

One function, `loss`, is every layout: the layout (layout.py) decides which mesh axes each parameter and the
tokens are split over, and the model calls the collectives that split implies. Under shard_map's rules
(check_vma) weft.grad then gives each layout's backward collectives by transposition, as JAX does: the
all-reduce of Megatron's backward pass is the transpose of the pvary weft inserts where a replicated
activation meets a column-split weight, FSDP's reduce-scatter is the transpose of its all_gather, sequence
parallelism's all_gather and psum_scatter transpose into each other, the pipeline's ppermute into the
reverse ppermute. Nothing here is a hand-written backward pass.

Activations are (rows, features) matrices (rows = batch x positions, position minor); attention reshapes to
(batch x heads, positions, head_dim).
"""
import numpy as np

import weft
import weft.numpy as jnp
from weft import lax

from corpus import causal_bias


def layer_norm(x, g, b, eps):
    """weft.nn.layer_norm: one fused equation (and one for its VJP), the arithmetic of
    (x - mean) / sqrt(var + eps) * g + b with the biased variance."""
    return weft.nn.layer_norm(x, g, b, eps)


def linear(x, w, b, policy):
    return product(policy, x, w) + b


def product(policy, a, b, **flags):
    """a @ b in the policy's compute dtype (weft.Policy; bfloat16: oneDNN's bf16 kernels, float32
    accumulation), the result in its output dtype (the parameters'): LayerNorm, softmax and the loss stay
    there, as torch.autocast keeps them in float32. Under weft.grad the casts' transposes give the gradients
    back in the parameters' dtype."""
    r = weft.ops.matmul(policy.cast_to_compute(a), policy.cast_to_compute(b), **flags)
    return policy.cast_to_output(r)


class Model:
    """The forward pass and the loss on one device's block, for a configuration and a layout."""

    def __init__(self, config, layout, policy):
        self.c = config
        self.lay = layout
        self.policy = policy

    # ---- parameters at use ------------------------------------------------------------------------------
    def at_use(self, p, name):
        """A parameter as the computation needs it: under FSDP its 'data' shard gathered whole."""
        if self.lay.fsdp_sharded(name, p.shape):
            return lax.all_gather(p, "data", axis=0, tiled=True)
        return p

    # ---- the sequence-parallel seams -------------------------------------------------------------------
    def enter_tensor_parallel(self, h, batch):
        """Before a column-parallel layer: with sequence parallelism every model rank gathers the whole
        sequence of the rows it holds a slice of (all_gather along positions)."""
        if self.lay.tp == 1:
            return h
        if not self.lay.sp:
            # Megatron's f: identity forward, all-reduce backward. One pvary for the three (or one) products
            # that read h, so their cotangents are summed before the one psum of its transpose; left to
            # shard_map's rules each product would pvary h itself (three psums backward).
            return lax.pvary(h, "model")
        t_local = h.shape[0] // batch
        full = lax.all_gather(jnp.reshape(h, (batch, t_local, h.shape[1])), "model", axis=1, tiled=True)
        return jnp.reshape(full, (batch * t_local * self.lay.tp, h.shape[1]))

    def leave_tensor_parallel(self, partial, batch):
        """After a row-parallel layer: the model ranks' partial sums added, whole (psum) or, with sequence
        parallelism, each rank its slice of positions (psum_scatter)."""
        if self.lay.tp == 1:
            return partial
        if not self.lay.sp:
            return lax.psum(partial, "model")
        t = partial.shape[0] // batch
        part = lax.psum_scatter(jnp.reshape(partial, (batch, t, partial.shape[1])), "model",
                                scatter_dimension=1, tiled=True)
        return jnp.reshape(part, (batch * (t // self.lay.tp), partial.shape[1]))

    # ---- one block ---------------------------------------------------------------------------------------
    def attention(self, h, b, batch):
        c, pol = self.c, self.policy
        g = lambda n: self.at_use(b[n], n)  # noqa: E731
        h = self.enter_tensor_parallel(h, batch)
        t = h.shape[0] // batch
        heads = c.heads // self.lay.tp
        dh = c.head_dim

        def split_heads(x):  # (batch t, heads dh) -> (batch heads, t, dh)
            return jnp.reshape(jnp.transpose(jnp.reshape(x, (batch, t, heads, dh)), (0, 2, 1, 3)),
                               (batch * heads, t, dh))

        q = split_heads(linear(h, g("wq"), g("bq"), pol))
        k = split_heads(linear(h, g("wk"), g("bk"), pol))
        v = split_heads(linear(h, g("wv"), g("bv"), pol))
        scores = product(pol, q, k, transpose_b=True) * (1.0 / np.sqrt(dh)) + causal_bias(t, h.dtype)
        weights = weft.nn.softmax(scores, axis=-1)
        y = product(pol, weights, v)                       # (batch heads, t, dh)
        y = jnp.reshape(jnp.transpose(jnp.reshape(y, (batch, heads, t, dh)), (0, 2, 1, 3)), (batch * t, heads * dh))
        out = self.leave_tensor_parallel(product(pol, y, g("wo")), batch)
        return out + g("bo")

    def mlp(self, h, b, batch):
        pol = self.policy
        g = lambda n: self.at_use(b[n], n)  # noqa: E731
        h = self.enter_tensor_parallel(h, batch)
        u = weft.nn.gelu(linear(h, g("w1"), g("b1"), pol), approximate=True)
        return self.leave_tensor_parallel(product(pol, u, g("w2")), batch) + g("b2")

    def block(self, x, b, batch):
        c = self.c
        g = lambda n: self.at_use(b[n], n)  # noqa: E731
        x = x + self.attention(layer_norm(x, g("ln1_g"), g("ln1_b"), c.eps), b, batch)
        return x + self.mlp(layer_norm(x, g("ln2_g"), g("ln2_b"), c.eps), b, batch)

    # ---- the whole model ---------------------------------------------------------------------------------
    def embed(self, p, tokens):
        """one_hot(tokens) @ embed + the positions' embeddings: (batch x positions, d_model)."""
        batch, t = tokens.shape
        onehot = weft.nn.one_hot(jnp.reshape(tokens, (batch * t,)), self.c.vocab, dtype=p["embed"].dtype)
        x = product(self.policy, onehot, self.at_use(p["embed"], "embed"))
        pos = self.at_use(p["pos"], "pos")
        return jnp.reshape(jnp.reshape(x, (batch, t, self.c.d_model)) + pos, (batch * t, self.c.d_model))

    def logits(self, p, x):
        h = layer_norm(x, self.at_use(p["lnf_g"], "lnf_g"), self.at_use(p["lnf_b"], "lnf_b"), self.c.eps)
        return product(self.policy, h, self.at_use(p["head"], "head"))

    def token_nll(self, logits, targets):
        """The mean over this block's tokens of -log p(target)."""
        onehot = weft.nn.one_hot(jnp.reshape(targets, (targets.size,)), self.c.vocab, dtype=logits.dtype)
        return -jnp.sum(onehot * weft.nn.log_softmax(logits, axis=-1)) * (1.0 / targets.size)

    def local_loss(self, p, tokens, targets):
        """This device's tokens' mean loss through every layer (no pipeline)."""
        batch = tokens.shape[0]
        x = self.embed(p, tokens)
        for b in p["blocks"]:
            x = self.block(x, b, batch)
        return self.token_nll(self.logits(p, x), targets)

    def loss(self, p, tokens, targets):
        """The global batch's mean loss (the same on every device)."""
        if self.lay.pp > 1:
            from pipeline import pipeline_loss
            local = pipeline_loss(self, p, tokens, targets)
        else:
            local = self.local_loss(p, tokens, targets)
        axes = self.lay.token_axes()
        return lax.pmean(local, axes) if axes else local
