"""weft.numpy: what the reference notebook takes from jax.numpy. Inside a replica, values are numpy arrays,
so jax.numpy's functions are numpy's (the notebook port writes `import weft.numpy as jnp`).

When the package's own directory is on sys.path (a script run from inside the installed package), `import
numpy` anywhere finds this file as top-level numpy. It then loads the real numpy, with that directory set
aside, and puts it in its own place in sys.modules (the import system returns what sys.modules holds), so
numpy, and weft importing it, work as from anywhere else.
"""
if __name__ == "numpy":
    import os as _os
    import sys as _sys

    _here = _os.path.realpath(_os.path.dirname(__file__))
    _saved = list(_sys.path)
    _sys.path[:] = [entry for entry in _sys.path if _os.path.realpath(entry or _os.getcwd()) != _here]
    del _sys.modules["numpy"]
    try:
        import numpy as _real_numpy
    finally:
        _sys.path[:] = _saved
    _sys.modules["numpy"] = _real_numpy
else:
    from numpy import *  # noqa: F401,F403
