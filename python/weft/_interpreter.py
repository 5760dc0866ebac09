"""The check `import weft` makes before loading its extension: is this the interpreter weft was built for,
and does it have numpy? A user who runs another python3 (the first one on PATH need not be Debian's
/usr/bin/python3) gets an ImportError naming the interpreter to use, instead of numpy's or the loader's error.
"""
import importlib.machinery
import sys

from . import _version


def _use_instead():
    return (f"weft was built for {_version.built_for_python} (Python {_version.built_for_version}); run your "
            f"script with it, e.g. `{_version.built_for_python} script.py`, instead of {sys.executable}")


def check():
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    suffix = _version.extension_suffix
    if version != _version.built_for_version or (suffix and suffix not in importlib.machinery.EXTENSION_SUFFIXES):
        raise ImportError(f"weft cannot load in this interpreter ({sys.executable}, Python {version}): its extension "
                          f"(_weft{suffix}) is for another Python ABI. " + _use_instead())
    try:
        import numpy  # noqa: F401
    except ImportError as error:
        raise ImportError(f"weft needs numpy, and this interpreter ({sys.executable}) cannot import it ({error}). "
                          + _use_instead()) from error
