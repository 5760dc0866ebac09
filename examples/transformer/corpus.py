"""corpus.py: the text, the model's configuration, its initial weights and the batches, shared by the weft
trainer (train.py) and its PyTorch twin (bench/pytorch_transformer.py) so that both start from the same
weights and read the same batches. Nothing here imports weft or torch: numpy only.

The text is the King James Bible as Debian's bible-kjv-text holds it, printed by its reader (`bible
Gen1:1-Rev22:21`: ~4.3 MB, 73 distinct characters). It is split by book: every tenth book (2 Samuel,
Proverbs, Amos, Matthew, Ephesians, James) is the validation text, the other 60 the training text, so the
validation loss measures text the model has not seen. Characters are tokens (the sorted set of the whole
text's characters: the same vocabulary for both splits).
"""
import dataclasses
import os
import re
import shutil
import subprocess

import numpy as np

BIBLE_READER = "/usr/bin/bible"
_CHAPTER = re.compile(r"^(\S.*) (\d+)$")


# ---- the text ----------------------------------------------------------------------------------------------
def read_bible():
    """The whole text from Debian's bible-kjv reader (scripts/setup.sh installs bible-kjv-text)."""
    reader = BIBLE_READER if os.path.exists(BIBLE_READER) else shutil.which("bible")
    if reader is None:
        raise FileNotFoundError("the King James Bible: /usr/bin/bible not found (apt-get install bible-kjv-text, "
                                "or pass --text FILE)")
    return subprocess.run([reader, "Gen1:1-Rev22:21"], check=True, capture_output=True, text=True).stdout


def split_books(text):
    """[(book name, its text)] in order, by the reader's chapter headings ('Genesis 1', '1 Samuel 12')."""
    books, current, lines = [], None, []
    for line in text.splitlines(keepends=True):
        m = _CHAPTER.match(line.rstrip("\n"))
        if m and m.group(1) != current:
            if current is not None:
                books.append((current, "".join(lines)))
            current, lines = m.group(1), []
        lines.append(line)
    if current is not None:
        books.append((current, "".join(lines)))
    return books


class Corpus:
    """The training and validation texts as int32 token arrays, and the vocabulary."""

    def __init__(self, text=None, validation_every=10):
        text = read_bible() if text is None else text
        books = split_books(text)
        if len(books) < 2:  # a plain text (not the reader's): its last tenth validates
            cut = len(text) * 9 // 10
            train, valid = text[:cut], text[cut:]
        else:
            valid = "".join(b for k, (_, b) in enumerate(books) if k % validation_every == validation_every - 1)
            train = "".join(b for k, (_, b) in enumerate(books) if k % validation_every != validation_every - 1)
            self.validation_books = [name for k, (name, _) in enumerate(books)
                                     if k % validation_every == validation_every - 1]
        self.chars = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.chars)}
        self.train = self.encode(train)
        self.valid = self.encode(valid)

    @property
    def vocab(self):
        return len(self.chars)

    def encode(self, s):
        return np.array([self.index[c] for c in s], np.int32)

    def decode(self, tokens):
        return "".join(self.chars[int(t)] for t in tokens)


def batches(tokens, batch, context, seed, stream=0):
    """An endless sequence of (inputs, targets), int32 (batch, context) each: windows of `tokens` at starts
    drawn uniformly by numpy's generator seeded (seed, stream); targets are the inputs shifted by one."""
    rng = np.random.default_rng([seed, 2, stream])
    offsets = np.arange(context + 1)
    while True:
        starts = rng.integers(0, len(tokens) - context - 1, size=batch)
        window = tokens[starts[:, None] + offsets]
        yield np.ascontiguousarray(window[:, :-1]), np.ascontiguousarray(window[:, 1:])


def validation_batches(tokens, batch, context, count):
    """`count` fixed batches of evenly spaced windows (the same every evaluation)."""
    starts = np.linspace(0, len(tokens) - context - 2, batch * count).astype(np.int64)
    offsets = np.arange(context + 1)
    for k in range(count):
        window = tokens[starts[k * batch:(k + 1) * batch, None] + offsets]
        yield np.ascontiguousarray(window[:, :-1]), np.ascontiguousarray(window[:, 1:])


# ---- the model's configuration and initial weights ------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Config:
    vocab: int = 73
    layers: int = 4
    d_model: int = 128
    heads: int = 4
    context: int = 128
    mlp_ratio: int = 4
    eps: float = 1e-5          # LayerNorm's epsilon (PyTorch's default)

    @property
    def head_dim(self):
        return self.d_model // self.heads

    @property
    def d_mlp(self):
        return self.mlp_ratio * self.d_model


BLOCK_PARAMS = ("ln1_g", "ln1_b", "wq", "bq", "wk", "bk", "wv", "bv", "wo", "bo",
                "ln2_g", "ln2_b", "w1", "b1", "w2", "b2")


def block_shapes(c):
    D, F = c.d_model, c.d_mlp
    return {"ln1_g": (D,), "ln1_b": (D,), "wq": (D, D), "bq": (D,), "wk": (D, D), "bk": (D,),
            "wv": (D, D), "bv": (D,), "wo": (D, D), "bo": (D,), "ln2_g": (D,), "ln2_b": (D,),
            "w1": (D, F), "b1": (F,), "w2": (F, D), "b2": (D,)}


def init_params(c, seed=0, dtype=np.float32):
    """GPT-2's initialisation: matrices ~ N(0, 0.02) (the residual projections wo and w2 scaled by
    1 / sqrt(2 layers)), biases 0, LayerNorm gains 1. Drawn in float64 from numpy's generator, then cast.
    {'embed' (V, D), 'pos' (T, D), 'blocks': [one dict per layer], 'lnf_g', 'lnf_b', 'head' (D, V)}."""
    if c.d_model % c.heads:
        raise ValueError(f"d_model {c.d_model} is not a multiple of heads {c.heads}")
    rng = np.random.default_rng([seed, 1])
    std, proj_std = 0.02, 0.02 / np.sqrt(2 * c.layers)

    def normal(shape, s):
        return (rng.standard_normal(shape) * s).astype(dtype)

    blocks = []
    for _ in range(c.layers):
        b = {}
        for name, shape in block_shapes(c).items():
            if name.startswith("ln") and name.endswith("_g"):
                b[name] = np.ones(shape, dtype)
            elif len(shape) == 1:
                b[name] = np.zeros(shape, dtype)
            else:
                b[name] = normal(shape, proj_std if name in ("wo", "w2") else std)
        blocks.append(b)
    return {"embed": normal((c.vocab, c.d_model), std), "pos": normal((c.context, c.d_model), std),
            "blocks": blocks, "lnf_g": np.ones(c.d_model, dtype), "lnf_b": np.zeros(c.d_model, dtype),
            "head": normal((c.d_model, c.vocab), std)}


def causal_bias(context, dtype):
    """(T, T): 0 where a position may attend (key <= query), -1e9 above the diagonal (exp gives 0 there)."""
    return np.triu(np.full((context, context), -1e9), k=1).astype(dtype)


@dataclasses.dataclass(frozen=True)
class AdamW:
    """torch.optim.AdamW's update (decoupled weight decay on every parameter, bias-corrected moments)."""
    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.99
    eps: float = 1e-8
    weight_decay: float = 0.01
