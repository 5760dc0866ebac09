"""layout.py: who holds what. A layout is a (data, model, pipe) mesh and four choices; from it follow each
parameter's PartitionSpec, the tokens' spec and the mesh. The model (model.py) reads the same object to call
the collectives the split implies.

- data (dp): the batch's rows split over 'data'; every parameter replicated (unless FSDP).
- tensor (tp, Megatron): wq/wk/wv and w1 (and their biases) split by columns over 'model' (each rank its
  heads / its slice of the MLP's width), wo and w2 by rows; one psum over 'model' after each row-parallel
  product (two a block forward; their transposes' two backward).
- sequence parallel (sp, with tp): the activations between the tensor-parallel halves split by positions over
  'model' (tokens and the positions' embedding too); all_gather before the column-parallel products,
  psum_scatter after the row-parallel ones.
- FSDP: every parameter's first dimension also split over 'data' (minor to 'model' where tp splits it), the
  shards all_gather'ed at use; the gradients arrive reduce-scattered (the gather's transpose).
- pipeline (pp): the layers split in pp stages over 'pipe', stage s holding layers [s L/pp, (s+1) L/pp);
  microbatches flow stage to stage by ppermute, in the GPipe or the 1F1B order (pipeline.py).
"""
import dataclasses

import numpy as np

import weft
from weft import P

COLUMN_SPLIT = ("wq", "bq", "wk", "bk", "wv", "bv", "w1", "b1")   # split along their last dimension
ROW_SPLIT = ("wo", "w2")                                           # split along their first dimension


@dataclasses.dataclass(frozen=True)
class Layout:
    dp: int = 1
    tp: int = 1
    pp: int = 1
    sp: bool = False
    fsdp: bool = False
    microbatches: int = 1
    schedule: str = "gpipe"

    @property
    def devices(self):
        return self.dp * self.tp * self.pp

    def check(self, c, batch):
        if self.sp and self.tp == 1:
            raise ValueError("sequence parallelism splits positions over the tensor-parallel ranks: it needs --tp > 1")
        if c.heads % self.tp:
            raise ValueError(f"--tp {self.tp} must divide the {c.heads} heads")
        if c.layers % self.pp:
            raise ValueError(f"--pp {self.pp} must divide the {c.layers} layers")
        if batch % (self.dp * self.microbatches):
            raise ValueError(f"the batch {batch} must divide over {self.dp} data-parallel ranks x "
                             f"{self.microbatches} microbatches")
        if self.sp and c.context % self.tp:
            raise ValueError(f"--sp: the context {c.context} must divide over --tp {self.tp}")
        if self.schedule not in ("gpipe", "1f1b"):
            raise ValueError(f"pipeline schedule {self.schedule!r}: the trainer has 'gpipe' and '1f1b'")

    def mesh(self):
        devices = np.array(weft.devices()[:self.devices], dtype=object).reshape(self.dp, self.tp, self.pp)
        return weft.Mesh(devices, ("data", "model", "pipe"))

    def token_axes(self):
        """The axes the tokens are split over (their loss is averaged over those)."""
        axes = []
        if self.dp > 1:
            axes.append("data")
        if self.sp:
            axes.append("model")
        return tuple(axes)

    def token_spec(self):
        return P("data" if self.dp > 1 else None, "model" if self.sp else None)

    # ---- parameters -----------------------------------------------------------------------------------------
    def model_dims(self, name, rank):
        """{dimension: 'model'} where tensor (or sequence) parallelism splits the parameter `name`."""
        if self.tp == 1:
            return {}
        if name in COLUMN_SPLIT:
            return {rank - 1: "model"}
        if name in ROW_SPLIT:
            return {0: "model"}
        if name == "pos" and self.sp:
            return {0: "model"}
        return {}

    def fsdp_sharded(self, name, shape):
        """Whether FSDP splits `name` (a block of `shape` on each device) over 'data': its first dimension,
        when that divides (decided on the whole parameter by spec(); here read back from the block)."""
        return self.fsdp and self.dp > 1 and name in self._fsdp_names

    def spec(self, name, shape, stage_axis=False):
        """The PartitionSpec of parameter `name` of (whole) `shape`; with stage_axis its first dimension is
        the pipeline's stage (split over 'pipe')."""
        lead = ("pipe",) if stage_axis else ()
        body = shape[1:] if stage_axis else shape
        parts = [() for _ in body]
        for d, axis in self.model_dims(name, len(body)).items():
            parts[d] = (axis,)
        if self.fsdp and self.dp > 1:
            split = int(np.prod([{"model": self.tp}[a] for a in parts[0]])) if parts[0] else 1
            if body[0] % (split * self.dp) == 0:
                parts[0] = parts[0] + ("data",)
                self._fsdp_names.add(name)
        return P(*([lead] if lead else []), *[p if p else None for p in parts])

    def __post_init__(self):
        object.__setattr__(self, "_fsdp_names", set())
