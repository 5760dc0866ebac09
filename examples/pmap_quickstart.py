"""The reference notebook "Multi-IPUs in JAX: pmap quickstart" (jax_ipu_pmap_quickstart.ipynb), cell by cell,
in Python on weft: 4 virtual CPU devices, no JAX. `import weft as jax` is the only shim; the code of each cell
is the notebook's. Each cell that prints starts its output with "# cell N" (N = the notebook's execution
count), so the transcript compares line for line with tests/data/pmap_quickstart.expected, the notebook's
outputs also used by the C++ port (examples/pmap_quickstart.cc); the test is
tests/python/test_notebook.py.

    PYTHONPATH=build/python /usr/bin/python3 examples/pmap_quickstart.py
"""
import re


def pretty(obj, width=79):
    """IPython's display of a cell's value: a container that does not fit on one line is broken one item per
    line, every nested container too, and an item's continuation lines shift right with its column. Whether it
    fits is measured with the notebook's device names (IpuDevice(id=3, num_tiles=1472, version=ipu2), longer
    than CpuDevice(id=3, process=0)), so the layout is the notebook's."""
    one_line = repr(obj)
    as_in_notebook = re.sub(r"CpuDevice\(id=(\d+), process=\d+\)", r"IpuDevice(id=\1, num_tiles=1472, version=ipu2)",
                            one_line)
    if not isinstance(obj, (list, tuple)) or (len(as_in_notebook) <= width and "\n" not in one_line):
        return one_line
    return _broken(obj)


def _broken(obj):
    if not isinstance(obj, (list, tuple)):
        return repr(obj)
    opening, closing = ("[", "]") if isinstance(obj, list) else ("(", ",)" if len(obj) == 1 else ")")
    items = [_broken(item).replace("\n", "\n ") for item in obj]
    return opening + ",\n ".join(items) + closing


def display(cell, value):
    print(f"# cell {cell}")
    print(pretty(value))


# In [1]: pip install of jax/jaxlib for IPUs (environment set-up: nothing to port).

# In [2]: config.FLAGS.jax_ipu_device_count = 4 -- a runtime with 4 virtual CPU devices.
import weft as jax

jax.init(device_count=4)

# In [3]
import numpy as np
import weft as jax  # noqa: F811 (the notebook's `import jax`)
import weft.numpy as jnp

# In [4] (shown as cell 7 in the transcript: its execution count)
print("# cell 7")
print(f"Platform={jax.default_backend()}")
print(f"Number of devices={jax.device_count()}")
ipu_devices = jax.devices()
print(pretty(ipu_devices))

# In [7]
from weft import pmap
from weft import lax

# In [8]
num_devices = len(jax.devices())
N = 3


# In [9]
@pmap
def square(x):
    return x ** 2


# In [10] (cell 11): the first call prepares the program.
print("# cell 11")
data = np.arange(N * num_devices, dtype=np.float32).reshape((num_devices, -1))
output = square(data)

print("INPUT:", data)
print("OUTPUT:", output, type(output))

# In [11] (cell 12): the second call reuses it; its input is already on the devices.
print("# cell 12")
output = square(output)
print("OUTPUT:", output)

# In [13]: buffers of the output sharded array living on different devices.
display(13, [b.device() for b in output.device_buffers])

# In [14]: move one shard to another device on the fly.
b = jax.device_put(output[1], ipu_devices[3])
display(14, (b, b.device()))

# In [15]
display(15, output[0:1])

# In [19]
from functools import partial


@partial(pmap, axis_name="i")
def normalize(x):
    return x / lax.psum(x, axis_name="i")


# In [20] (cell 17)
output = normalize(data[0:2])
display(17, output)

# In [21] (cell 18): proper normalization across devices.
display(18, np.sum(np.asarray(output), axis=0))


# In [24] (cell 19): nested pmap, a (rows, cols) mesh.
@partial(pmap, axis_name='rows')
@partial(pmap, axis_name='cols')
def f(x):
    row_normed = x / lax.psum(x, 'rows')
    col_normed = x / lax.psum(x, 'cols')
    doubly_normed = x / lax.psum(x, ('rows', 'cols'))
    return row_normed, col_normed, doubly_normed


x = np.arange(4., dtype=np.float32).reshape((2, 2))
outputs = f(x)

print("# cell 19")
print("OUTPUTS:", repr(outputs))

# In [27]: manual data sharding.
sub_devices0 = ipu_devices[:2]
sub_devices1 = ipu_devices[2:]

indata0 = jax.device_put_sharded([v for v in data[:2]], sub_devices0)
indata1 = jax.device_put_sharded([v for v in data[2:]], sub_devices1)


# In [29]
def normalize_fn(x):
    return x / lax.psum(x, 'i')


def normalize_fn2(x):
    return x / lax.pmean(x, 'i')


normalize0 = pmap(normalize_fn, axis_name='i', devices=sub_devices0)
normalize1 = pmap(normalize_fn2, axis_name='i', devices=sub_devices1)

# In [30] (cell 25)
out0 = normalize0(indata0)
out1 = normalize1(indata1)

display(25, (out0, out1))

# In [31] (cell 26)
display(26, ([b.device() for b in out0.device_buffers], [b.device() for b in out1.device_buffers]))

# In [34]: Rule 30 on a ring split over the devices, halos exchanged with ppermute.
device_count = jax.device_count()


def send_right(x, axis_name):
    left_perm = [(i, (i + 1) % device_count) for i in range(device_count)]
    return lax.ppermute(x, perm=left_perm, axis_name=axis_name)


def send_left(x, axis_name):
    left_perm = [((i + 1) % device_count, i) for i in range(device_count)]
    return lax.ppermute(x, perm=left_perm, axis_name=axis_name)


def update_board(board):
    left = board[:-2]
    right = board[2:]
    center = board[1:-1]
    return lax.bitwise_xor(left, lax.bitwise_or(center, right))


@partial(pmap, axis_name='i')
def step(board_slice):
    left, right = board_slice[:1], board_slice[-1:]
    right, left = send_left(left, 'i'), send_right(right, 'i')
    enlarged_board_slice = jnp.concatenate([left, board_slice, right])
    return update_board(enlarged_board_slice)


def print_board(board):
    print(''.join('*' if x else ' ' for x in np.asarray(board).ravel()))


# In [35] (cell 22)
print("# cell 22")
board = np.zeros(40, dtype=bool)
board[board.shape[0] // 2] = True
reshaped_board = board.reshape((device_count, -1))

print_board(reshaped_board)
for _ in range(20):
    reshaped_board = step(reshaped_board)
    print_board(reshaped_board)
