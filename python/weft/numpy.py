"""weft.numpy: weft's jax.numpy (`import weft.numpy as jnp`). On tracers (inside weft.jit and the traced
weft.pmap) its functions record program equations with JAX's dtype rules (weft/_jnp.py has the list); on
concrete arrays (eager replicas, plain Python) they are numpy's. Every other numpy name (dtypes, constants,
functions weft does not trace) is numpy's own.

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
    from numpy import ndarray, dtype  # noqa: F401
    from ._jnp import *  # noqa: F401,F403  (weft's traced functions take precedence)
    from ._jnp import _getitem  # noqa: F401

    def __getattr__(name):  # anything else numpy has
        import numpy as _numpy
        return getattr(_numpy, name)
