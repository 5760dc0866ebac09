"""weft.errors: the errors of weft's tracing layer under jax.errors' names (`except weft.errors.
UnexpectedTracerError`), beside weft's own runtime errors (weft.Error and its subclasses)."""
from ._trace import TracerConversionError, UnexpectedTracerError

# JAX raises TracerArrayConversionError where weft raises TracerConversionError (a tracer handed to numpy).
TracerArrayConversionError = TracerConversionError

__all__ = ["TracerArrayConversionError", "TracerConversionError", "UnexpectedTracerError"]
