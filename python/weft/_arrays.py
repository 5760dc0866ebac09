"""weft's arrays as a JAX user sees them: ShardedArray (a pmap result) and DeviceArray (one device's array).

A ShardedArray wraps the C++ sharded array: its shards stay on their devices until read (np.asarray,
printing, arithmetic). A DeviceArray is a read-only numpy array that also knows its device (.device()), as
JAX 0.3's DeviceArray does; its repr reads "DeviceArray([...], dtype=float32)" because numpy prints a subclass
under the subclass's name.
"""
import numpy as np



class DeviceArray(np.ndarray):
    """A numpy array committed to a weft device (read-only when it views a weft buffer)."""

    def __new__(cls, array, device=None):
        obj = np.asarray(array).view(cls)
        obj._device = device
        return obj

    def __array_finalize__(self, obj):
        self._device = getattr(obj, "_device", None)

    def device(self):
        return self._device

    def block_until_ready(self):
        return self


def _device_of(devices, device_id):
    for d in devices:
        if d.id == device_id:
            return d
    return None


class _Deleted:
    """What a ShardedArray holds once donated to a pmap call (donate_argnums): its buffers went to the call's
    results, and any use is JAX's error."""

    __slots__ = ("_what",)

    def __init__(self, shape, dtype):
        self._what = f"{np.dtype(dtype).name}{list(shape)}".replace(" ", "")

    def __getattr__(self, name):
        raise RuntimeError(f"Array has been deleted with shape={self._what}: it was donated to a pmap call "
                           "(donate_argnums), whose results took its buffers")


class ShardedArray(np.lib.mixins.NDArrayOperatorsMixin):
    """One shard per device; indexing, np.asarray, .shards, .devices, arithmetic (on the host), JAX's repr."""

    __slots__ = ("_impl",)
    __array_priority__ = 100

    def __init__(self, impl):
        self._impl = impl

    def is_deleted(self):
        """True once donated to a pmap call (JAX's Array.is_deleted)."""
        return isinstance(self._impl, _Deleted)

    # ---- shape ------------------------------------------------------------------------------------
    @property
    def shape(self):
        return self._impl.shape

    @property
    def dtype(self):
        return self._impl.dtype

    @property
    def ndim(self):
        return len(self._impl.shape)

    @property
    def size(self):
        return int(np.prod(self._impl.shape, dtype=np.int64))

    def __len__(self):
        return self._impl.shape[0]

    # ---- where the data lives -------------------------------------------------------------------------
    @property
    def shards(self):
        """The per-device arrays (DeviceArray each, no copy), in device order."""
        return [DeviceArray(a, d) for d, a in self._impl.shards()]

    @property
    def device_buffers(self):  # JAX 0.3's name
        return self.shards

    @property
    def devices(self):
        return self._impl.devices()

    def block_until_ready(self):
        return self

    # ---- reading --------------------------------------------------------------------------------------
    def __array__(self, dtype=None):
        a = self._impl.to_host()
        return a if dtype is None else a.astype(dtype)

    def __getitem__(self, index):
        if isinstance(index, (int, np.integer)):
            # With a 1-d mesh: the shard itself, still on its device.
            data, device_id = self._impl.index(int(index))
            return DeviceArray(data, _device_of(self.devices, device_id))
        if isinstance(index, slice) and index.step in (None, 1):
            begin, end, _ = index.indices(self.shape[0])
            return DeviceArray(self._impl.slice(begin, end), self.devices[0] if self.devices else None)
        return DeviceArray(np.asarray(self)[index])

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        inputs = tuple(np.asarray(x) if isinstance(x, ShardedArray) else x for x in inputs)
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __repr__(self):
        return repr(self._impl)

    def __str__(self):
        return str(np.asarray(self))

    def tolist(self):
        return np.asarray(self).tolist()

    def __float__(self):
        return float(np.asarray(self))

    def __int__(self):
        return int(np.asarray(self))


# Printed as JAX prints its types (<class 'weft.ShardedArray'>), not by the private module defining them.
DeviceArray.__module__ = "weft"
ShardedArray.__module__ = "weft"
