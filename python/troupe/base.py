"""The native core and MXNet's error type."""
from . import _core

# troupe::Error raised by the native core, as MXNet's MXNetError (a RuntimeError).
MXNetError = _core.TroupeError

__all__ = ["MXNetError"]
