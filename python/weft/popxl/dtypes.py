"""weft.popxl.dtypes: PopXL's dtype objects (popxl.dtypes.int32, float16, ...), mapped onto numpy's.

PopXL code names element types as `popxl.int32` or `popxl.dtypes.float32`; weft's session works on numpy
dtypes. Every PopXL name exists here so that code naming one imports; the ones weft cannot hold
(int16, uint16, uint32, uint64, and bfloat16, which has no numpy dtype) raise an error naming the dtype and
weft's dtypes when a tensor is made with them (`as_numpy`).
"""
import numpy as _np

# The element types weft holds (include/weft/dtype.hpp), by PopXL name.
_WEFT = ("bool", "uint8", "int8", "int32", "int64", "float16", "float32", "float64")


class dtype:
    """One element type. `name` is PopXL's (and numpy's) name; `as_numpy()` the numpy dtype."""

    def __init__(self, name, itemsize, kind):
        self._name, self._itemsize, self._kind = name, itemsize, kind

    name = property(lambda self: self._name)
    itemsize = property(lambda self: self._itemsize)
    is_floating_point = property(lambda self: self._kind == "f")
    is_int = property(lambda self: self._kind in "iu")
    is_signed = property(lambda self: self._kind in "if")

    def as_numpy(self):
        if self._name not in _WEFT:
            raise TypeError(f"popxl.dtypes.{self._name} is not supported by weft (its dtypes: {', '.join(_WEFT)})"
                            + ("; bfloat16 has no numpy dtype: use float32 host data" if self._name == "bfloat16"
                               else ""))
        return _np.dtype(self._name)

    @classmethod
    def as_dtype(cls, value):
        """The popxl dtype of a popxl dtype, a numpy dtype or type, or a name ('int32')."""
        if isinstance(value, dtype):
            return value
        name = value if isinstance(value, str) else _np.dtype(value).name
        if name not in _BY_NAME:
            raise TypeError(f"popxl.dtypes: no dtype for {value!r}")
        return _BY_NAME[name]

    def __repr__(self):
        return f"popxl.dtypes.{self._name}"

    def __eq__(self, other):
        try:
            return self._name == dtype.as_dtype(other)._name
        except TypeError:
            return NotImplemented

    def __hash__(self):
        return hash(self._name)


bool = dtype("bool", 1, "b")  # noqa: A001 (PopXL's name)
int8 = dtype("int8", 1, "i")
int16 = dtype("int16", 2, "i")
int32 = dtype("int32", 4, "i")
int64 = dtype("int64", 8, "i")
uint8 = dtype("uint8", 1, "u")
uint16 = dtype("uint16", 2, "u")
uint32 = dtype("uint32", 4, "u")
uint64 = dtype("uint64", 8, "u")
float16 = dtype("float16", 2, "f")
bfloat16 = dtype("bfloat16", 2, "f")
float32 = dtype("float32", 4, "f")
float64 = dtype("float64", 8, "f")
half, float, double = float16, float32, float64  # noqa: A001 (PopXL's aliases)

_BY_NAME = {d.name: d for d in (bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, bfloat16,
                                float32, float64)}


def as_numpy(value):
    """numpy dtype of a popxl dtype, a numpy dtype or a name."""
    return dtype.as_dtype(value).as_numpy()
