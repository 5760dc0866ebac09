"""weft.popxl.transforms: PopXL's graph transforms. autodiff is provided (transforms/autodiff.py); PopXL's
others raise an error naming them and what is here."""
from .autodiff import ExpectedConnection, ExpectedConnectionType, GradGraphInfo, autodiff

__all__ = ["autodiff", "GradGraphInfo", "ExpectedConnection", "ExpectedConnectionType"]

_POPXL_TRANSFORMS = frozenset("""merge_exchange io_tile_exchange decompose_sum
""".split())


def __getattr__(name):
    if name in _POPXL_TRANSFORMS:
        raise AttributeError(f"popxl.transforms.{name} is not supported by weft.popxl; popxl.transforms provides "
                             "autodiff (with GradGraphInfo, ExpectedConnection, ExpectedConnectionType)")
    raise AttributeError(f"module 'weft.popxl.transforms' has no attribute {name!r}")
