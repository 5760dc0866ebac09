"""weft.Session: PopXL's Ir + Session in one object, over weft's C++ Session.

    s = weft.Session(replication_factor=8)
    g = weft.ReplicaGrouping(8, stride=2, group_size=4)          # or s.replica_grouping(stride=2, group_size=4)
    w = s.variable(np.ones((2, 16), np.int32), replica_grouping=g, retrieval_mode="all_replicas")
    out = s.d2h_stream((16,), np.int32)

    @s.program                     # the function every replica runs on each s.run() (PopXL's main graph)
    def step():
        weft.ops.host_store(out, weft.ops.read(w))
        weft.ops.add_(w, 2)

    outs = s.run()                 # {out: array of (local replicas, 16)}
    s.get_tensor_data(w)           # (replicas, 16)

Arguments keep PopXL's names and defaults (replica_grouping=None, retrieval_mode="one_per_group", entries=1,
downcast=True: data without a dtype has its 64-bit types made 32-bit), and run() converts its inputs to each
stream's dtype as PopXL does, warning when a value is cast.
"""
import numpy as _np

from . import _weft

Variable = _weft.Variable
RemoteBuffer = _weft.RemoteBuffer
HostStream = _weft.HostStream


def ReplicaGrouping(num_replicas, stride=1, group_size=None):
    """PopXL's ReplicaGrouping: groups of `group_size` replicas `stride` apart (group_size None = all with that
    stride). .assignment, .num_groups, .group_size, .stride, .transpose() as in PopXL."""
    return _weft.ReplicaGroups.strided(int(num_replicas), int(stride), 0 if group_size is None else int(group_size))


# PopXL's downcast: data given without a dtype has its 64-bit types made 32-bit (popxl.variable(...,
# downcast=True)), so session.variable([0.5, 1.5]) is float32 as in PopXL, not numpy's float64.
# (PopXL also makes uint64 uint32; weft has neither, and says so.)
_DOWNCAST = {_np.dtype(_np.float64): _np.dtype(_np.float32), _np.dtype(_np.int64): _np.dtype(_np.int32)}


def _data(data, dtype, downcast=True):
    if dtype is not None:
        return _np.asarray(data, dtype=dtype)
    array = _np.asarray(data)
    if downcast and array.dtype in _DOWNCAST:
        return array.astype(_DOWNCAST[array.dtype])
    return data if isinstance(data, _np.ndarray) else array


def _stream_input(stream, data):
    """`data` for h2d stream `stream` in the stream's dtype, as PopXL converts it: Python data (lists, numbers)
    and arrays of another dtype are cast when numpy casts them within their kind or up (float64 to float32,
    int to float), with a warning naming the stream when the values' own dtype was not the stream's; a cast that
    would change the kind of value (float to int) is refused."""
    want = _np.dtype(stream.dtype)
    given = data if isinstance(data, _np.ndarray) else _data(data, None)
    if given.dtype == want:
        return given
    if not _np.can_cast(given.dtype, want, "same_kind"):
        raise _weft.InvalidArgument(
            f"Session.run: the data for {stream!r} is {given.dtype}, which does not cast safely to the stream's "
            f"{want}; pass {want} data (e.g. np.asarray(data, np.{want}))")
    import warnings
    what = "an array" if isinstance(data, _np.ndarray) else f"a {type(data).__name__}, converted by numpy to"
    warnings.warn(f"Session.run: the data for {stream!r} is {what} {given.dtype}; cast to the stream's {want}",
                  stacklevel=3)
    return given.astype(want)


def _retrieval(mode):
    return "one_per_group" if mode is None else mode


class Session(_weft.Session):
    """Replicated state and a program run once per replica (PopXL's Ir(replication=R) + Session)."""

    def __init__(self, replication_factor=0, *, num_host_transfers=1, name="session"):
        super().__init__(int(replication_factor), int(num_host_transfers), name)
        self._program = None
        # The session runs on the runtime current now: keep it alive as long as the session (weft.init may
        # make another one current meanwhile).
        self._runtime = _weft.current_runtime()  # (what weft.runtime() returns)

    # ---- groupings ---------------------------------------------------------------------------------------
    def replica_grouping(self, stride=1, group_size=None):
        return super().replica_grouping(int(stride), 0 if group_size is None else int(group_size))

    # ---- state -------------------------------------------------------------------------------------------
    def variable(self, data, dtype=None, name=None, downcast=True, *, replica_grouping=None,
                 retrieval_mode="one_per_group"):
        """popxl.variable: without a dtype, 64-bit data is made 32-bit (downcast=True, PopXL's default)."""
        return super().variable(_data(data, dtype, downcast), replica_grouping, _retrieval(retrieval_mode), name or "")

    def remote_buffer(self, shape, dtype, entries=1):
        return super().remote_buffer(list(shape), _np.dtype(dtype), int(entries))

    def remote_variable(self, data, remote_buffer, offset=0, dtype=None, name=None, downcast=True, *,
                        replica_grouping=None, retrieval_mode="one_per_group"):
        return super().remote_variable(_data(data, dtype, downcast), remote_buffer, int(offset), replica_grouping,
                                       _retrieval(retrieval_mode), name or "")

    def replica_sharded_buffer(self, shape, dtype, replica_grouping=None, shard_over=None, entries=1):
        return super().replica_sharded_buffer(list(shape), _np.dtype(dtype), replica_grouping,
                                              0 if shard_over is None else int(shard_over), int(entries))

    def remote_replica_sharded_variable(self, data, remote_buffer, offset=0, dtype=None, name=None, downcast=True, *,
                                        replica_grouping=None, retrieval_mode="one_per_group"):
        return super().remote_replica_sharded_variable(_data(data, dtype, downcast), remote_buffer, int(offset),
                                                       replica_grouping, _retrieval(retrieval_mode), name or "")

    def replica_sharded_variable(self, data, dtype=None, name=None, downcast=True, *, replica_grouping=None,
                                 shard_over=None, retrieval_mode="one_per_group"):
        return super().replica_sharded_variable(_data(data, dtype, downcast), replica_grouping,
                                                0 if shard_over is None else int(shard_over),
                                                _retrieval(retrieval_mode), name or "")

    def h2d_stream(self, shape, dtype, name=None):
        return super().h2d_stream(list(shape), _np.dtype(dtype), name or "")

    def d2h_stream(self, shape, dtype, name=None):
        return super().d2h_stream(list(shape), _np.dtype(dtype), name or "")

    # ---- running -----------------------------------------------------------------------------------------
    def program(self, fn):
        """Decorator: `fn()` is what every replica runs on run() (weft.ops / weft.collectives inside)."""
        self._program = fn
        return fn

    def run(self, inputs=None, program=None):
        """Runs the program once per replica. `inputs`: {h2d stream: data}; returns {d2h stream: data}, shaped
        (num_host_transfers if > 1) + (local replicas if > 1) + stream shape, as PopXL's session.run."""
        fn = program if program is not None else self._program
        if fn is None:
            raise _weft.InvalidArgument(f"{type(self).__name__}.run: no program: decorate one with @session.program "
                                        "or pass program=")
        return super().run(fn, {stream: _stream_input(stream, data) for stream, data in dict(inputs or {}).items()})

    def __enter__(self):  # PopXL's `with session:` (weights go to the devices on the first run anyway)
        return self

    def __exit__(self, *exc):
        return False
