#!/usr/bin/python3
# Writes tests/data/fuzz/checkpoint/regress-*.safetensors: the malformed checkpoints of issue 21 (items 1, 2
# and 14), each an edit of seed-model.safetensors that the reader must refuse with an InvalidArgument
# (tests/inproc/checkpoint_test.cc checks each one's message; the fuzz target replays them and mutates
# from them). Rerun after the seed changes: /usr/bin/python3 tests/data/fuzz/checkpoint_regressions.py
import json
import os
import struct

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "checkpoint")
seed = open(os.path.join(here, "seed-model.safetensors"), "rb").read()
(header_bytes,) = struct.unpack("<Q", seed[:8])
header = json.loads(seed[8:8 + header_bytes])
data = seed[8 + header_bytes:]


def file_of(text, data_bytes=data):
    raw = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
    raw += b" " * ((8 - len(raw) % 8) % 8)
    return struct.pack("<Q", len(raw)) + raw + data_bytes


def edited(edit, extra=b""):
    h = json.loads(json.dumps(header))
    edit(h)
    return file_of(json.dumps(h), data + extra)


def edited_layout(edit):
    def change(h):
        layout = json.loads(h["__metadata__"]["weft"])
        edit(layout)
        h["__metadata__"]["weft"] = json.dumps(layout)
    return edited(change)


entries = [name for name in header if name.startswith("remote_buffer_")]
first, last = entries[0], entries[-1]


def overlap(h):
    h[last]["data_offsets"] = h[first]["data_offsets"]


def two_variables_one_tensor(l):
    l["variables"][1]["tensor"] = l["variables"][0]["tensor"]


def two_entries_one_tensor(l):
    l["buffer_entries"][1]["tensor"] = l["buffer_entries"][0]["tensor"]


def entry_twice(l):
    l["buffer_entries"][1]["entry"] = l["buffer_entries"][0]["entry"]


def extra_tensor(h):
    h["extra"] = {"dtype": "U8", "shape": [4], "data_offsets": [len(data), len(data) + 4]}


text = json.dumps(header)
cases = {
    "overlap": edited(overlap),
    "gap": edited(lambda h: h.pop(first)),
    "trailing-bytes": seed + b"\0\0\0\0",
    "duplicate-key": file_of(text[:-1] + ', "plain": ' + json.dumps(header["plain"]) + "}"),
    "duplicate-layout-key": edited(lambda h: h["__metadata__"].update(weft=h["__metadata__"]["weft"][:-1] + ', "replicas": 4}')),
    "two-variables-one-tensor": edited_layout(two_variables_one_tensor),
    "two-entries-one-tensor": edited_layout(two_entries_one_tensor),
    "entry-twice": edited_layout(entry_twice),
    "tensor-outside-layout": edited(extra_tensor, b"\1\1\1\1"),
    "deep-header": file_of("[" * 4096, b""),
    "deep-layout": edited(lambda h: h["__metadata__"].update(weft="[" * 4096)),
    "raw-bytes": file_of(b'{"a\xff\xfe": 1}', b""),
    "control-name": edited(lambda h: h.update({"a\nb": dict(header["plain"], dtype="C64")})),
}
for name, content in cases.items():
    with open(os.path.join(here, "regress-" + name + ".safetensors"), "wb") as f:
        f.write(content)
