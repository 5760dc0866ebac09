"""weft.numpy: what the reference notebook takes from jax.numpy. Inside a replica, values are numpy arrays,
so jax.numpy's functions are numpy's (the notebook port writes `import weft.numpy as jnp`)."""
from numpy import *  # noqa: F401,F403
